"""Audit events: appended in bulk, read back oldest first, filtered and paged."""

from __future__ import annotations

from decimal import Decimal

import pytest
import sqlalchemy as sa

from deltaport.catalog import db, store_audit
from deltaport.catalog.model import AuditEvent
from deltaport.errors import InvalidParameter


def event(i, **kwargs):
    fields = dict(time=1000 + i, request_id=f"req-{i}", principal="alice", action="queryTable", status=200)
    return AuditEvent(**(fields | kwargs))


def test_events_come_back_as_stored(store):
    full = AuditEvent(
        time=5,
        request_id="r",
        principal="admin:root",
        action="createShare",
        status=201,
        client_ip="10.0.0.1",
        user_agent="curl/8",
        share="Sales",
        schema="s",
        table="t",
        version=3,
        files=2,
        bytes=1024,
        duration_ms=1.5,
        detail={"objects": ["a", "b"], "n": 1, "nested": {"ok": True}},
    )
    store.add_audit_events([full, event(1)])
    (first_id, first), (second_id, second) = store.audit_events()
    assert first == full and second == event(1) and second_id > first_id


def test_a_large_batch_of_every_kind_of_value_comes_back_as_stored(store):
    batch = [
        event(
            i,
            principal=f'r\u00e9cipient "{i}" \\ \n',
            client_ip=None if i % 2 else "::1",
            user_agent="\u6f22\u5b57 \U0001f600",
            share="S" if i % 3 else None,
            version=2**62 + i,
            files=0,
            bytes=2**53 + 1,
            duration_ms=float(i) / 3,
            detail={"i": i} if i % 5 == 0 else {},
        )
        for i in range(3000)
    ]
    store.add_audit_events(batch)
    stored = [e for _, e in store.audit_events(limit=3000)]
    assert stored == batch


def test_a_value_json_has_no_type_for_is_kept_as_an_array_or_text(store):
    store.add_audit_events([event(1, detail={"ids": {7}, "pair": (1, "a"), "price": Decimal("1.50")})])
    ((_, stored),) = store.audit_events()
    assert stored.detail == {"ids": [7], "pair": [1, "a"], "price": "1.50"}


def test_an_integer_beyond_64_bits_is_kept(store):
    store.add_audit_events([event(1, detail={"big": 2**70, "set": {3}})])
    ((_, stored),) = store.audit_events()
    assert stored.detail == {"big": 2**70, "set": [3]}


def test_a_block_is_one_row_of_the_lines_the_audit_file_writes(store):
    """One rendering of an event: the block's lines, made a JSON array, are what the row keeps."""
    events = [event(i, detail={"n": i, "s": {"x"}, "t": "\u00e9\n,"}) for i in (2, 0, 1)]
    block = store_audit.AuditBlock.of(events)
    assert (block.count, block.first_time, block.last_time) == (3, 1000, 1002)
    assert store_audit.AuditBlock.of(iter(events)) == block  # taken one at a time
    assert store_audit.AuditBlock.of([]) == store_audit.AuditBlock(b"", 0, 0, 0)
    store.add_audit_block(block)
    store.add_audit_block(store_audit.AuditBlock(b"", 0, 0, 0))  # nothing: no row
    with store._engine.connect() as conn:
        (text,) = conn.execute(sa.select(db.audit_blocks.c.events)).scalars()
    assert text == "[" + block.lines.decode().strip().replace("\n", ",") + "]"
    assert [e for _, e in store.audit_events()] == [
        event(i, detail={"n": i, "s": ["x"], "t": "\u00e9\n,"}) for i in (2, 0, 1)
    ]
    assert store.audit_events(since_ms=1001) and not store.audit_events(since_ms=1003)


def test_blocks_joined_are_the_block_of_all_their_events_in_order():
    events = [event(i) for i in (5, 1, 7, 3)]
    parts = [
        store_audit.AuditBlock.of(events[:1]),
        store_audit.AuditBlock.of([]),
        store_audit.AuditBlock.of(events[1:]),
    ]
    assert store_audit.AuditBlock.join(parts) == store_audit.AuditBlock.of(events)
    assert (
        store_audit.AuditBlock.join([])
        == store_audit.AuditBlock.join([parts[1]])
        == store_audit.AuditBlock(b"", 0, 0, 0)
    )


def test_a_block_holds_at_most_two_to_the_twenty_events(store):
    with pytest.raises(ValueError, match="at most"):
        store.add_audit_block(store_audit.AuditBlock(b"", store_audit.MAX_BLOCK_EVENTS + 1, 0, 0))


def test_audit_events_are_not_catalog_writes(store):
    before = store.revision()
    store.add_audit_events([event(1)])
    store.add_audit_events([])
    assert store.revision() == before


def test_filters_and_paging(store):
    store.add_audit_events(
        [
            event(0),
            event(1, principal="bob"),
            event(2, action="listShares"),
            event(3, share="SALES"),
            event(4, share="other"),
            event(5),
        ]
    )
    ids = [i for i, _ in store.audit_events()]
    assert len(ids) == 6 and ids == sorted(ids)

    def ids_of(**kwargs):
        return [e.request_id for _, e in store.audit_events(**kwargs)]

    assert ids_of(since_ms=1002, until_ms=1004) == ["req-2", "req-3"]
    assert ids_of(principal="bob") == ["req-1"]
    assert ids_of(action="listShares") == ["req-2"]
    assert ids_of(share="sales") == ["req-3"]
    assert ids_of(after_id=ids[3]) == ["req-4", "req-5"]
    assert ids_of(limit=2) == ["req-0", "req-1"]
    assert ids_of(after_id=ids[1], limit=2, principal="alice") == ["req-2", "req-3"]


def test_paging_through_many_blocks_sees_every_match_once_in_order(store, monkeypatch):
    """Batches become blocks (a big batch several); a reader paging with filters crosses them,
    and blocks are read a few at a time."""
    monkeypatch.setattr(store_audit, "BLOCK_EVENTS", 7)
    monkeypatch.setattr(store_audit, "_BLOCKS_PER_READ", 2)
    written = []
    for batch in range(6):
        events = [event(batch * 40 + i, principal="bob" if i % 3 == 0 else "alice") for i in range(batch * 5)]
        events.reverse()  # times within a block need not be in order
        store.add_audit_events(events)
        written += events
    wanted = [e for e in written if e.principal == "bob" and 1040 <= e.time < 1190]
    seen, after = [], None
    while True:
        page = store.audit_events(principal="bob", since_ms=1040, until_ms=1190, after_id=after, limit=4)
        seen += page
        if len(page) < 4:
            break
        after = page[-1][0]
    assert [e for _, e in seen] == wanted and len(wanted) > 8
    ids = [i for i, _ in seen]
    assert ids == sorted(set(ids))


def test_the_limit_is_bounded(store):
    for limit in (0, -1, 10_001, True):
        with pytest.raises(InvalidParameter, match="limit must be between 1 and 10000"):
            store.audit_events(limit=limit)
    store.audit_events(limit=10_000)
