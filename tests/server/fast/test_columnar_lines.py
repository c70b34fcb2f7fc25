"""Columnar parquet-format lines are exactly the per-row lines."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pyarrow as pa
import pytest
from conftest import TABLES

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.demo import build_demo_tables
from deltaport.protocol import lines as wire
from deltaport.protocol.lines import WireField
from deltaport.server.fast.columnar_lines import ColumnarLines
from deltaport.server.sharing.translate import FileLineMaker
from deltaport.signing import LocalFileSigner

NOW = 1_700_000_040.0  # at the start of a signing window, so both paths sign at the same instant

pytestmark = pytest.mark.usefixtures("either_loops")  # each test with and without deltaport._native


def _both(snapshot, id_hash="parquet", version=None):
    """The same FileLineMaker.snapshot_lines call, with and without its column-wise implementation."""
    signer = LocalFileSigner("http://127.0.0.1:9/delta-sharing", "k" * 24, "AK", b"s" * 32)
    indices = pa.array(range(snapshot.num_files), pa.int64())
    out = []
    for columnar in (ColumnarLines(), None):
        maker = FileLineMaker(
            table_uri=snapshot.table_uri,
            signer=signer,
            expires_in=900,
            fmt="parquet",
            id_hash=id_hash,
            now=NOW,
            columnar=columnar,
        )
        assert maker._columnar_applies(snapshot) is (columnar is not None)  # each side takes its own path
        out.append((b"".join(maker.snapshot_lines(snapshot, indices, version=version)), maker.expiry.min_ms))
    (columnar_bytes, columnar_expiry), (row_bytes, row_expiry) = out
    return columnar_bytes, row_bytes, columnar_expiry, row_expiry


@pytest.mark.parametrize(
    "name",
    [
        "basic_partitioned",
        "mixed-nulls",
        "timestamp-truncation-stats",
        "cdf-table",
        "v2-checkpoints-parquet-with-sidecars",
        "parquet_row_group_skipping",  # a file without stats
    ],
)
def test_corpus_tables(name):
    snap = DeltaTable(str(TABLES / name), cache=SnapshotCache()).snapshot()
    columnar, rows, e1, e2 = _both(snap)
    assert columnar == rows
    assert [orjson.loads(x) for x in columnar.splitlines()]  # valid JSON lines
    assert e1 == e2


def test_escaped_partition_values_and_time_travel(tmp_path):
    path = build_demo_tables(tmp_path)["sales"]  # 'asia/pacific', 'north america': encoded paths
    snap = DeltaTable(path, cache=SnapshotCache()).snapshot(1)
    columnar, rows, _, _ = _both(snap, id_hash="delta", version=1)
    assert columnar == rows
    regions = {orjson.loads(x)["file"]["partitionValues"]["region"] for x in columnar.splitlines()}
    assert "asia/pacific" in regions and "north america" in regions


def test_subset_and_window_cache():
    snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    signer = LocalFileSigner("http://127.0.0.1:9/delta-sharing", "k" * 24, "AK", b"s" * 32)
    lines = ColumnarLines()
    full = b"".join(
        lines.lines(snap, pa.array(range(6), pa.int64()), signer, expires_in=900, now=NOW, id_hash="parquet")[0]
    ).splitlines()
    again = b"".join(
        lines.lines(snap, pa.array(range(6), pa.int64()), signer, expires_in=900, now=NOW + 30, id_hash="parquet")[0]
    ).splitlines()
    assert full == again  # same window: identical URLs
    later = b"".join(
        lines.lines(snap, pa.array(range(6), pa.int64()), signer, expires_in=900, now=NOW + 60, id_hash="parquet")[0]
    ).splitlines()
    assert later != full
    part = b"".join(
        lines.lines(snap, pa.array([4, 1], pa.int64()), signer, expires_in=900, now=NOW, id_hash="parquet")[0]
    ).splitlines()
    assert part == [full[4], full[1]]


def test_short_lifetimes_are_signed_at_now_not_at_the_window_start():
    snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    signer = LocalFileSigner("http://127.0.0.1:9/delta-sharing", "k" * 24, "AK", b"s" * 32)
    now = NOW + 59  # late in the window
    _, expiry = ColumnarLines().lines(
        snap, pa.array(range(6), pa.int64()), signer, expires_in=30, now=now, id_hash="parquet"
    )
    assert expiry == int(now + 30) * 1000
    _, expiry = ColumnarLines().lines(
        snap, pa.array(range(6), pa.int64()), signer, expires_in=900, now=now, id_hash="parquet"
    )
    assert int(now) * 1000 + 840_000 <= expiry <= int(now) * 1000 + 900_000


class _PathSigner:
    """A signer that signs one URL at a time (as an object store's does)."""

    def sign(self, path, *, expires_in, now=None):
        from deltaport.signing import SignedUrl

        return SignedUrl(f"https://signed.test/{path}?e={int(now) + expires_in}", (int(now) + expires_in) * 1000)


def test_the_row_path_serves_signers_without_batches_and_tables_with_deletion_vectors():
    plain = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    maker = FileLineMaker(
        table_uri=plain.table_uri,
        signer=_PathSigner(),
        expires_in=900,
        fmt="parquet",
        id_hash="parquet",
        now=NOW,
        columnar=ColumnarLines(),
    )
    assert not maker._columnar_applies(plain)
    urls = [orjson.loads(x)["file"]["url"] for x in b"".join(maker.snapshot_lines(plain, range(6))).splitlines()]
    assert len(urls) == 6 and all(u.startswith("https://signed.test/") for u in urls)
    with_dvs = DeltaTable(str(TABLES / "table-with-dv-small"), cache=SnapshotCache()).snapshot()
    signer = LocalFileSigner("http://127.0.0.1:9/delta-sharing", "k" * 24, "AK", b"s" * 32)
    maker = FileLineMaker(
        table_uri=with_dvs.table_uri,
        signer=signer,
        expires_in=900,
        fmt="delta",
        id_hash="delta",
        now=NOW,
        columnar=ColumnarLines(),
    )
    assert with_dvs.has_deletion_vectors and not maker._columnar_applies(with_dvs)


@pytest.mark.parametrize("partition_by", [None, ["a"], ["a", "b"]])
def test_written_tables_with_zero_one_and_two_partition_columns(tmp_path, partition_by):
    from deltalake import write_deltalake

    data = pa.table({"a": ["x", 'q"uote', None, "t\tab"], "b": [1, 2, 3, None], "v": [1.5, 2.5, None, 4.0]})
    write_deltalake(str(tmp_path / "t"), data, partition_by=partition_by)
    snap = DeltaTable(str(tmp_path / "t"), cache=SnapshotCache()).snapshot()
    columnar, rows, _, _ = _both(snap)
    assert columnar == rows
    files = [orjson.loads(x)["file"] for x in columnar.splitlines()]
    values = {f["partitionValues"].get("a") for f in files}
    assert values == ({"x", 'q"uote', None, "t\tab"} if partition_by else {None})
    assert all(set(f["partitionValues"]) == set(partition_by or []) for f in files)


#: The file line's fields renamed, reordered, ``timestamp`` dropped and ``version`` made required.
RESHAPED = (
    WireField("size", "size", "number"),
    WireField("fileUrl", "url", "string"),
    WireField("stats", "stats", "string", optional=True),
    WireField("partitionValues", "partition_values", "object"),
    WireField("expiresAt", "expiration_timestamp", "number", optional=True),
    WireField("fileId", "id", "string"),
    WireField("version", "version", "number"),
)


#: The same with ``stats`` required: ``null`` where a file has none.
STATS_REQUIRED = tuple(replace(f, optional=False) if f.key == "stats" else f for f in RESHAPED)


@pytest.mark.parametrize("fields", [RESHAPED, STATS_REQUIRED])
@pytest.mark.parametrize(("name", "version"), [("basic_partitioned", None), ("parquet_row_group_skipping", 0)])
def test_a_changed_declaration_changes_both_paths_alike(monkeypatch, fields, name, version):
    monkeypatch.setattr(wire, "FILE_FIELDS", fields)
    snap = DeltaTable(str(TABLES / name), cache=SnapshotCache()).snapshot()
    columnar, rows, _, _ = _both(snap, version=version)
    assert columnar == rows
    files = [orjson.loads(x)["file"] for x in columnar.splitlines()]
    names = [f.name for f in fields]
    assert all(list(f) == (names if "stats" in f else [n for n in names if n != "stats"]) for f in files)
    assert all(f["version"] == version for f in files)  # required: null when there is none
    assert ("stats" in files[0]) is (name != "parquet_row_group_skipping" or fields is STATS_REQUIRED)


def test_the_column_wise_builder_refuses_a_line_that_starts_with_an_optional_field(monkeypatch):
    monkeypatch.setattr(wire, "FILE_FIELDS", (RESHAPED[2], *RESHAPED[:2], *RESHAPED[3:]))
    snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    with pytest.raises(ValueError, match="must be required"):
        _both(snap)
