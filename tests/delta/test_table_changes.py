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
from deltaport.delta.table_changes import CommitCache, TableChanges
from deltaport.errors import ChangeDataNotRecorded, ChangesPositionGone, TableFilesMissing
from deltaport.storage import store_for

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
        TableChanges.try_new(table, 0, 2, change_data=True)
    assert [c.version for c in TableChanges.try_new(table, 1, 2, change_data=True).commits()] == [1, 2]
    assert [c.version for c in TableChanges.try_new(table, 2, change_data=True).commits()] == [2]


def _cdf_off_and_on(path: str) -> DeltaTable:
    """Versions 0-1 record change data, 2 turns it off, 3 writes, 4 turns it on again."""
    on = {"delta.enableChangeDataFeed": "true"}
    deltalake.write_deltalake(path, pa.table({"x": [1]}), configuration=on)
    deltalake.write_deltalake(path, pa.table({"x": [2]}), mode="append")
    deltalake.DeltaTable(path).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})
    deltalake.write_deltalake(path, pa.table({"x": [3]}), mode="append")
    deltalake.DeltaTable(path).alter.set_table_properties(on)
    return DeltaTable(path, cache=SnapshotCache(), commit_cache=CommitCache())


def test_a_commit_without_change_data_inside_the_range_fails_before_it_is_returned(tmp_path):
    table = _cdf_off_and_on(str(tmp_path / "t"))
    changes = TableChanges.try_new(table, 0, 4, change_data=True)  # recorded at both ends
    read = []
    with pytest.raises(ChangeDataNotRecorded, match=r"range \[0, 4\].*version \[2\]"):
        for change in changes.commits():
            read.append(change.version)
    assert read == [0, 1]
    # an end without change data names the first version without it, before anything is read
    with pytest.raises(ChangeDataNotRecorded, match=r"range \[1, 3\].*version \[2\]"):
        TableChanges.try_new(table, 1, 3, change_data=True)


class _CountingStore:
    """A store that counts reads of each file (the engine's only way to its bytes)."""

    def __init__(self, inner):
        self._inner = inner
        self.root_uri = inner.root_uri
        self.reads: dict[str, int] = {}

    def read(self, path):
        self.reads[path] = self.reads.get(path, 0) + 1
        return self._inner.read(path)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _appends(path: Path, commits: int) -> None:
    deltalake.write_deltalake(str(path), pa.table({"x": [0]}), configuration={"delta.enableChangeDataFeed": "true"})
    for i in range(1, commits):
        deltalake.write_deltalake(str(path), pa.table({"x": [i]}), mode="append")


def test_commits_are_read_from_the_position_asked_and_shared_through_the_cache(tmp_path):
    _appends(tmp_path / "t", 6)
    store = _CountingStore(store_for(str(tmp_path / "t")))
    cache = CommitCache()
    table = DeltaTable(str(tmp_path / "t"), store=store, cache=SnapshotCache(), commit_cache=cache)
    changes = TableChanges.try_new(table, 0, change_data=True)
    assert [c.version for c in changes.commits()] == [0, 1, 2, 3, 4, 5]
    assert [c.version for c in changes.commits(4)] == [4, 5]
    assert max(store.reads.values()) <= 2  # the configs at both ends, and the feed (once, the second from the cache)
    table.commit_cache = CommitCache()
    store.reads.clear()
    assert [c.version for c in changes.commits(4)] == [4, 5]
    assert sorted(store.reads) == [f"_delta_log/{v:020d}.json" for v in (4, 5)]  # from the position only
    store.reads.clear()
    other = DeltaTable(str(tmp_path / "t"), store=store, cache=SnapshotCache(), commit_cache=cache)
    parsed = len(cache)
    again = [c.version for c in TableChanges.try_new(other, 4, change_data=True).commits()]
    assert again == [4, 5] and len(cache) == parsed  # parsed once, for both tables
    assert max(store.reads.values()) == 1  # read only for the new table's configs


def test_resuming_at_a_commit_removed_by_log_cleanup_names_the_fix(tmp_path):
    _appends(tmp_path / "t", 5)
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache(), commit_cache=CommitCache())
    TableChanges.try_new(table, 0, change_data=True)  # the table is listed and its configs known
    for v in (0, 1, 2):
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(ChangesPositionGone, match=r"from version 2.*Restart the feed from a later version") as err:
        TableChanges.try_new(table, 0, 4, change_data=True, resume=2)  # the log as listed still names it
    assert (err.value.http_status, err.value.error_code) == (400, "INVALID_PARAMETER_VALUE")
    fresh = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache(), commit_cache=CommitCache())
    with pytest.raises(ChangesPositionGone, match="Restart the feed from a later version"):
        TableChanges.try_new(fresh, 0, 4, change_data=True, resume=2)
    # from the first page on, a range over a removed commit is table files missing, as before
    with pytest.raises(TableFilesMissing):
        TableChanges.try_new(fresh, 0, 4, change_data=True)


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


class _ListingStore(_CountingStore):
    """Counts reads, listings of the log and heads."""

    def __init__(self, inner):
        super().__init__(inner)
        self.listings = 0
        self.heads: list[str] = []

    def list_dir(self, directory, start_after=None):
        self.listings += 1
        return self._inner.list_dir(directory, start_after=start_after)

    def head(self, path):
        self.heads.append(path)
        return self._inner.head(path)


def _commit(v: int) -> str:
    return f"_delta_log/{v:020d}.json"


def test_a_reader_resuming_in_a_pinned_range_checks_two_commits_instead_of_listing_the_log(tmp_path):
    _appends(tmp_path / "t", 6)
    store = _ListingStore(store_for(str(tmp_path / "t")))
    table = DeltaTable(str(tmp_path / "t"), store=store, cache=SnapshotCache(), commit_cache=CommitCache())
    first = TableChanges.try_new(table, 0, 4, change_data=True)
    listed = store.listings
    resumed = TableChanges.try_new(table, 0, first.end, change_data=True, resume=2)
    assert store.listings == listed  # no listing: the one the first read made still holds
    assert store.heads == [_commit(2), _commit(4)]  # where it resumes, and the range's end
    assert [c.version for c in resumed.commits(2)] == [2, 3, 4]
    assert resumed.history is first.history  # the commit timestamps are worked out once per listing


def test_a_reader_resuming_after_the_log_was_rewritten_lists_it_again(tmp_path):
    _appends(tmp_path / "t", 6)
    store = _ListingStore(store_for(str(tmp_path / "t")))
    table = DeltaTable(str(tmp_path / "t"), store=store, cache=SnapshotCache(), commit_cache=CommitCache())
    TableChanges.try_new(table, 0, 4, change_data=True)
    log = tmp_path / "t" / "_delta_log"
    lines = (log / f"{4:020d}.json").read_bytes().splitlines()
    commit_info = next(i for i, line in enumerate(lines) if line.startswith(b'{"commitInfo"'))
    lines[commit_info] = json.dumps({"commitInfo": {"operation": "WRITE", "rewritten": "yes"}}).encode()
    for v in (4, 5):  # the log rewritten from version 4 on (another size)
        (log / f"{v:020d}.json").write_bytes(b"\n".join(lines) + b"\n")
    listed = store.listings
    resumed = TableChanges.try_new(table, 0, 4, change_data=True, resume=2)
    assert store.listings > listed
    info = [c.commit_info for c in resumed.commits(2)][-1]
    assert info is not None and info.operation == "WRITE"  # commit 4 as it is now, not the cached parse


def test_the_configs_a_feed_notes_are_bounded(tmp_path):
    _appends(tmp_path / "t", 8)
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache(), commit_cache=CommitCache(), config_memo_entries=3)
    changes = TableChanges.try_new(table, 0, change_data=True)
    assert len(list(changes.commits())) == 8
    assert table.configs_remembered == 3
    resumed = TableChanges.try_new(table, 0, changes.end, change_data=True, resume=5)
    assert [c.version for c in resumed.commits(5)] == [5, 6, 7]  # what was dropped is read again
