"""A throwaway PostgreSQL cluster for tests, and the session fixture ``postgres_server`` that any
test directory can use by importing it into its conftest::

    from postgres import postgres_server  # noqa: F401

The cluster lives in a temporary directory (data, socket, log), listens on a free port of
127.0.0.1, trusts every local connection (``-A trust``) and runs with fsync off: it is for tests
only, and removed when the session ends. ``initdb`` refuses to run as root, so as root the cluster
belongs to the ``postgres`` user (``runuser``). Without the server binaries the fixture fails, it
never skips: install the Debian package ``postgresql-15``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from servers import free_port

PACKAGE = "postgresql-15"
_SUPERUSER = "postgres"


def find_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: ``pg_config --bindir``, else Debian's usual place."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    candidates.append(Path("/usr/lib/postgresql/15/bin"))
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


class PostgresCluster:
    """One initialised and started cluster; ``stop()``/``start()`` take it down and bring it back
    on the same port (for outage tests), ``destroy()`` removes it."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        self.base = Path(tempfile.mkdtemp(prefix="deltaport-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.running = False
        if self.as_root:
            shutil.chown(self.base, user=_SUPERUSER)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", _SUPERUSER, "--no-sync", "-E", "UTF8")
        self.start()

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self.as_root:
            command = ["runuser", "-u", _SUPERUSER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = self.base / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w", "-t", "60", "start"
        )
        self.running = True

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        self.running = False

    def destroy(self) -> None:
        try:
            if self.running:
                self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        who = _SUPERUSER if password is None else f"{_SUPERUSER}:{password}"
        return f"postgresql://{who}@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple]:
        """Run one statement outside any transaction (CREATE DATABASE needs that); its rows."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={_SUPERUSER} dbname={database}", autocommit=True
        ) as c:
            cursor = c.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); its URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)


def require_bindir() -> Path:
    """The server binaries' folder, or the test fails (never skips) saying what to install."""
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(
            f"the PostgreSQL server binaries (initdb, pg_ctl) are missing: install the Debian package {PACKAGE} "
            f"(apt-get install {PACKAGE}); the catalog tests need a real PostgreSQL",
            pytrace=False,
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_SUPERUSER)
        except KeyError:
            pytest.fail(f"running as root needs a '{_SUPERUSER}' user to own the test cluster: install {PACKAGE}")
    return bindir


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL cluster shared by the session (create a database per test with
    ``create_database()``); stopped and removed at the end."""
    cluster = PostgresCluster(require_bindir())
    yield cluster
    cluster.destroy()
