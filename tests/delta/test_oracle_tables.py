"""Every shared table, every reconstructable version: our live files equal delta-rs's.

Where delta-rs cannot be the oracle (tables we refuse on purpose, a log with no commits) the
expected result is spelled out by hand from the log.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import deltalake
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.errors import NotADeltaTable, UnsupportedTableFeature

TABLES_ROOT = Path(__file__).resolve().parents[3] / "shared" / "delta-tables"
if not TABLES_ROOT.is_dir():  # CI lays shared/ beside the repo root
    TABLES_ROOT = Path(os.environ.get("DELTAPORT_SHARED", "/work/shared")) / "delta-tables"

BIG = "300k-add-files-100-col-partitioned"
REFUSED = {"table-with-geo": ["geospatial"], "unshredded-variant": ["variantType-preview"]}
NO_COMMITS = {"crc-malformed"}


def _table_dirs() -> list[str]:
    out = []
    for name in sorted(os.listdir(TABLES_ROOT)):
        p = TABLES_ROOT / name
        if not p.is_dir():
            continue
        if (p / "_delta_log").is_dir():
            out.append(name)
        else:
            out.extend(f"{name}/{s}" for s in sorted(os.listdir(p)) if (p / s / "_delta_log").is_dir())
    return out


ALL_TABLES = _table_dirs()
ORACLE_TABLES = [t for t in ALL_TABLES if t not in REFUSED and t not in NO_COMMITS and t != BIG]
DV_TABLES = [
    t
    for t in ORACLE_TABLES
    if any(
        re.search(rb"\"deletionVector\"\s*:\s*\{", f.read_bytes())
        for f in (TABLES_ROOT / t / "_delta_log").glob("*.json")
    )
]


def _oracle_live(path: Path, version: int) -> list[str]:
    dl = deltalake.DeltaTable(str(path), version=version)
    return sorted(pa.table(dl.get_add_actions(flatten=True)).column("path").to_pylist())


def test_corpus_is_present():
    assert len(ALL_TABLES) >= 55, ALL_TABLES


@pytest.mark.parametrize("name", ORACLE_TABLES)
def test_live_files_match_deltalake_at_every_version(name):
    path = TABLES_ROOT / name
    table = DeltaTable(str(path), cache=SnapshotCache())
    first, latest = table.earliest_version(), table.latest_version()
    assert first <= latest
    for version in range(first, latest + 1):
        snap = table.snapshot(version)
        ours = sorted(snap.files().column("path").to_pylist())
        assert ours == _oracle_live(path, version), f"{name}@{version}"
        assert snap.num_files == len(ours)
        assert snap.version == version
        # protocol and metadata agree with delta-rs too
        dl = deltalake.DeltaTable(str(path), version=version)
        assert snap.metadata.id == dl.metadata().id
        assert list(snap.metadata.partition_columns) == list(dl.metadata().partition_columns)
        assert snap.protocol.min_reader_version == dl.protocol().min_reader_version


def test_some_tables_have_deletion_vectors():
    assert len(DV_TABLES) >= 5, DV_TABLES


@pytest.mark.parametrize("name", DV_TABLES)
def test_deletion_vectors_match_deltalake(name):
    from deltaport import dv

    path = TABLES_ROOT / name
    snap = DeltaTable(str(path), cache=SnapshotCache()).snapshot()
    with_dv = [a for a in snap.add_actions() if a.get("deletionVector")]
    if not with_dv:  # the DVs were all superseded by the latest version: check an earlier one
        table = DeltaTable(str(path), cache=SnapshotCache())
        for v in range(table.latest_version(), table.earliest_version() - 1, -1):
            with_dv = [a for a in table.snapshot(v).add_actions() if a.get("deletionVector")]
            if with_dv:
                break
        assert with_dv, "the log has DVs but no version has a live file with one"
        version = v
    else:
        version = snap.version
    try:
        reader = deltalake.DeltaTable(str(path), version=version).deletion_vectors()
    except Exception as exc:  # delta-rs cannot read this table's DVs
        pytest.skip(f"delta-rs cannot read DVs here: {exc}")
    expected = {}
    for row in pa.table(reader).to_pylist():
        deleted = {i for i, keep in enumerate(row["selection_vector"]) if not keep}
        expected[row["filepath"].rsplit("/", 1)[-1]] = deleted
    store = DeltaTable(str(path)).store
    for add in with_dv:
        desc = dv.DeletionVectorDescriptor.from_dict(add["deletionVector"])
        rows = set(int(r) for r in dv.read_dv(desc, store.read_range))
        assert len(rows) == desc.cardinality
        name_only = add["path"].rsplit("/", 1)[-1]
        if name_only in expected:
            assert rows == expected[name_only], add["path"]


def test_row_sets_with_deletion_vectors_match_deltalake():
    """Reading live files and dropping DV rows gives the same rows as a DV-aware reader."""
    from urllib.parse import unquote

    import polars

    from deltaport import dv

    checked = 0
    for name in ("table-with-dv-small", "with-short-dv", "cdf-table-with-dv", "cdf-table-with-cdc-and-dvs"):
        path = TABLES_ROOT / name
        table = DeltaTable(str(path), cache=SnapshotCache())
        snap = table.snapshot()
        parts = []
        for add in snap.add_actions():
            data = pq.read_table(path / unquote(add["path"]))
            if add.get("deletionVector"):
                deleted = dv.read_dv(
                    dv.DeletionVectorDescriptor.from_dict(add["deletionVector"]), table.store.read_range
                )
                keep = pa.array([i not in set(deleted.tolist()) for i in range(data.num_rows)])
                data = data.filter(keep)
            parts.append(data)
        ours_t = pa.concat_tables(parts, promote_options="permissive")
        theirs = polars.read_delta(str(path)).to_arrow().select(ours_t.column_names).cast(ours_t.schema)
        ours = sorted(map(tuple, (r.values() for r in ours_t.to_pylist())))
        theirs_rows = sorted(map(tuple, (r.values() for r in theirs.to_pylist())))
        assert len(ours) > 0
        assert ours == theirs_rows, name
        checked += 1
    assert checked == 4


@pytest.mark.parametrize("name", ORACLE_TABLES)
def test_changes_match_the_log(name):
    """Per commit, the changes carry exactly the log's add/remove/cdc actions."""
    path = TABLES_ROOT / name
    table = DeltaTable(str(path), cache=SnapshotCache())
    listing = table.refresh_listing()
    versions = sorted(listing.commits)
    # only a contiguous run from the first commit still present
    start = versions[0]
    run = [v for i, v in enumerate(versions) if v == start + i]
    changes = table.changes(run[0], run[-1])
    assert [c.version for c in changes] == run
    for change in changes:
        raw = (path / "_delta_log" / f"{change.version:020d}.json").read_bytes()
        expected = {"add": [], "remove": [], "cdc": []}
        for line in raw.splitlines():
            if line.strip():
                obj = orjson.loads(line)
                for kind in expected:
                    if kind in obj:
                        expected[kind].append((obj[kind]["path"], obj[kind].get("dataChange")))
        for kind, tbl in (("add", change.adds), ("remove", change.removes), ("cdc", change.cdcs)):
            got = sorted(zip(tbl.column("path").to_pylist(), tbl.column("dataChange").to_pylist()))
            assert got == sorted(expected[kind]), f"{name}@{change.version} {kind}"
        assert change.timestamp is not None


def test_timestamps_strictly_increase_and_resolve_both_ways():
    table = DeltaTable(str(TABLES_ROOT / "cdf-table-with-cdc-and-dvs"), cache=SnapshotCache())
    history = table.history()
    assert all(a < b for a, b in zip(history.timestamps, history.timestamps[1:]))
    for v, ts in zip(history.versions, history.timestamps):
        assert table.version_at_or_before(ts) == v
        assert table.version_at_or_after(ts) == v
    for prev_ts, (v, ts) in zip(history.timestamps, list(zip(history.versions, history.timestamps))[1:]):
        if ts - 1 > prev_ts:
            assert table.version_at_or_after(ts - 1) == v
            assert table.version_at_or_before(ts - 1) == v - 1
    snap = table.snapshot(timestamp=history.timestamps[3])
    assert snap.version == history.versions[3]


@pytest.mark.parametrize(("name", "features"), sorted(REFUSED.items()))
def test_unsupported_reader_features_are_refused_by_name(name, features):
    with pytest.raises(UnsupportedTableFeature) as err:
        DeltaTable(str(TABLES_ROOT / name), cache=SnapshotCache()).snapshot()
    assert err.value.features == features
    for f in features:
        assert f in str(err.value)
    # the table's location is for the operator, never in the message a recipient reads
    assert name not in str(err.value) and name in err.value.operator_message


def test_log_without_commits_is_not_a_delta_table():
    with pytest.raises(NotADeltaTable) as err:
        DeltaTable(str(TABLES_ROOT / "crc-malformed"), cache=SnapshotCache()).snapshot()
    assert "crc-malformed" not in str(err.value) and "crc-malformed" in err.value.operator_message


def test_big_log_matches_deltalake():
    path = TABLES_ROOT / BIG
    snap = DeltaTable(str(path), cache=SnapshotCache()).snapshot()
    assert snap.num_files == 300_000
    ours = snap.files().column("path")
    theirs = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True)).column("path")
    assert sorted(ours.to_pylist()) == sorted(theirs.to_pylist())
    theirs_size = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True)).column("size_bytes")
    assert snap.size_in_bytes == sum(theirs_size.to_pylist())


@pytest.mark.parametrize(
    "name",
    [
        "v1-single-part-struct-stats-only",
        "v1-multi-part-struct-stats-only",
        "v2-classic-parquet-struct-stats-only",
        "v2-parquet-sidecars-struct-stats-only",
        "v2-json-sidecars-struct-stats-only",
    ],
)
def test_stats_rebuilt_from_struct_only_checkpoints_match_the_commits(name):
    """Checkpoints with only stats_parsed: the JSON stats we rebuild equal what the commits wrote."""
    path = TABLES_ROOT / name
    written = {}
    for f in sorted((path / "_delta_log").glob("*.json")):
        for line in f.read_bytes().splitlines():
            obj = orjson.loads(line) if line.strip() else {}
            if "add" in obj and obj["add"].get("stats"):
                written[obj["add"]["path"]] = orjson.loads(obj["add"]["stats"])
    snap = DeltaTable(str(path), cache=SnapshotCache()).snapshot()
    assert snap.version == max(int(f.name[:20]) for f in (path / "_delta_log").glob("[0-9]*.checkpoint*"))
    compared = 0
    for add in snap.add_actions():
        ours = orjson.loads(add["stats"])
        theirs = written[add["path"]]
        theirs.pop("tightBounds", None)
        ours.pop("tightBounds", None)
        assert ours == theirs, add["path"]
        compared += 1
    assert compared == snap.num_files > 0
