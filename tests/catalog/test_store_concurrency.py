"""Races between writers (one wins, nothing half-made stays) and a database that goes away."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from deltaport.catalog import db as tables
from deltaport.catalog.store import CatalogDB
from deltaport.catalog.store_sql import write_unique
from deltaport.catalog.store_types import Tx
from deltaport.errors import AlreadyExists, CatalogUnavailable, DeltaportError, ResourceNotFound
from postgres import PostgresCluster, require_bindir

THREADS = 6


def _race(calls):
    """Run the calls at the same moment; each one's result or the error it raised."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        try:
            return call()
        except DeltaportError as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.fixture
def replicas(catalog_url, clock):
    """THREADS stores on one database, as separate server replicas would have."""
    stores = [CatalogDB(catalog_url, clock=clock) for _ in range(THREADS)]
    yield stores
    for store in stores:
        store.close()


def test_concurrent_creates_of_one_share_leave_exactly_one(replicas):
    names = ["sales", "SALES", "Sales", "sAles", "saLes", "salEs"]  # one name, without regard to case
    results = _race([lambda s=s, n=n: s.create_share(n) for s, n in zip(replicas, names)])
    winners = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Exception)]
    assert len(winners) == 1
    assert all(isinstance(e, AlreadyExists) and "already exists" in e.message for e in losers)
    assert [s.id for s in replicas[0].list_shares()] == [winners[0].id]


def test_concurrent_creates_of_one_recipient_leave_one_recipient_with_one_token(replicas, secrets_used):
    results = _race([lambda s=s: s.create_recipient("alice") for s in replicas])
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1 and all(isinstance(r, AlreadyExists) for r in results if r not in winners)
    info, activation = winners[0]
    secrets_used.add(activation, label="raced activation token")
    (listed,) = replicas[0].list_recipients()
    assert listed == info and len(listed.tokens) == 1
    engine = sa.create_engine(replicas[0]._engine.url)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tables.recipient_tokens)).scalar_one() == 1
    engine.dispose()


def test_one_activation_link_activates_once_under_a_race(replicas, secrets_used):
    _, activation = replicas[0].create_recipient("alice")
    secrets_used.add(activation, label="raced activation token")
    results = _race([lambda s=s: s.activate(activation) for s in replicas])
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1
    assert all(isinstance(r, DeltaportError) and r.http_status in (403, 404) for r in results if r not in winners)
    secrets_used.add(winners[0][1], label="raced bearer token")
    (recipient,) = replicas[0].served().recipients
    assert len(recipient.tokens) == 1


def test_the_revision_counts_every_concurrent_write(replicas):
    before = replicas[0].revision()
    _race([lambda s=s, i=i: s.create_share(f"s{i}") for i, s in enumerate(replicas)])
    assert replicas[0].revision() == before + THREADS


def test_a_constraint_violation_is_already_exists_without_the_drivers_text(store):
    """The unique constraints back the checks up: a duplicate that slips past them is refused with
    the caller's message, and nothing of the driver's (which quotes the row) is kept."""
    store.create_share("sales")
    duplicate = sa.insert(tables.shares).values(share_id="x", name="SALES", name_lc="sales", created_at=0, updated_at=0)
    with store._engine.connect() as conn, pytest.raises(AlreadyExists) as info, conn.begin():
        write_unique(Tx(conn, 0), duplicate, "share 'SALES' already exists")
    assert info.value.message == "share 'SALES' already exists"
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.detail is None


# --- a database that goes away ------------------------------------------------------------------


def test_an_unopenable_sqlite_file_is_unavailable(tmp_path):
    with pytest.raises(CatalogUnavailable) as info:
        CatalogDB(f"sqlite:///{tmp_path / 'missing-dir' / 'catalog.db'}")
    assert "cannot be used right now" in info.value.message
    assert "missing-dir" not in info.value.message  # which database is for the operator only
    assert "missing-dir/catalog.db" in info.value.operator_message
    assert info.value.http_status == 503 and info.value.detail


def test_a_locked_sqlite_database_is_unavailable_until_the_lock_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "SQLITE_BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "catalog.db"
    store = CatalogDB(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CatalogUnavailable):
            store.create_share("sales")
        assert store.list_shares() == []  # readers are not blocked by a writer (WAL)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.create_share("sales").name == "sales"
    store.close()


def test_a_bad_activation_link_never_waits_for_the_write_lock(tmp_path, monkeypatch):
    """Guessing links is refused by a read: it neither queues behind writers nor holds them up."""
    monkeypatch.setattr(tables, "SQLITE_BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "catalog.db"
    store = CatalogDB(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(ResourceNotFound, match="activation link is not known"):
            store.activate("dpa_guessed-link-0123456789")
    finally:
        other.execute("ROLLBACK")
        other.close()
        store.close()


@pytest.fixture
def own_cluster(postgres_server):
    """A cluster of its own, to stop and start without disturbing other tests."""
    cluster = PostgresCluster(require_bindir())
    yield cluster
    cluster.destroy()


def test_a_stopped_postgres_is_unavailable_and_recovers_without_reopening(own_cluster):
    own_cluster.execute("CREATE DATABASE catalog")
    store = CatalogDB(own_cluster.url("catalog", password="pw-not-to-show"))
    store.create_share("sales")
    own_cluster.stop()
    for call in (store.list_shares, store.revision, lambda: store.create_share("other")):
        with pytest.raises(CatalogUnavailable) as info:
            call()
        assert "pw-not-to-show" not in info.value.operator_message
        shown = f"postgresql://postgres:***@127.0.0.1:{own_cluster.port}/catalog"
        assert shown in info.value.operator_message and shown not in info.value.message  # the operator's only
    own_cluster.start()
    assert [s.name for s in store.list_shares()] == ["sales"]
    store.create_share("other")
    assert store.revision() == 3
    store.close()


def test_a_connection_dropped_mid_call_is_unavailable_and_undone(postgres_server):
    """The clock is read inside the write transaction: this one kills the store's own backend
    there, so the call loses its connection half-way."""
    url = postgres_server.create_database()
    database = url.rsplit("/", 1)[1]
    kill = threading.Event()

    def clock():
        if kill.is_set():
            kill.clear()
            postgres_server.execute(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' "
                "AND pid <> pg_backend_pid()"
            )
        return 1_767_225_600.0

    store = CatalogDB(url, clock=clock)
    kill.set()
    with pytest.raises(CatalogUnavailable):
        store.create_share("sales")
    assert store.list_shares() == [] and store.revision() == 1
    assert store.create_share("sales").name == "sales"
    store.close()
