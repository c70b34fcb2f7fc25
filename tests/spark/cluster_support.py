"""A real Spark standalone cluster on loopback, from the pyspark wheel's own scripts: a master, two
one-core workers, and a Spark Connect server on them; and a recorder of who fetched shared files.

The cluster's processes get ``PYSPARK_PYTHON`` = this Python (so executors run this environment's
packages) and ``SPARK_LOCAL_IP=127.0.0.1``; their logs are in the work folder.
"""

from __future__ import annotations

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


class FetchRecorder:
    """ASGI middleware noting, for each GET of a shared file, the process that sent it."""

    def __init__(self, app) -> None:
        self.app = app
        self.fetches: list[tuple[int, bool]] = []  # (pid, whether that process is an executor's)

    def _peer_pid(self, port: int, server_port: int) -> int:
        """The process of the socket from ``port`` to ``server_port`` (a local port may serve
        several connections to other peers)."""
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.raddr and (conn.laddr.port, conn.raddr.port) == (port, server_port):
                return -1 if conn.pid is None else conn.pid
        return -1

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET" and "/files/" in scope["path"]:
            pid = self._peer_pid(scope["client"][1], scope["server"][1])
            self.fetches.append((pid, executor_process(pid)))
        return await self.app(scope, receive, send)


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
