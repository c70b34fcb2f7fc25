"""Input partitions, conforming batches, and fresh URLs for expired ones (no SparkSession needed)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pyarrow as pa
import pytest

from deltaport.errors import DeltaportError
from deltaport.spark.options import parse_table_url
from deltaport.spark.planning import conform, plan_partitions, read_partition
from deltaport.spark.remote import Refresh, RemoteTable
from deltaport.spark.types import arrow_schema, delta_to_spark

MB = 1 << 20


def files(*sizes):
    return [SimpleNamespace(id=str(i), size=size) for i, size in enumerate(sizes)]


def test_small_files_are_grouped_and_big_ones_alone():
    parts = plan_partitions(
        files(*[10 * MB] * 20, 200 * MB), "table", max_partition_bytes=128 * MB, open_cost_bytes=4 * MB, parallelism=2
    )
    sizes = sorted(sum(f.size for f in p.files) for p in parts)
    assert len(parts) == 4  # a multiple of the 2 cores
    assert sizes[-1] == 200 * MB and all(s <= 128 * MB for s in sizes[:-1])
    assert max(sizes[:-1]) - min(sizes[:-1]) <= 10 * MB  # balanced
    assert sorted(int(f.id) for p in parts for f in p.files) == list(range(21))
    assert [p.index for p in parts] == [0, 1, 2, 3]
    assert all([int(f.id) for f in p.files] == sorted(int(f.id) for f in p.files) for p in parts)


def test_small_tables_still_spread_over_the_cores():
    parts = plan_partitions(
        files(*[1 * MB] * 8), "table", max_partition_bytes=128 * MB, open_cost_bytes=4 * MB, parallelism=4
    )
    assert [len(p.files) for p in parts] == [2, 2, 2, 2]
    assert (
        len(plan_partitions(files(1, 2, 3), "t", max_partition_bytes=128 * MB, open_cost_bytes=0, parallelism=8)) == 3
    )
    assert plan_partitions([], "table", max_partition_bytes=1, open_cost_bytes=1) == []


def test_conform_orders_casts_and_checks_nullability():
    target = pa.schema(
        [
            pa.field("a", pa.int64(), nullable=False),
            pa.field("b", pa.list_(pa.field("element", pa.int32()))),
            pa.field("c", pa.string()),
        ]
    )
    table = pa.table({"b": pa.array([[1], None], pa.list_(pa.int32())), "A": pa.array([1, 2], pa.int32())})
    out = conform(table, target)
    assert out.schema.equals(target) and out.column("c").null_count == 2
    with pytest.raises(DeltaportError, match="NOT NULL"):
        conform(pa.table({"a": pa.array([None, 1], pa.int64())}), target)


def test_expired_urls_are_refreshed_on_the_executor(sharing):
    remote = RemoteTable(parse_table_url(sharing.url("customers_dv")), {})
    with remote.open() as session:
        result = session.snapshot()
    expired = [dataclasses.replace(f, url=f.url + "&tampered=1", expiration_timestamp=1) for f in result.files]
    target = arrow_schema(delta_to_spark(result.table.schema_json))
    partition = plan_partitions(
        expired,
        result.table,
        max_partition_bytes=1 << 30,
        open_cost_bytes=1,
        parallelism=1,
        refresh=Refresh(remote, "snapshot", {}),
    )[0]
    batches = list(read_partition(partition, target, change_feed=False))
    assert sorted(pa.Table.from_batches(batches).column("id").to_pylist()) == [
        i for i in range(1, 21) if i not in (2, 5, 8, 16)
    ]
    partition.refresh = None
    with pytest.raises(Exception, match="expired"):
        list(read_partition(partition, target, change_feed=False))
