"""The throwaway PostgreSQL helper: it fails, never skips, when the server is not installed."""

from __future__ import annotations

import pytest

import postgres


def test_missing_binaries_fail_naming_the_package(monkeypatch):
    monkeypatch.setattr(postgres, "find_bindir", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="install the Debian package postgresql-15"):
        postgres.require_bindir()


def test_the_binaries_are_found_here():
    folder = postgres.require_bindir()
    assert (folder / "initdb").is_file() and (folder / "pg_ctl").is_file()


def test_the_shared_cluster_answers(postgres_server):
    assert postgres_server.execute("SHOW server_version")[0][0].startswith("15.")
    url = postgres_server.create_database()
    name = url.rsplit("/", 1)[1]
    assert postgres_server.execute(f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == [(1,)]
