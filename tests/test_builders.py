"""The table builders produce tables deltalake reads, with the rows the builders promise."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from builders import (
    DV_TABLE_ALL_IDS,
    DV_TABLE_DELETED_IDS,
    TIMESTAMP_NTZ_ROWS,
    expected_cdf_rows,
    expected_many_commits_ids,
    expected_partitioned_rows,
    log_actions,
    make_cdf_table,
    make_dv_table,
    make_many_commits_table,
    make_partitioned_table,
    make_timestamp_ntz_table,
    many_commits_delete_versions,
    write_dv_commit,
)
from deltalake import DeltaTable

from deltaport.dv import DeletionVectorDescriptor, local_read_range, read_dv


def _rows(path: str, version: int | None = None, sort: str = "id") -> list[dict]:
    # scan() rather than to_pyarrow_table(): see the builders module docstring.
    table = pa.table(DeltaTable(path, version=version).scan())
    return sorted(table.to_pylist(), key=lambda r: r[sort])


def _all_actions(path: str) -> list[tuple[int, dict]]:
    log = Path(path) / "_delta_log"
    out = []
    for f in sorted(log.glob("*.json")):
        if f.stem.isdigit():
            out += [(int(f.stem), json.loads(line)) for line in f.read_text().splitlines() if line.strip()]
    return out


def test_partitioned_table(tmp_path):
    path = make_partitioned_table(tmp_path)
    dt = DeltaTable(path)
    assert dt.version() == 3
    assert dt.metadata().partition_columns == ["region", "year"]
    assert _rows(path) == expected_partitioned_rows()
    actions = _all_actions(path)
    adds = [a["add"] for _, a in actions if "add" in a]
    # Partition values are strings on the wire, null for the null region.
    assert {"region": None, "year": "2023"} in [a["partitionValues"] for a in adds]
    assert all(isinstance(a["partitionValues"]["year"], str) for a in adds)
    # v2 replaced partition eu/2024 only; v3 rewrote us files.
    removed_v2 = [a["remove"]["partitionValues"] for v, a in actions if v == 2 and "remove" in a]
    assert removed_v2 and all(pv == {"region": "eu", "year": "2024"} for pv in removed_v2)
    assert any("remove" in a for v, a in actions if v == 3)
    # Earlier versions stay readable.
    assert len(_rows(path, version=1)) == 18


def test_cdf_table(tmp_path):
    path = make_cdf_table(tmp_path)
    dt = DeltaTable(path)
    assert dt.version() == 3
    assert dt.protocol().min_writer_version >= 4
    assert dt.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert _rows(path) == expected_cdf_rows()
    assert list((Path(path) / "_change_data").glob("*.parquet"))
    cdc_versions = {v for v, a in _all_actions(path) if "cdc" in a}
    assert cdc_versions == {2, 3}
    changes = pa.table(dt.load_cdf(starting_version=0))
    kinds = {}
    for row in changes.select(["id", "_change_type", "_commit_version"]).to_pylist():
        kinds.setdefault((int(row["_commit_version"]), str(row["_change_type"])), []).append(row["id"])
    assert sorted(kinds[(0, "insert")]) == list(range(10))
    assert sorted(kinds[(1, "insert")]) == list(range(10, 15))
    assert kinds[(2, "update_preimage")] == [3]
    assert kinds[(2, "update_postimage")] == [3]
    assert sorted(kinds[(3, "delete")]) == [12, 13, 14]


def test_many_commits_table(tmp_path):
    path = make_many_commits_table(tmp_path)
    dt = DeltaTable(path)
    assert dt.version() == 24
    log = Path(path) / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    assert (log / f"{20:020d}.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 20
    assert [r["id"] for r in _rows(path)] == expected_many_commits_ids(25)
    deletes = many_commits_delete_versions(25)
    assert len(deletes) == 2
    for v in deletes:
        actions = [a for ver, a in _all_actions(path) if ver == v]
        assert any("remove" in a for a in actions) and not any("add" in a for a in actions)


def test_many_commits_table_small(tmp_path):
    path = make_many_commits_table(tmp_path, commits=8, checkpoint_every=3)
    assert DeltaTable(path).version() == 7
    log = Path(path) / "_delta_log"
    assert sorted(p.name[:20] for p in log.glob("*.checkpoint.parquet")) == [f"{3:020d}", f"{6:020d}"]
    assert [r["id"] for r in _rows(path)] == expected_many_commits_ids(8)


@pytest.mark.parametrize("inline", [False, True])
def test_dv_table(tmp_path, inline):
    path = make_dv_table(tmp_path, inline=inline)
    dt = DeltaTable(path)
    assert dt.version() == 2
    protocol = dt.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == ["deletionVectors"]
    assert "deletionVectors" in protocol.writer_features
    assert dt.metadata().configuration["delta.enableDeletionVectors"] == "true"

    expected_ids = [i for i in DV_TABLE_ALL_IDS if i not in DV_TABLE_DELETED_IDS]
    assert [r["id"] for r in _rows(path)] == expected_ids
    assert [r["id"] for r in _rows(path, version=1)] == DV_TABLE_ALL_IDS

    import polars as pl

    assert sorted(pl.read_delta(path)["id"].to_list()) == expected_ids

    dvs = pa.table(dt.deletion_vectors()).to_pylist()
    assert len(dvs) == 1
    assert [i for i, keep in enumerate(dvs[0]["selection_vector"]) if not keep] == DV_TABLE_DELETED_IDS

    with pytest.raises(Exception, match="deletionVectors"):
        dt.to_pyarrow_dataset()

    add = next(a["add"] for a in log_actions(path, 2) if "add" in a)
    descriptor = DeletionVectorDescriptor.from_dict(add["deletionVector"])
    assert descriptor.storage_type == ("i" if inline else "u")
    assert read_dv(descriptor, local_read_range(path)).tolist() == DV_TABLE_DELETED_IDS
    assert json.loads(add["stats"])["tightBounds"] is False
    if not inline:
        assert (Path(path) / descriptor.relative_path()).is_file()


def test_write_dv_commit_merges_with_prefix_and_runs(tmp_path):
    path = make_dv_table(tmp_path)
    adds = {a["add"]["path"]: a["add"] for a in log_actions(path, 0) if "add" in a}
    first = next(iter(adds))
    second = next(a["add"]["path"] for a in log_actions(path, 1) if "add" in a)
    # A run of rows (run container) in a prefixed DV file on the second file.
    d2 = write_dv_commit(path, second, range(1, 9), prefix="ab")  # ids 11..18
    assert d2.relative_path().startswith("ab/")
    # A second DV on the first file keeps the rows the first one deleted.
    d1 = write_dv_commit(path, first, [5], inline=True)
    assert d1.cardinality == len(DV_TABLE_DELETED_IDS) + 1
    ids = [r["id"] for r in _rows(path)]
    gone = set(DV_TABLE_DELETED_IDS) | {5} | set(range(11, 19))
    assert ids == [i for i in DV_TABLE_ALL_IDS if i not in gone]
    with pytest.raises(KeyError):
        write_dv_commit(path, "no-such-file.parquet", [1])


def test_timestamp_ntz_table(tmp_path):
    path = make_timestamp_ntz_table(tmp_path)
    dt = DeltaTable(path)
    assert "timestampNtz" in (dt.protocol().reader_features or [])
    schema = json.loads(next(a for a in log_actions(path, 0) if "metaData" in a)["metaData"]["schemaString"])
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert types == {"id": "long", "ts": "timestamp_ntz", "tsz": "timestamp", "day": "timestamp_ntz"}
    table = pa.table(dt.scan())
    assert table.schema.field("ts").type == pa.timestamp("us")
    assert table.schema.field("tsz").type.tz in ("UTC", "+00:00")
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])
    assert [r["ts"] for r in rows] == [r["ts"] for r in TIMESTAMP_NTZ_ROWS]
    assert [r["day"] for r in rows] == [r["day"] for r in TIMESTAMP_NTZ_ROWS]
    assert [r["tsz"] for r in rows] == [r["tsz"] for r in TIMESTAMP_NTZ_ROWS]


def _gen_big_table():
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gen_big_table.py"
    spec = importlib.util.spec_from_file_location("gen_big_table", script)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_big_table_generator_small(tmp_path):
    """benchmarks/gen_big_table.py at a small size: deltalake opens it with the right state."""
    gen = _gen_big_table()
    summary = gen.generate(tmp_path / "big", files=3000, commits=4)
    assert summary["expected_live_files"] == 3000 + 4 * 50
    result = gen.check(tmp_path / "big", files=3000, commits=4)
    assert result["ok"], result
    log = tmp_path / "big" / "_delta_log"
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 1
    assert "parts" not in json.loads((log / "_last_checkpoint").read_text())
    add = next(a["add"] for a in log_actions(tmp_path / "big", 2) if "add" in a)
    stats = json.loads(add["stats"])
    assert set(stats) == {"numRecords", "minValues", "maxValues", "nullCount"}
    assert set(stats["minValues"]) == {"id", "value", "name", "ts"}


def test_big_table_generator_batches_and_parts(tmp_path, monkeypatch):
    """Drawn in several batches, written in small row groups and in a 3-part checkpoint, the big
    table still has the state its commits describe: the removes of checkpoint files (found again
    from the saved batch states) hit live files, for deltalake and for the engine alike."""
    import pyarrow.parquet as pq

    from deltaport.delta import DeltaTable as EngineTable
    from deltaport.delta import SnapshotCache

    gen = _gen_big_table()
    monkeypatch.setattr(gen, "BATCH", 700)
    monkeypatch.setattr(gen, "ROW_GROUP", 256)
    summary = gen.generate(tmp_path / "big", files=3000, commits=4, parts=3)
    assert summary["expected_live_files"] == 3000 + 4 * 50
    result = gen.check(tmp_path / "big", files=3000, commits=4)
    assert result["ok"], result
    log = tmp_path / "big" / "_delta_log"
    names = [f"{1:020d}.checkpoint.{k:010d}.{3:010d}.parquet" for k in (1, 2, 3)]
    hint = json.loads((log / "_last_checkpoint").read_text())
    assert hint["parts"] == 3 and hint["size"] == 3002
    assert hint["sizeInBytes"] == sum((log / n).stat().st_size for n in names)
    assert sum(pq.ParquetFile(log / n).metadata.num_rows for n in names) == 3002
    assert max(pq.ParquetFile(log / n).metadata.row_group(0).num_rows for n in names[1:]) <= 256
    expected = set(pa.table(DeltaTable(str(tmp_path / "big")).get_add_actions(flatten=True)).column("path").to_pylist())
    engine = EngineTable(str(tmp_path / "big"), cache=SnapshotCache()).snapshot()
    assert set(engine.files().column("path").to_pylist()) == expected
