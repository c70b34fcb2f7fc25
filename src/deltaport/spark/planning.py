"""Input partitions (groups of file actions) and reading them into Arrow record batches.

A partition carries everything an executor needs: the file actions with their presigned URLs
and the table info. Reading yields batches whose Arrow schema equals, field for field, the one
Spark derives from the declared schema.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from deltaport.errors import DeltaportError
from deltaport.spark import remote
from deltaport.spark.types import cast_array

__all__ = ["FilesPartition", "conform", "plan_partitions", "read_partition"]

BATCH_ROWS = 1 << 17


class FilesPartition(InputPartition):
    """File actions read by one Spark task, with the table info they are read against."""

    def __init__(self, index: int, files: Sequence[Any], table: Any, refresh: remote.Refresh | None = None) -> None:
        super().__init__(index)
        self.index = index
        self.files = tuple(files)
        self.table = table
        self.refresh = refresh

    def __repr__(self) -> str:
        return f"FilesPartition(index={self.index}, files={len(self.files)}, bytes={sum(f.size for f in self.files)})"


def plan_partitions(
    files: Sequence[Any],
    table: Any,
    *,
    max_partition_bytes: int,
    open_cost_bytes: int,
    parallelism: int | None = None,
    refresh: remote.Refresh | None = None,
    first_index: int = 0,
) -> list[FilesPartition]:
    """Group files into balanced partitions of at most about ``max_partition_bytes`` each.

    Each file also costs ``open_cost_bytes`` (as in Spark's file sources). The number of
    partitions is rounded up to a multiple of ``parallelism`` (default: the CPU count) so that
    the last wave of tasks keeps every core busy; files go, largest first, to the lightest
    partition, and keep their given order inside it.
    """
    if not files:
        return []
    cores = max(1, parallelism or os.cpu_count() or 1)
    costs = [int(f.size) + open_cost_bytes for f in files]
    count = max(1, -(-sum(costs) // max(1, max_partition_bytes)))
    count = min(len(files), -(-count // cores) * cores)
    lightest_first = [(0, p) for p in range(count)]  # (load, partition): a heap
    members: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(files)), key=lambda i: -costs[i]):
        load, p = heapq.heappop(lightest_first)
        members[p].append(i)
        heapq.heappush(lightest_first, (load + costs[i], p))
    groups = [[files[i] for i in sorted(m)] for m in members if m]
    return [FilesPartition(first_index + i, group, table, refresh) for i, group in enumerate(groups)]


def read_partition(partition: FilesPartition, target: pa.Schema, *, change_feed: bool) -> Iterator[pa.RecordBatch]:
    """Read every file of ``partition``; batches match ``target`` exactly.

    The next file is downloaded and decoded in a background thread while Spark consumes the
    batches of the current one.
    """
    if not partition.files:
        return
    renewer = remote.renewer_for(partition.refresh)

    def load(action: Any) -> pa.Table:
        table = remote.read_file(action, partition.table, http=http, change_feed=change_feed, renewer=renewer)
        if change_feed:
            table = _commit_timestamp_as_timestamp(table)
        return conform(table, target)

    with remote.file_http_client() as http, ThreadPoolExecutor(max_workers=1) as prefetcher:
        pending = prefetcher.submit(load, partition.files[0])
        for following in [*partition.files[1:], None]:
            table = pending.result()
            if following is not None:
                pending = prefetcher.submit(load, following)
            yield from table.to_batches(max_chunksize=BATCH_ROWS)
            del table


def _commit_timestamp_as_timestamp(table: pa.Table) -> pa.Table:
    """``_commit_timestamp`` in ms since the epoch (as the readers give it) as a UTC timestamp."""
    index = table.schema.get_field_index("_commit_timestamp")
    if index < 0 or pa.types.is_timestamp(table.schema.field(index).type):
        return table
    micros = pc.multiply(table.column(index).cast(pa.int64()), 1000)
    return table.set_column(index, "_commit_timestamp", micros.cast(pa.timestamp("us", tz="UTC")))


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Select and cast ``table``'s columns to ``target`` (by name, case-insensitively as a fallback)."""
    if table.schema.equals(target):
        return table
    lowered = {name.lower(): i for i, name in enumerate(table.column_names)}
    arrays = []
    for f in target:
        index = table.schema.get_field_index(f.name)
        if index < 0:
            index = lowered.get(f.name.lower(), -1)
        if index < 0:
            arrays.append(pa.nulls(table.num_rows, f.type))
            column = None
        else:
            column = cast_array(table.column(index), f.type)
            arrays.append(column)
        if not f.nullable and table.num_rows and (column is None or column.null_count):
            raise DeltaportError(f"column {f.name!r} is declared NOT NULL but a shared file has null values in it")
    return pa.Table.from_arrays(arrays, schema=target)
