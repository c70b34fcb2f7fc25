"""Two versions of the sharing server side by side, measured at the same moment: before and after.

    python benchmarks/server_ab.py --before SRC [--rounds 3] [--seconds 10] [--cold 3] [--audit]
                                   [--workdir .bench] [--only polled|warm|cold|downloads]

``SRC`` is the ``src`` folder of another checkout (e.g. ``git worktree add ../before <commit>``); the
"before" server runs `deltaport serve` with it first on ``PYTHONPATH``, the "after" server runs
the code installed here. On a machine whose speed drifts from one run to the next (shared or
virtual), measurements taken in turns differ by more than the 5 % a change may cost; here both
servers take the same load at the same time, so a drift falls on both alike.

  /version, /metadata   a cached table, one wrk -t1 -c16 per server, both servers pinned to CPU 0
                        and the wrk processes to CPU 1: requests/s and CPU time per request
                        (with ``--audit``, both servers write an audit event per request to an
                        ``auditLog`` file: the audit log's cost, before and after)
  300k warm             the 300k-file log's /query (full NDJSON), sent to both at once, ``--rounds``
                        x 4 times after two warm-up queries: median seconds
  1M cold               the generated 1,000,000-file table (made by benchmarks/server_query.py),
                        first /query of two fresh servers at once, ``--cold`` times: median seconds
  file downloads        every file of benchmarks/spark_read.py's 1 GB table (when built), fetched
                        whole through the recipient's download layer (4 threads, bytes dropped),
                        from one server and then the other, ``--rounds`` x 2 times: median GB/s
                        and the server's CPU seconds per GB

Printed: each figure for before and after, and after/before (for times, above 1.05 is a >5 %
regression; for requests/s, below 0.95).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import catalog_serving as cs  # beside this script
import server_query as sq

KINDS = ("before", "after")
CASES = ("polled", "warm", "cold", "downloads")  # /version and /metadata, 300k warm, 1M cold, file downloads
TOKEN = "server-ab-bench-token-0123456789abcdef"
POLLED = "/delta-sharing/shares/s/schemas/s/tables/t0"


def _start(
    kind: str, before_src: str, tables: dict[str, str], workdir: Path, recipient: bool, audit: bool = False
) -> cs.ServeProcess:
    """A server of ``kind``: the ``before`` code via PYTHONPATH, or the installed one. With
    ``recipient``, share ``s.s`` behind a bearer token (and with ``audit``, an ``auditLog`` file),
    else server_query's open share."""
    saved = os.environ.get("PYTHONPATH")
    if kind == "before":
        os.environ["PYTHONPATH"] = before_src
    else:
        os.environ.pop("PYTHONPATH", None)
    try:
        folder = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
        if not recipient:
            return sq.Server(tables, folder)
        listed = [{"name": name, "location": path} for name, path in tables.items()]
        share = {"name": "s", "schemas": [{"name": "s", "tables": listed}]}
        config = {"version": 1, "shares": [share], "authorization": {"bearerToken": TOKEN}}
        if audit:
            config["auditLog"] = str(folder / "audit.jsonl")
        return cs.ServeProcess(config, folder)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@contextmanager
def _both(
    before_src: str, tables: dict[str, str], workdir: Path, recipient: bool, audit: bool = False
) -> Iterator[dict]:
    """A server of each kind (see :func:`_start`), by kind; stopped on leaving."""
    servers = {kind: _start(kind, before_src, tables, workdir, recipient, audit) for kind in KINDS}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _at_once(servers: dict, table: str) -> dict[str, float]:
    """Seconds of one /query of ``table`` on every server, all sent at the same moment."""
    took: dict[str, float] = {}

    def query(kind: str) -> None:
        took[kind] = servers[kind].query(table)[0]

    threads = [threading.Thread(target=query, args=(kind,)) for kind in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return took


def polled(
    before_src: str, workdir: Path, rounds: int, seconds: int, audit: bool = False
) -> list[tuple[str, float, float, str]]:
    """/version and /metadata requests/s of both servers loaded together (with ``audit``, each
    writing an audit event per request)."""
    table = str(cs.TABLES / cs.CORPUS[0])
    with _both(before_src, {"t0": table}, workdir, recipient=True, audit=audit) as servers:
        time.sleep(1)
        for server in servers.values():
            cs._pin(server.proc.pid, 0)
            for route in cs.ROUTES:
                answer = httpx.get(f"{server.base}{POLLED}/{route}", headers={"Authorization": f"Bearer {TOKEN}"})
                answer.raise_for_status()
        paths = {kind: (server, POLLED) for kind, server in servers.items()}
        load = cs.Load(TOKEN, workdir, 16)
        rates: dict[tuple[str, str], list[float]] = {(k, r): [] for k in KINDS for r in cs.ROUTES}
        cpus: dict[tuple[str, str], list[float]] = {(k, r): [] for k in KINDS for r in cs.ROUTES}
        for round_ in range(rounds):
            for route in cs.ROUTES:
                cs._together(paths, route, seconds, load, rates, cpus, round_)
    rows = []
    for route in cs.ROUTES:
        before, after = (statistics.mean(rates[(k, route)]) for k in KINDS)
        cpu = " / ".join(f"{min(cpus[(k, route)]):.0f}" for k in KINDS)
        rows.append((f"/{route} req/s", before, after, f"least CPU us/request {cpu}"))
    return rows


def warm(before_src: str, workdir: Path, rounds: int) -> tuple[str, float, float, str]:
    took: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with _both(before_src, {"big": str(sq.BIG_LOG)}, workdir, recipient=False) as servers:
        time.sleep(1)
        for _ in range(2):
            _at_once(servers, "big")
        for _ in range(rounds * 4):
            for kind, seconds in _at_once(servers, "big").items():
                took[kind].append(seconds)
    return ("/query 300k warm, s", *(statistics.median(took[k]) for k in KINDS), "median, both queried at once")


def cold(before_src: str, workdir: Path, times: int) -> tuple[str, float, float, str] | None:
    table = Path(workdir) / "big-1000000"
    if not (table / "_delta_log").is_dir():
        print(f"(no {table}: run benchmarks/server_query.py once to generate it; 1M cold left out)")
        return None
    took: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(times):
        with _both(before_src, {"m": str(table)}, workdir, recipient=False) as servers:
            time.sleep(1.5)  # the keying workers start
            for kind, seconds in _at_once(servers, "m").items():
                took[kind].append(seconds)
    return ("/query 1M cold, s", *(statistics.median(took[k]) for k in KINDS), "median, fresh servers queried at once")


def downloads(before_src: str, workdir: Path, rounds: int) -> list[tuple[str, float, float, str]]:
    table = Path(workdir) / "spark" / "table-1024mb-64"
    if not (table / "_delta_log").is_dir():
        print(f"(no {table}: run benchmarks/spark_read.py once to build it; file downloads left out)")
        return []
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpus: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with _both(before_src, {"t": str(table)}, workdir, recipient=True) as servers:
        urls = {kind: _file_urls(server) for kind, server in servers.items()}
        for round_ in range(rounds * 2 + 1):  # the first round warms the page cache and connections
            for kind, server in servers.items():
                cpu = cs.cpu_seconds(server.proc.pid)
                seconds, size = _fetch_all(urls[kind])
                if round_:
                    rates[kind].append(size / 1e9 / seconds)
                    cpus[kind].append((cs.cpu_seconds(server.proc.pid) - cpu) / (size / 1e9))
    how = "median; each server in turn, whole files, 4 threads"
    return [
        ("file downloads, GB/s", *(statistics.median(rates[k]) for k in KINDS), how),
        ("server CPU s per GB", *(statistics.median(cpus[k]) for k in KINDS), how),
    ]


def _file_urls(server: cs.ServeProcess) -> list[tuple[str, str, int]]:
    """(url, id, size) of every file of share ``s.s``'s table ``t``."""
    answer = httpx.post(
        f"{server.base}/delta-sharing/shares/s/schemas/s/tables/t/query",
        json={},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    answer.raise_for_status()
    lines = [json.loads(line) for line in answer.text.splitlines()]
    return [(x["file"]["url"], x["file"]["id"], x["file"]["size"]) for x in lines if "file" in x]


def _fetch_all(files: list[tuple[str, str, int]]) -> tuple[float, int]:
    """Seconds to GET every file whole (4 threads, one connection pool), and the bytes fetched."""
    from concurrent.futures import ThreadPoolExecutor

    from deltaport.client.download import ConnectionPool, copy_url

    class Dropped:
        def write(self, data) -> int:
            return len(data)

    pool = ConnectionPool()
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as threads:
        got = sum(threads.map(lambda f: copy_url(f[0], Dropped(), pool=pool, file_id=f[1]), files))
    seconds = time.perf_counter() - started
    pool.close()
    if got != sum(size for _, _, size in files):
        raise SystemExit(f"fetched {got} bytes where the files hold {sum(size for _, _, size in files)}")
    return seconds, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the src folder of the checkout to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10, help="per /version or /metadata round")
    ap.add_argument("--cold", type=int, default=3, help="1M cold queries per server")
    ap.add_argument("--workdir", default=str(Path(__file__).resolve().parent.parent / ".bench"))
    ap.add_argument(
        "--audit",
        action="store_true",
        help="the /version and /metadata servers write an audit event per request to an auditLog file",
    )
    ap.add_argument("--only", choices=CASES, help="measure this case alone")
    args = ap.parse_args()
    if not (Path(args.before) / "deltaport").is_dir():
        ap.error(f"--before {args.before}: no deltaport package there (give a checkout's src folder)")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deltaport-ab-", dir=work) as tmp:
        wanted = set(CASES) if args.only is None else {args.only}
        rows = polled(args.before, Path(tmp), args.rounds, args.seconds, args.audit) if "polled" in wanted else []
        if "warm" in wanted:
            rows.append(warm(args.before, Path(tmp), args.rounds))
        big = cold(args.before, work, args.cold) if "cold" in wanted else None
        if big is not None:
            rows.append(big)
        if "downloads" in wanted:
            rows += downloads(args.before, work, args.rounds)
    audited = " /version and /metadata servers audit every request (auditLog file)." if args.audit else ""
    at_once = "Both measured at the same moment (file downloads: in turns)."
    print(f"\nbefore: {args.before}; after: the installed deltaport. {at_once}{audited}")
    print(f"{'figure':22s} {'before':>10s} {'after':>10s} {'after/before':>13s}  how")
    for name, before, after, how in rows:
        shown = ",.0f" if before >= 100 else ".3f"
        print(f"{name:22s} {before:10{shown}} {after:10{shown}} {after / before:13.3f}  {how}")


if __name__ == "__main__":
    main()
