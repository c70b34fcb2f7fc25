"""Log replay: deltaport's Delta engine next to deltalake (delta-rs), measured in one run.

    python benchmarks/log_replay.py [--files 1000000] [--repeat 3] [--workdir .bench]

Cases (each timed in a fresh child process that first opens a tiny table with the same engine, so
imports and first-call set-up are done before the clock starts; best of N):
  300k   the shared 300k-add-files log (three 15 MB JSON commits): cold snapshot with the live
         files as Arrow, vs deltalake DeltaTable(path) + get_add_actions().
  1M     a generated table of N files with stats, a checkpoint and 10 later commits: cold time
         and peak RSS of the process.
  refresh  one new small commit on a cached 1M snapshot: time to the new snapshot.
Targets (issue 2): 300k <= 0.5x deltalake; 1M cold <= 3 s with RSS <= 1.5 GB; refresh <= 5% of cold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
BIG_LOG = SHARED / "delta-tables" / "300k-add-files-100-col-partitioned"

CHILD = r"""
import json, resource, sys, time, gc
import pyarrow, pyarrow.compute, pyarrow.json, pyarrow.parquet, numpy, orjson
try:
    import pandas  # pyarrow imports it lazily on first conversion: pay it before the clock starts
except ImportError:
    pass
mode, path, warm = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
# both engines first open a tiny table, so the clock measures log replay, not first-call set-up
if mode == "deltaport":
    from deltaport.delta import DeltaTable, SnapshotCache
    DeltaTable(warm, cache=SnapshotCache()).snapshot().files()
    t0 = time.perf_counter()
    snap = DeltaTable(path, cache=SnapshotCache()).snapshot()
    files = snap.files()
    out["seconds"] = time.perf_counter() - t0
    out["files"] = files.num_rows
elif mode == "deltalake":
    import deltalake
    deltalake.DeltaTable(warm).get_add_actions(flatten=True)
    t0 = time.perf_counter()
    dt = deltalake.DeltaTable(path)
    adds = dt.get_add_actions(flatten=True)
    out["seconds"] = time.perf_counter() - t0
    out["files"] = len(adds)
elif mode == "refresh":
    from deltaport.delta import DeltaTable, SnapshotCache
    DeltaTable(warm, cache=SnapshotCache()).snapshot().files()
    table = DeltaTable(path, cache=SnapshotCache())
    t0 = time.perf_counter()
    before = table.snapshot()
    out["cold_seconds"] = time.perf_counter() - t0
    v = before.version + 1
    line = {"add": {"path": f"refresh/new-{v}.parquet", "partitionValues": {"part": "p0"}, "size": 1,
                    "modificationTime": 1, "dataChange": True, "stats": '{"numRecords":1}'}}
    with open(f"{path}/_delta_log/{v:020d}.json", "wb") as fh:
        fh.write(orjson.dumps({"commitInfo": {"timestamp": 1}}) + b"\n" + orjson.dumps(line) + b"\n")
    t0 = time.perf_counter()
    after = table.snapshot()
    out["seconds"] = time.perf_counter() - t0
    out["files"] = after.num_files
    assert after.num_files == before.num_files + 1
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_child(mode: str, path: Path) -> dict:
    warm = SHARED / "delta-tables" / "basic_partitioned"
    res = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(warm)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{mode} on {path} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def best(mode: str, path: Path, repeat: int) -> dict:
    runs = [run_child(mode, path) for _ in range(repeat)]
    top = min(runs, key=lambda r: r["seconds"])
    top["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_big_table import generate

    rows = []
    ours = best("deltaport", BIG_LOG, args.repeat)
    theirs = best("deltalake", BIG_LOG, args.repeat)
    assert ours["files"] == theirs["files"] == 300_000
    rows.append(
        (
            "300k log, cold snapshot + Arrow file list",
            ours,
            theirs,
            "<= 0.5x deltalake",
            ours["seconds"] <= 0.5 * theirs["seconds"],
        )
    )

    big = Path(args.workdir) / f"big-{args.files}"
    if not (big / "_delta_log" / "_last_checkpoint").exists():
        generate(big, files=args.files, commits=10, force=True)
    ours = best("deltaport", big, args.repeat)
    theirs = best("deltalake", big, args.repeat)
    assert ours["files"] == theirs["files"], (ours, theirs)
    rows.append(
        (
            f"{args.files:,}-file table, cold",
            ours,
            theirs,
            "<= 3 s, RSS <= 1.5 GB",
            ours["seconds"] <= 3 and ours["peak_rss_mb"] <= 1536,
        )
    )

    refresh_dir = Path(args.workdir) / f"refresh-{args.files}"
    import shutil

    refreshes = []
    for _ in range(args.repeat):
        shutil.rmtree(refresh_dir, ignore_errors=True)
        shutil.copytree(big, refresh_dir)
        refreshes.append(run_child("refresh", refresh_dir))
    refresh = min(refreshes, key=lambda r: r["seconds"])
    cold = min(r["cold_seconds"] for r in refreshes)
    rows.append(
        (
            "refresh after one small commit (cached)",
            refresh,
            {"seconds": cold, "peak_rss_mb": 0},
            "<= 5% of cold",
            refresh["seconds"] <= 0.05 * cold,
        )
    )
    shutil.rmtree(refresh_dir, ignore_errors=True)

    print(f"\n{'case':45s} {'deltaport':>10s} {'peer':>10s} {'ratio':>7s} {'RSS MB':>8s}  target")
    for name, o, t, target, ok in rows:
        peer = "cold" if name.startswith("refresh") else "deltalake"
        ratio = o["seconds"] / t["seconds"] if t["seconds"] else float("nan")
        print(
            f"{name:45s} {o['seconds']:9.3f}s {t['seconds']:9.3f}s {ratio:7.2f} {o['peak_rss_mb']:8.0f}  "
            f"{target} ({peer}) {'MET' if ok else 'MISSED'}"
        )
    print(f"(deltalake peak RSS: 300k {rows[0][2]['peak_rss_mb']:.0f} MB, big {rows[1][2]['peak_rss_mb']:.0f} MB)")


if __name__ == "__main__":
    main()
