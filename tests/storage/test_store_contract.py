"""One contract, every ObjectStore: local files and S3 (a real moto server over HTTP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.errors import ObjectNotFound, StorageError
from deltaport.storage import LocalStore, store_for

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"


def _fixture_dir(tmp: Path) -> Path:
    (tmp / "d" / "sub").mkdir(parents=True)
    (tmp / "d" / "a.txt").write_bytes(b"0123456789")
    (tmp / "d" / "b.txt").write_bytes(b"bb")
    (tmp / "d" / "sub" / "c.txt").write_bytes(b"c")
    (tmp / "top.txt").write_bytes(b"t")
    return tmp


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    root = _fixture_dir(tmp_path)
    if request.param == "local":
        return LocalStore(root)
    moto = request.getfixturevalue("moto_server")
    uri = moto.upload_dir("contract", tmp_path.name, root)
    return store_for(uri, moto.storage_options())


def test_list_dir_is_sorted_shallow_and_starts_after(store):
    assert [f.path for f in store.list_dir("d")] == ["d/a.txt", "d/b.txt"]
    assert [f.path for f in store.list_dir("d", start_after="a.txt")] == ["d/b.txt"]
    assert [(f.size, f.name) for f in store.list_dir("d")] == [(10, "a.txt"), (2, "b.txt")]
    assert store.list_dir("missing") == []
    assert all(f.mtime_ms > 1_000_000_000_000 for f in store.list_dir("d"))


def test_read_range_head(store):
    assert store.read("d/a.txt") == b"0123456789"
    assert store.read_range("d/a.txt", 2, 3) == b"234"
    assert store.read_range("d/a.txt", 8, 10) == b"89"
    assert store.head("d/sub/c.txt").size == 1


def test_missing_objects_raise_object_not_found(store):
    with pytest.raises(ObjectNotFound):
        store.read("d/nope.txt")
    with pytest.raises(ObjectNotFound):
        store.head("d/nope.txt")


def test_child_store(store):
    assert store.child("d").read("a.txt") == b"0123456789"


def test_local_store_refuses_paths_outside_the_root(tmp_path):
    store = LocalStore(_fixture_dir(tmp_path) / "d")
    for bad in ("../top.txt", "/etc/passwd", "sub/../../top.txt"):
        with pytest.raises(StorageError):
            store.read(bad)


def test_unknown_scheme_is_a_clear_error():
    with pytest.raises(StorageError, match="unsupported storage scheme 'hdfs'"):
        store_for("hdfs://namenode/table")


@pytest.mark.parametrize(
    "name",
    [
        "table-with-dv-small",
        "v2-checkpoints-parquet-with-sidecars",
        "v1-multi-part-partitioned-struct-stats-only",
        "cdf-table",
    ],
)
def test_delta_snapshot_over_s3_equals_local(moto_server, name):
    uri = moto_server.upload_dir("tables", name, TABLES / name)
    remote = DeltaTable(uri, storage_options=moto_server.storage_options(), cache=SnapshotCache())
    local = DeltaTable(str(TABLES / name), cache=SnapshotCache())
    for version in range(local.earliest_version(), local.latest_version() + 1):
        r, loc = remote.snapshot(version), local.snapshot(version)
        assert sorted(r.files().column("path").to_pylist()) == sorted(loc.files().column("path").to_pylist())
        assert r.metadata == loc.metadata
    assert [c.version for c in remote.changes(local.earliest_version())] == [
        c.version for c in local.changes(local.earliest_version())
    ]


def test_local_io_errors_that_may_pass_are_unavailable_not_missing(tmp_path, monkeypatch):
    import errno

    from deltaport.errors import StorageUnavailable
    from deltaport.storage.local import LocalStore

    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "_delta_log" / "x.json").write_text("{}")
    store = LocalStore(tmp_path)

    def failing(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("os.scandir", failing)
    with pytest.raises(StorageUnavailable):
        store.list_dir("_delta_log")
    monkeypatch.setattr("builtins.open", failing)
    with pytest.raises(StorageUnavailable):
        store.read("_delta_log/x.json")
    monkeypatch.undo()
    with pytest.raises(ObjectNotFound):
        store.read("_delta_log/missing.json")
