"""A big table's live files, read a piece at a time: memory bounded by a piece, not by the table.

A snapshot (snapshot.py) holds every live file of its version as one Arrow table: right for most
tables, and what the snapshot cache keeps. A table of millions of files does not fit that way.
:class:`StreamedSnapshot` keeps only what is small: the commits after the checkpoint, replayed
alone (their surviving adds, and the keys they add or remove). The checkpoint's adds are read
when :meth:`StreamedSnapshot.pieces` is iterated, ``PIECE_ROWS`` rows at a time, each piece without
the files a later commit touched, then the later commits' surviving adds.

That is replay.py's rule applied piece by piece, so the files come out exactly as a whole replay
lists them (checkpoint order, then later adds in commit order). Each file has a :class:`Place`
(a source and a row in it) that does not depend on what a query keeps, so a query can stop after
any file and a later request resume right after it, reading only from there on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaport.delta.arrow_util import np_bool_array, select_rows
from deltaport.delta.checkpoint import checkpoint_adds, read_json_checkpoint, sidecar_relpath
from deltaport.delta.replay import KEY, with_keys
from deltaport.delta.snapshot import Snapshot
from deltaport.delta.table_config import TableConfig
from deltaport.errors import CorruptLog, DeltaportError, ObjectNotFound
from deltaport.storage.base import ObjectStore
from deltaport.storage.ranged import open_parquet

#: Checkpoint rows read at a time.
PIECE_ROWS = 65_536


@dataclass(frozen=True, order=True)
class Place:
    """Where a file is in a streamed snapshot: ``source`` indexes its checkpoint files, and
    ``source == len(sources)`` names the later commits' adds; ``row`` is the row in that source."""

    source: int
    row: int


@dataclass(frozen=True)
class Piece:
    """Some live files, in order: ``snapshot`` holds them (its ``live`` is just these files), and
    ``rows[i]`` is the row in source ``source`` of its i-th file."""

    snapshot: Snapshot
    source: int
    rows: np.ndarray

    def place(self, i: int) -> Place:
        return Place(self.source, int(self.rows[i]))

    def after(self, i: int) -> Piece | None:
        """The files of this piece after its ``i``-th, as a piece (None when there are none)."""
        if i + 1 >= len(self.rows):
            return None
        rest = dataclasses.replace(self.snapshot, live=self.snapshot.live.slice(i + 1))  # nothing derived carried
        return Piece(rest, self.source, self.rows[i + 1 :])


@dataclass(frozen=True)
class StreamedSnapshot:
    """A table at one version whose live files are read in pieces (see the module)."""

    table_uri: str
    version: int
    config: TableConfig
    timestamp: int | None
    store: ObjectStore
    sources: tuple[str, ...]  # the checkpoint's files, in order (parquet, or a JSON v2 checkpoint)
    later: pa.Table  # the later commits' surviving adds, with ``_key``, in commit order
    touched: pa.Array  # every key a later commit adds or removes

    def pieces(self, start: Place = Place(0, 0)) -> Iterator[Piece]:
        """The live files from ``start`` on, a piece at a time."""
        for source in range(start.source, len(self.sources)):
            first = start.row if source == start.source else 0
            yield from self._checkpoint_pieces(source, first)
        tail_from = start.row if start.source == len(self.sources) else 0
        if start.source <= len(self.sources):
            for first in range(tail_from, self.later.num_rows, PIECE_ROWS):
                rows = np.arange(first, min(first + PIECE_ROWS, self.later.num_rows), dtype=np.int64)
                yield self._piece(self.later.slice(first, len(rows)), len(self.sources), rows)

    def _piece(self, live: pa.Table, source: int, rows: np.ndarray) -> Piece:
        snap = Snapshot(self.table_uri, self.version, self.config, live, self.timestamp)
        return Piece(snap, source, rows)

    def _checkpoint_pieces(self, source: int, first: int) -> Iterator[Piece]:
        path = self.sources[source]
        if _is_json(path):
            yield from self._json_pieces(source, first)
            return
        try:
            parquet = pq.ParquetFile(open_parquet(self.store, path))
            meta = parquet.metadata
            starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
            group = int(np.searchsorted(starts, first, side="right")) - 1
            if group >= meta.num_row_groups or "add" not in parquet.schema_arrow.names:
                return
            row = int(starts[group])
            groups = list(range(group, meta.num_row_groups))
            for batch in parquet.iter_batches(batch_size=PIECE_ROWS, row_groups=groups, columns=["add"]):
                skip = max(first - row, 0)
                piece = self._live_rows(batch.column(0).slice(skip), source, row + skip, path)
                row += batch.num_rows
                if piece is not None:
                    yield piece
        except DeltaportError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise CorruptLog(f"checkpoint {path} cannot be read", table=self.table_uri, detail=str(exc)) from exc

    def _json_pieces(self, source: int, first: int) -> Iterator[Piece]:
        """The add actions written in a JSON v2 checkpoint itself (its sidecars are sources of their
        own), from its ``first`` on: the file is read whole, as it holds few of them."""
        path = self.sources[source]
        adds = _json_checkpoint(self.store, path, self.config.physical_partition_columns, self.table_uri)[0]
        for start in range(first, adds.num_rows, PIECE_ROWS):
            part = adds.slice(start, PIECE_ROWS)
            piece = self._untouched(with_keys(part, self.table_uri), source, np.arange(start, start + part.num_rows))
            if piece is not None:
                yield piece

    def _live_rows(self, adds: pa.StructArray, source: int, first_row: int, path: str) -> Piece | None:
        """The piece of checkpoint rows ``adds`` (the first at ``first_row``): its add actions
        that no later commit touched."""
        present = np.asarray(pc.is_valid(adds), dtype=bool)
        rows = np.flatnonzero(present).astype(np.int64) + first_row
        if not len(rows):
            return None
        adds = adds.filter(np_bool_array(present)) if not present.all() else adds
        pv = self.config.physical_partition_columns
        live = with_keys(checkpoint_adds(adds, pv, path, self.table_uri), self.table_uri)
        return self._untouched(live, source, rows)

    def _untouched(self, live: pa.Table, source: int, rows: np.ndarray) -> Piece | None:
        """The piece of ``live`` (at ``rows`` of ``source``) without the files a later commit touched."""
        if len(self.touched):
            kept = ~np.asarray(pc.is_in(live.column(KEY), value_set=self.touched), dtype=bool)
            if not kept.all():
                live, rows = select_rows(live, kept), rows[kept]
        return self._piece(live, source, rows) if len(rows) else None

    @property
    def end(self) -> Place:
        """The place after the last file."""
        return Place(len(self.sources), self.later.num_rows)


def checkpoint_sources(store: ObjectStore, parts: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    """The files that hold a checkpoint's actions, in order (each part, then the sidecars it names),
    and their rows: parquet ones from their footers, a JSON v2 checkpoint by reading it. CorruptLog
    when one cannot be read."""
    sources: list[str] = []
    rows = 0
    for path in parts:
        try:
            if _is_json(path):
                adds, sidecars = _json_checkpoint(store, path, [], None)
                rows += adds.num_rows
            else:
                parquet = pq.ParquetFile(open_parquet(store, path))
                sidecars = _sidecars(parquet) if "sidecar" in parquet.schema_arrow.names else []
                rows += parquet.metadata.num_rows
            sources.append(path)
            for sidecar in sidecars:
                sources.append(sidecar)
                rows += pq.ParquetFile(open_parquet(store, sidecar)).metadata.num_rows
        except (OSError, pa.ArrowException, ObjectNotFound) as exc:
            raise CorruptLog(f"checkpoint {path} or a sidecar it names cannot be read", detail=str(exc)) from exc
    return tuple(sources), rows


def _is_json(path: str) -> bool:
    return path.endswith(".json")


def _json_checkpoint(store: ObjectStore, path: str, pv: list[str], table: str | None) -> tuple[pa.Table, list[str]]:
    """A JSON v2 checkpoint's own add actions, and the sidecars it names (relative to the table)."""
    actions = read_json_checkpoint(store, path, pv, table)
    return actions.adds, [sidecar_relpath(sidecar.get("path") or "", table) for sidecar in actions.sidecars]


def _sidecars(parquet: pq.ParquetFile) -> list[str]:
    column = parquet.read(columns=["sidecar"]).column(0)
    return [sidecar_relpath(row["path"] or "") for row in column.filter(pc.is_valid(column)).to_pylist()]


__all__ = ["PIECE_ROWS", "Piece", "Place", "StreamedSnapshot", "checkpoint_sources"]
