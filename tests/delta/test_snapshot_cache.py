"""Snapshot cache: incremental refresh equals a cold load; concurrency; memory bound."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.delta import table as table_module
from deltaport.delta.cache import LruMemo

PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "t1",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}},'
        '{"name":"p","type":"string","nullable":true,"metadata":{}}]}',
        "partitionColumns": ["p"],
        "configuration": {},
        "createdTime": 1,
    }
}


def _commit(path: Path, version: int, *actions: dict) -> None:
    log = path / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    tmp = log / f".{version:020d}.json.tmp"  # write, then rename into place, as Delta writers do
    tmp.write_bytes(b"\n".join(orjson.dumps(a) for a in actions) + b"\n")
    tmp.rename(log / f"{version:020d}.json")


def _add(name: str, p: str = "a", dv: dict | None = None) -> dict:
    add = {"path": name, "partitionValues": {"p": p}, "size": 1, "modificationTime": 1, "dataChange": True}
    if dv:
        add["deletionVector"] = dv
    return {"add": add}


def _remove(name: str, dv: dict | None = None) -> dict:
    rm = {"path": name, "deletionTimestamp": 1, "dataChange": True}
    if dv:
        rm["deletionVector"] = dv
    return {"remove": rm}


def _paths(snap) -> list[tuple[str, str | None]]:
    return sorted((a["path"], (a.get("deletionVector") or {}).get("pathOrInlineDv")) for a in snap.add_actions())


def test_incremental_refresh_equals_cold_load(tmp_path, monkeypatch):
    dv = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "offset": None,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("f0"), _add("f1", "b"), _add("f2"))
    cache = SnapshotCache()
    table = DeltaTable(str(tmp_path), cache=cache)
    assert table.snapshot().num_files == 3
    steps = [
        [_add("f3")],
        [_remove("f0"), _add("f4", "c")],
        [_remove("f1"), _add("f1", "b", dv)],  # same path, now with a DV
        [_remove("f1", dv), _add("f1", "b")],  # DV removed again
        [_add("f5"), _remove("f5")],  # add and remove of one key in one commit: the add stays
    ]
    calls = []
    real_apply = DeltaTable._apply_commits
    monkeypatch.setattr(DeltaTable, "_apply_commits", lambda self, *a: calls.append(1) or real_apply(self, *a))
    for i, actions in enumerate(steps, start=1):
        _commit(tmp_path, i, *actions)
        warm = table.snapshot()
        cold = DeltaTable(str(tmp_path), cache=SnapshotCache()).snapshot()
        assert warm.version == cold.version == i
        assert _paths(warm) == _paths(cold)
    assert len(calls) == len(steps)  # every refresh went the incremental way
    assert ("f1", dv["pathOrInlineDv"]) not in _paths(table.snapshot())
    assert ("f5", None) in _paths(table.snapshot())


def test_refresh_lists_only_new_log_files(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("f0"))
    table = DeltaTable(str(tmp_path), cache=SnapshotCache())
    table.snapshot()
    seen = []
    real = table.store.list_dir
    table.store.list_dir = lambda d, start_after=None: seen.append(start_after) or real(d, start_after)
    _commit(tmp_path, 1, _add("f1"))
    assert table.snapshot().num_files == 2
    # one listing, from the newest known version on (to see that it is still there, unchanged)
    assert seen == ["00000000000000000000"]
    seen.clear()
    assert table.snapshot().num_files == 2
    assert seen == ["00000000000000000001"]


def test_unchanged_table_returns_the_cached_snapshot(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("f0"))
    table = DeltaTable(str(tmp_path), cache=SnapshotCache())
    assert table.snapshot() is table.snapshot()


def test_time_travel_builds_on_a_cached_older_snapshot(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("f0"))
    for v in range(1, 6):
        _commit(tmp_path, v, _add(f"f{v}"))
    table = DeltaTable(str(tmp_path), cache=SnapshotCache())
    assert table.snapshot(2).num_files == 3
    assert table.snapshot(4).num_files == 5
    assert table.snapshot(1).num_files == 2
    assert table.snapshot().num_files == 6


def test_concurrent_requests_agree(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, *[_add(f"f{i}") for i in range(200)])
    table = DeltaTable(str(tmp_path), cache=SnapshotCache())
    results, errors = [], []

    def worker(n: int) -> None:
        try:
            for _ in range(20):
                results.append(table.snapshot().num_files)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writer_done = threading.Event()

    def writer() -> None:
        for v in range(1, 11):
            _commit(tmp_path, v, _add(f"g{v}"))
        writer_done.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(200 <= n <= 210 for n in results)
    assert table.snapshot().num_files == 210


def test_cache_is_bounded_by_bytes_and_entries(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, *[_add(f"f{i}") for i in range(500)])
    for v in range(1, 8):
        _commit(tmp_path, v, _add(f"g{v}"))
    one = DeltaTable(str(tmp_path), cache=SnapshotCache()).snapshot().nbytes
    cache = SnapshotCache(max_entries=100, max_bytes=3 * one)
    table = DeltaTable(str(tmp_path), cache=cache)
    for v in range(8):
        table.snapshot(v)
    assert len(cache) <= 3
    assert cache.bytes_held <= 3 * one + one  # newest kept even when slightly larger
    small = SnapshotCache(max_entries=2)
    t2 = DeltaTable(str(tmp_path), cache=small)
    for v in range(8):
        t2.snapshot(v)
    assert len(small) == 2


def test_default_cache_is_created_lazily():
    assert table_module._default_cache is None or isinstance(table_module._default_cache, SnapshotCache)
    assert isinstance(table_module.default_cache(), SnapshotCache)
    assert table_module.default_cache() is table_module.default_cache()


@pytest.mark.parametrize("partition_change", [True])
def test_partitioning_change_rebuilds(tmp_path, partition_change):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("f0"))
    table = DeltaTable(str(tmp_path), cache=SnapshotCache())
    table.snapshot()
    md = orjson.loads(orjson.dumps(METADATA))
    md["metaData"]["partitionColumns"] = []
    _commit(
        tmp_path,
        1,
        md,
        _remove("f0"),
        {"add": {"path": "n0", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}},
    )
    snap = table.snapshot()
    assert [a["path"] for a in snap.add_actions()] == ["n0"]
    assert snap.partition_columns == []


def _add_with_stats(name: str, low: int) -> dict:
    stats = {"numRecords": 10, "minValues": {"x": low}, "maxValues": {"x": low + 9}, "nullCount": {"x": 0}}
    return {
        "add": {
            "path": name,
            "partitionValues": {"p": "a"},
            "size": 1,
            "modificationTime": 1,
            "dataChange": True,
            "stats": orjson.dumps(stats).decode(),
        }
    }


def test_stats_parsed_by_a_scan_count_in_the_bound_and_go_with_their_snapshot(tmp_path):
    """Parsed stats live with their snapshot: an evicted snapshot is freed with them, and what a
    cached snapshot derived counts in the cache's bytes."""
    import gc
    import weakref

    from deltaport.delta.scan import scan
    from deltaport.protocol.hints import parse_sql_predicates

    _commit(tmp_path, 0, PROTOCOL, METADATA, *[_add_with_stats(f"f{i}", 10 * i) for i in range(2000)])
    for v in range(1, 6):
        _commit(tmp_path, v, _add_with_stats(f"g{v}", 0))
    cache = SnapshotCache(max_entries=2)
    table = DeltaTable(str(tmp_path), cache=cache)
    predicate = parse_sql_predicates(["x > 19990"])
    first = table.snapshot(0)
    before = cache.bytes_held
    assert len(scan(first, predicate).indices) == 1  # stats are read: only the last file can match
    assert cache.bytes_held > before  # the parsed stats count
    evicted = weakref.ref(first)
    del first
    for v in range(1, 6):
        scan(table.snapshot(v), predicate)
    gc.collect()
    assert evicted() is None, "an evicted snapshot is still held (by its parsed stats?)"
    assert len(cache) == 2


# --- a log that changed under the cache -------------------------------------------------------


def _two_commits(path: Path, table_id: str = "t1", files: tuple[str, ...] = ("a.parquet", "b.parquet")) -> None:
    metadata = {"metaData": {**METADATA["metaData"], "id": table_id}}
    _commit(path, 0, PROTOCOL, metadata, _add(files[0]))
    _commit(path, 1, _add(files[1]))


def test_a_deleted_table_is_not_served_from_the_cache(tmp_path, caplog):
    import shutil

    from deltaport.errors import NotADeltaTable

    _two_commits(tmp_path / "t")
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache())
    assert len(_paths(table.snapshot())) == 2
    shutil.rmtree(tmp_path / "t")
    with caplog.at_level("WARNING", logger="deltaport.delta"), pytest.raises(NotADeltaTable):
        table.latest_version()
    with pytest.raises(NotADeltaTable):
        table.snapshot()
    assert len(table.cache) == 0
    assert [r.getMessage() for r in caplog.records].count(
        f"table {table.uri}: its commit 1 is gone or was rewritten; its cached state is dropped and it is read "
        "again from storage"
    ) == 1, "logged once"


def test_a_log_that_went_backwards_is_read_again(tmp_path):
    _two_commits(tmp_path / "t")
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache())
    assert table.latest_version() == 1 and len(_paths(table.snapshot())) == 2
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").unlink()  # rewritten from version 0
    assert table.latest_version() == 0
    assert _paths(table.snapshot()) == [("a.parquet", None)]


def test_another_table_copied_into_the_folder_is_served_as_itself(tmp_path):
    import shutil

    _two_commits(tmp_path / "t", table_id="old", files=("old-a.parquet", "old-b.parquet"))
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache())
    assert table.snapshot().metadata.id == "old"
    new = tmp_path / "new"
    _two_commits(new, table_id="new-table", files=("new-aa.parquet", "new-bb.parquet"))
    _commit(new, 2, _add("new-cc.parquet"))
    shutil.rmtree(tmp_path / "t")
    shutil.copytree(new, tmp_path / "t")
    snap = table.snapshot()
    assert snap.version == 2 and snap.metadata.id == "new-table"
    assert [p for p, _ in _paths(snap)] == ["new-aa.parquet", "new-bb.parquet", "new-cc.parquet"]
    assert table.snapshot(0).metadata.id == "new-table"  # older versions are the new table's too


def test_a_new_table_id_in_later_commits_drops_the_cached_base(tmp_path):
    _two_commits(tmp_path / "t", table_id="old")
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache())
    assert table.snapshot().metadata.id == "old"
    _commit(tmp_path / "t", 2, PROTOCOL, {"metaData": {**METADATA["metaData"], "id": "other"}}, _add("c.parquet"))
    snap = table.snapshot()
    assert snap.metadata.id == "other"
    assert table.cache.get(table.uri, 1) is None, "the old table's snapshots are dropped"


def test_an_unchanged_log_keeps_its_cached_snapshots(tmp_path):
    _two_commits(tmp_path / "t")
    table = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache())
    first = table.snapshot()
    _commit(tmp_path / "t", 2, _add("c.parquet"))
    assert table.latest_version() == 2
    assert table.cache.get(table.uri, 1) is first
    assert table.snapshot(1) is first


def test_lru_memo_keeps_the_most_recently_used():
    memo: LruMemo[int, str] = LruMemo(2)
    memo.put(1, "a")
    memo.put(2, "b")
    assert memo.get(1) == "a"  # 1 is now the most recent
    memo.put(3, "c")
    assert (memo.get(1), memo.get(2), memo.get(3), len(memo)) == ("a", None, "c", 2)
    memo.put(3, "other", replace=False)
    assert memo.get(3) == "c"
    memo.clear()
    assert len(memo) == 0
