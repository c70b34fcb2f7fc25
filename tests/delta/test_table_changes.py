"""The change-data-feed rules the engine owns: which file actions a commit's change feed and a
streaming read return, whether the feed was recorded over a range, and what a table needs beyond
parquet. Checked against the raw log (parsed here with json) and tables written with deltalake."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.delta.actions import CommitInfo
from deltaport.delta.table_changes import check_change_data_recorded
from deltaport.errors import ChangeDataNotRecorded

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"


def _raw_actions(table: Path, version: int) -> list[dict]:
    text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _expected_feed(actions: list[dict]) -> list[tuple[str, str]]:
    """The change feed of one commit by the protocol's rule, from its raw actions."""
    cdcs = [("cdc", a["cdc"]["path"]) for a in actions if "cdc" in a]
    if cdcs:
        return cdcs
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    metrics = info.get("operationMetrics") or {}
    keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    if info.get("operation") == "MERGE" and all(str(metrics.get(k, "")) == "0" for k in keys):
        return []
    out = []
    for kind in ("add", "remove"):
        out += [(kind, a[kind]["path"]) for a in actions if kind in a and a[kind].get("dataChange") is not False]
    return out


@pytest.mark.parametrize("name", ["cdf-table", "cdf-table-data-change", "cdf-table-update-ops", "cdf-table-with-dv"])
def test_change_feed_of_every_commit_follows_the_raw_log(name):
    root = TABLES / name
    table = DeltaTable(str(root), cache=SnapshotCache())
    changes = table.changes(0)
    assert changes, "the table has commits"
    seen_cdc = False
    for change in changes:
        expected = _expected_feed(_raw_actions(root, change.version))
        got = [(kind, action["path"]) for kind, action in change.change_feed()]
        assert sorted(got) == sorted(expected), f"version {change.version}"
        seen_cdc = seen_cdc or any(kind == "cdc" for kind, _ in got)
    if name == "cdf-table":
        assert seen_cdc  # the cdc-over-add/remove rule was exercised


def test_streaming_changes_drop_actions_without_data_change():
    root = TABLES / "cdf-table-data-change"
    change_counts = []
    for change in DeltaTable(str(root), cache=SnapshotCache()).changes(0):
        raw = _raw_actions(root, change.version)
        expected = [
            (kind, a[kind]["path"])
            for kind in ("add", "remove")
            for a in raw
            if kind in a and a[kind].get("dataChange") is not False
        ]
        assert sorted((k, a["path"]) for k, a in change.data_changes()) == sorted(expected)
        change_counts.append(len([a for a in raw if "add" in a or "remove" in a]) - len(expected))
    assert any(change_counts), "some commit has actions without data change"


def test_a_merge_that_changed_no_row_has_no_change_feed():
    change = next(c for c in DeltaTable(str(TABLES / "cdf-table"), cache=SnapshotCache()).changes(0) if not c.has_cdc)
    assert list(change.change_feed())  # an ordinary commit's adds and removes
    zero = {"numTargetRowsInserted": "0", "numTargetRowsUpdated": "0", "numTargetRowsDeleted": "0"}
    merge = replace(change, commit_info=CommitInfo(None, None, "MERGE", zero))
    assert merge.is_empty_merge and list(merge.change_feed()) == []
    changed = replace(change, commit_info=CommitInfo(None, None, "MERGE", {**zero, "numTargetRowsUpdated": "2"}))
    assert not changed.is_empty_merge and list(changed.change_feed()) == list(change.change_feed())


def test_change_data_must_be_recorded_over_the_whole_range(tmp_path):
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, pa.table({"x": [1, 2]}))  # version 0: no change data feed
    deltalake.DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # version 1
    deltalake.write_deltalake(path, pa.table({"x": [3]}), mode="append")  # version 2
    table = DeltaTable(path, cache=SnapshotCache())
    with pytest.raises(ChangeDataNotRecorded, match=r"range \[0, 2\].*version \[0\]"):
        check_change_data_recorded(table.config_at(0), 0, table.changes(1, 2))
    check_change_data_recorded(table.config_at(1), 1, table.changes(2, 2))  # recorded from version 1 on
    check_change_data_recorded(table.config_at(2), 2, [])  # a range of one version, no later commit


@pytest.mark.parametrize(
    ("name", "needs"),
    [
        ("basic_partitioned", []),
        ("table-with-dv-small", ["deletionVectors"]),
        ("cdf-column-mapping-name-mode", ["columnMapping"]),
        ("cdf-column-mapping-id-mode", ["columnMapping"]),
    ],
)
def test_features_a_reader_needs_beyond_parquet(name, needs):
    config = DeltaTable(str(TABLES / name), cache=SnapshotCache()).snapshot().config
    assert config.features_beyond_parquet == needs
