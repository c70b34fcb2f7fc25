"""The state of asynchronous queries in the catalog database (catalog/store_queries.py), on SQLite
and PostgreSQL: added once per idempotency key (also when two replicas race), read by id and by key,
finished once, purged once expired, and never a catalog write."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import sqlalchemy as sa

from deltaport.catalog import db as tables
from deltaport.catalog.model import AsyncQuery
from deltaport.catalog.store import CatalogDB

TTL_MS = 60_000


def _query(clock, query_id: str, key: str | None = "key-1", **changes) -> AsyncQuery:
    query = AsyncQuery(
        query_id=query_id,
        recipient="alice",
        table="s.d.t",
        table_id="id-t",
        params_digest="digest-" + query_id,
        request='{"limitHint": 3}',
        expires_at=clock.ms + TTL_MS,
        idempotency_key=key,
    )
    return replace(query, **changes)


def _rows(store: CatalogDB) -> list[tuple]:
    q = tables.async_queries
    with store._engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(q.c.query_id, q.c.idempotency_key).order_by(q.c.query_id))]


def test_an_added_query_reads_back_by_id_and_by_key(store, clock):
    revision = store.revision()
    query = _query(clock, "q1")
    assert store.add_async_query(query) == query
    assert store.async_query("q1") == query
    assert store.keyed_async_query("alice", "s.d.t", "id-t", "key-1") == query
    assert store.revision() == revision, "query state is not a catalog write"


def test_lookups_miss_unknown_ids_and_keys_of_another_recipient_or_table(store, clock):
    store.add_async_query(_query(clock, "q1"))
    assert store.async_query("q2") is None
    assert store.keyed_async_query("bob", "s.d.t", "id-t", "key-1") is None
    assert store.keyed_async_query("alice", "s.d.u", "id-t", "key-1") is None
    assert store.keyed_async_query("alice", "s.d.t", "id-other", "key-1") is None  # the table was replaced
    assert store.keyed_async_query("alice", "s.d.t", "id-t", "key-2") is None


def test_a_second_query_with_the_same_key_gets_the_first(store, clock):
    first = store.add_async_query(_query(clock, "q1"))
    again = store.add_async_query(_query(clock, "q2", params_digest="other"))
    assert again == first
    assert _rows(store) == [("q1", "key-1")]


def test_the_same_key_of_another_recipient_or_table_is_another_query(store, clock):
    store.add_async_query(_query(clock, "q1"))
    assert store.add_async_query(_query(clock, "q2", recipient="bob")).query_id == "q2"
    assert store.add_async_query(_query(clock, "q3", table="s.d.u")).query_id == "q3"
    assert [r[0] for r in _rows(store)] == ["q1", "q2", "q3"]


def test_queries_without_a_key_are_each_stored(store, clock):
    store.add_async_query(_query(clock, "q1", key=None))
    store.add_async_query(_query(clock, "q2", key=None))
    assert _rows(store) == [("q1", None), ("q2", None)]


def test_finish_records_the_version_of_a_success(store, clock):
    store.add_async_query(_query(clock, "q1"))
    store.finish_async_query("q1", version=7)
    done = store.async_query("q1")
    assert (done.status, done.version, done.error_code, done.error_message) == ("succeeded", 7, None, None)


def test_finish_records_the_error_of_a_failure(store, clock):
    store.add_async_query(_query(clock, "q1"))
    store.finish_async_query("q1", error_code="INVALID_PARAMETER_VALUE", error_message="bad hint")
    done = store.async_query("q1")
    assert (done.status, done.version, done.error_code, done.error_message) == (
        "failed",
        None,
        "INVALID_PARAMETER_VALUE",
        "bad hint",
    )


def test_the_first_outcome_stays(store, clock):
    store.add_async_query(_query(clock, "q1"))
    store.finish_async_query("q1", version=3)
    store.finish_async_query("q1", error_code="INTERNAL_ERROR", error_message="late replica")
    store.finish_async_query("q1", version=9)
    done = store.async_query("q1")
    assert (done.status, done.version, done.error_code) == ("succeeded", 3, None)


def test_an_expired_query_is_not_found_then_purged_by_the_next_add(store, clock):
    store.add_async_query(_query(clock, "old"))
    store.add_async_query(_query(clock, "later", key="key-2", expires_at=clock.ms + 10 * TTL_MS))
    clock.advance(TTL_MS / 1000 - 0.001)
    assert store.async_query("old") is not None  # one millisecond before its expiry
    clock.advance(0.001)
    assert store.async_query("old") is None
    assert store.keyed_async_query("alice", "s.d.t", "id-t", "key-1") is None
    assert [r[0] for r in _rows(store)] == ["later", "old"], "reads delete nothing"
    fresh = store.add_async_query(_query(clock, "new"))  # its key was the expired query's: a new query
    assert fresh.query_id == "new"
    assert [r[0] for r in _rows(store)] == ["later", "new"]


def test_a_submission_waiting_on_an_uncommitted_insert_of_its_key_gets_the_winner(store, clock):
    """The race's narrow window made certain: another replica's insert of the same key is not yet
    committed when this one looks the key up, so this one inserts too, waits on the unique index
    (PostgreSQL) or the write lock (SQLite), and must answer the winner's query, not fail."""
    winner = _query(clock, "winner")
    values = {("table_name" if k == "table" else k): v for k, v in winner.__dict__.items()}
    started = threading.Event()
    with store._engine.connect() as conn:
        conn = conn.execution_options(**{tables.WRITE: True})
        with conn.begin():
            conn.execute(sa.insert(tables.async_queries).values(**values))
            with ThreadPoolExecutor(1) as pool:

                def submit() -> AsyncQuery:
                    started.set()
                    return store.add_async_query(_query(clock, "loser", params_digest="other"))

                pending = pool.submit(submit)
                started.wait()
                threading.Event().wait(0.3)  # let the submission reach its insert and block there
                assert not pending.done(), "the submission must wait for the uncommitted insert"
                conn.commit()
                kept = pending.result(timeout=30)
    assert kept == winner
    assert _rows(store) == [("winner", "key-1")]


def test_replicas_racing_one_key_agree_on_one_query(catalog_url, clock):
    replicas = [CatalogDB(catalog_url, clock=clock) for _ in range(6)]
    try:
        for round_ in range(5):
            key = f"race-{round_}"
            barrier = threading.Barrier(len(replicas))

            def add(i: int, key: str = key, barrier: threading.Barrier = barrier) -> AsyncQuery:
                barrier.wait()
                return replicas[i].add_async_query(_query(clock, f"{key}-q{i}", key=key))

            with ThreadPoolExecutor(len(replicas)) as pool:
                kept = list(pool.map(add, range(len(replicas))))
            assert len({k.query_id for k in kept}) == 1, kept
            assert kept[0] == replicas[0].async_query(kept[0].query_id)
            assert [r for r in _rows(replicas[0]) if r[1] == key] == [(kept[0].query_id, key)]
    finally:
        for replica in replicas:
            replica.close()
