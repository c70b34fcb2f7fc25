"""A real Spark standalone cluster on loopback, from the pyspark wheel's own scripts: a master, two
one-core workers, and a Spark Connect server on them; and a recorder of who fetched shared files.

The cluster's processes get ``PYSPARK_PYTHON`` = this Python (so executors run this environment's
packages) and ``SPARK_LOCAL_IP=127.0.0.1``; their logs are in the work folder.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyspark
from servers import free_port

SPARK_HOME = Path(pyspark.__file__).parent


def cluster_env() -> dict[str, str]:
    """The environment of the cluster's processes (the project comes from what the driver ships)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_HOME": str(SPARK_HOME),
        }
    )
    return env


def _wait_for_line(log: Path, line: str, proc: subprocess.Popen, what: str, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if log.exists() and line in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    _stop(proc)
    raise RuntimeError(f"{what} did not start:\n{text}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class SparkCluster:
    """A standalone master and ``workers`` one-core, 1 GiB workers on 127.0.0.1."""

    def __init__(self, workdir: Path, workers: int = 2) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []
        self.port = free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1")
            for i in range(workers):
                self._worker(i)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=cluster_env(),
                cwd=self.workdir,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc, log

    def _start(self, name: str, cls: str, *args: str) -> None:
        proc, log = self._spawn(name, cls, *args, "--port", str(self.port), "--webui-port", str(free_port()))
        _wait_for_line(log, "I have been elected leader", proc, "the Spark master")

    def _worker(self, i: int) -> None:
        work = self.workdir / f"worker-{i}"
        work.mkdir(exist_ok=True)
        master_log = self.workdir / "master.log"
        before = master_log.read_text(errors="replace").count("Registering worker")
        self._spawn(
            f"worker-{i}",
            "org.apache.spark.deploy.worker.Worker",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(work),
            self.master,
        )
        deadline = time.time() + 60
        while master_log.read_text(errors="replace").count("Registering worker") <= before:
            if time.time() > deadline:
                raise RuntimeError(f"worker {i} did not register:\n{master_log.read_text()[-2000:]}")
            time.sleep(0.25)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)


class ConnectServer:
    """A Spark Connect server as an application of ``cluster``."""

    def __init__(self, cluster: SparkCluster, workdir: Path, *conf: tuple[str, str]) -> None:
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        settings = [
            ("spark.connect.grpc.binding.port", str(self.port)),
            ("spark.connect.grpc.binding.address", "127.0.0.1"),
            ("spark.ui.enabled", "false"),
            ("spark.executor.memory", "768m"),
            ("spark.sql.session.timeZone", "UTC"),
            *conf,
        ]
        args = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
        ]
        args += ["--master", cluster.master]
        for key, value in settings:
            args += ["--conf", f"{key}={value}"]
        args.append("spark-internal")
        self.log = workdir / "connect.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=cluster_env(), cwd=workdir, start_new_session=True
            )
        _wait_for_line(self.log, "Spark Connect server started", self.proc, "the Spark Connect server")

    def stop(self) -> None:
        _stop(self.proc)


# --- who fetched the files -----------------------------------------------------------------------------


def executor_process(pid: int) -> bool:
    """Whether ``pid`` is a Python worker of a Spark executor (an executor JVM among its parents)."""
    try:
        for parent in psutil.Process(pid).parents():
            if "CoarseGrainedExecutorBackend" in " ".join(parent.cmdline()):
                return True
    except psutil.Error:
        pass
    return False


def _socket_inode(port: int, server_port: int) -> str | None:
    """The inode of the loopback socket from ``port`` to ``server_port``, from the kernel's tables."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            ports = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
            if ports == (port, server_port) and fields[9] != "0":  # 0: a closed socket (TIME_WAIT)
                return fields[9]
    return None


def _python_holding(inode: str) -> tuple[int, str] | None:
    """The Python process holding the socket ``inode``, and its descriptor's path in ``/proc``
    (every fetcher is a Python process: the executors' workers, the drivers). Python processes
    only: the JVMs hold thousands of descriptors."""
    target = f"socket:[{inode}]"
    for proc in psutil.process_iter(["name"]):
        if not (proc.info["name"] or "").startswith("python"):
            continue
        try:
            for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
                try:
                    if os.readlink(fd) == target:
                        return proc.pid, str(fd)
                except OSError:
                    continue
        except OSError:
            continue
    return None


class FetchRecorder:
    """ASGI middleware noting, for each GET of a shared file, the process that sent it.

    Finding a socket's process reads the kernel's socket table and scans processes' descriptors
    (about 15 ms with a cluster running), so it runs in a thread while the request is served (the
    answer starts once it is known, so the client's socket is still open), and once per connection:
    a kept-alive connection's next request is known by its descriptor still holding the socket."""

    def __init__(self, app) -> None:
        self.app = app
        self.fetches: list[tuple[int, bool]] = []  # (pid, whether that process is an executor's)
        self._connections: dict[int, tuple[str, str, int]] = {}  # client port: (fd path, socket, pid)
        self._executors: dict[int, bool] = {}

    def _peer(self, port: int, server_port: int) -> tuple[int, bool]:
        """The process of the socket from ``port`` to ``server_port``, and whether it is an executor's."""
        pid = self._known(port)
        if pid is None:
            inode = _socket_inode(port, server_port)
            found = None if inode is None else _python_holding(inode)
            if found is None:
                return -1, False
            pid = found[0]
            self._connections[port] = (found[1], f"socket:[{inode}]", pid)
        if pid not in self._executors:
            self._executors[pid] = executor_process(pid)
        return pid, self._executors[pid]

    def _known(self, port: int) -> int | None:
        """The process of the connection from ``port`` seen before, if that socket is still open
        (then no other connection can have the same ports)."""
        known = self._connections.get(port)
        if known is None:
            return None
        try:
            return known[2] if os.readlink(known[0]) == known[1] else None
        except OSError:
            return None

    async def __call__(self, scope, receive, send):
        if not (scope["type"] == "http" and scope["method"] == "GET" and "/files/" in scope["path"]):
            return await self.app(scope, receive, send)
        peer = asyncio.get_running_loop().run_in_executor(None, self._peer, scope["client"][1], scope["server"][1])

        async def sending(message):
            if message["type"] == "http.response.start":
                self.fetches.append(await peer)
            await send(message)

        try:
            return await self.app(scope, receive, sending)
        finally:
            await peer


# --- the reads both kinds of session make ----------------------------------------------------------------


def read_case(spark, url: str, options: dict, via: str, staging: str):
    """One read as a pandas DataFrame: by ``read_table`` on this thread, or by ``load_as_spark`` /
    ``load_table_changes_as_spark`` on another thread (which must find the session by itself)."""
    import threading

    import deltaport
    from deltaport.spark import read_table

    if via == "here":
        return read_table(spark, url, stagingLocation=staging, **options).toPandas()
    outcome: list = []

    def read() -> None:
        try:
            if options.get("readChangeFeed"):
                frame = deltaport.load_table_changes_as_spark(
                    url, starting_version=options["startingVersion"], stagingLocation=staging
                )
            else:
                frame = deltaport.load_as_spark(url, version=options.get("versionAsOf"), stagingLocation=staging)
            outcome.append(frame.toPandas())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]


def read_all(spark, cases: dict[str, tuple[str, dict, str]], staging: str) -> dict[str, object]:
    """Each case's rows, or the text of the error it raised; four reads at a time (a read mostly
    waits: for the server, for the fetching job, for Spark's scheduling)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case: tuple[str, dict, str]) -> object:
        url, options, via = case
        try:
            return read_case(spark, url, options, via, staging)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(cases, pool.map(one, cases.values())))


def executors_deltaport(spark) -> list[str]:
    """Where the executors' Python workers import deltaport from."""
    import pyarrow as pa

    def where(batches):
        import deltaport

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"file": [deltaport.__file__] * batch.num_rows})

    return sorted({row["file"] for row in spark.range(4).mapInArrow(where, "file string").collect()})
