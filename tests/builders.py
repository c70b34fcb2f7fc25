"""Builders of small Delta tables for tests, written with deltalake (plus hand-written commits).

Every ``make_*`` function creates a fresh sub-directory of ``dir`` and returns its path as a
string. The ``*_EXPECTED``/``expected_*`` helpers give the rows the latest version must hold, so
tests can compare any reader against them.

Reading with deltalake in tests: prefer ``pyarrow.table(DeltaTable(p).scan())`` or
``polars.read_delta``. ``to_pyarrow_table()``/``to_pandas()`` work but make the interpreter abort
at exit ("terminate called without an active exception") with deltalake 1.6.6, and they refuse
tables with deletion vectors.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from deltaport.dv import (
    DeletionVectorDescriptor,
    inline_dv,
    local_read_range,
    read_dv,
    write_dv_file,
)

__all__ = [
    "DV_TABLE_ALL_IDS",
    "DV_TABLE_DELETED_IDS",
    "TIMESTAMP_NTZ_ROWS",
    "expected_cdf_rows",
    "expected_many_commits_ids",
    "expected_partitioned_rows",
    "log_actions",
    "make_cdf_table",
    "make_dv_table",
    "make_many_commits_table",
    "make_partitioned_table",
    "make_timestamp_ntz_table",
    "many_commits_delete_versions",
    "write_commit",
    "write_dv_commit",
]


# --- log helpers --------------------------------------------------------------------------


def _log_dir(table: str | os.PathLike[str]) -> Path:
    return Path(table) / "_delta_log"


def _commit_files(table: str | os.PathLike[str]) -> list[Path]:
    files = [p for p in _log_dir(table).glob("*.json") if p.stem.isdigit() and len(p.stem) == 20]
    return sorted(files)


def log_actions(table: str | os.PathLike[str], version: int | None = None) -> list[dict[str, Any]]:
    """The actions of one JSON commit (the latest if ``version`` is None)."""
    files = _commit_files(table)
    path = files[-1] if version is None else _log_dir(table) / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_commit(table: str | os.PathLike[str], actions: Iterable[dict[str, Any]]) -> int:
    """Write ``actions`` as the next JSON commit (created exclusively); returns its version."""
    files = _commit_files(table)
    version = int(files[-1].stem) + 1 if files else 0
    body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    with open(_log_dir(table) / f"{version:020d}.json", "x") as fh:
        fh.write(body)
    return version


def _live_adds(table: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Replay the JSON commits (builder tables keep all of them) into path -> add action."""
    live: dict[str, dict[str, Any]] = {}
    for path in _commit_files(table):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return live


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- partitioned table ----------------------------------------------------------------------

_PART_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("year", pa.int32()),
        ("value", pa.float64()),
        ("name", pa.string()),
    ]
)


def _part_row(i: int, region: str | None = None, year: int | None = None) -> dict[str, Any]:
    regions = ["eu", "us", None]
    return {
        "id": i,
        "region": regions[i % 3] if region is None and year is None else region,
        "year": 2023 + i % 2 if year is None else year,
        "value": i * 1.5,
        "name": f"n{i}",
    }


def _part_steps() -> tuple[list[dict], list[dict], list[dict]]:
    first = [_part_row(i) for i in range(12)]
    second = [_part_row(i) for i in range(12, 18)]
    replacement = [_part_row(i, "eu", 2024) for i in (100, 101, 102)]
    return first, second, replacement


def expected_partitioned_rows() -> list[dict[str, Any]]:
    """Rows of the latest version of :func:`make_partitioned_table`, sorted by id."""
    first, second, replacement = _part_steps()
    rows = [r for r in first + second if not (r["region"] == "eu" and r["year"] == 2024)]
    rows += replacement
    rows = [r for r in rows if not (r["region"] == "us" and r["id"] >= 12)]
    return sorted(rows, key=lambda r: r["id"])


def make_partitioned_table(dir: str | os.PathLike[str]) -> str:
    """Table partitioned by ``region`` (string, with a null partition) and ``year`` (int).

    v0 create (ids 0..11), v1 append (ids 12..17), v2 overwrite of partition eu/2024 via
    ``predicate=`` (ids 100..102), v3 delete ``region = 'us' AND id >= 12``.
    """
    path = Path(dir) / "partitioned"
    first, second, replacement = _part_steps()
    parts = ["region", "year"]
    write_deltalake(path, pa.Table.from_pylist(first, _PART_SCHEMA), partition_by=parts)
    write_deltalake(path, pa.Table.from_pylist(second, _PART_SCHEMA), mode="append")
    write_deltalake(
        path,
        pa.Table.from_pylist(replacement, _PART_SCHEMA),
        mode="overwrite",
        predicate="region = 'eu' AND year = 2024",
    )
    DeltaTable(path).delete("region = 'us' AND id >= 12")
    return str(path)


# --- change data feed -----------------------------------------------------------------------

_CDF_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])


def expected_cdf_rows() -> list[dict[str, Any]]:
    """Rows of the latest version of :func:`make_cdf_table`, sorted by id."""
    rows = [{"id": i, "value": f"v{i}"} for i in range(12)]
    rows[3]["value"] = "three"
    return rows


def make_cdf_table(dir: str | os.PathLike[str]) -> str:
    """``delta.enableChangeDataFeed=true`` (protocol 1/4).

    v0 insert ids 0..9, v1 insert ids 10..14, v2 update id 3 to 'three' (``_change_data``
    pre/post images), v3 delete ``id >= 12`` (``_change_data`` deletes).
    """
    path = Path(dir) / "cdf"
    first = pa.Table.from_pylist([{"id": i, "value": f"v{i}"} for i in range(10)], _CDF_SCHEMA)
    second = pa.Table.from_pylist([{"id": i, "value": f"v{i}"} for i in range(10, 15)], _CDF_SCHEMA)
    write_deltalake(path, first, configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(path, second, mode="append")
    DeltaTable(path).update(updates={"value": "'three'"}, predicate="id = 3")
    DeltaTable(path).delete("id >= 12")
    return str(path)


# --- many commits with checkpoints ------------------------------------------------------------

_MANY_ROWS_PER_COMMIT = 3
_MANY_SCHEMA = pa.schema([("id", pa.int64()), ("batch", pa.int64()), ("payload", pa.string())])


def many_commits_delete_versions(commits: int) -> list[int]:
    """Versions at which :func:`make_many_commits_table` deletes (one earlier batch each)."""
    if commits < 5:
        return []
    return sorted({max(3, commits // 3), max(4, (2 * commits) // 3)})


def _many_plan(commits: int) -> list[tuple[str, int]]:
    deletes = set(many_commits_delete_versions(commits))
    plan: list[tuple[str, int]] = []
    appended: list[int] = []
    for v in range(commits):
        if v in deletes:
            target = appended.pop(0)  # oldest live batch
            plan.append(("delete", target))
        else:
            plan.append(("append", v))
            appended.append(v)
    return plan


def expected_many_commits_ids(commits: int = 25) -> list[int]:
    """Sorted ids of the latest version of :func:`make_many_commits_table`."""
    live: set[int] = set()
    for op, batch in _many_plan(commits):
        if op == "append":
            live.add(batch)
        else:
            live.discard(batch)
    return sorted(b * 100 + i for b in live for i in range(_MANY_ROWS_PER_COMMIT))


def make_many_commits_table(dir: str | os.PathLike[str], commits: int = 25, checkpoint_every: int = 10) -> str:
    """``commits`` versions (0..commits-1) of small appends (one file each, ``batch`` = version),
    with whole-file deletes of the oldest live batch at :func:`many_commits_delete_versions`
    (remove actions only) and ``create_checkpoint()`` after every version that is a positive
    multiple of ``checkpoint_every``.
    """
    if commits < 1:
        raise ValueError("commits must be at least 1")
    path = Path(dir) / "many_commits"
    for v, (op, batch) in enumerate(_many_plan(commits)):
        if op == "append":
            rows = [
                {"id": batch * 100 + i, "batch": batch, "payload": f"b{batch}-{i}"}
                for i in range(_MANY_ROWS_PER_COMMIT)
            ]
            write_deltalake(path, pa.Table.from_pylist(rows, _MANY_SCHEMA), mode="error" if v == 0 else "append")
        else:
            DeltaTable(path).delete(f"batch = {batch}")
        if checkpoint_every and v and v % checkpoint_every == 0:
            DeltaTable(path).create_checkpoint()
    return str(path)


# --- deletion vectors -----------------------------------------------------------------------

DV_TABLE_ALL_IDS = list(range(20))
DV_TABLE_DELETED_IDS = [0, 3, 9]  # row indexes 0, 3, 9 of the first data file (ids 0..9)

_DV_PROTOCOL = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["deletionVectors"],
    "writerFeatures": ["deletionVectors"],
}


def write_dv_commit(
    table: str | os.PathLike[str],
    data_path: str,
    rows: Iterable[int],
    *,
    inline: bool = False,
    prefix: str = "",
) -> DeletionVectorDescriptor:
    """Hand-write a commit deleting row indexes ``rows`` of ``data_path`` with a deletion vector.

    The commit removes the file's current add and re-adds the same path with a
    ``deletionVector`` (union with any DV it already had): on-disk ``u`` in a new
    ``deletion_vector_<uuid>.bin`` (under ``prefix``) or inline ``i``. Stats keep
    ``numRecords`` and gain ``tightBounds: false``. The table's protocol must allow DVs.
    """
    live = _live_adds(table)
    if data_path not in live:
        raise KeyError(f"{data_path} is not an active file of {table}")
    old = {k: v for k, v in live[data_path].items() if v is not None}
    wanted = {int(r) for r in rows}
    if "deletionVector" in old:
        prior = DeletionVectorDescriptor.from_dict(old["deletionVector"])
        wanted |= {int(r) for r in read_dv(prior, local_read_range(table))}
    descriptor = inline_dv(sorted(wanted)) if inline else write_dv_file(table, sorted(wanted), prefix=prefix)
    now = _now_ms()
    remove = {
        "path": data_path,
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": old.get("partitionValues", {}),
        "size": old["size"],
    }
    for key in ("tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if key in old:
            remove[key] = old[key]
    add = dict(old)
    add["dataChange"] = True
    add["deletionVector"] = descriptor.to_dict()
    if "stats" in add:
        stats = json.loads(add["stats"])
        stats["tightBounds"] = False
        add["stats"] = json.dumps(stats, separators=(",", ":"))
    commit_info = {
        "timestamp": now,
        "operation": "DELETE",
        "operationParameters": {"predicate": '["deletion vector written by test builder"]'},
        "operationMetrics": {"numDeletionVectorsAdded": 1, "numDeletedRows": len(wanted)},
        "engineInfo": "deltaport-tests",
    }
    write_commit(table, [{"commitInfo": commit_info}, {"remove": remove}, {"add": add}])
    return descriptor


def _force_dv_protocol(table: Path) -> None:
    """Set commit 0's protocol to exactly 3/7 with the deletionVectors feature.

    deltalake 1.6.6 upgrades to 3/7 for ``delta.enableDeletionVectors`` but also lists the
    ``variantType`` feature, which readers without variant support would refuse.
    """
    first = _log_dir(table) / f"{0:020d}.json"
    actions = [json.loads(line) for line in first.read_text().splitlines() if line.strip()]
    for action in actions:
        if "protocol" in action:
            action["protocol"] = dict(_DV_PROTOCOL)
    first.write_text("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))


def make_dv_table(dir: str | os.PathLike[str], inline: bool = False) -> str:
    """Table with deletion vectors: protocol 3/7 (readerFeatures/writerFeatures deletionVectors),
    ``delta.enableDeletionVectors=true``.

    v0 create ids 0..9 (one file), v1 append ids 10..19 (one file), v2 hand-written: remove the
    v0 file and re-add it with a DV deleting row indexes 0, 3, 9 (ids in
    ``DV_TABLE_DELETED_IDS``), on-disk ``u`` or inline ``i``.
    """
    path = Path(dir) / ("dv_inline" if inline else "dv")
    schema = pa.schema([("id", pa.int64()), ("label", pa.string())])
    first = pa.Table.from_pylist([{"id": i, "label": f"l{i}"} for i in range(10)], schema)
    second = pa.Table.from_pylist([{"id": i, "label": f"l{i}"} for i in range(10, 20)], schema)
    write_deltalake(path, first, configuration={"delta.enableDeletionVectors": "true"})
    _force_dv_protocol(path)
    write_deltalake(path, second, mode="append")
    adds = [a["add"] for a in log_actions(path, 0) if "add" in a]
    if len(adds) != 1:
        raise RuntimeError(f"expected one data file in commit 0, found {len(adds)}")
    write_dv_commit(path, adds[0]["path"], DV_TABLE_DELETED_IDS, inline=inline)
    return str(path)


# --- timestamp_ntz --------------------------------------------------------------------------

TIMESTAMP_NTZ_ROWS = [
    {
        "id": i,
        "ts": _dt.datetime(2020, 1, 1, 12, 30, i),
        "tsz": _dt.datetime(2020, 1, 1, 12, 30, i, tzinfo=_dt.timezone.utc),
        "day": _dt.datetime(2021, 5, 1 + i % 2, 8, 0, 0),
    }
    for i in range(4)
]


def make_timestamp_ntz_table(dir: str | os.PathLike[str]) -> str:
    """``ts`` and ``day`` are timestamp_ntz (``day`` is the partition column), ``tsz`` is a UTC
    timestamp; protocol 3/7 with the timestampNtz feature. Skips the calling test if this
    deltalake cannot write timestamp_ntz.
    """
    path = Path(dir) / "timestamp_ntz"
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us")),
            ("tsz", pa.timestamp("us", tz="UTC")),
            ("day", pa.timestamp("us")),
        ]
    )
    try:
        write_deltalake(path, pa.Table.from_pylist(TIMESTAMP_NTZ_ROWS, schema), partition_by=["day"])
    except Exception as exc:  # deltalake versions without timestamp_ntz writing
        import pytest

        pytest.skip(f"deltalake cannot write timestamp_ntz: {exc}")
    return str(path)


def writable_copy(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """A copy of a (read-only) corpus table that tests may write to; returns ``dst``."""
    import shutil

    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    os.chmod(dst, 0o755)
    return Path(dst)
