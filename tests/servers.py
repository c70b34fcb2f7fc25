"""Real servers on loopback for tests: moto (S3) and Azurite (Azure) processes, a deltaport app in a
thread, and `deltaport serve` as a process."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(ready, proc: subprocess.Popen, what: str, seconds: float = 30) -> None:
    """Poll ``ready()`` until it is true; stop ``proc`` and fail if it never is."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if ready():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    _stop(proc)
    raise RuntimeError(f"{what} did not start")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


class MotoServer:
    """``moto_server`` on 127.0.0.1, an S3 API that tests can put real tables into."""

    access_key = "testing"
    secret_key = "testing"
    region = "us-east-1"

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        """Start (again, on the same port: a restarted moto holds no objects)."""
        exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(lambda: httpx.get(self.endpoint, timeout=1) is not None, self.proc, "moto_server")

    def stop(self) -> None:
        _stop(self.proc)

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def storage_options(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "region": self.region,
            "allow_http": True,
            "virtual_hosted_style_request": False,
        }

    def upload_dir(self, bucket: str, prefix: str, local: Path) -> str:
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for root, _, files in os.walk(local):
            for name in files:
                full = Path(root) / name
                key = f"{prefix}/{full.relative_to(local).as_posix()}"
                client.upload_file(str(full), bucket, key)
        return f"s3://{bucket}/{prefix}"


class RunningServer:
    """A deltaport app served by uvicorn in a thread on 127.0.0.1 (a real HTTP server); ``options``
    go to uvicorn's Config (e.g. ``proxy_headers=False``); ``port`` is a free one unless given."""

    def __init__(self, app, port: int | None = None, **options) -> None:
        import threading

        import uvicorn

        self.port = free_port() if port is None else port
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False, **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class ServeProcess:
    """``deltaport serve`` as its own process on 127.0.0.1 (the server as operators run it): writes
    ``config`` with host and port filled in to ``workdir/serve.yaml``, starts it and returns once it
    answers /health (over https, unverified, with ``tls``). Its output goes to ``workdir/serve.log``."""

    def __init__(self, config: dict, workdir: Path, *args: str, tls: bool = False) -> None:
        import yaml

        self.port = free_port()
        self.url = f"http{'s' if tls else ''}://127.0.0.1:{self.port}"
        path = workdir / "serve.yaml"
        path.write_text(yaml.safe_dump({**config, "host": "127.0.0.1", "port": self.port}))
        self.log = workdir / "serve.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "deltaport"), "serve", "--config", str(path), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for(
            lambda: httpx.get(f"{self.url}/health", timeout=1, verify=False).status_code == 200,
            self.proc,
            "deltaport serve",
        )

    def stop(self) -> None:
        _stop(self.proc)


AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE_VERSION = "3.35.0"


def _installed_azurite() -> Path:
    """Azurite's blob server, installed with npm into .cache on first use. The suite's worker
    processes may all ask at once: the install is made under a lock, by the first to get it."""
    cache = Path(__file__).resolve().parents[1] / ".cache" / "azurite"
    exe = cache / "node_modules" / ".bin" / "azurite-blob"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / "azurite.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError("npm is needed to install Azurite for the Azure tests")
            install = [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", "--silent"]
            subprocess.run([*install, f"azurite@{AZURITE_VERSION}"], check=True, timeout=600)
    return exe


class AzuriteServer:
    """Azurite's blob service on 127.0.0.1 (installed with npm on first use); it checks SAS signatures."""

    account = "devstoreaccount1"

    def __init__(self, workdir: Path) -> None:
        self.exe, self.workdir = _installed_azurite(), workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{self.account}"
        self.start()

    def start(self) -> None:
        """Start (again, on the same port and folder: a restarted Azurite keeps its blobs)."""
        self.proc = subprocess.Popen(
            [
                str(self.exe),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.workdir),
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(
            lambda: socket.create_connection(("127.0.0.1", self.port), timeout=1).close() is None, self.proc, "Azurite"
        )

    def stop(self) -> None:
        _stop(self.proc)

    def service(self):
        from azure.storage.blob import BlobServiceClient

        conn = (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )
        return BlobServiceClient.from_connection_string(conn)

    def storage_options(self) -> dict:
        return {"account_name": self.account, "account_key": AZURITE_KEY, "endpoint": self.endpoint, "allow_http": True}

    def upload_dir(self, container: str, prefix: str, local: Path) -> str:
        svc = self.service()
        try:
            svc.create_container(container)
        except Exception as exc:  # already there
            if "ContainerAlreadyExists" not in str(exc):
                raise
        client = svc.get_container_client(container)
        for root, _, files in os.walk(local):
            for name in files:
                full = Path(root) / name
                client.upload_blob(f"{prefix}/{full.relative_to(local).as_posix()}", full.read_bytes(), overwrite=True)
        return f"az://{container}/{prefix}"


class SlowPlanning:
    """A deltaport app's store opener (``create_app(..., store=)``): the tables' real stores, where
    each listing of a table's log takes ``delay`` seconds while it is > 0, so that planning a
    query outlasts the server's asynchronous-query threshold."""

    def __init__(self) -> None:
        self.delay = 0.0

    def __call__(self, location, options):
        from deltaport.storage import store_for

        inner = store_for(location, options)
        listing = inner.list_dir

        def list_dir(*args, **kwargs):
            time.sleep(self.delay)
            return listing(*args, **kwargs)

        inner.list_dir = list_dir
        return inner
