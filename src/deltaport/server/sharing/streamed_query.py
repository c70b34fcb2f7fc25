"""The snapshot query of a big table, a piece at a time (delta/streamed.py): each piece of live
files is scanned (the slice, predicates, the limit), paged and rendered before the next is read,
so a query of ten million files holds one piece, not the table.

The files come out in the order a whole snapshot lists them, and a page ends at a file's
:class:`~deltaport.delta.streamed.Place`: its page token names the place after it (and the rows
still owed to a ``limitHint``), so each page reads only from where the last one stopped, and a
query paged with a tiny ``maxFiles`` stays linear.

What a whole snapshot checks before the first byte (paths outside the table's root), this checks
for the first piece before the first byte, and for later pieces as they are read: an error there
ends the stream with the protocol's error line when the client reads ``endStreamAction``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc

from deltaport.delta.scan import scan, up_to_limit
from deltaport.delta.snapshot import Snapshot
from deltaport.delta.streamed import Piece, Place, StreamedSnapshot
from deltaport.server.fast.pipeline import pipelined
from deltaport.server.ops.request_info import FilesServed, current_request
from deltaport.server.sharing.answers import page_out_of_range

#: Paths of a piece's files outside the table's root, or deletion vectors by absolute path: refused.
CheckPaths = Callable[[Snapshot], None]


@dataclass(frozen=True)
class StreamedPlan:
    """What a streamed query keeps of each piece: ``keep`` maps a piece's snapshot to the indices of
    the files the query reads (slice and predicates); ``limit`` is the rows still owed to the
    query's ``limitHint`` at ``start`` (None: no limit); ``page_size`` the files of one page (None:
    not paged)."""

    start: Place
    keep: Callable[[Snapshot], Any]
    limit: int | None
    page_size: int | None


@dataclass
class _Stop:
    """Where the files listed so far stopped: the place after the last one, and the limit still owed."""

    place: Place | None = None
    limit: int | None = None


CursorKey = tuple[str, int, Place]


class Cursors:
    """Where paged streamed queries stopped, ready to go on: the rest of the piece a page ended in
    and the open reading of the pieces after it, by (table, version, place). A next page that
    resumes there takes it, and reads none of what came before again (parquet cannot start reading
    a row group in its middle). At most ``entries`` are kept, the oldest dropped; a page served by
    another replica, or after a drop, reads from the place's row group, as without."""

    def __init__(self, entries: int = 4) -> None:
        self.entries = entries
        self._items: OrderedDict[CursorKey, Iterator[Piece]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: CursorKey) -> Iterator[Piece] | None:
        with self._lock:
            return self._items.pop(key, None)

    def keep(self, key: CursorKey, pieces: Iterator[Piece]) -> None:
        with self._lock:
            self._items[key] = pieces
            dropped = [self._items.popitem(last=False)[1] for _ in range(len(self._items) - self.entries)]
        for old in dropped:
            close = getattr(old, "close", None)
            if close is not None:
                close()


class StreamedFiles:
    """One response's files of a streamed snapshot (see the module): iterate :meth:`pieces` once;
    afterwards :meth:`resume` says where a next page starts (None on the last page)."""

    def __init__(
        self, stream: StreamedSnapshot, plan: StreamedPlan, check_paths: CheckPaths, cursors: Cursors | None = None
    ) -> None:
        self.stream, self.plan, self.check_paths, self.cursors = stream, plan, check_paths, cursors
        self._stop = _Stop()
        self._rest: Piece | None = None  # what is left of the piece a page ended in
        self._checked: Snapshot | None = None
        self._first = self._primed()

    def _key(self, place: Place) -> CursorKey:
        return self.stream.table_uri, self.stream.version, place

    def _primed(self) -> Iterator[Piece]:
        """The stream's pieces (from where a page stopped, if that is kept), the first read now: the
        errors of opening the checkpoint and of the first piece's paths come before any byte."""
        kept = self.cursors.take(self._key(self.plan.start)) if self.cursors is not None else None
        pieces = kept if kept is not None else self.stream.pieces(self.plan.start)
        first = next(pieces, None)
        if first is None:
            return iter(())
        self.check_paths(first.snapshot)
        self._checked = first.snapshot
        return _chain(first, pieces)

    def _kept(self, piece: Piece) -> tuple[Piece, np.ndarray]:
        if piece.snapshot is not self._checked:
            self.check_paths(piece.snapshot)
        return piece, np.asarray(self.plan.keep(piece.snapshot), dtype=np.int64)

    def pieces(self) -> Iterator[tuple[Snapshot, Any]]:
        """(piece snapshot, indices of its files to list), in order, up to the page's end. Unpaged,
        the next pieces are read and scanned in two threads while this one's lines are made and
        sent; paged, one after the other, and where the page ends is kept for the next."""
        if self.plan.page_size is not None:
            yield from self._paged(map(self._kept, self._first))
            if self._stop.place is not None and self.cursors is not None:
                rest = self._first if self._rest is None else _chain(self._rest, self._first)
                self.cursors.keep(self._key(self._stop.place), rest)
            return
        kept = pipelined(self._first, self._kept, depth=1)
        try:
            yield from self._paged(kept)
        finally:
            kept.close()

    def _paged(self, kept: Iterator[tuple[Piece, np.ndarray]]) -> Iterator[tuple[Snapshot, Any]]:
        owed, room = self.plan.limit, self.plan.page_size
        for piece, indices in kept:
            if owed is not None:
                if owed <= 0:
                    return
                indices, rows = up_to_limit(piece.snapshot, indices, owed)
                owed -= rows
            if room is not None and len(indices) >= room:
                more = len(indices) > room
                indices = indices[:room]
                last = piece.place(int(indices[-1])) if len(indices) else None
                if last is not None and (more or Place(last.source, last.row + 1) < self.stream.end):
                    self._stop = _Stop(Place(last.source, last.row + 1), owed)
                    self._rest = piece.after(int(indices[-1]))
                if len(indices):
                    yield piece.snapshot, indices
                return
            if room is not None:
                room -= len(indices)
            if len(indices):
                yield piece.snapshot, indices

    def resume(self) -> tuple[Place, int | None] | None:
        """Where the next page starts and the limit still owed then; None when this was the last."""
        stop = self._stop
        return None if stop.place is None else (stop.place, stop.limit)


def _chain(first: Piece, rest: Iterator[Piece]) -> Iterator[Piece]:
    yield first
    yield from rest


def counted_lines(
    listed: Iterator[tuple[Snapshot, Any]], render: Callable[[Snapshot, Any], Iterator[Any]], share: str
) -> Iterator[Any]:
    """The lines ``render`` makes for each piece's files, noting on the request being served (known
    now, not in the thread that streams), once all are sent, how many files they handed out."""
    seen = current_request()

    def lines() -> Iterator[Any]:
        files = size = 0
        for snap, indices in listed:
            files += len(indices)
            size += declared_size(snap, indices)
            yield from render(snap, indices)
        if seen is not None:
            seen.served = FilesServed(share, files, size)

    return lines()


def declared_size(snap: Snapshot, indices: Any) -> int:
    """The sum of the sizes the snapshot's files at ``indices`` declare."""
    if not len(indices):
        return 0
    return int(pc.sum(pc.take(snap.live.column("size"), indices)).as_py() or 0)


def place_of(data: dict[str, Any]) -> tuple[Place, int | None]:
    """The place and owed limit a streamed query's page token holds."""
    try:
        place = Place(int(data["p"]), int(data["r"]))
        owed = data.get("l")
        return place, None if owed is None else int(owed)
    except (KeyError, TypeError, ValueError):
        raise page_out_of_range() from None


def token_data(version: int, place: Place, owed: int | None) -> dict[str, Any]:
    """What a streamed query's page token holds (read back by :func:`place_of`)."""
    return {"v": version, "p": place.source, "r": place.row, **({"l": owed} if owed is not None else {})}


def keep_files(predicate: Any, within: Callable[[Snapshot], Any] | None) -> Callable[[Snapshot], Any]:
    """The files of a piece a query reads: those of the recipient's slice (``within``) its
    predicates cannot rule out (no limit: the limit runs over pieces, in :class:`StreamedFiles`)."""

    def keep(snap: Snapshot) -> Any:
        return scan(snap, predicate, None, within=within(snap) if within is not None else None).indices

    return keep
