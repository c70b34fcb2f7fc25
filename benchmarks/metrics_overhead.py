"""What observing requests costs: GET /version on a warm table, requests per second, per variant.

    python benchmarks/metrics_overhead.py [--seconds 5] [--rounds 3] [--connections 16] [--asgi]

Variants (each its own server process: one uvicorn worker on 127.0.0.1, httptools and uvloop as
`deltaport serve` runs it, the hot paths on, a recipient's bearer token checked):
  baseline        the app without the request observer (as before metrics, audit and access lists)
  observer        metrics=False, no audit: the request id, the client address, X-Request-Id
  metrics         the default: the observer and Prometheus metrics
  metrics+audit   and every request written to a JSON-lines audit file

The load is ``wrk -t1`` (one thread: on 2 cores one drives the load, one serves it), pinned to the
other core than the server's when ``taskset`` is there; without wrk, a Python client measures
(and says so). Variants take turns, ``--rounds`` times; printed per variant, with its cost against
the baseline: the median and the best round's requests per second, and the least CPU time (user +
system, from /proc) the server process spent per request in a round. On a machine other work
shares, the best round and the least CPU are the steadier figures.

``--asgi`` measures the observing middleware alone, in one process, without sockets: around a
stand-in for the hot path's /version answer, one request at a time, variants taking turns (so
drift in the machine's load falls on all alike); printed: the best round's CPU microseconds per
request (the process's, the audit writer thread's included) and what each variant adds to the
bare answer. On a busy machine this is the steadier figure of the two.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
TABLE = SHARED / "delta-tables" / "basic_partitioned"
TOKEN = "metrics-overhead-bench-token"
VARIANTS = ("baseline", "observer", "metrics", "metrics+audit")
VERSION = "/delta-sharing/shares/s/schemas/d/tables/t/version"


def _app(variant: str, workdir: Path):
    from deltaport.server import AuditLog, JsonLinesAuditSink, create_app, parse_config
    from deltaport.server.ops.observe import RequestObserver

    config = parse_config(
        {
            "version": 1,
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLE)}]}]}],
            "recipients": [{"name": "bench", "tokens": [TOKEN], "shares": ["s"]}],
        }
    )
    audit = None
    if variant == "metrics+audit":
        audit = AuditLog([JsonLinesAuditSink(workdir / f"audit-{os.getpid()}.jsonl").write])
    app = create_app(config, metrics=variant.startswith("metrics"), audit=audit)
    if variant == "baseline":
        app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestObserver]
    return app


def serve(variant: str, port: int, workdir: Path) -> None:
    """The server process of one variant."""
    import uvicorn

    app = _app(variant, workdir)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, proxy_headers=False)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


def _start(variant: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    args = [sys.executable, __file__, "--serve", variant, "--port", str(port), "--workdir", str(workdir)]
    proc = subprocess.Popen([*_pinned(0), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            answer = httpx.get(base + VERSION, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            if answer.status_code == 200:  # the table is warm now
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the {variant} server did not start")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(url: str, seconds: int, connections: int) -> tuple[float, int, str]:
    """Requests per second, requests answered, and how the load was made."""
    auth = f"Authorization: Bearer {TOKEN}"
    if shutil.which("wrk"):
        command = [*_pinned(1), "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-H", auth, url]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        rate = count = None
        for line in out.splitlines():
            if line.startswith("Requests/sec:"):
                rate = float(line.split()[1])
            elif " requests in " in line:
                count = int(line.split()[0])
        if rate is None or count is None or "Non-2xx" in out:
            raise RuntimeError(f"wrk did not get only 200s:\n{out}")
        return rate, count, f"wrk -t1 -c{connections}"
    n, started = 0, time.perf_counter()
    with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        while time.perf_counter() - started < seconds:
            assert client.get(url).status_code == 200
            n += 1
    return n / (time.perf_counter() - started), n, "python client, one connection (wrk not installed)"


def _observed(variant: str, workdir: Path):
    """The observer of ``variant`` around a stand-in for the hot path's /version answer (the same
    headers, the route set as the hot path sets it, the principal noted as the service notes it)."""
    from starlette.responses import Response

    from deltaport.delta import SnapshotCache
    from deltaport.server import JsonLinesAuditSink
    from deltaport.server.ops.access import IpAllowList
    from deltaport.server.ops.audit import AuditLog
    from deltaport.server.ops.metrics import ServerMetrics
    from deltaport.server.ops.observe import RequestObserver
    from deltaport.server.ops.request_info import current_request

    class Route:
        path = "/delta-sharing/shares/{share}/schemas/{schema}/tables/{table}/version"

    route = Route()

    async def version(scope, receive, send):
        scope["route"] = route
        scope["path_params"] = {"share": "s", "schema": "d", "table": "t"}
        seen = current_request()
        if seen is not None:
            seen.principal = "bench"
        await Response(headers={"Delta-Table-Version": "3"})(scope, receive, send)

    if variant == "baseline":
        return version
    metrics = ServerMetrics(SnapshotCache()) if variant.startswith("metrics") else None
    audit = AuditLog([JsonLinesAuditSink(workdir / "audit.jsonl").write]) if variant == "metrics+audit" else None
    return RequestObserver(version, prefix="/delta-sharing", proxies=IpAllowList(), metrics=metrics, audit=audit)


def _asgi_round(app, requests: int) -> float:
    """CPU seconds (the process's, every thread's) per request of ``requests`` GET /version calls of
    ``app``, one at a time."""
    import asyncio

    scope = {
        "type": "http",
        "method": "GET",
        "path": VERSION,
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {TOKEN}".encode()), (b"user-agent", b"wrk")],
        "client": ("127.0.0.1", 50000),
    }

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    async def run() -> float:
        started = time.process_time()
        for _ in range(requests):
            await app(dict(scope), receive, send)
        return (time.process_time() - started) / requests

    return asyncio.run(run())


def measure_asgi(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="deltaport-metrics-bench-") as workdir:
        apps = {variant: _observed(variant, Path(workdir)) for variant in VARIANTS}
        best = {variant: _asgi_round(app, 2000) for variant, app in apps.items()}
        for _ in range(rounds * 5):
            for variant, app in apps.items():
                best[variant] = min(best[variant], _asgi_round(app, 5000))
    print(f"The observing middleware alone, in-process ASGI calls, best of {rounds * 5} rounds of 5,000")
    for variant in VARIANTS:
        added = (best[variant] - best["baseline"]) * 1e6
        print(f"  {variant:<14} {best[variant] * 1e6:6.2f} us CPU/request   {added:+5.2f} us over the bare answer")


def measure(seconds: int, rounds: int, connections: int, variants: tuple[str, ...] = VARIANTS) -> None:
    results: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}  # microseconds per request
    how = ""
    with tempfile.TemporaryDirectory(prefix="deltaport-metrics-bench-") as workdir:
        for _ in range(rounds):
            for variant in variants:
                proc, base = _start(variant, Path(workdir))
                try:
                    _load(base + VERSION, 1, connections)  # warm-up
                    used = _cpu_seconds(proc.pid)
                    rate, count, how = _load(base + VERSION, seconds, connections)
                    cpu[variant].append((_cpu_seconds(proc.pid) - used) / count * 1e6)
                    results[variant].append(rate)
                finally:
                    proc.terminate()
                    proc.wait(10)
    print(f"GET /version on a warm table, {how}, {seconds} s x {rounds} rounds: median, best, CPU per request")
    first = variants[0]  # the baseline, unless left out
    base_median, base_best, base_cpu = statistics.median(results[first]), max(results[first]), min(cpu[first])
    for variant in variants:
        median, best, used = statistics.median(results[variant]), max(results[variant]), min(cpu[variant])
        runs = ", ".join(f"{r:,.0f}" for r in results[variant])
        print(
            f"  {variant:<14} median {median:>7,.0f}/s {(1 - median / base_median) * 100:+5.1f}%   "
            f"best {best:>7,.0f}/s {(1 - best / base_best) * 100:+5.1f}%   "
            f"least CPU {used:6.1f} us/req {(used / base_cpu - 1) * 100:+5.1f}%   (req/s: {runs})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--asgi", action="store_true", help="measure in-process ASGI calls instead")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, the first the baseline")
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.workdir)
    elif args.asgi:
        measure_asgi(args.rounds)
    else:
        variants = tuple(v for v in args.variants.split(",") if v)
        unknown = set(variants) - set(VARIANTS)
        if unknown:
            parser.error(f"unknown variant(s) {sorted(unknown)}: choose from {', '.join(VARIANTS)}")
        measure(args.seconds, args.rounds, args.connections, variants)


if __name__ == "__main__":
    main()
