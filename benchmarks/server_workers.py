"""`deltaport serve --workers N`: requests/s with 1 and with 2 (or more) workers, side by side.

    python benchmarks/server_workers.py [--workers 1 2] [--seconds 10] [--rounds 2] [--workdir .bench]
                                        [--routes /version ...] [--peer bare]

One share behind a bearer token: a small cached table for GET /version and /metadata, and a
generated 10,000-file table (log only, made once by gen_big_table.py in the workdir) for a full
POST /query. Each server count is started in turn (each round starts every count afresh, so a
drift of the machine falls on all); after /health, each worker is given time to start and the
routes are warmed. wrk -t1 -c16 loads one route for ``--seconds``; the token reaches wrk in a Lua
script only this user can read. Nothing is pinned: the workers and wrk share the machine's CPUs,
as they would on a server that also terminates its own load. The keying processes take their
default (none where the compiled loops are built; else one per worker while the machine has two
CPUs per worker).

Printed: requests/s of each route for each worker count (mean over rounds, each round's in
brackets) and the ratio to the first count; and the server's CPU time per request (all its
processes: supervisor, workers, keying processes; the least over rounds), which says what the
workers would answer with CPUs to spare: on a machine busy with other work, requests/s varies
from run to run far more than CPU time per request.

``--routes`` loads only the routes named (the 10,000-file table is made only for /query).
``--peer bare`` loads, in each round right after the servers, a bare uvicorn app answering a
constant JSON body (bare_app.py) the same way, and prints its figures beside the server's: the
ceiling of one uvicorn process on this machine at this moment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from serve_process import ServeProcess, children, free_port

import gen_big_table  # beside this script

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
TOKEN = "server-workers-bench-token-0123456789abcdef"
TABLE = "/delta-sharing/shares/s/schemas/d/tables"
ROUTES = {"/version": ("GET", "small"), "/metadata": ("GET", "small"), "/query 10k files": ("POST", "big")}


def big_table(workdir: Path) -> Path:
    path = workdir / "workers-10k"
    if not (path / "_delta_log" / "_last_checkpoint").exists():
        gen_big_table.generate(path, files=10_000, commits=0, force=True)
    return path


def start(workers: int, tables: dict[str, Path], workdir: Path, routes: dict[str, tuple[str, str]]) -> ServeProcess:
    listed = [{"name": name, "location": str(path)} for name, path in tables.items()]
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": listed}]}],
        "authorization": {"bearerToken": TOKEN},
    }
    server = ServeProcess(config, workdir, "--workers", str(workers))
    time.sleep(2 + workers)  # every worker serving, not only the first to answer /health
    for route, (method, table) in routes.items():
        url = f"{server.base}{TABLE}/{table}{route.split()[0]}"
        for _ in range(4 * workers):  # each worker's snapshot cache warmed
            answer = httpx.request(method, url, headers={"Authorization": f"Bearer {TOKEN}"}, json={}, timeout=60)
            answer.raise_for_status()
    return server


def script(workdir: Path, method: str) -> Path:
    path = workdir / f"workers-{method.lower()}.lua"
    path.touch(mode=0o600)
    lines = [f'wrk.method = "{method}"', f'wrk.headers["Authorization"] = "Bearer {TOKEN}"']
    if method == "POST":
        lines += ['wrk.headers["Content-Type"] = "application/json"', 'wrk.body = "{}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def bare_rate(workdir: Path, seconds: int) -> tuple[float, float]:
    """Requests/s and CPU us/request of bare_app.py under the same wrk load."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "bare_app.py"), str(port)])
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 30
        while True:
            try:
                for _ in range(50):
                    httpx.get(url, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise SystemExit("bare_app.py did not start") from None
                time.sleep(0.1)
        before = cpu_seconds(proc.pid)
        figure, count = rate(url, script(workdir, "GET"), seconds)
        return figure, (cpu_seconds(proc.pid) - before) / count * 1e6
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and of its children's and their children's (Linux /proc)."""
    total = 0.0
    for process in (pid, *(grand for child in children(pid) for grand in (child, *children(child)))):
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rate(url: str, lua: Path, seconds: int) -> tuple[float, int]:
    """Requests/s and requests answered."""
    out = subprocess.run(
        ["wrk", "-t1", "-c16", f"-d{seconds}s", "--timeout", "30s", "-s", str(lua), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figure = next((float(line.split()[1]) for line in out.splitlines() if line.startswith("Requests/sec:")), None)
    count = next((int(line.split()[0]) for line in out.splitlines() if " requests in " in line), None)
    if figure is None or count is None or "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk did not get only 200s from {url}:\n{out}")
    return figure, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    ap.add_argument("--routes", nargs="+", choices=list(ROUTES), default=list(ROUTES))
    ap.add_argument("--peer", choices=["bare"], help="also load bare_app.py in each round, beside the server")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    routes = {route: ROUTES[route] for route in args.routes}
    tables = {"small": SHARED / "delta-tables" / "basic_partitioned"}
    if any(table == "big" for _, table in routes.values()):
        tables["big"] = big_table(workdir)
    rates: dict[tuple[int, str], list[float]] = {(n, r): [] for n in args.workers for r in routes}
    cpus: dict[tuple[int, str], list[float]] = {(n, r): [] for n in args.workers for r in routes}
    peer: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        for n in args.workers:
            server = start(n, tables, workdir, routes)
            try:
                for route, (method, table) in routes.items():
                    url = f"{server.base}{TABLE}/{table}{route.split()[0]}"
                    before = cpu_seconds(server.proc.pid)
                    figure, count = rate(url, script(workdir, method), args.seconds)
                    rates[(n, route)].append(figure)
                    cpus[(n, route)].append((cpu_seconds(server.proc.pid) - before) / count * 1e6)
            finally:
                server.stop()
        if args.peer == "bare":
            peer.append(bare_rate(workdir, args.seconds))
    print(f"{os.cpu_count()} CPUs; wrk -t1 -c16, {args.seconds} s a route, {args.rounds} round(s)")
    first = args.workers[0]
    print(f"{'route':<18}" + "".join(f"{f'{n} worker(s) req/s':>34}" for n in args.workers) + "   ratio")
    for route in routes:
        cells = []
        for n in args.workers:
            each = " ".join(f"{r:.0f}" for r in rates[(n, route)])
            cells.append(f"{statistics.mean(rates[(n, route)]):>10.0f} [{each}]".rjust(34))
        ratios = " ".join(
            f"{statistics.mean(rates[(n, route)]) / statistics.mean(rates[(first, route)]):.2f}x"
            for n in args.workers[1:]
        )
        print(f"{route:<18}" + "".join(cells) + f"   {ratios}")
    print(f"{'CPU us/request':<18}" + "".join(f"{f'{n} worker(s)':>34}" for n in args.workers))
    for route in routes:
        print(f"{route:<18}" + "".join(f"{min(cpus[(n, route)]):>34.0f}" for n in args.workers))
    if peer:
        each = " ".join(f"{r:.0f}" for r, _ in peer)
        print(
            f"{'bare uvicorn':<18}{statistics.mean(r for r, _ in peer):>10.0f} [{each}] req/s, "
            f"{min(c for _, c in peer):.0f} CPU us/request"
        )


if __name__ == "__main__":
    main()
