"""Partition values read out of a checkpoint's map column, and absolute-path detection."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaport.delta.checkpoint import _partition_columns
from deltaport.delta.replay import any_absolute

MAP = pa.map_(pa.string(), pa.string())


def _lookup(pv_map: pa.MapArray, columns: list[str]) -> list[list]:
    return [pc.map_lookup(pv_map, pa.scalar(c, pa.string()), "first").to_pylist() for c in columns]


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_a_sliced_map_gives_the_values_of_its_own_rows(offset):
    rows = [
        [("p", "x0"), ("q", "y0")],
        [("p", "x1"), ("q", None)],
        [("p", "x2"), ("q", "y2")],
        [("p", None), ("q", "y3")],
        [("p", "x4"), ("q", "y4")],
    ]
    pv = pa.array(rows, MAP).slice(offset)
    got = [a.to_pylist() for a in _partition_columns(pv, ["p", "q"], len(pv))]
    assert got == _lookup(pv, ["p", "q"])
    assert got[0] == [r[0][1] for r in rows[offset:]]


def test_one_partition_column_after_non_add_rows():
    pv = pa.array([[], [], [("part", "a")], [("part", "b")]], MAP).slice(2)
    assert [a.to_pylist() for a in _partition_columns(pv, ["part"], 2)] == [["a", "b"]]


@pytest.mark.parametrize(
    ("rows", "columns"),
    [
        ([[("q", "1"), ("p", "2")], [("q", "3"), ("p", "4")]], ["p", "q"]),  # keys in another order
        ([[("p", "1")], [("p", "2"), ("q", "3")]], ["p", "q"]),  # a missing key
        ([[("other", "1")], [("other", "2")]], ["p"]),  # a different key
    ],
)
def test_irregular_maps_are_looked_up_key_by_key(rows, columns):
    pv = pa.array(rows, MAP)
    assert [a.to_pylist() for a in _partition_columns(pv, columns, len(pv))] == _lookup(pv, columns)


@pytest.mark.parametrize(
    ("paths", "absolute"),
    [
        (["a/b.parquet", "part=1/c.parquet"], False),
        (["x/y://z.parquet"], False),  # '://' inside a relative path names no scheme
        (["a.parquet", "s3://bucket/t/b.parquet"], True),
        (["file:///tmp/t/a.parquet"], True),
        ([], False),
    ],
)
def test_absolute_paths_are_those_with_a_scheme(paths, absolute):
    assert any_absolute(pa.array(paths, pa.string())) is absolute
