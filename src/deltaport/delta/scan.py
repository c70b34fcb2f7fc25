"""Scan a snapshot: partition pruning, then stats-based skipping, then a row-count limit.

Pruning is conservative (see expressions.evaluate): a file is dropped only when its partition
values or stats prove no row can match. Stats JSON strings are parsed columnar (one Arrow JSON
read over all files) for just the referenced columns, and kept on the snapshot for later scans.
The limit keeps files in log order until the sum of ``numRecords`` minus deletion-vector
cardinality reaches it; a file without stats counts as 0 rows, so more files are returned, never
fewer.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltaport.delta.arrow_util import np_array
from deltaport.delta.snapshot import Snapshot
from deltaport.expressions import Expr
from deltaport.expressions.evaluate import FileColumns, prune_mask
from deltaport.expressions.tree import columns_of

#: Delta primitive types whose JSON stats we read, with the Arrow type the JSON reader produces.
_STATS_JSON_TYPES = {
    "long": pa.int64(),
    "integer": pa.int64(),
    "short": pa.int64(),
    "byte": pa.int64(),
    "double": pa.float64(),
    "float": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "date": pa.string(),
    "timestamp": pa.string(),
    "timestamp_ntz": pa.string(),
}
_FINAL_TYPES = {
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


@dataclass(frozen=True)
class ScanResult:
    """Positions (into the snapshot's live files, in log order) of the files to read."""

    snapshot: Snapshot
    indices: pa.Array  # int64

    @property
    def num_files(self) -> int:
        return len(self.indices)

    def add_actions(self) -> Iterator[dict[str, Any]]:
        return self.snapshot.add_actions(self.indices)

    def files(self) -> pa.Table:
        return self.snapshot.files().take(self.indices)


def _stats_text(stats: pa.ChunkedArray) -> bytes:
    """All stats strings as one newline-delimited JSON buffer ("{}" for missing stats)."""
    arr = pc.binary_join_element_wise(pc.fill_null(stats, "{}"), "\n", "").combine_chunks()
    if len(arr) == 0:
        return b""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    data: bytes = arr.buffers()[2].to_pybytes()
    return data[offsets[0] : offsets[-1]]


def parsed_stats(snapshot: Snapshot, physical_types: dict[str, str]) -> pa.StructArray | None:
    """Stats of every live file as a struct (numRecords, minValues, maxValues, nullCount), parsed
    once per snapshot and column set and kept with the snapshot; None when they cannot be read."""
    key = ("parsed-stats", frozenset(physical_types.items()))
    return snapshot.derived(key, lambda: _parse_stats(snapshot, physical_types))


def _parse_stats(snapshot: Snapshot, physical_types: dict[str, str]) -> pa.StructArray | None:
    cols = [(name, _STATS_JSON_TYPES[t]) for name, t in physical_types.items() if t in _STATS_JSON_TYPES]
    schema = pa.schema(
        [
            ("numRecords", pa.int64()),
            ("minValues", pa.struct(cols)),
            ("maxValues", pa.struct(cols)),
            ("nullCount", pa.struct([(name, pa.int64()) for name, _ in cols])),
        ]
    )
    text = _stats_text(snapshot.live.column("stats"))
    try:
        table = pj.read_json(
            io.BytesIO(text),
            read_options=pj.ReadOptions(block_size=1 << 22),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # stats we cannot read: no stats skipping, every file is kept
    result = pa.StructArray.from_arrays([table.column(i).combine_chunks() for i in range(4)], names=schema.names)
    return result if len(result) == snapshot.num_files else None


def _typed(values: pa.Array, delta_type: str) -> pa.Array | None:
    """Stats values (as read from JSON) in the column's Arrow type; None when they do not convert."""
    target = _FINAL_TYPES[delta_type]
    try:
        if delta_type in ("timestamp", "timestamp_ntz"):
            return _iso_timestamps(values, target)
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _iso_timestamps(values: pa.Array, target: pa.DataType) -> pa.Array | None:
    """ISO-8601 stats strings ('2021-04-28T23:33:57.955Z', fraction optional) to timestamps.

    Writers use UTC ('Z') or no zone; any other offset is left unknown rather than guessed.
    """
    if pc.any(pc.match_substring_regex(values, r"[+-]\d\d:?\d\d$")).as_py():
        return None
    parsed = pc.cast(pc.replace_substring_regex(values, r"Z$", ""), pa.timestamp("us"))
    return pc.assume_timezone(parsed, "UTC") if target.tz is not None else parsed


def file_columns(snapshot: Snapshot, columns: set[str]) -> FileColumns:
    """What pruning needs about the live files, for the logical ``columns`` referenced."""
    schema = snapshot.schema
    n = snapshot.num_files
    partition_cols = {c.lower(): c for c in snapshot.partition_columns}
    types: dict[str, str] = {}
    pv: dict[str, pa.Array] = {}
    stat_fields: dict[str, tuple[str, str]] = {}  # logical -> (physical, type)
    pv_struct = snapshot.live.column("partitionValues").combine_chunks() if partition_cols else None
    for name in columns:
        f = schema.field(name)
        if f is None or not isinstance(f.type, str):
            continue  # unknown or nested column: unknown to the pruner, files kept
        types[name] = f.type
        if f.name.lower() in partition_cols:
            physical = snapshot.config.physical_partition_columns[snapshot.partition_columns.index(f.name)]
            assert pv_struct is not None  # read when there are partition columns
            pv[name] = pv_struct.field(physical)
        elif f.metadata.get("delta.typeChanges"):
            continue  # widened type: older files' stats are in the old type (float "3.4" != double 3.4f)
        else:
            stat_fields[name] = (f.physical_name, f.type)
    mins: dict[str, pa.Array] = {}
    maxs: dict[str, pa.Array] = {}
    nulls: dict[str, pa.Array] = {}
    num_records = None
    if n and stat_fields:
        stats = parsed_stats(snapshot, {p: t for p, t in stat_fields.values()})
        if stats is not None:
            num_records = stats.field("numRecords")
            for name, (physical, t) in stat_fields.items():
                if t not in _STATS_JSON_TYPES:
                    continue
                lo = _typed(stats.field("minValues").field(physical), t)
                hi = _typed(stats.field("maxValues").field(physical), t)
                if lo is not None and hi is not None:
                    mins[name], maxs[name] = lo, hi
                nulls[name] = stats.field("nullCount").field(physical)
    return FileColumns(n, types, pv, mins, maxs, nulls, num_records)


def scan(
    snapshot: Snapshot, predicate: Expr | None = None, limit: int | None = None, *, within: np.ndarray | None = None
) -> ScanResult:
    """The files of ``snapshot`` that could hold rows matching ``predicate``, up to ``limit`` rows;
    only files ``within`` marks (a bool per live file) when it is given, the limit counted over them."""
    n = snapshot.num_files
    keep = np.ones(n, dtype=bool) if within is None else within.astype(bool, copy=True)
    if predicate is not None and n:
        cols = file_columns(snapshot, columns_of(predicate))
        keep &= np.asarray(prune_mask(predicate, cols), dtype=bool)
    indices = np.flatnonzero(keep).astype(np.int64)
    if limit is not None and len(indices):
        indices = up_to_limit(snapshot, indices, limit)[0]
    return ScanResult(snapshot, np_array(indices))


def up_to_limit(snapshot: Snapshot, indices: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """The first of ``indices`` (in order) needed to reach ``limit`` rows, and the rows they count
    (files without stats count 0, so more files are kept, never fewer)."""
    if limit <= 0:
        return indices[:0], 0
    stats = parsed_stats(snapshot, {})
    if stats is None:
        return indices, 0
    records = np.asarray(stats.field("numRecords").fill_null(0), dtype=np.int64)[indices]
    dv = snapshot.live.column("deletionVector").combine_chunks()
    if dv.null_count < len(dv):
        card = np.asarray(pc.fill_null(pc.struct_field(dv, "cardinality"), 0), dtype=np.int64)[indices]
        records = np.maximum(records - card, 0)
    # the check happens before each file: stop at the first file where the running sum >= limit
    running = np.cumsum(records)
    reached = np.flatnonzero(running >= limit)
    n = int(reached[0]) + 1 if len(reached) else len(indices)
    return indices[:n], int(running[n - 1]) if n else 0
