"""Broken logs and bad arguments give specific errors naming the version or file.

The table's location is kept for the operator (``table``, ``operator_message``), never in the
message a recipient reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from builders import writable_copy

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.errors import (
    CorruptLog,
    DeltaportError,
    InvalidVersionRange,
    NotADeltaTable,
    TableFilesMissing,
    TimestampOutOfRange,
    VersionNotFound,
)

SHARED = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared"))
TABLES = SHARED / "delta-tables"


def _table(path: Path) -> DeltaTable:
    return DeltaTable(str(path), cache=SnapshotCache())


def _copy(name: str, tmp_path: Path) -> Path:
    return writable_copy(TABLES / name, tmp_path / name.replace("/", "_"))


def _commit(path: Path, version: int, *actions: dict) -> None:
    log = path / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.json").write_bytes(b"\n".join(orjson.dumps(a) for a in actions) + b"\n")


PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "t1",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}',
        "partitionColumns": [],
        "configuration": {},
        "createdTime": 1,
    }
}


def _add(path: str) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": 10, "modificationTime": 1, "dataChange": True}}


def _location_only_for_the_operator(err: DeltaportError, path: Path) -> None:
    assert str(path) not in err.message and str(path) not in str(err)
    assert err.table is not None and str(path) in err.table
    assert str(path) in err.operator_message


def test_no_delta_log(tmp_path):
    with pytest.raises(NotADeltaTable) as err:
        _table(tmp_path).snapshot()
    _location_only_for_the_operator(err.value, tmp_path)
    assert "_delta_log" in str(err.value)
    # the reference server's code for the engine's "table not found"; never a 5xx
    assert (err.value.http_status, err.value.error_code) == (400, "MALFORMED_REQUEST")


def test_empty_log(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    with pytest.raises(NotADeltaTable, match="no commit files"):
        _table(tmp_path).snapshot()


def test_truncated_commit_line_names_file_and_line(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    with open(tmp_path / "_delta_log" / f"{1:020d}.json", "wb") as fh:
        fh.write(orjson.dumps(_add("b.parquet")) + b"\n" + b'{"add":{"path":"c.parq')
    with pytest.raises(CorruptLog) as err:
        _table(tmp_path).snapshot()
    msg = str(err.value)
    assert "00000000000000000001.json line 2" in msg
    assert "truncated" in msg
    _location_only_for_the_operator(err.value, tmp_path)
    assert (err.value.http_status, err.value.error_code) == (400, "MALFORMED_REQUEST")


def test_non_json_commit_line(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA)
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_bytes(b"this is not json\n")
    with pytest.raises(CorruptLog, match=r"00000000000000000001\.json line 1: invalid JSON"):
        _table(tmp_path).snapshot()


def test_action_that_is_not_an_object(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA)
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_bytes(b"[1, 2]\n")
    with pytest.raises(CorruptLog, match="must be a JSON object"):
        _table(tmp_path).snapshot()


def test_add_without_path(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, {"add": {"size": 3}})
    with pytest.raises(CorruptLog, match="add action without a path"):
        _table(tmp_path).snapshot()


def test_missing_protocol_or_metadata(tmp_path):
    _commit(tmp_path, 0, METADATA, _add("a.parquet"))
    with pytest.raises(CorruptLog, match="no protocol action"):
        _table(tmp_path).snapshot()
    other = tmp_path / "other"
    _commit(other, 0, PROTOCOL, _add("a.parquet"))
    with pytest.raises(CorruptLog, match="no metaData action"):
        _table(other).snapshot()


def test_version_out_of_range(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, _add("b.parquet"))
    table = _table(tmp_path)
    with pytest.raises(VersionNotFound) as err:
        table.snapshot(5)
    assert err.value.message == "Cannot load table version 5 as it does not exist. The latest available version is 1."
    assert (err.value.http_status, err.value.error_code) == (400, "MALFORMED_REQUEST")
    with pytest.raises(VersionNotFound, match="versions start at 0"):
        table.snapshot(-1)
    assert table.snapshot(1).num_files == 2


def test_missing_commit_without_checkpoint(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, _add("b.parquet"))
    _commit(tmp_path, 2, _add("c.parquet"))
    (tmp_path / "_delta_log" / f"{1:020d}.json").unlink()
    table = _table(tmp_path)
    with pytest.raises(VersionNotFound) as err:
        table.snapshot()
    assert str(err.value) == (
        "Cannot load table version 2: commit 1 is missing from _delta_log and no checkpoint "
        "covers it. Ask the data provider to restore the missing commit or to write a "
        "checkpoint after it."
    )
    assert table.snapshot(0).num_files == 1  # what can be read still reads


def test_commits_removed_before_checkpoint(tmp_path):
    t = _copy("with_checkpoint_no_last_checkpoint", tmp_path)
    for v in (0, 1):
        (t / "_delta_log" / f"{v:020d}.json").unlink()
    table = _table(t)
    assert table.earliest_version() == 2
    assert table.snapshot().version == 3
    with pytest.raises(VersionNotFound) as err:
        table.snapshot(1)
    assert err.value.message == (
        "Cannot load table version 1 as the transaction log has been truncated due to manual deletion or the "
        "log/checkpoint retention policy. The earliest available version is 2."
    )


def test_missing_commit_after_checkpoint(tmp_path):
    t = _copy("with_checkpoint_no_last_checkpoint", tmp_path)
    (t / "_delta_log" / f"{3:020d}.json").rename(t / "_delta_log" / f"{4:020d}.json")
    with pytest.raises(VersionNotFound, match="commit 3 is missing"):
        _table(t).snapshot()


def test_corrupt_checkpoint_without_fallback(tmp_path):
    t = _copy("with_checkpoint_no_last_checkpoint", tmp_path)
    (t / "_delta_log" / f"{0:020d}.json").unlink()  # no way around the checkpoint
    cp = next((t / "_delta_log").glob("*.checkpoint.parquet"))
    cp.write_bytes(b"PAR1 garbage")
    with pytest.raises(CorruptLog) as err:
        _table(t).snapshot()
    assert cp.name in str(err.value)
    # the parquet reader's own text quotes the file's absolute path: kept for the operator only
    _location_only_for_the_operator(err.value, t)
    assert err.value.detail and str(t) in err.value.operator_message


def test_corrupt_checkpoint_falls_back_to_commits(tmp_path):
    t = _copy("with_checkpoint_no_last_checkpoint", tmp_path)
    expected = sorted(
        _table(TABLES / "with_checkpoint_no_last_checkpoint").snapshot().files().column("path").to_pylist()
    )
    cp = next((t / "_delta_log").glob("*.checkpoint.parquet"))
    cp.write_bytes(b"PAR1 garbage")
    snap = _table(t).snapshot()
    assert sorted(snap.files().column("path").to_pylist()) == expected


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"version": "x"}', b'{"version": 99}'])
def test_last_checkpoint_corrupt_or_stale_is_ignored(tmp_path, content):
    t = _copy("v2-checkpoints-parquet-with-sidecars", tmp_path)
    expected = sorted(
        _table(TABLES / "v2-checkpoints-parquet-with-sidecars").snapshot().files().column("path").to_pylist()
    )
    (t / "_delta_log" / "_last_checkpoint").write_bytes(content)
    assert sorted(_table(t).snapshot().files().column("path").to_pylist()) == expected


def test_timestamp_outside_history(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, _add("b.parquet"))
    log = tmp_path / "_delta_log"
    os.utime(log / f"{0:020d}.json", (1_600_000_000, 1_600_000_000))
    os.utime(log / f"{1:020d}.json", (1_700_000_000, 1_700_000_000))
    table = _table(tmp_path)
    with pytest.raises(TimestampOutOfRange) as err:
        table.snapshot(timestamp="2000-01-01T00:00:00Z")
    assert err.value.message == (
        "The provided timestamp (2000-01-01 00:00:00.0) is before the earliest version available to this table "
        "(2020-09-13 12:26:40.0). Please use a timestamp greater than or equal to 2020-09-13 12:26:40.0."
    )
    assert (err.value.http_status, err.value.error_code) == (400, "MALFORMED_REQUEST")
    _location_only_for_the_operator(err.value, tmp_path)
    after = (
        "The provided timestamp (2030-01-01 00:00:00.0) is after the latest version available to this table "
        "(2023-11-14 22:13:20.0). Please use a timestamp less than or equal to 2023-11-14 22:13:20.0."
    )
    with pytest.raises(TimestampOutOfRange) as err:
        table.snapshot(timestamp="2030-01-01T00:00:00Z")
    assert err.value.message == after
    with pytest.raises(TimestampOutOfRange) as err:
        table.version_at_or_after("2030-01-01T00:00:00Z")
    assert err.value.message == after
    # the time the message suggests is one this server accepts back
    assert table.snapshot(timestamp="2020-09-13 12:26:40.0").version == 0
    assert table.snapshot(timestamp="2022-01-01T00:00:00Z").version == 0
    assert table.version_at_or_after("2022-01-01T00:00:00Z") == 1
    assert table.version_at_or_after("2000-01-01T00:00:00Z") == 0


def test_changes_range_errors(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, _add("b.parquet"))
    table = _table(tmp_path)
    with pytest.raises(InvalidVersionRange, match=r"cannot be greater than the latest version of the table\(1\)"):
        table.changes(3)
    with pytest.raises(InvalidVersionRange, match="End version cannot be greater"):
        table.changes(0, 2)
    with pytest.raises(InvalidVersionRange, match="End cannot be before start"):
        table.changes(1, 0)
    assert [c.version for c in table.changes(0)] == [0, 1]


def test_changes_over_a_missing_commit_are_table_files_missing(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, _add("b.parquet"))
    _commit(tmp_path, 2, _add("c.parquet"))
    (tmp_path / "_delta_log" / f"{1:020d}.json").unlink()
    with pytest.raises(TableFilesMissing) as err:
        _table(tmp_path).changes(0, 2)
    assert err.value.message.startswith("table files missing. Ask")  # the reference text, then the fix
    assert (err.value.http_status, err.value.error_code) == (400, "RESOURCE_DOES_NOT_EXIST")
    assert "commit 1 is no longer in the log" in err.value.operator_message
    _location_only_for_the_operator(err.value, tmp_path)


def test_every_error_is_a_deltaport_error_with_a_status(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA)
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_bytes(b"\x00\xff garbage\n")
    with pytest.raises(DeltaportError) as err:
        _table(tmp_path).snapshot()
    assert 400 <= err.value.http_status < 500
    assert err.value.error_code


def test_absolute_path_inside_root_matches_relative_add(tmp_path):
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"), _add("b.parquet"))
    root = tmp_path.resolve().as_uri()
    _commit(tmp_path, 1, {"remove": {"path": f"{root}/a.parquet", "deletionTimestamp": 2, "dataChange": True}})
    assert _table(tmp_path).snapshot().files().column("path").to_pylist() == ["b.parquet"]


def test_in_commit_timestamps_win_over_file_times(tmp_path):
    md = orjson.loads(orjson.dumps(METADATA))
    md["metaData"]["configuration"] = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "1",
    }
    _commit(tmp_path, 0, PROTOCOL, METADATA, _add("a.parquet"))
    _commit(tmp_path, 1, {"commitInfo": {"timestamp": 5, "inCommitTimestamp": 1_650_000_000_000}}, md, _add("b"))
    _commit(tmp_path, 2, {"commitInfo": {"timestamp": 6, "inCommitTimestamp": 1_650_000_100_000}}, _add("c"))
    log = tmp_path / "_delta_log"
    for v in range(3):  # file times that disagree with the in-commit timestamps
        os.utime(log / f"{v:020d}.json", (1_600_000_000 + v, 1_600_000_000 + v))
    table = _table(tmp_path)
    history = table.history()
    assert history.timestamps == [1_600_000_000_000, 1_650_000_000_000, 1_650_000_100_000]
    assert table.version_at_or_before("2022-04-15T05:21:00Z") == 1  # between the two ICTs
    assert [c.timestamp for c in table.changes(1)] == [1_650_000_000_000, 1_650_000_100_000]
    assert table.snapshot(2).timestamp == 1_650_000_100_000


def test_file_times_are_made_strictly_increasing(tmp_path):
    for v in range(3):
        _commit(tmp_path, v, *((PROTOCOL, METADATA) if v == 0 else ()), _add(f"f{v}"))
        os.utime(tmp_path / "_delta_log" / f"{v:020d}.json", (1_700_000_000, 1_700_000_000))
    assert _table(tmp_path).history().timestamps == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002]
