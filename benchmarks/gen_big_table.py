"""Generate the log of a big Delta table (log only, no data files) for log-replay benchmarks.

    python benchmarks/gen_big_table.py OUT_DIR [--files N] [--commits 10] [--seed 0] [--force] [--check]

Writes into ``OUT_DIR/_delta_log``:

* ``00000000000000000000.json``: commitInfo, protocol 1/2 and metaData (5 columns: ``part``
  string, the partition column with ~1000 distinct values, then ``id`` long, ``value`` double,
  ``name`` string, ``ts`` timestamp);
* ``00000000000000000001.json``: a commitInfo only, so that version 1 exists;
* ``00000000000000000001.checkpoint.parquet``: a classic single-part checkpoint of version 1
  in the standard schema (txn, add, remove, metaData, protocol structs): protocol, metaData and
  N add actions with per-file JSON stats (numRecords, minValues/maxValues/nullCount of the 4
  data columns), written columnar with pyarrow;
* ``_last_checkpoint``: ``{"version": 1, "size": N + 2, "sizeInBytes": ..., "numOfAddFiles": N}``;
* ``commits`` later JSON commits (versions 2 ..), each adding 100 files and removing 50 live
  ones (from the checkpoint and, after the first, from the previous commit).

The live table then has ``N + 100 * commits - 50 * commits`` files. ``--check`` opens the
result with deltalake and compares its version and file count.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaport.delta.actions import add_fields, remove_fields

PARTITIONS = 1000
ADDS_PER_COMMIT = 100
REMOVES_PER_COMMIT = 50
REMOVES_FROM_PREVIOUS_COMMIT = 10
BASE_TIME_MS = 1_700_000_000_000

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        ],
    },
    separators=(",", ":"),
)

# --- the standard (classic) checkpoint schema -------------------------------------------------

STR_MAP = pa.map_(pa.string(), pa.string())
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
# the checkpoint form of the file actions: the engine's action fields with partition values as a map
ADD_FIELDS = add_fields(STR_MAP)
ADD_TYPE = pa.struct(ADD_FIELDS)
REMOVE_TYPE = pa.struct(remove_fields(STR_MAP))
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STR_MAP),
        ("createdTime", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", TXN_TYPE),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("metaData", METADATA_TYPE),
        ("protocol", PROTOCOL_TYPE),
    ]
)


# --- file descriptions ----------------------------------------------------------------------


class Files:
    """Columnar description of a batch of data files (all numpy/pyarrow, no per-file objects)."""

    def __init__(self, rng: np.random.Generator, start: int, count: int) -> None:
        self.index = np.arange(start, start + count, dtype=np.int64)
        self.part = (self.index % PARTITIONS).astype(np.int64)
        self.size = rng.integers(50_000, 5_000_000, count, dtype=np.int64)
        self.mtime = BASE_TIME_MS + self.index * 7
        self.records = rng.integers(1_000, 100_000, count, dtype=np.int64)
        self.uuids = rng.integers(0, 256, (count, 16), dtype=np.uint8)
        self.rng = rng

    def __len__(self) -> int:
        return len(self.index)

    def part_values(self) -> pa.Array:
        digits = pc.utf8_lpad(pc.cast(pa.array(self.part), pa.string()), 4, "0")
        return pc.binary_join_element_wise("p", digits, "")

    def paths(self) -> pa.Array:
        hexes = self.uuids.tobytes().hex()
        parts = self.part.tolist()
        out = []
        for i in range(len(self)):
            h = hexes[32 * i : 32 * i + 32]
            out.append(
                f"part=p{parts[i]:04d}/part-00000-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}-c000.snappy.parquet"
            )
        return pa.array(out, pa.string())

    def stats(self) -> pa.Array:
        n = len(self)
        rng = self.rng
        id_min = self.index * 100_000
        id_max = id_min + self.records - 1
        v_min = np.round(rng.uniform(-1000.0, 0.0, n), 3)
        v_max = np.round(v_min + rng.uniform(0.0, 1000.0, n), 3)
        nulls = rng.integers(0, 3, n, dtype=np.int64) * (rng.random(n) < 0.2)
        name_min = rng.integers(0, 500_000, n, dtype=np.int64)
        name_max = name_min + rng.integers(1, 500_000, n, dtype=np.int64)
        ts_min = 1_700_000_000 + self.index * 60
        ts_max = ts_min + rng.integers(1, 86_400, n, dtype=np.int64)

        def num(a: np.ndarray) -> pa.Array:
            return pc.cast(pa.array(a), pa.string())

        def name(a: np.ndarray) -> pa.Array:
            return pc.binary_join_element_wise("name_", pc.utf8_lpad(num(a), 7, "0"), "")

        def ts(a: np.ndarray) -> pa.Array:
            return pc.strftime(pa.array(a.astype("datetime64[s]")), format="%Y-%m-%dT%H:%M:%S.000Z")

        pieces = [
            '{"numRecords":',
            num(self.records),
            ',"minValues":{"id":',
            num(id_min),
            ',"value":',
            num(v_min),
            ',"name":"',
            name(name_min),
            '","ts":"',
            ts(ts_min),
            '"},"maxValues":{"id":',
            num(id_max),
            ',"value":',
            num(v_max),
            ',"name":"',
            name(name_max),
            '","ts":"',
            ts(ts_max),
            '"},"nullCount":{"id":0,"value":',
            num(nulls),
            ',"name":0,"ts":0}}',
        ]
        return pc.binary_join_element_wise(*pieces, "")

    def add_array(self) -> pa.StructArray:
        n = len(self)
        part_values = pa.MapArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)),
            pa.repeat(pa.scalar("part", pa.string()), n),
            self.part_values(),
        )
        children = {
            "path": self.paths(),
            "partitionValues": part_values,
            "size": pa.array(self.size),
            "modificationTime": pa.array(self.mtime),
            "dataChange": pa.repeat(pa.scalar(True), n),
            "stats": self.stats(),
        }
        arrays = [children[name] if name in children else pa.nulls(n, typ) for name, typ in ADD_FIELDS]
        return pa.StructArray.from_arrays(arrays, fields=list(ADD_TYPE))

    def add_actions(self) -> list[dict]:
        """The same files as JSON-ready ``add`` actions (for the small commits)."""
        paths = self.paths().to_pylist()
        stats = self.stats().to_pylist()
        parts = self.part_values().to_pylist()
        return [
            {
                "add": {
                    "path": paths[i],
                    "partitionValues": {"part": parts[i]},
                    "size": int(self.size[i]),
                    "modificationTime": int(self.mtime[i]),
                    "dataChange": True,
                    "stats": stats[i],
                }
            }
            for i in range(len(self))
        ]


# --- writing --------------------------------------------------------------------------------


def _commit_info(operation: str, timestamp: int, **params) -> dict:
    return {
        "commitInfo": {
            "timestamp": timestamp,
            "operation": operation,
            "operationParameters": {k: json.dumps(v) if not isinstance(v, str) else v for k, v in params.items()},
            "engineInfo": "gen_big_table",
        }
    }


def _write_json(path: Path, actions: list[dict]) -> None:
    path.write_text("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))


def generate(out: Path, files: int, commits: int, seed: int = 0, force: bool = False) -> dict:
    """Write the log; returns a summary with timings."""
    if commits < 0:
        raise ValueError("commits must be >= 0")
    if files < REMOVES_PER_COMMIT * commits:
        raise ValueError(f"--files must be at least {REMOVES_PER_COMMIT * commits} for {commits} commits")
    log = out / "_delta_log"
    if log.exists():
        if not force:
            raise SystemExit(f"{log} exists (use --force to replace it)")
        shutil.rmtree(log)
    log.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()

    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata = {
        "id": str(uuid.UUID(bytes=rng.bytes(16), version=4)),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": ["part"],
        "configuration": {},
        "createdTime": BASE_TIME_MS,
    }
    _write_json(
        log / f"{0:020d}.json",
        [
            _commit_info("CREATE TABLE", BASE_TIME_MS, partitionBy=["part"]),
            {"protocol": protocol},
            {"metaData": metadata},
        ],
    )
    _write_json(log / f"{1:020d}.json", [_commit_info("WRITE", BASE_TIME_MS + 1000, mode="Append")])

    # Checkpoint at version 1: protocol, metaData, then the N adds, built column by column.
    base = Files(rng, 0, files)
    head = pa.Table.from_pylist(
        [
            {"protocol": {**protocol, "readerFeatures": None, "writerFeatures": None}},
            {"metaData": {**metadata, "name": None, "description": None}},
        ],
        schema=CHECKPOINT_SCHEMA,
    )
    adds = base.add_array()
    body = pa.Table.from_arrays(
        [
            pa.nulls(files, TXN_TYPE),
            adds,
            pa.nulls(files, REMOVE_TYPE),
            pa.nulls(files, METADATA_TYPE),
            pa.nulls(files, PROTOCOL_TYPE),
        ],
        schema=CHECKPOINT_SCHEMA,
    )
    t_build = time.perf_counter()
    checkpoint = log / f"{1:020d}.checkpoint.parquet"
    writer = pq.ParquetWriter(checkpoint, CHECKPOINT_SCHEMA, compression="snappy")
    writer.write_table(head)
    writer.write_table(body, row_group_size=256 * 1024)
    writer.close()
    t_write = time.perf_counter()
    (log / "_last_checkpoint").write_text(
        json.dumps(
            {"version": 1, "size": files + 2, "sizeInBytes": checkpoint.stat().st_size, "numOfAddFiles": files},
            separators=(",", ":"),
        )
    )

    # Later commits: 100 adds and 50 removes each.
    from_checkpoint = rng.choice(files, size=commits * REMOVES_PER_COMMIT, replace=False)
    base_paths = adds.field("path")
    base_parts = base.part_values()
    taken = 0
    previous: list[dict] = []
    next_index = files
    for k in range(commits):
        version = 2 + k
        ts = BASE_TIME_MS + 1000 * version
        new = Files(rng, next_index, ADDS_PER_COMMIT)
        next_index += ADDS_PER_COMMIT
        removes = []
        reuse = previous[:REMOVES_FROM_PREVIOUS_COMMIT]
        for a in reuse:
            removes.append(_remove(a["add"]["path"], a["add"]["partitionValues"], a["add"]["size"], ts))
        for idx in from_checkpoint[taken : taken + REMOVES_PER_COMMIT - len(reuse)]:
            idx = int(idx)
            removes.append(_remove(base_paths[idx].as_py(), {"part": base_parts[idx].as_py()}, int(base.size[idx]), ts))
        taken += REMOVES_PER_COMMIT - len(reuse)
        new_adds = new.add_actions()
        _write_json(
            log / f"{version:020d}.json",
            [_commit_info("WRITE", ts, mode="Append")] + [{"remove": r} for r in removes] + new_adds,
        )
        previous = new_adds
    t_end = time.perf_counter()
    return {
        "out": str(out),
        "files_in_checkpoint": files,
        "latest_version": 1 + commits,
        "expected_live_files": files + commits * (ADDS_PER_COMMIT - REMOVES_PER_COMMIT),
        "checkpoint_bytes": checkpoint.stat().st_size,
        "seconds_build": round(t_build - t0, 2),
        "seconds_write_checkpoint": round(t_write - t_build, 2),
        "seconds_total": round(t_end - t0, 2),
    }


def _remove(path: str, part_values: dict, size: int, ts: int) -> dict:
    return {
        "path": path,
        "deletionTimestamp": ts,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": part_values,
        "size": size,
    }


def check(out: Path, files: int, commits: int) -> dict:
    """Open the table with deltalake; compare version and live file count."""
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    dt = DeltaTable(str(out))
    version = dt.version()
    live = len(dt.get_add_actions(flatten=False))
    expected_version = 1 + commits
    expected_files = files + commits * (ADDS_PER_COMMIT - REMOVES_PER_COMMIT)
    result = {
        "deltalake_version": version,
        "deltalake_files": live,
        "seconds_deltalake": round(time.perf_counter() - t0, 2),
        "ok": version == expected_version and live == expected_files,
    }
    if not result["ok"]:
        result["expected"] = {"version": expected_version, "files": expected_files}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="table directory (only _delta_log is written)")
    parser.add_argument("--files", type=int, default=1_000_000, help="add actions in the checkpoint")
    parser.add_argument("--commits", type=int, default=10, help="small commits after the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="replace an existing _delta_log")
    parser.add_argument("--check", action="store_true", help="verify the result with deltalake")
    args = parser.parse_args(argv)
    summary = generate(args.out, args.files, args.commits, seed=args.seed, force=args.force)
    print(json.dumps(summary))
    if args.check:
        result = check(args.out, args.files, args.commits)
        print(json.dumps(result))
        if not result["ok"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
