"""Schemathesis over the sharing server's own /openapi.json: 10,000+ generated requests by default.

    python benchmarks/fuzz_server.py [--requests 10000] [--examples 150] [--seed 1] [--admin]

The server is a real one on loopback (uvicorn in a thread, `create_app` over five corpus tables
and a bearer-token recipient; see tests/server/fuzz_support.py for the generated requests and the
properties every answer must satisfy: no 5xx, the protocol's JSON error on every 4xx, nothing
leaked). Rounds of ``--examples`` requests per operation and generation mode, each round with the
next seed, run until ``--requests`` were sent. Everything the server logged (its own loggers, the
access log included) is scanned for the tokens and the file-URL secret as well.

Prints the requests sent per route with the statuses seen, the failures found (grouped, then the
first few with a command to reproduce each) and requests per second; exits 1 on any failure.

With ``--admin`` the admin API is fuzzed instead (Unity Catalog's routes and the public activation
routes) against a server whose SQLite catalog holds copies of corpus tables, shares and recipients;
see tests/server/admin/admin_fuzz_support.py for the catalog, the steering and the properties.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "server" / "admin"), str(HERE.parent / "tests" / "server")]
sys.path.insert(2, str(HERE.parent / "tests"))

from fuzz_support import (  # noqa: E402
    FILE_SECRET,
    OTHER_TOKEN,
    TOKEN,
    TOKEN_SECRET,
    FileUrls,
    Fuzzer,
    Tally,
    fuzz_app,
    load_schema,
)
from secret_scan import LogCapture, SecretRegistry, find_leaks  # noqa: E402
from servers import RunningServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000, help="send at least this many requests")
    ap.add_argument("--examples", type=int, default=150, help="requests per operation and mode in each round")
    ap.add_argument("--seed", type=int, default=1, help="seed of the first round")
    ap.add_argument("--admin", action="store_true", help="fuzz the admin API (and activation) instead")
    args = ap.parse_args()

    logs = LogCapture()
    server_log = logging.getLogger("deltaport")
    server_log.setLevel(logging.DEBUG)
    server_log.addHandler(logs)
    tally = Tally()
    secrets = SecretRegistry()
    try:
        if args.admin:
            _fuzz_admin(args, tally, secrets)
        else:
            _fuzz_protocol(args, tally, secrets)
    finally:
        server_log.removeHandler(logs)
    leaks = find_leaks(logs.lines.items(), secrets)
    print()
    print(tally.report())
    for finding in tally.failures[:10]:
        print(finding)
    print(f"server log lines scanned for secrets: {sum(logs.lines.values())}, leaks: {len(leaks)}")
    for leak in leaks:
        print(f"  {leak}")
    return 1 if tally.failures or leaks else 0


def _rounds(fuzzer, args, tally: Tally) -> None:
    """Rounds of ``--examples`` requests per operation and mode, each with the next seed, until
    ``--requests`` were sent."""
    seed = args.seed
    while tally.total < args.requests:
        before = tally.total
        fuzzer.run(args.examples, seed)
        print(f"round {seed - args.seed + 1} (seed {seed}): {tally.total - before} requests", flush=True)
        seed += 1


def _fuzz_protocol(args, tally: Tally, secrets: SecretRegistry) -> None:
    server = RunningServer(fuzz_app())
    try:
        _rounds(Fuzzer(load_schema(server.url), server.url, FileUrls.collect(server.url), tally), args, tally)
    finally:
        server.stop()
    secrets.add(TOKEN, OTHER_TOKEN, label="a recipient's bearer token")
    secrets.add(FILE_SECRET.decode(), label="the file-URL secret")
    secrets.add(TOKEN_SECRET, label="the page-token secret")


def _fuzz_admin(args, tally: Tally, secrets: SecretRegistry) -> None:
    import admin_fuzz_support as admin

    with tempfile.TemporaryDirectory(prefix="deltaport-admin-fuzz-") as base:
        world = admin.AdminWorld.create(Path(base) / "world")
        server = RunningServer(admin.admin_app(world))
        try:
            world.collect_page_tokens(server.url)
            _rounds(admin.AdminFuzzer(load_schema(server.url), server.url, world, tally), args, tally)
        finally:
            server.stop()
            world.db.close()
    secrets.add(admin.ADMIN_TOKEN, label="the admin token")
    secrets.add(*world.bearers, label="a recipient's bearer token")
    secrets.add(admin.FILE_SECRET.decode(), label="the file-URL secret")
    secrets.add(admin.TOKEN_SECRET, label="the page-token secret")


if __name__ == "__main__":
    raise SystemExit(main())
