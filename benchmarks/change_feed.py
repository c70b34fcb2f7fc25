"""Change feed: a whole feed read at once against the same feed paged one file at a time.

    python benchmarks/change_feed.py [--commits 1000] [--big 10000] [--workdir .bench]

Each case runs a fresh server process on 127.0.0.1 (the sharing app under uvicorn, one worker, as
`deltaport serve` runs it) whose table store counts every read of a commit file; the process
writes the counts when it stops. The table has one file added per commit, change data feed on,
its commits written as JSON (no checkpoint).
  unpaged   GET /changes?startingVersion=0 of the N-commit table, read whole by an HTTP client.
  paged     the same feed with maxFiles=1 (N requests, each resuming from its page token).
  big       the unpaged read of a 10,000-commit table: the server's peak RSS against the unpaged
            N-commit run's (the feed is streamed, not built whole).
Targets: paged reads each commit file at most twice and takes at most 3x the unpaged time.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
from serve_process import free_port, status_mb

HERE = Path(__file__).resolve().parent
T = "/delta-sharing/shares/s/schemas/d/tables/t"
SCHEMA = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'

CHILD = r"""
import json, sys
import uvicorn
from deltaport.server import create_app, parse_config
from deltaport.storage.local import LocalStore

table, port, counts = sys.argv[1], int(sys.argv[2]), sys.argv[3]
reads = {}

class Counting(LocalStore):
    def read(self, path):
        if path.startswith("_delta_log/") and path.endswith(".json"):
            reads[path] = reads.get(path, 0) + 1
        return super().read(path)

cfg = {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [
    {"name": "t", "location": table, "historyShared": True}]}]}]}
app = create_app(parse_config(cfg), store=lambda location, options=None: Counting(location))
server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
try:
    server.run()
except KeyboardInterrupt:
    pass
finally:
    with open(counts, "w") as fh:
        json.dump(reads, fh)
"""


def write_table(root: Path, commits: int) -> Path:
    """A table of ``commits`` JSON commits, change data feed on, each adding one file (kept once made)."""
    log = root / "_delta_log"
    if (log / f"{commits - 1:020d}.json").exists():
        return root
    log.mkdir(parents=True, exist_ok=True)
    for v in range(commits):
        actions: list[dict] = [{"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}]
        if v == 0:
            meta = {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": SCHEMA}
            meta |= {"partitionColumns": [], "configuration": {"delta.enableChangeDataFeed": "true"}}
            actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}}, {"metaData": meta}]
        add = {"path": f"part-{v:05d}.parquet", "partitionValues": {}, "size": 1000 + v, "modificationTime": 1}
        actions.append({"add": add | {"dataChange": True, "stats": '{"numRecords":1}'}})
        (log / f"{v:020d}.json").write_bytes(b"\n".join(orjson.dumps(a) for a in actions) + b"\n")
    return root


class Server:
    """The counting server in its own process; :meth:`stop` returns its commit-file reads."""

    def __init__(self, table: Path, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.counts = workdir / f"reads-{self.port}.json"
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(table), str(self.port), str(self.counts)])
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                httpx.get(f"{self.url}/health", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.proc.kill()
        raise SystemExit("the server did not start")

    def peak_rss_mb(self) -> float:
        return status_mb(self.proc.pid, "VmHWM:")

    def stop(self) -> dict[str, int]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        reads = json.loads(self.counts.read_text())
        self.counts.unlink()
        return reads


def read_unpaged(c: httpx.Client) -> int:
    r = c.get(T + "/changes", params={"startingVersion": 0})
    r.raise_for_status()
    return sum(1 for line in r.content.splitlines() if line.startswith(b'{"add"'))


def read_paged(c: httpx.Client) -> int:
    files, token = 0, None
    while True:
        params = {"startingVersion": 0, "maxFiles": 1, **({"pageToken": token} if token else {})}
        r = c.get(T + "/changes", params=params)
        r.raise_for_status()
        lines = r.content.splitlines()
        files += sum(1 for line in lines if line.startswith(b'{"add"'))
        token = orjson.loads(lines[-1])["endStreamAction"].get("nextPageToken")
        if not token:
            return files


def run(table: Path, workdir: Path, read) -> dict:
    server = Server(table, workdir)
    try:
        with httpx.Client(base_url=server.url, timeout=600) as c:
            t0 = time.perf_counter()
            files = read(c)
            seconds = time.perf_counter() - t0
        rss = server.peak_rss_mb()
    finally:
        reads = server.stop()
    return {"files": files, "seconds": seconds, "rss_mb": rss, "max_reads": max(reads.values()), "reads": reads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--big", type=int, default=10000)
    ap.add_argument("--workdir", type=Path, default=Path(".bench"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    table = write_table(args.workdir / f"feed-{args.commits}", args.commits)
    unpaged = run(table, args.workdir, read_unpaged)
    paged = run(table, args.workdir, read_paged)
    for name, case in (("unpaged", unpaged), ("paged maxFiles=1", paged)):
        per_commit = sum(case["reads"].values()) / args.commits
        print(
            f"{name:17} {args.commits} commits: {case['files']} files in {case['seconds']:.2f} s, "
            f"commit-file reads {per_commit:.2f} per commit (most {case['max_reads']}), "
            f"peak RSS {case['rss_mb']:.0f} MB"
        )
    print(f"paged / unpaged time: {paged['seconds'] / unpaged['seconds']:.2f}x (target <= 3x)")
    print(f"paged reads of any one commit file: {paged['max_reads']} (target <= 2)")
    big = run(write_table(args.workdir / f"feed-{args.big}", args.big), args.workdir, read_unpaged)
    print(
        f"unpaged {args.big} commits: {big['files']} files in {big['seconds']:.2f} s, peak RSS "
        f"{big['rss_mb']:.0f} MB against {unpaged['rss_mb']:.0f} MB for {args.commits} commits"
    )


if __name__ == "__main__":
    main()
