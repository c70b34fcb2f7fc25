"""Schemathesis over the sharing server's own /openapi.json: 10,000+ generated requests by default.

    python benchmarks/fuzz_server.py [--requests 10000] [--examples 150] [--seed 1]

The server is a real one on loopback (uvicorn in a thread, `create_app` over five corpus tables
and a bearer-token recipient; see tests/server/fuzz_support.py for the generated requests and the
properties every answer must satisfy: no 5xx, the protocol's JSON error on every 4xx, nothing
leaked). Rounds of ``--examples`` requests per operation and generation mode, each round with the
next seed, run until ``--requests`` were sent. Everything the server logged (its own loggers, the
access log included) is scanned for the tokens and the file-URL secret as well.

Prints the requests sent per route with the statuses seen, the failures found (grouped, then the
first few with a command to reproduce each) and requests per second; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "server"), str(HERE.parent / "tests")]

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
    args = ap.parse_args()

    logs = LogCapture()
    server_log = logging.getLogger("deltaport")
    server_log.setLevel(logging.DEBUG)
    server_log.addHandler(logs)
    server = RunningServer(fuzz_app())
    tally = Tally()
    try:
        fuzzer = Fuzzer(load_schema(server.url), server.url, FileUrls.collect(server.url), tally)
        seed = args.seed
        while tally.total < args.requests:
            before = tally.total
            fuzzer.run(args.examples, seed)
            print(f"round {seed - args.seed + 1} (seed {seed}): {tally.total - before} requests", flush=True)
            seed += 1
    finally:
        server.stop()
        server_log.removeHandler(logs)

    secrets = SecretRegistry()
    secrets.add(TOKEN, OTHER_TOKEN, label="a recipient's bearer token")
    secrets.add(FILE_SECRET.decode(), label="the file-URL secret")
    secrets.add(TOKEN_SECRET, label="the page-token secret")
    leaks = find_leaks(logs.lines.items(), secrets)
    print()
    print(tally.report())
    for finding in tally.failures[:10]:
        print(finding)
    print(f"server log lines scanned for secrets: {sum(logs.lines.values())}, leaks: {len(leaks)}")
    for leak in leaks:
        print(f"  {leak}")
    return 1 if tally.failures or leaks else 0


if __name__ == "__main__":
    raise SystemExit(main())
