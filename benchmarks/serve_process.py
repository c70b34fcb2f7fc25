"""`deltaport serve` as its own process on 127.0.0.1, for the benchmarks that need a sharing server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """Writes ``config`` (host and port filled in) to ``workdir``, starts the server with ``args``, and
    returns once it answers /health; :meth:`stop` stops it and removes that file."""

    def __init__(self, config: dict, workdir: Path, *args: str) -> None:
        import httpx
        import yaml

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config_path = path = workdir / f"bench-{self.port}.yaml"
        path.write_text(yaml.safe_dump({**config, "host": "127.0.0.1", "port": self.port}))
        exe = Path(sys.executable).parent / "deltaport"
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--config", str(path), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                httpx.get(f"{self.base}/health", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit("deltaport serve did not start")

    def peak_rss_mb(self) -> float:
        """Peak RSS of the server process plus that of its child processes (keying workers)."""
        return sum(status_mb(pid, "VmHWM:") for pid in (self.proc.pid, *children(self.proc.pid)))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.config_path.unlink(missing_ok=True)


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def status_mb(pid: int, key: str) -> float:
    """A size line of /proc/PID/status (``VmRSS:``, ``VmHWM:``) in MB; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
