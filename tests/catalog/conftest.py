"""Catalog store fixtures: every store test runs against SQLite (a file in tmp_path) and against
PostgreSQL (a fresh database per test on the session's throwaway cluster)."""

from __future__ import annotations

import time

import pytest

from deltaport.catalog.store import CatalogDB
from postgres import postgres_server  # noqa: F401  (the session's cluster, shared with other test dirs)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, in seconds


class FakeClock:
    """A clock the test moves by hand (epoch seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @property
    def ms(self) -> int:
        return int(self.now * 1000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def postgres_catalog_template(request):
    """A database migrated to the newest schema once, that store tests copy (CREATE DATABASE ...
    TEMPLATE): copying costs less than migrating each time. Its name."""
    cluster = request.getfixturevalue("postgres_server")
    name = "catalog_template"
    cluster.execute(f'CREATE DATABASE "{name}"')
    CatalogDB(cluster.url(name)).close()
    deadline = time.monotonic() + 10  # a closed connection's server process may linger a moment
    active = f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"
    while cluster.execute(active)[0][0] and time.monotonic() < deadline:
        time.sleep(0.02)
    return name


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def catalog_url(backend, request, tmp_path):
    """The URL of an empty database (nothing migrated yet) of each kind."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture
def store(backend, request, tmp_path, clock):
    """An open store on a new database of each kind, migrated."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        template = request.getfixturevalue("postgres_catalog_template")
        url = request.getfixturevalue("postgres_server").create_database(template=template)
    db = CatalogDB(url, clock=clock)
    yield db
    db.close()
