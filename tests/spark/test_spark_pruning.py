"""Row groups ruled out by their statistics (deltaport.spark.pruning): only when certainly no row
can match, on files pyarrow writes with one row group per value range."""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaport.spark.chunks import GAP, Chunk, coalesce
from deltaport.spark.pruning import column_kind, row_group_filter

# two row groups: the first with i 0..9, the second with i 10..19 (and so on per column)
TABLE = pa.table(
    {
        "i": pa.array(range(20), pa.int64()),
        "b": pa.array(range(20), pa.int8()),
        "u": pa.array(range(20), pa.uint32()),
        "s": pa.array([f"k{n:02d}" for n in range(20)]),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=n) for n in range(20)]),
        "f": pa.array([float(n) for n in range(20)]),
        "t": pa.array([n >= 10 for n in range(20)]),
        "n": pa.array([None] * 10 + list(range(10)), pa.int32()),
        "x": pa.array(range(20), pa.int32()),
    }
)
KINDS = tuple(
    (name, name, kind)
    for name, field in zip(TABLE.column_names, TABLE.schema)
    if (kind := column_kind(field.type)) is not None
)


@pytest.fixture(scope="module")
def metadata():
    out = io.BytesIO()
    pq.write_table(TABLE, out, row_group_size=10)
    return pq.read_metadata(pa.BufferReader(out.getvalue()))


def kept(where, metadata, kinds=KINDS) -> list[int]:
    keep = row_group_filter(where, kinds, metadata)
    return [g for g in range(metadata.num_row_groups) if keep(g)]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("i < 10", [0]),
        ("i >= 10", [1]),
        ("10 > i", [0]),
        ("i = 25", []),
        ("i <> 3", [0, 1]),
        ("i IN (1, 2)", [0]),
        ("i IN (1, 15)", [0, 1]),
        ("NOT (i < 10)", [1]),
        ("i < 5 OR i > 15", [0, 1]),
        ("i < 5 AND i > 15", []),
        ("b > 12", [1]),
        ("s >= 'k15'", [1]),
        ("s = 'k3'", []),
        ("d < DATE'2024-01-05'", [0]),
        ("t = false", [0]),
        ("n IS NULL", [0]),
        ("n IS NOT NULL", [1]),
        ("i < 10 AND n IS NOT NULL", []),
        ("I < 10", [0]),  # Spark's names are case-insensitive
    ],
)
def test_understood_conditions_rule_out_row_groups(metadata, where, expected):
    assert kept(where, metadata) == expected


@pytest.mark.parametrize(
    "where",
    [
        "f < 5",  # doubles: NaN sorts above everything in Spark
        "u < 5",  # unsigned: not Spark's order
        "CAST(i AS int) < 5",
        "i < 5.5",  # a literal of another type
        "s < 5",
        "d < '2024-01-05'",
        "i < NULL",
        "upper(s) = 'K01'",
        "i < x",
        "x < 5",  # a column whose kind the caller did not give
        "p = 1",  # not in the file (a partition column)
        "NOT (i < 10) OR i < 10",
    ],
)
def test_anything_else_keeps_every_row_group(metadata, where):
    kinds = (*(k for k in KINDS if k[0] != "x"), ("f", "f", "integer"), ("p", "p", "integer"))
    assert kept(where, metadata, kinds) == [0, 1]


def test_a_row_group_without_statistics_is_kept():
    out = io.BytesIO()
    pq.write_table(TABLE, out, row_group_size=10, write_statistics=False)
    metadata = pq.read_metadata(pa.BufferReader(out.getvalue()))
    assert kept("i > 100 AND n IS NULL", metadata) == [0, 1]


def test_ranges_closer_than_the_hole_are_one_get():
    pieces = [Chunk(0, 0, 0, 10), Chunk(0, 1, 10 + GAP, 5), Chunk(0, 2, 16 + 2 * GAP, 1)]
    assert coalesce(pieces) == [pieces[:2], pieces[2:]]
    assert coalesce(pieces, gap=0) == [[p] for p in pieces]
