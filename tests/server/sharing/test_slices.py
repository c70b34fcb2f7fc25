"""Partition slices: the rule that decides which files of a table one recipient may read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from deltaport.catalog.model import PartitionOp, PartitionValue
from deltaport.delta import DeltaTable
from deltaport.server.sharing.slices import slice_for

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"


@pytest.fixture(scope="module")
def letters():
    """basic_partitioned: six files partitioned by ``letter`` (a, b, c, null, a, e)."""
    return DeltaTable(str(TABLES / "basic_partitioned")).snapshot()


def _kept(snap, partitions, properties=None) -> list:
    part = slice_for(partitions, properties or {})
    assert part is not None
    mask = part.mask_of_struct(snap.config, snap.live.column("partitionValues"))
    return [v["letter"] for v, keep in zip(snap.live.column("partitionValues").to_pylist(), mask) if keep]


def test_a_table_shared_whole_has_no_slice():
    assert slice_for((), {"letter": "a"}) is None


def test_or_over_partitions_and_over_values(letters):
    a = PartitionValue("letter", PartitionOp.EQUAL, "a")
    like = PartitionValue("Letter", PartitionOp.LIKE, "_")  # column names are case-insensitive
    not_a = PartitionValue("letter", PartitionOp.LIKE, "[bc]")  # LIKE is not a regex
    assert _kept(letters, ((a,),)) == ["a", "a"]
    assert _kept(letters, ((a,), (PartitionValue("letter", PartitionOp.EQUAL, "e"),))) == ["a", "a", "e"]
    assert _kept(letters, ((like,),)) == ["a", "b", "c", "a", "e"]  # never the null partition
    assert _kept(letters, ((like, not_a),)) == []


def test_recipient_properties_and_missing_ones(letters):
    by_property = ((PartitionValue("letter", PartitionOp.EQUAL, recipient_property_key="region"),),)
    assert _kept(letters, by_property, {"region": "c"}) == ["c"]
    assert _kept(letters, by_property, {"other": "c"}) == []  # no such property: nothing
    assert _kept(letters, ((PartitionValue("number", PartitionOp.EQUAL, "1"),),)) == []  # not a partition column


def test_change_actions_are_judged_by_the_same_rule(letters):
    part = slice_for(((PartitionValue("letter", PartitionOp.LIKE, "%a%"),),), {})
    assert part is not None
    actions = [{"partitionValues": {"letter": v}} for v in ("a", "ba", None, "b")] + [{}]
    assert part.mask_of_actions(letters.config, actions).tolist() == [True, True, False, False, False]


def test_physical_names_under_column_mapping():
    snap = DeltaTable(str(TABLES / "partition_cm" / "name")).snapshot()
    physical = snap.config.physical_partition_columns[0]
    assert physical != "category"
    struct = pa.StructArray.from_arrays([pa.array(["x", "y"])], names=[physical])
    part = slice_for(((PartitionValue("category", PartitionOp.EQUAL, "y"),),), {})
    assert part is not None
    assert np.asarray(part.mask_of_struct(snap.config, struct)).tolist() == [False, True]


def test_the_digest_names_the_resolved_slice():
    spec = ((PartitionValue("letter", PartitionOp.EQUAL, recipient_property_key="p"),),)
    a1, a2, b = (slice_for(spec, {"p": v}) for v in ("a", "a", "b"))
    assert a1 is not None and a2 is not None and b is not None
    assert a1.digest == a2.digest != b.digest
