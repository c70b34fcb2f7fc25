"""Generate the log of a big Delta table (log only, no data files) for log-replay benchmarks.

    python benchmarks/gen_big_table.py OUT_DIR [--files N] [--commits 10] [--seed 0] [--parts 1] [--force] [--check]

Writes into ``OUT_DIR/_delta_log``:

* ``00000000000000000000.json``: commitInfo, protocol 1/2 and metaData (5 columns: ``part``
  string, the partition column with ~1000 distinct values, then ``id`` long, ``value`` double,
  ``name`` string, ``ts`` timestamp);
* ``00000000000000000001.json``: a commitInfo only, so that version 1 exists;
* ``00000000000000000001.checkpoint.parquet``: a classic single-part checkpoint of version 1
  in the standard schema (txn, add, remove, metaData, protocol structs): protocol, metaData and
  N add actions with per-file JSON stats (numRecords, minValues/maxValues/nullCount of the 4
  data columns), written columnar with pyarrow in row groups of 256Ki rows, a million files at
  a time (memory stays bounded: 10,000,000 files fit in well under 1 GB); with ``--parts K``
  (K >= 2) a multi-part checkpoint instead, ``00000000000000000001.checkpoint.000000000k.000000000K.parquet``
  for k = 1..K, the adds split evenly (protocol and metaData in the first part);
* ``_last_checkpoint``: ``{"version": 1, "size": N + 2, "sizeInBytes": ..., "numOfAddFiles": N}``
  (with ``"parts": K`` after ``size`` for a multi-part checkpoint);
* ``commits`` later JSON commits (versions 2 ..), each adding 100 files and removing 50 live
  ones (from the checkpoint and, after the first, from the previous commit).

The live table then has ``N + 100 * commits - 50 * commits`` files. ``--check`` opens the
result with deltalake and compares its version and file count.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

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
# Checkpoint files are drawn BATCH at a time (up to BATCH, a table is the same as when they were all
# drawn at once) and written in row groups of ROW_GROUP rows, so memory stays bounded at any size.
BATCH = 1_000_000
ROW_GROUP = 256 * 1024

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
    """Columnar description of a batch of data files (all numpy/pyarrow, no per-file objects).

    Every random number is drawn here, in the order the columns are then used (sizes, records,
    ids, then the stats), so that slices of a batch describe the same files as the whole batch."""

    def __init__(self, rng: np.random.Generator, start: int, count: int) -> None:
        self.index = np.arange(start, start + count, dtype=np.int64)
        self.part = (self.index % PARTITIONS).astype(np.int64)
        self.size = rng.integers(50_000, 5_000_000, count, dtype=np.int64)
        self.mtime = BASE_TIME_MS + self.index * 7
        self.records = rng.integers(1_000, 100_000, count, dtype=np.int64)
        self.uuids = rng.integers(0, 256, (count, 16), dtype=np.uint8)
        self.v_min = np.round(rng.uniform(-1000.0, 0.0, count), 3)
        self.v_max = np.round(self.v_min + rng.uniform(0.0, 1000.0, count), 3)
        self.nulls = rng.integers(0, 3, count, dtype=np.int64) * (rng.random(count) < 0.2)
        self.name_min = rng.integers(0, 500_000, count, dtype=np.int64)
        self.name_max = self.name_min + rng.integers(1, 500_000, count, dtype=np.int64)
        self.ts_min = 1_700_000_000 + self.index * 60
        self.ts_max = self.ts_min + rng.integers(1, 86_400, count, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def slice(self, lo: int, hi: int) -> Files:
        """Files ``lo`` to ``hi`` (positions in this batch) as a batch of their own (numpy views)."""
        out = object.__new__(Files)
        out.__dict__.update({k: v[lo:hi] for k, v in self.__dict__.items()})
        return out

    def path(self, i: int) -> str:
        """The path of the file at position ``i`` of this batch."""
        return _path(int(self.part[i]), self.uuids[i].tobytes().hex())

    def part_values(self) -> pa.Array:
        digits = pc.utf8_lpad(pc.cast(pa.array(self.part), pa.string()), 4, "0")
        return pc.binary_join_element_wise("p", digits, "")

    def paths(self) -> pa.Array:
        hexes = self.uuids.tobytes().hex()
        parts = self.part.tolist()
        return pa.array([_path(parts[i], hexes[32 * i : 32 * i + 32]) for i in range(len(self))], pa.string())

    def stats(self) -> pa.Array:
        id_min = self.index * 100_000
        id_max = id_min + self.records - 1

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
            num(self.v_min),
            ',"name":"',
            name(self.name_min),
            '","ts":"',
            ts(self.ts_min),
            '"},"maxValues":{"id":',
            num(id_max),
            ',"value":',
            num(self.v_max),
            ',"name":"',
            name(self.name_max),
            '","ts":"',
            ts(self.ts_max),
            '"},"nullCount":{"id":0,"value":',
            num(self.nulls),
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


def _path(part: int, h: str) -> str:
    return f"part=p{part:04d}/part-00000-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}-c000.snappy.parquet"


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


def generate(out: Path, files: int, commits: int, seed: int = 0, force: bool = False, parts: int = 1) -> dict:
    """Write the log; returns a summary with timings."""
    if commits < 0:
        raise ValueError("commits must be >= 0")
    if not 1 <= parts <= max(files, 1):
        raise ValueError("--parts must be between 1 and --files")
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
    head = pa.Table.from_pylist(
        [
            {"protocol": {**protocol, "readerFeatures": None, "writerFeatures": None}},
            {"metaData": {**metadata, "name": None, "description": None}},
        ],
        schema=CHECKPOINT_SCHEMA,
    )
    checkpoint = _write_checkpoint(log, rng, head, files, parts)
    t_write = time.perf_counter()
    last = {"version": 1, "size": files + 2, **({"parts": parts} if parts > 1 else {})}
    size_in_bytes = sum(p.stat().st_size for p in checkpoint.paths)
    last.update({"sizeInBytes": size_in_bytes, "numOfAddFiles": files})
    (log / "_last_checkpoint").write_text(json.dumps(last, separators=(",", ":")))

    # Later commits: 100 adds and 50 removes each.
    from_checkpoint = rng.choice(files, size=commits * REMOVES_PER_COMMIT, replace=False)
    base = checkpoint.files_at(from_checkpoint)
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
            path, part, size = base[int(idx)]
            removes.append(_remove(path, {"part": f"p{part:04d}"}, size, ts))
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
        "checkpoint_parts": parts,
        "checkpoint_bytes": size_in_bytes,
        "seconds_checkpoint": round(t_write - t0, 2),
        "seconds_total": round(t_end - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


class Checkpoint:
    """The checkpoint's part files, and how to find its files again after they were written."""

    def __init__(self, paths: list[Path], states: list[Any], total: int) -> None:
        self.paths = paths
        self.states = states  # the generator's state before each batch of BATCH files
        self.total = total

    def files_at(self, indices: np.ndarray) -> dict[int, tuple[str, int, int]]:
        """Path, partition number and size of the checkpoint files at ``indices``, drawn again
        batch by batch from the saved generator states (nothing per file is kept in memory)."""
        out: dict[int, tuple[str, int, int]] = {}
        for b in sorted({int(i) // BATCH for i in indices}):
            bits = np.random.PCG64()
            bits.state = self.states[b]
            count = min(BATCH, self.total - b * BATCH)
            batch = Files(np.random.Generator(bits), b * BATCH, count)
            for i in (int(i) for i in indices if int(i) // BATCH == b):
                at = i - b * BATCH
                out[i] = (batch.path(at), int(batch.part[at]), int(batch.size[at]))
        return out


def _write_checkpoint(log: Path, rng: np.random.Generator, head: pa.Table, files: int, parts: int) -> Checkpoint:
    """Write the checkpoint of version 1 (``head``, then ``files`` adds) in ``parts`` files, in
    row groups of at most ROW_GROUP rows; the random numbers are drawn BATCH files at a time, so
    a table of up to BATCH files is the same whatever the row groups."""
    if parts == 1:
        names = [f"{1:020d}.checkpoint.parquet"]
    else:
        names = [f"{1:020d}.checkpoint.{k:010d}.{parts:010d}.parquet" for k in range(1, parts + 1)]
    bounds = [files * k // parts for k in range(parts + 1)]
    states: list[Any] = []
    batch: Files | None = None
    for k, name in enumerate(names):
        with pq.ParquetWriter(log / name, CHECKPOINT_SCHEMA, compression="snappy") as writer:
            if k == 0:
                writer.write_table(head)
            lo = bounds[k]
            while lo < bounds[k + 1]:
                b = lo // BATCH
                if batch is None or len(states) <= b:
                    batch = None  # let the previous batch go before drawing the next one
                    states.append(rng.bit_generator.state)
                    batch = Files(rng, b * BATCH, min(BATCH, files - b * BATCH))
                hi = min(lo + ROW_GROUP, bounds[k + 1], (b + 1) * BATCH)
                writer.write_table(_adds_table(batch.slice(lo - b * BATCH, hi - b * BATCH)))
                lo = hi
    return Checkpoint([log / n for n in names], states, files)


def _adds_table(files: Files) -> pa.Table:
    n = len(files)
    return pa.Table.from_arrays(
        [
            pa.nulls(n, TXN_TYPE),
            files.add_array(),
            pa.nulls(n, REMOVE_TYPE),
            pa.nulls(n, METADATA_TYPE),
            pa.nulls(n, PROTOCOL_TYPE),
        ],
        schema=CHECKPOINT_SCHEMA,
    )


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
    parser.add_argument("--parts", type=int, default=1, help="checkpoint files (2+: multi-part)")
    parser.add_argument("--force", action="store_true", help="replace an existing _delta_log")
    parser.add_argument("--check", action="store_true", help="verify the result with deltalake")
    args = parser.parse_args(argv)
    summary = generate(args.out, args.files, args.commits, seed=args.seed, force=args.force, parts=args.parts)
    print(json.dumps(summary))
    if args.check:
        result = check(args.out, args.files, args.commits)
        print(json.dumps(result))
        if not result["ok"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
