"""Sharing server: /query, /version and /metadata, with the peers measured in the same run.

    python benchmarks/server_query.py [--files 1000000] [--workdir .bench] [--seconds 10]

Each server runs as its own process (`deltaport serve`, one uvicorn worker) on 127.0.0.1; "cold"
queries come one second after it answers /health (time for its keying worker process to start;
no table is read before the query).
  300k cold   first /query of the 300k-file log (full NDJSON read by an HTTP client), vs deltalake
              DeltaTable(path) + get_add_actions() of the same log (target <= 0.5x).
  300k warm   the same request again, snapshot cached (target <= 0.6 s).
  1M cold     first /query of a generated 1,000,000-file table with stats and a checkpoint, full
              response, and the server's peak RSS, its keying worker's included (targets <= 4 s,
              <= 1.5 GB); once more with --keying-processes 0 (all hashing in the server process).
  /version, /metadata   requests per second on a cached table with wrk over loopback (>= 3,000/s);
              without wrk, a Python client measures instead and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from serve_process import ServeProcess

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
BIG_LOG = SHARED / "delta-tables" / "300k-add-files-100-col-partitioned"
PEER = r"""
import json, sys, time
import deltalake
deltalake.DeltaTable(sys.argv[2]).get_add_actions(flatten=True)  # warm the library on a tiny table
t0 = time.perf_counter()
n = len(deltalake.DeltaTable(sys.argv[1]).get_add_actions(flatten=True))
print(json.dumps({"seconds": time.perf_counter() - t0, "files": n}))
"""


class Server(ServeProcess):
    """One share ``b.d`` of the given tables, without auth."""

    def __init__(self, tables: dict[str, str], workdir: Path, *args: str) -> None:
        super().__init__(
            {
                "version": 1,
                "shares": [
                    {
                        "name": "b",
                        "schemas": [{"name": "d", "tables": [{"name": n, "location": p} for n, p in tables.items()]}],
                    }
                ],
            },
            workdir,
            *args,
        )
        self.url = f"{self.base}/delta-sharing/shares/b/schemas/d/tables"

    def query(self, table: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        lines = 0
        with httpx.stream("POST", f"{self.url}/{table}/query", json={}, timeout=600) as r:
            r.raise_for_status()
            for chunk in r.iter_bytes():
                lines += chunk.count(b"\n")
        return time.perf_counter() - t0, lines


def peer_seconds(path: Path) -> float:
    warm = SHARED / "delta-tables" / "basic_partitioned"
    out = subprocess.run([sys.executable, "-c", PEER, str(path), str(warm)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["seconds"]


def rate(url: str, seconds: int) -> tuple[float, str]:
    if shutil.which("wrk"):
        # one wrk thread: on 2 cores, one core drives the load and one serves it
        out = subprocess.run(["wrk", "-t1", "-c16", f"-d{seconds}s", url], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Requests/sec:"):
                return float(line.split()[1]), "wrk -t1 -c16"
    n, t0 = 0, time.perf_counter()
    with httpx.Client() as c:
        while time.perf_counter() - t0 < seconds:
            c.get(url).raise_for_status()
            n += 1
    return n / (time.perf_counter() - t0), "python client (wrk not installed)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    from gen_big_table import generate

    big = work / f"big-{args.files}"
    if not (big / "_delta_log" / "_last_checkpoint").exists():
        generate(big, files=args.files, commits=10, force=True)
    rows = []

    colds, warms = [], []
    for _ in range(args.repeat):
        server = Server({"log300k": str(BIG_LOG)}, work)
        time.sleep(1)  # the keying worker starts in the background, as it does before a first request
        try:
            cold, n = server.query("log300k")
            assert n == 300_002, n
            colds.append(cold)
            warms.append(min(server.query("log300k")[0] for _ in range(3)))
        finally:
            server.stop()
    peer = min(peer_seconds(BIG_LOG) for _ in range(args.repeat))
    rows.append(
        ("/query 300k log, cold", min(colds), f"{peer:.3f}s deltalake", min(colds) <= 0.5 * peer, "<= 0.5x deltalake")
    )
    rows.append(("/query 300k log, warm (cached)", min(warms), "", min(warms) <= 0.6, "<= 0.6 s"))

    def big_cold(label: str, *flags: str) -> Server:
        """Cold 1M queries, each on a fresh server; the last server is kept for the rate tests."""
        times, rss, server = [], 0.0, None
        for _ in range(args.repeat):
            if server is not None:
                server.stop()
            server = Server({"big": str(big)}, work, *flags)
            time.sleep(1)  # the keying worker starts in the background, as it does before a first request
            times.append(server.query("big")[0])
            rss = max(rss, server.peak_rss_mb())
        rows.append(
            (
                f"/query {args.files:,}-file table, cold{label}",
                min(times),
                f"median {statistics.median(times):.3f}s, RSS {rss:.0f} MB",
                min(times) <= 4 and rss <= 1536,
                "<= 4 s, RSS <= 1.5 GB",
            )
        )
        return server

    big_cold(" (no worker)", "--keying-processes", "0").stop()
    server = big_cold("")
    try:
        meta = f"{server.url}/big/metadata"
        version = f"{server.url}/big/version"
        httpx.get(meta).raise_for_status()
        for name, url in (("/version", version), ("/metadata", meta)):
            r, how = rate(url, args.seconds)
            rows.append((f"{name} on a cached table, req/s", r, how, r >= 3000, ">= 3,000/s"))
    finally:
        server.stop()

    print(f"\n{'case':48s} {'deltaport':>10s}  {'peer / detail':32s} target")
    for name, value, detail, ok, target in rows:
        shown = f"{value:,.0f}" if "req/s" in name else f"{value:.3f}s"
        print(f"{name:48s} {shown:>10s}  {detail:32s} {target} {'MET' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
