"""A command whose optional part is not installed says, in one line, which extra installs it."""

from __future__ import annotations

import subprocess
import sys

RUN = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed
from deltaport.cli import main
sys.argv = ["deltaport", *sys.argv[2:]]
main()
"""


def _run(missing: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, missing, *args], capture_output=True, text=True, timeout=60)


def test_serve_without_the_server_extra(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("version: 1\nshares: []\n")
    done = _run("fastapi,uvicorn", "serve", "--config", str(config))
    assert done.returncode == 2
    assert done.stderr.strip() == "error: this command needs the 'server' extra: pip install \"deltaport[server]\""
    assert "Traceback" not in done.stderr + done.stdout


def test_catalog_import_without_the_database_packages(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("version: 1\nshares: []\n")
    done = _run("sqlalchemy", "catalog", "import", str(config))
    assert done.returncode == 2 and "deltaport[server]" in done.stderr and done.stderr.count("\n") == 1


def test_other_missing_modules_are_not_blamed_on_an_extra(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("version: 1\nshares: []\n")
    done = _run("yaml", "serve", "--config", str(config))
    assert done.returncode != 0 and "Traceback" in done.stderr  # a broken install is not an extra to install


def test_a_postgresql_catalog_without_its_driver_names_the_postgres_extra(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("version: 1\ncatalog: postgresql://user@127.0.0.1:1/db\n")
    done = _run("psycopg", "serve", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: a PostgreSQL catalog needs the 'postgres' extra: pip install \"deltaport[postgres]\""
    )


def test_directory_access_without_deltalake_names_the_dir_extra():
    code = (
        "import sys; sys.modules['deltalake'] = None\n"
        "from deltaport.client.directory import deltalake_module\n"
        "try:\n    deltalake_module()\nexcept ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "directory access needs the 'dir' extra: pip install \"deltaport[dir]\""
