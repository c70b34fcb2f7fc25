"""Two versions of the sharing server side by side, measured at the same moment: before and after.

    python benchmarks/server_ab.py --before SRC [--rounds 3] [--seconds 10] [--cold 3] [--audit]
                                   [--workdir .bench]

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

Printed: each figure for before and after, and after/before (for times, above 1.05 is a >5 %
regression; for requests/s, below 0.95).
"""

from __future__ import annotations

import argparse
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
    args = ap.parse_args()
    if not (Path(args.before) / "deltaport").is_dir():
        ap.error(f"--before {args.before}: no deltaport package there (give a checkout's src folder)")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deltaport-ab-", dir=work) as tmp:
        rows = polled(args.before, Path(tmp), args.rounds, args.seconds, args.audit)
        rows.append(warm(args.before, Path(tmp), args.rounds))
        big = cold(args.before, work, args.cold)
        if big is not None:
            rows.append(big)
    audited = " /version and /metadata servers audit every request (auditLog file)." if args.audit else ""
    print(f"\nbefore: {args.before}; after: the installed deltaport. Both measured at the same moment.{audited}")
    print(f"{'figure':22s} {'before':>10s} {'after':>10s} {'after/before':>13s}  how")
    for name, before, after, how in rows:
        shown = ",.0f" if before >= 100 else ".3f"
        print(f"{name:22s} {before:10{shown}} {after:10{shown}} {after / before:13.3f}  {how}")


if __name__ == "__main__":
    main()
