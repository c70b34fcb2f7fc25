"""A writer commits while 50 clients query, page, stream and fetch: every answer checked.

    python benchmarks/concurrent_writer.py [--seconds 300] [--clients 50] [--workdir DIR]

Runs the scenario of tests/server/test_concurrent_writer.py (``run_scenario``: one `deltaport
serve` process, a table made fresh under a temporary folder, a deltalake writer that appends,
deletes by rewriting files and with deletion vectors, checkpoints every 10 versions and runs
OPTIMIZE three times) for longer and with more clients, then prints what was written, the
requests per kind with their latencies (HTTP time only, not the checking), the URL fetches,
the server's peak RSS and every error. Exit status 1 if there was any error.

Every answer is checked as in the test: a /query lists exactly the files (and deletion vectors)
deltalake sees at the version its header names; the pages of a paged query all belong to the
first page's version; streaming queries and /changes list exactly the actions of the commits of
their range; no file URL 404s within its lifetime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--workdir", default=None, help="where the table is made (default: a temporary folder)")
    args = ap.parse_args()
    sys.path[:0] = [str(TESTS), str(TESTS / "server")]
    from test_concurrent_writer import Scenario, run_scenario

    scenario = Scenario(seconds=args.seconds, clients=args.clients, optimize_at=(0.3, 0.6, 0.9))
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        started = time.monotonic()
        report = run_scenario(Path(work), scenario)
        took = time.monotonic() - started
    print(f"\nconcurrent writer: {args.clients} clients, {args.seconds:.0f} s of writes, {took:.0f} s in all")
    print(report.summary())
    requests = sum(len(v) for v in report.latencies.values())
    print(
        f"requests checked: {requests} ({requests / args.seconds:.1f}/s); server peak RSS "
        f"{report.server_peak_rss_mb:.0f} MB (keying worker included)"
    )
    for error in report.errors[:20]:
        print(f"  error: {error}")
    raise SystemExit(1 if report.errors else 0)


if __name__ == "__main__":
    main()
