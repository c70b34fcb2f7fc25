"""Audit events in the catalog database: appended in blocks, read back oldest first in pages.

An event is rendered once, as a line of JSON (:func:`event_line`), when it is made; a server
gathers the lines of the events of the last moments into one :class:`AuditBlock`, which its audit
file appends as it is and the database keeps as one row of ``audit_blocks``: the events as one JSON
array, with the least and greatest event time in it. Storing a block is one insert; one row per
event (with its indexes) cost a busy server over ten microseconds an event, more than answering
the request it recorded. Reading filters the blocks of the time range asked for, event by event;
audit reads are an administrator's, rare and paged.

An event's id is its block's id times 2**20 plus its place in the block: ids grow in the order
events were stored, and a reader pages with ``after_id`` = the last id it saw. The store keeps what
it is given: keeping tokens, presigned URLs and credentials out of an event is the caller's duty
(see :class:`AuditEvent`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import sqlalchemy as sa

from deltaport.catalog import db
from deltaport.catalog.model import AuditEvent
from deltaport.catalog.names import name_key
from deltaport.catalog.store_types import Tx
from deltaport.errors import InvalidParameter

_B = db.audit_blocks
MAX_LIMIT = 10_000
BLOCK_EVENTS = 4096  # what add_audit_events puts in one block
_PLACE_BITS = 20  # an event's id: block id << _PLACE_BITS | place in the block
MAX_BLOCK_EVENTS = 1 << _PLACE_BITS
_BLOCKS_PER_READ = 64
_NO_TIME = 1 << 62  # later than any event's time (epoch ms)
_LINE = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def _plain(value: Any) -> Any:
    """A value JSON has no type for, in an event's ``detail``: a mapping as an object, a set or
    tuple as an array, anything else as its text (never failing the write)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def event_line(event: AuditEvent) -> bytes:
    """The event as one line of JSON (every field by its name), ending in a newline: the one
    rendering of an event, in the audit file and in the database alike. JSON escapes newlines in
    strings, so the only newline is the last byte."""
    try:
        return orjson.dumps(event, default=_plain, option=_LINE)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits in a detail; keys JSON cannot hold are left out
        return json.dumps(asdict(event), default=_plain, skipkeys=True).encode() + b"\n"


@dataclass(frozen=True)
class AuditBlock:
    """Events as they are written: their lines (:func:`event_line` each, in order), how many, and
    their least and greatest time (epoch ms)."""

    lines: bytes
    count: int
    first_time: int
    last_time: int

    @classmethod
    def of(cls, events: Iterable[AuditEvent]) -> AuditBlock:
        """The block of ``events``, taken one at a time: each line is appended to one buffer as it
        is rendered, so no event or line outlives its turn. (Keeping a batch's thousands of lines
        alive until one join made the allocator hand memory back to the system and fault it in
        again: on a busy server, more page faults than events, and a cost several times that of the
        rendering.)"""
        lines = bytearray()
        count, first, last = 0, _NO_TIME, -_NO_TIME
        for event in events:
            lines += event_line(event)
            count += 1
            first, last = min(first, event.time), max(last, event.time)
        return cls(bytes(lines), count, first, last) if count else cls(b"", 0, 0, 0)

    @classmethod
    def join(cls, blocks: Sequence[AuditBlock]) -> AuditBlock:
        """One block of the events of ``blocks``, in order."""
        blocks = [block for block in blocks if block.count]
        if not blocks:
            return cls(b"", 0, 0, 0)
        return cls(
            b"".join(block.lines for block in blocks),
            sum(block.count for block in blocks),
            min(block.first_time for block in blocks),
            max(block.last_time for block in blocks),
        )

    def json_array(self) -> str:
        """The events as one JSON array."""
        return "[" + self.lines[:-1].decode().replace("\n", ",") + "]"


def add_audit_block(tx: Tx, block: AuditBlock) -> None:
    """The block's events as one row (at most :data:`MAX_BLOCK_EVENTS`; none is nothing)."""
    if block.count == 0:
        return
    if block.count > MAX_BLOCK_EVENTS:
        raise ValueError(f"an audit block holds at most {MAX_BLOCK_EVENTS} events, not {block.count}")
    tx.conn.execute(
        sa.insert(_B).values(first_time=block.first_time, last_time=block.last_time, events=block.json_array())
    )


def add_audit_events(tx: Tx, events: Sequence[AuditEvent]) -> None:
    """``events`` in blocks of at most :data:`BLOCK_EVENTS`, in the order given."""
    for start in range(0, len(events), BLOCK_EVENTS):
        add_audit_block(tx, AuditBlock.of(events[start : start + BLOCK_EVENTS]))


def _blocks(tx: Tx, since_ms: int | None, until_ms: int | None, first_block: int) -> Iterator[tuple[int, str]]:
    """(id, events) of the blocks from ``first_block`` on that may hold events of the time range,
    in id order, read a few at a time."""
    query = sa.select(_B.c.id, _B.c.events).order_by(_B.c.id).limit(_BLOCKS_PER_READ)
    if since_ms is not None:
        query = query.where(_B.c.last_time >= since_ms)
    if until_ms is not None:
        query = query.where(_B.c.first_time < until_ms)
    after = first_block - 1
    while True:
        rows = tx.conn.execute(query.where(_B.c.id > after)).all()
        yield from ((row.id, row.events) for row in rows)
        if len(rows) < _BLOCKS_PER_READ:
            return
        after = rows[-1].id


def audit_events(
    tx: Tx,
    *,
    since_ms: int | None,
    until_ms: int | None,
    principal: str | None,
    action: str | None,
    share: str | None,
    after_id: int | None,
    limit: int,
) -> list[tuple[int, AuditEvent]]:
    """Up to ``limit`` events, oldest first, with their ids: time in [since_ms, until_ms), the
    principal and action matched exactly, the share without regard to case, id > after_id."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidParameter(f"limit must be between 1 and {MAX_LIMIT}, not {limit!r}: page with after_id")
    wanted = {"principal": principal, "action": action}
    wanted = {key: value for key, value in wanted.items() if value is not None}
    share_key = name_key(share) if share is not None else None
    after = after_id if after_id is not None else -1
    found: list[tuple[int, AuditEvent]] = []
    for block_id, text in _blocks(tx, since_ms, until_ms, max(after, 0) >> _PLACE_BITS):
        for place, event in enumerate(orjson.loads(text)):
            event_id = block_id << _PLACE_BITS | place
            if event_id <= after or any(event[key] != value for key, value in wanted.items()):
                continue
            if (since_ms is not None and event["time"] < since_ms) or (
                until_ms is not None and event["time"] >= until_ms
            ):
                continue
            if share_key is not None and (event["share"] is None or name_key(event["share"]) != share_key):
                continue
            found.append((event_id, AuditEvent(**event)))
            if len(found) == limit:
                return found
    return found
