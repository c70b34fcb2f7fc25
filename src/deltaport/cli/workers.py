"""`deltaport serve --workers N`: N server processes on one port, under a supervisor.

The supervisor (the `deltaport serve` process) binds the listeners itself, the protocol's and the
admin one, and starts N workers (``python -m deltaport.cli.workers``) that inherit the bound
sockets and accept on them. One accept queue per listener, not one per worker as with
SO_REUSEPORT: a connection goes to whichever worker accepts first, never waits in the queue of a
busy or dying worker, and is queued (not refused) while a worker is replaced; the port is bound
once, so a port in use, or port 0, is settled before any worker starts; no other process can join
the port.

What the workers share: ``tokenSecret`` (the config's, or one the supervisor draws for the run),
so a page token, refresh token, file URL or S3-face credential one worker issues works on all;
the catalog database and config file (each worker polls them; SIGHUP to the supervisor is passed
to every worker); with ``ssl: {selfSigned: true}``, the certificate and key the supervisor made
(one certificate on the port); the audit log file (appended under a lock, audit.py); Prometheus metrics
(``PROMETHEUS_MULTIPROC_DIR``: a folder of the supervisor's, emptied at start, so /metrics adds
up all workers). The secret reaches a worker through a pipe, never its command line or a log.

A worker that dies is replaced (at once, then with a growing pause if replacements keep dying
before they serve); one that dies before any worker served stops the supervisor with its exit
code. SIGTERM or SIGINT to the supervisor stops the workers gracefully and then itself.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from glob import glob
from typing import Any

log = logging.getLogger("deltaport.server")

#: Seconds the supervisor waits for its workers to finish after SIGTERM before it kills them.
STOP_TIMEOUT_S = 30.0
#: The longest pause before replacing a worker again, when replacements keep dying at start.
MAX_PAUSE_S = 30.0
#: Connections waiting to be accepted on each listener (uvicorn's default).
BACKLOG = 2048


@dataclass
class _Worker:
    proc: subprocess.Popen
    lifeline: int  # the write end of the pipe its spec went through; closed, the worker stops
    ready: int  # the read end of the pipe it says it serves through
    served: bool = False


@dataclass
class Supervisor:
    """Starts, watches and stops the workers. ``spec`` is what each worker is told (config path,
    host, port, keying processes); ``sockets`` the bound listeners they inherit."""

    spec: dict[str, Any]
    sockets: list[socket.socket]
    count: int
    env: dict[str, str]
    workers: list[_Worker] = field(default_factory=list)
    served: bool = False  # a worker has served
    _signal: int | None = None
    _hup: bool = False

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (0) or until the first workers fail to start (their code)."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        for n in range(self.count):
            self.workers.append(self._start(announce=n == 0))
        pause, due = 0.0, 0.0
        waiting = 0  # workers to start again
        while self._signal is None:
            time.sleep(0.1)
            if self._hup:
                self._hup = False
                for worker in self.workers:
                    worker.proc.send_signal(signal.SIGHUP)
            for worker in self.workers:
                self._check_ready(worker)
            for worker in list(self.workers):
                code = worker.proc.poll()
                if code is None:
                    continue
                self._forget(worker)
                if not self.served:  # none has served yet: the config or the catalog keeps them from it
                    log.error("worker %d stopped (exit code %d) before serving: stopping", worker.proc.pid, code)
                    self._stop_all()
                    return code or 1
                log.error("worker %d stopped (exit code %s): starting another", worker.proc.pid, code)
                pause = 0.0 if worker.served else min(MAX_PAUSE_S, max(1.0, 2 * pause))
                due, waiting = time.monotonic() + pause, waiting + 1
            if waiting and time.monotonic() >= due:
                self.workers.append(self._start(announce=False))
                waiting -= 1
        self._stop_all()
        return 0

    def _start(self, *, announce: bool) -> _Worker:
        spec_r, spec_w = os.pipe()
        ready_r, ready_w = os.pipe()
        os.set_blocking(ready_r, False)
        fds = [s.fileno() for s in self.sockets]
        spec = {**self.spec, "fds": fds, "ready": ready_w, "announce": announce}
        proc = subprocess.Popen(
            [sys.executable, "-m", "deltaport.cli.workers", str(spec_r)],
            pass_fds=(spec_r, ready_w, *fds),
            env=self.env,
            start_new_session=True,  # Ctrl-C reaches the supervisor only, which stops the workers once
        )
        os.close(spec_r)
        os.close(ready_w)
        os.write(spec_w, json.dumps(spec).encode() + b"\n")
        return _Worker(proc, spec_w, ready_r)

    def _check_ready(self, worker: _Worker) -> None:
        if worker.served:
            return
        try:
            worker.served = bool(os.read(worker.ready, 1))
        except BlockingIOError:
            return
        self.served = self.served or worker.served

    def _forget(self, worker: _Worker) -> None:
        from prometheus_client import multiprocess

        self.workers.remove(worker)
        os.close(worker.lifeline)
        os.close(worker.ready)
        metrics = self.env.get("PROMETHEUS_MULTIPROC_DIR")
        if metrics:
            multiprocess.mark_process_dead(worker.proc.pid, metrics)  # its live gauges stop counting

    def _stop_all(self) -> None:
        for worker in self.workers:
            worker.proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in list(self.workers):
            try:
                worker.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            self._forget(worker)

    def _on_stop(self, signum: int, frame: Any) -> None:
        self._signal = signum

    def _on_hup(self, signum: int, frame: Any) -> None:
        self._hup = True


def supervise(
    config: str,
    cfg: Any,
    host: str,
    port: int,
    count: int,
    keying: int,
    metrics_token: str | None,
    bound: list,
    certificate: tuple[str, str] | None = None,
) -> int:
    """Run ``count`` workers serving ``config`` on the ``bound`` listeners; the exit code.
    ``certificate``: the files of the self-signed certificate and key every worker presents."""
    env = dict(os.environ)
    env.pop("DELTAPORT_METRICS_TOKEN", None)  # given through the pipe
    metrics_dir, made = _metrics_dir()
    env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    for sock in bound:
        sock.listen(BACKLOG)
    secret = None if cfg.token_secret is not None else secrets.token_hex(32)
    spec = {"config": config, "host": host, "port": port, "keying": keying, "secret": secret}
    spec["metrics_token"], spec["certificate"] = metrics_token, certificate
    origin = "the config's" if secret is None else "drawn for this run"
    print(f"{count} worker processes on {host}:{port}; tokenSecret shared by them: {origin}", flush=True)
    try:
        return Supervisor(spec, bound, count, env).run()
    finally:
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _metrics_dir() -> tuple[str, bool]:
    """The workers' Prometheus folder: the environment's ``PROMETHEUS_MULTIPROC_DIR``, emptied of
    an earlier run's files, or a new one (True: removed at the end)."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        os.makedirs(given, exist_ok=True)
        for path in glob(os.path.join(given, "*.db")):
            os.remove(path)
        return given, False
    return tempfile.mkdtemp(prefix="deltaport-metrics-"), True


# --- the worker's side ----------------------------------------------------------------------------


def _read_spec(fd: int) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            raise SystemExit("the supervisor went away before it said what to serve")
        data += chunk
    return json.loads(data)


def _watch_supervisor(fd: int) -> None:
    """Stop this worker when the supervisor's end of the pipe closes (it died, even by SIGKILL)."""
    while os.read(fd, 4096):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app takes it (a reload), not a stop
    fd = int(sys.argv[1])
    spec = _read_spec(fd)
    if spec["secret"]:
        from deltaport.server.sources.config import TOKEN_SECRET_ENV

        os.environ[TOKEN_SECRET_ENV] = spec["secret"]  # read with the config, at start and each reload
    threading.Thread(target=_watch_supervisor, args=(fd,), daemon=True, name="supervisor-watch").start()
    import typer

    from deltaport.cli.serve import serve_worker

    try:
        serve_worker(spec)
    except typer.Exit as exc:  # a one-line error already said why (outside typer's main, say it with the code)
        raise SystemExit(exc.exit_code) from None


if __name__ == "__main__":
    main()
