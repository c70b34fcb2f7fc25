"""Audit events: appended in bulk, read back oldest first, filtered and paged."""

from __future__ import annotations

import pytest

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


def test_a_value_json_cannot_hold_is_kept_as_text(store):
    store.add_audit_events([event(1, detail={"ids": {7}})])
    ((_, stored),) = store.audit_events()
    assert stored.detail == {"ids": "{7}"}


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


def test_the_limit_is_bounded(store):
    for limit in (0, -1, 10_001, True):
        with pytest.raises(InvalidParameter, match="limit must be between 1 and 10000"):
            store.audit_events(limit=limit)
    store.audit_events(limit=10_000)
