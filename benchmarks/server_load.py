"""Sharing server under load: /version, /metadata and a 10,000-file /query on 64 connections.

    python benchmarks/server_load.py [--seconds 60] [--connections 64] [--files 10000]
                                     [--generators 1] [--routes version,metadata,query] [--workdir .bench]

One `deltaport serve` process (one uvicorn worker and its keying worker, as the CLI starts it) on
127.0.0.1 serves a generated table of ``--files`` live files (log only, made once under
``--workdir`` and reused). The load comes from ``--generators`` separate processes (asyncio on
uvloop when installed, raw HTTP/1.1 over keep-alive sockets, no HTTP library), each driving its share
of ``--connections``; connection i asks for route i mod len(routes), back to back, for
``--seconds``. Every answer is checked: status 200, a ``Delta-Table-Version`` header, and a
complete body (/metadata: its two lines parse; /query: exactly files + 2 lines, the last one a
file line that parses). Anything else counts as an error.

Printed: requests/s, p50 and p99 latency per route, errors (must be 0), the server's peak RSS
(its keying worker's included), its RSS averaged over the first 20 s (after ``--settle`` seconds of
load, 10 by default: the buffers of the responses in flight reach their steady size) and the last
20 s of the run (growth over 10 % is flagged), the server's CPU use, and which generator ran and how much CPU it
used. The snapshot is warmed before the run: this measures a cached table, not cold loads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from serve_process import ServeProcess, children, status_mb  # beside this script

HERE = Path(__file__).resolve().parent
ROUTES = ("version", "metadata", "query")
WINDOW_SECONDS = 20  # RSS compared over the first and the last WINDOW_SECONDS of the run
GROWTH_FLAG = 0.10
PEER = (
    "no peer measured: the reference Delta Sharing server is a JVM service that cannot be built or run on this "
    "machine (no Maven access), and no other sharing server is installed here"
)


# --- the load generator (runs in its own process) ---------------------------------------------


class Failure(Exception):
    """An answer that is not a complete 200."""


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent: the empty line ends the body
                return b"".join(parts)
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
    return await reader.readexactly(int(headers.get(b"content-length", b"0")))


def _check(route: str, status: int, headers: dict[bytes, bytes], body: bytes, files: int) -> None:
    import orjson

    if status != 200:
        raise Failure(f"{route}: status {status}: {body[:200]!r}")
    if b"delta-table-version" not in headers:
        raise Failure(f"{route}: no Delta-Table-Version header")
    if route == "metadata":
        lines = body.split(b"\n")
        if len(lines) != 3 or lines[2] or "metaData" not in orjson.loads(lines[1]):
            raise Failure(f"metadata: incomplete body of {len(body)} bytes")
        orjson.loads(lines[0])
    elif route == "query":
        count = body.count(b"\n")
        if not body.endswith(b"\n") or count != files + 2:
            raise Failure(f"query: {count} lines, expected {files + 2}")
        last = orjson.loads(body[body.rindex(b"\n", 0, len(body) - 1) + 1 :])
        if "file" not in last or not last["file"].get("url"):
            raise Failure("query: the last line is not a file line")


async def _connection(port: int, path: str, route: str, files: int, until: float, out: dict, errors: list[str]) -> None:
    method = "POST" if route == "query" else "GET"
    body = b"{}" if route == "query" else b""
    request = (
        f"{method} {path}/{route} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(body)}\r\n"
        "Content-Type: application/json\r\n\r\n"
    ).encode() + body
    latencies = out.setdefault(route, [])
    reader = writer = None
    while time.time() < until:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
            assert reader is not None
            started = time.perf_counter()
            writer.write(request)
            status, headers = await _read_head(reader)
            data = await _read_body(reader, headers)
            elapsed = time.perf_counter() - started
            _check(route, status, headers, data, files)
            latencies.append(elapsed)
            if headers.get(b"connection", b"").lower() == b"close":
                writer.close()
                writer = None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, Failure) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            if writer is not None:
                writer.close()
            writer = None
    if writer is not None:
        writer.close()


def run_generator(args: argparse.Namespace) -> None:
    """One generator process: its connections, then a JSON report on stdout."""
    try:
        import uvloop

        uvloop.install()
        how = "asyncio + uvloop, raw HTTP/1.1 keep-alive sockets"
    except ImportError:
        how = "asyncio, raw HTTP/1.1 keep-alive sockets"
    routes = args.routes.split(",")
    out: dict[str, list[float]] = {}
    errors: list[str] = []

    async def main() -> None:
        await asyncio.sleep(max(0.0, args.start_at - time.time()))
        until = args.start_at + args.seconds
        await asyncio.gather(
            *(
                _connection(args.port, args.path, routes[i % len(routes)], args.files, until, out, errors)
                for i in range(args.first, args.first + args.connections)
            )
        )

    wall0, usage0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    asyncio.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime - usage0.ru_utime + usage.ru_stime - usage0.ru_stime
    busy = time.time() - max(wall0, args.start_at)
    report = {"how": how, "latencies": out, "errors": errors[:20], "error_count": len(errors), "cpu": cpu, "wall": busy}
    Path(args.out).write_text(json.dumps(report))  # not stdout: an unbuffered pipe may take a big write in part


# --- the server and its memory ------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class MemorySampler(threading.Thread):
    """The RSS of a process and its children, every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []
        self.stopped = threading.Event()

    def pids(self) -> list[int]:
        return [self.pid, *children(self.pid)]

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples.append((time.time(), sum(status_mb(p, "VmRSS:") for p in self.pids())))
            self.stopped.wait(self.interval)

    def mean(self, start: float, end: float) -> float:
        values = [mb for t, mb in self.samples if start <= t < end]
        return statistics.fmean(values) if values else float("nan")


def _table(work: Path, files: int) -> Path:
    """A table of ``files`` live files: a checkpoint and 10 commits (made once, then reused)."""
    sys.path.insert(0, str(HERE))
    from gen_big_table import generate

    commits = 10 if files >= 1000 else 0
    table = work / f"load-{files}"
    marker = table / "generated.json"
    if not marker.exists():
        summary = generate(table, files=files - 50 * commits, commits=commits, force=True)
        assert summary["expected_live_files"] == files, summary
        marker.write_text(json.dumps(summary))
    return table


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _report(args, results: list[dict], sampler: MemorySampler, start: float, server_cpu: float, peak: float) -> bool:
    seconds = args.seconds
    print(
        f"\nload: {args.connections} connections for {seconds} s, routes {args.routes}, "
        f"table of {args.files:,} files (cached)"
    )
    print(f"{'route':10s} {'requests':>9s} {'req/s':>9s} {'p50 ms':>9s} {'p99 ms':>9s}")
    total = 0
    for route in args.routes.split(","):
        lat = [x for r in results for x in r["latencies"].get(route, [])]
        total += len(lat)
        print(
            f"{route:10s} {len(lat):9d} {len(lat) / seconds:9.1f} {_percentile(lat, 0.5) * 1000:9.2f} "
            f"{_percentile(lat, 0.99) * 1000:9.2f}"
        )
    print(f"{'all':10s} {total:9d} {total / seconds:9.1f}")
    errors = sum(r["error_count"] for r in results)
    print(f"errors: {errors}" + ("" if not errors else f"  e.g. {[e for r in results for e in r['errors']][:3]}"))
    window = min(WINDOW_SECONDS, seconds / 3)
    settle = min(args.settle, seconds / 3)
    last = sampler.mean(start + seconds - window, start + seconds)
    from_start = sampler.mean(start, start + window)
    first = sampler.mean(start + settle, start + settle + window)
    growth = (last - first) / first
    print(
        f"server RSS: peak {peak:.0f} MB (VmHWM, keying worker included); mean over the first {window:.0f} s "
        f"after {settle:.0f} s of load {first:.0f} MB, over the last {window:.0f} s {last:.0f} MB: "
        f"{last - first:+.1f} MB ({growth:+.1%})"
        + ("  GROWTH OVER 10 %" if growth > GROWTH_FLAG else "")
        + f"; over the very first {window:.0f} s: {from_start:.0f} MB"
    )
    curve = [sampler.mean(start + t, start + t + 5) for t in range(0, int(seconds), max(5, int(seconds) // 12))]
    print("server RSS over the run (5 s means, MB): " + " ".join(f"{mb:.0f}" for mb in curve))
    print(
        f"server CPU: {server_cpu:.1f} s in {seconds} s ({server_cpu / seconds:.0%} of one core), keying worker "
        "included"
    )
    gen_cpu = sum(r["cpu"] for r in results)
    print(
        f"generator: {len(results)} process(es), {results[0]['how']}; {gen_cpu:.1f} CPU s in {seconds} s "
        f"({gen_cpu / seconds:.0%} of one core)"
    )
    print(f"peer: {PEER}")
    return errors == 0 and growth <= GROWTH_FLAG


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--generators", type=int, default=1, help="load generator processes")
    ap.add_argument("--routes", default=",".join(ROUTES), help="comma-separated, from: " + ", ".join(ROUTES))
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    ap.add_argument(
        "--settle",
        type=float,
        default=10,
        help="seconds of load before the first RSS window (in-flight responses' buffers reach their size)",
    )
    # the generator process's own arguments
    ap.add_argument("--generator", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generator:
        return run_generator(args)
    if any(r not in ROUTES for r in args.routes.split(",")):
        raise SystemExit(f"--routes: choose from {', '.join(ROUTES)}")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    table = _table(work, args.files)

    share = {"name": "b", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}]}
    server = ServeProcess({"version": 1, "shares": [share]}, work)  # its config stays until it stops
    ok = False
    try:
        path = "/delta-sharing/shares/b/schemas/d/tables/t"
        import httpx

        warm = httpx.post(f"{server.base}{path}/query", json={}, timeout=600)  # the snapshot is cached from here on
        warm.raise_for_status()
        assert warm.text.count("\n") == args.files + 2, warm.text.count("\n")
        sampler = MemorySampler(server.proc.pid)
        sampler.start()
        start = time.time() + 2  # every generator is up and connected by then
        share_of = [
            args.connections // args.generators + (i < args.connections % args.generators)
            for i in range(args.generators)
        ]
        procs, first = [], 0
        outs = tempfile.TemporaryDirectory()
        cpu0 = sum(_cpu_seconds(p) for p in sampler.pids())
        for n in share_of:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--generator",
                        "--port",
                        str(server.port),
                        "--path",
                        path,
                        "--files",
                        str(args.files),
                        "--routes",
                        args.routes,
                        "--connections",
                        str(n),
                        "--first",
                        str(first),
                        "--seconds",
                        str(args.seconds),
                        "--start-at",
                        str(start),
                        "--out",
                        f"{outs.name}/{len(procs)}.json",
                    ],
                )
            )
            first += n
        if any(p.wait() != 0 for p in procs):
            raise SystemExit("a load generator failed")
        results = [json.loads(Path(f"{outs.name}/{k}.json").read_text()) for k in range(len(procs))]
        outs.cleanup()
        server_cpu = sum(_cpu_seconds(p) for p in sampler.pids()) - cpu0
        peak = sum(status_mb(p, "VmHWM:") for p in sampler.pids())
        sampler.stopped.set()
        ok = _report(args, results, sampler, start, server_cpu, peak)
    finally:
        server.stop()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
