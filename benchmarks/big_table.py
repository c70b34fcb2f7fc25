"""A table of ten million files: the sharing server's cold /query and paging, beside deltalake.

    python benchmarks/big_table.py [--files 10000000] [--workdir .bench] [--parts 1]
        [--timeout 600] [--max-rss-gb 12] [--only server,paging,peer] [--serve-args "..."]

The log (checkpoint + 10 commits, no data files) is made once by gen_big_table.py in
WORKDIR/big-FILES (big-FILES-pK with --parts K) and reused after. Each case runs on its own:
  server   a fresh `deltaport serve` process (one uvicorn worker, its keying worker processes if
           any: by default none where the compiled loops are built);
           one second after it answers /health, one /query of the whole table, the NDJSON
           answer read by an HTTP client that drops the bytes as they come: time to the first
           byte, to the first file line, in all; bytes and lines; the peak RSS of the server
           process plus its children, from psutil every 50 ms.
  paging   another fresh server: maxFiles=1000 pages with
           `delta-sharing-capabilities: responseformat=parquet;includeendstreamaction=true`,
           each next page from the endStreamAction's nextPageToken: the first (cold) page, a few
           early pages, one page of all files up to the last few (maxFiles may change between
           pages), the late pages, then early pages again (the same server state as the late
           ones); a late page must be no slower than an early one (the fastest of each, as
           the machine's noise only ever adds time; medians shown beside).
  peer     deltalake in a subprocess: DeltaTable(path) + get_add_actions(flatten=True), and
           DeltaTable(path) + file_uris(), each in its own process: time and peak RSS (its own
           ru_maxrss, and the same 50 ms sampling).
Targets: peak RSS <= 1 GB, first byte <= 3 s, at 1M files the whole answer <= 2 s, at other
sizes no more time per file than the 1M figure (from WORKDIR/big-table-1000000.json, written by
a --files 1000000 run; else the 1M target). A process past --timeout or --max-rss-gb is killed
and reported as such, so that a server running out of memory does not take the machine with it.
Figures are written to WORKDIR/big-table-FILES.json (those of cases not run are kept).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from serve_process import ServeProcess

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
CAPABILITIES = {"delta-sharing-capabilities": "responseformat=parquet;includeendstreamaction=true"}
PAGE = 1000
PAGES = 8  # early pages, late pages and early pages again, each
RSS_TARGET_MB = 1024
FIRST_BYTE_TARGET_S = 3.0
ONE_MILLION_TARGET_S = 2.0
LATE_PAGE_SLACK = 1.25  # a late page may take this much longer than an early one (noise)
SAMPLE_S = 0.05
PEER = r"""
import json, resource, sys, time
import deltalake
how, path, warm = sys.argv[1:4]
deltalake.DeltaTable(warm).get_add_actions(flatten=True)  # warm the library on a tiny table
t0 = time.perf_counter()
dt = deltalake.DeltaTable(path)
opened = time.perf_counter() - t0
n = len(dt.get_add_actions(flatten=True)) if how == "actions" else len(dt.file_uris())
seconds = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "open_seconds": opened, "files": n, "ru_maxrss_mb": rss}))
"""


class Watch(threading.Thread):
    """Samples the RSS of a process and its descendants every SAMPLE_S; kills them all once the
    sum passes ``cap_mb`` or the time passes ``deadline`` (monotonic), and says why."""

    def __init__(self, pid: int, cap_mb: float, deadline: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.cap_mb, self.deadline = pid, cap_mb, deadline
        self.peak_mb = 0.0
        self.killed: str | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            procs = tree(self.pid)
            if not procs:
                return
            rss = sum(_rss_mb(p) for p in procs)
            self.peak_mb = max(self.peak_mb, rss)
            if rss > self.cap_mb:
                self.kill(procs, f"killed: RSS {rss:,.0f} MB passed the cap of {self.cap_mb:,.0f} MB")
            elif time.monotonic() > self.deadline:
                self.kill(procs, "killed: past --timeout")

    def kill(self, procs: list[psutil.Process], why: str) -> None:
        self.killed = why
        for p in reversed(procs):  # children first
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        self.done.set()

    def stop(self) -> float:
        self.done.set()
        self.join(5)
        return self.peak_mb


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _rss_mb(p: psutil.Process) -> float:
    try:
        return p.memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


class Server(ServeProcess):
    """One share ``b.d`` with the table ``big``, without auth; one page may hold every file (so
    that a late page can be reached in one request)."""

    def __init__(self, table: Path, workdir: Path, *args: str) -> None:
        schemas = [{"name": "d", "tables": [{"name": "big", "location": str(table)}]}]
        config = {"version": 1, "shares": [{"name": "b", "schemas": schemas}], "queryTablePageSizeLimit": 2**31 - 1}
        super().__init__(config, workdir, *args)
        self.url = f"{self.base}/delta-sharing/shares/b/schemas/d/tables/big/query"


@dataclass
class Read:
    """One /query answer as the client saw it."""

    status: int = 0
    headers: float | None = None
    first_byte: float | None = None
    first_file: float | None = None
    seconds: float = 0.0
    client_cpu: float = 0.0  # CPU seconds the reading thread used: near ``seconds``, the client is the limit
    nbytes: int = 0
    lines: int = 0
    tail: bytes = b""
    error: str | None = None

    def next_page_token(self) -> str | None:
        last = self.tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        return json.loads(last).get("endStreamAction", {}).get("nextPageToken")


def query(url: str, body: dict, headers: dict[str, str], timeout: float) -> Read:
    """POST ``body``; read the answer to its end, keeping only counts and the last bytes.

    The reader is http.client taking each piece as it comes (``read1``: a buffer to fill would
    wait for it, and delay the first byte): the client shares this machine's two cores with the
    server, so it should cost as little as a client on another machine would cost the server's
    (httpx's reader took about 1 CPU-s of a 3.5 s answer of 0.9 GB)."""
    out = Read()
    t0, cpu0 = time.perf_counter(), time.thread_time()
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    tail: deque[bytes] = deque()  # the last pieces, 64 KiB at least once read
    kept = 0
    try:
        payload = json.dumps(body).encode()
        conn.request("POST", parts.path, payload, {**headers, "Content-Type": "application/json"})
        r = conn.getresponse()
        out.status = r.status
        out.headers = time.perf_counter() - t0
        while piece := r.read1(1 << 20):
            if out.first_byte is None:
                out.first_byte = time.perf_counter() - t0
            across = (tail[-1][-16:] if tail else b"") + piece[:16]  # a marker split between two pieces
            if out.first_file is None and (b'{"file":' in piece or b'{"file":' in across):
                out.first_file = time.perf_counter() - t0
            out.nbytes += len(piece)
            out.lines += piece.count(b"\n")
            tail.append(piece)
            kept += len(piece)
            while kept - len(tail[0]) >= 65536:
                kept -= len(tail.popleft())
    except (OSError, http.client.HTTPException) as e:
        out.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    out.seconds = time.perf_counter() - t0
    out.client_cpu = time.thread_time() - cpu0
    out.tail = b"".join(tail)[-65536:]
    if out.status and out.status != 200 and out.error is None:
        out.error = f"HTTP {out.status}: {out.tail[:300].decode(errors='replace')}"
    return out


def serve(table: Path, args: argparse.Namespace) -> tuple[Server, Watch]:
    server = Server(table, Path(args.workdir), *shlex.split(args.serve_args))
    watch = Watch(server.proc.pid, args.max_rss_gb * 1024, time.monotonic() + args.timeout)
    time.sleep(1)  # the keying worker starts in the background, as it does before a first request
    return server, watch


def run_server(table: Path, args: argparse.Namespace) -> dict:
    server, watch = serve(table, args)
    try:
        read = query(server.url, {}, {}, args.timeout)
    finally:
        peak = watch.stop()
        server.stop()
    return {
        "headers_s": read.headers,
        "first_byte_s": read.first_byte,
        "first_file_s": read.first_file,
        "seconds": read.seconds,
        "client_cpu_s": read.client_cpu,
        "bytes": read.nbytes,
        "lines": read.lines,
        "peak_rss_mb": peak,
        "error": watch.killed or read.error,
    }


def pages(url: str, token: str | None, count: int, timeout: float) -> Iterator[tuple[Read, str | None]]:
    for _ in range(count):
        read = query(url, {"maxFiles": PAGE, **({"pageToken": token} if token else {})}, CAPABILITIES, timeout)
        if read.error:
            raise RuntimeError(read.error)
        token = read.next_page_token()
        yield read, token
        if token is None:
            return


def run_paging(table: Path, files: int, args: argparse.Namespace) -> dict:
    """Early pages from the start, one page up to the last PAGES pages, those, early pages again."""
    skip = files - PAGE * (PAGES + 1) - PAGE * PAGES
    if skip < 1:
        return {"error": f"the paging case needs more than {PAGE * (2 * PAGES + 1):,} files"}
    server, watch = serve(table, args)
    out: dict = {}
    try:
        early = list(pages(server.url, None, PAGES + 1, args.timeout))
        out["first_page_s"] = early[0][0].seconds
        out["early_pages_s"] = [r.seconds for r, _ in early[1:]]
        token = early[-1][1]
        jump = query(server.url, {"maxFiles": skip, "pageToken": token}, CAPABILITIES, args.timeout)
        if jump.error:
            raise RuntimeError(jump.error)
        out["jump"] = {"files": skip, "seconds": jump.seconds, "lines": jump.lines}
        late = list(pages(server.url, jump.next_page_token(), PAGES + 1, args.timeout))
        out["late_pages_s"] = [r.seconds for r, _ in late]
        out["last_page_has_token"] = late[-1][1] is not None
        again = list(pages(server.url, None, PAGES, args.timeout))
        out["early_pages_s"] += [r.seconds for r, _ in again]
    except RuntimeError as e:
        out["error"] = f"{e}"
    finally:
        out["peak_rss_mb"] = watch.stop()
        server.stop()
    if watch.killed:
        out["error"] = watch.killed
    return out


def run_peer(table: Path, how: str, args: argparse.Namespace) -> dict:
    warm = SHARED / "delta-tables" / "basic_partitioned"
    proc = subprocess.Popen(
        [sys.executable, "-c", PEER, how, str(table), str(warm)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    watch = Watch(proc.pid, args.max_rss_gb * 1024, time.monotonic() + args.timeout)
    stdout, stderr = proc.communicate()
    peak = watch.stop()
    if proc.returncode != 0:
        return {"peak_rss_mb": peak, "error": watch.killed or stderr.decode(errors="replace")[-300:]}
    return {**json.loads(stdout), "peak_rss_mb": peak}


def table_for(args: argparse.Namespace) -> tuple[Path, dict | None]:
    """The log (made on first use) and the generator's summary when made in this run."""
    sys.path.insert(0, str(HERE))
    from gen_big_table import generate

    name = f"big-{args.files}" + (f"-p{args.parts}" if args.parts > 1 else "")
    path = Path(args.workdir) / name
    if (path / "_delta_log" / "_last_checkpoint").exists():
        return path, None
    return path, generate(path, files=args.files, commits=10, force=True, parts=args.parts)


def live_files(files: int) -> int:
    return files + 10 * 50  # gen_big_table.py: 10 commits, each 100 adds and 50 removes


Row = tuple[str, str, str, bool | None, str]  # case, figure, detail, met (None: no target), target


def report(files: int, got: dict, reference: dict | None) -> list[Row]:
    rows: list[Row] = []
    gen = got.get("generate")
    if gen:
        detail = f"peak RSS {gen['peak_rss_mb']} MB, {gen['checkpoint_bytes'] / 1e9:.2f} GB checkpoint"
        rows.append(("generate the log (once)", f"{gen['seconds_total']:.1f}s", detail, None, ""))
    if got.get("server"):
        rows += server_rows(files, got["server"], reference)
    if got.get("paging"):
        rows += paging_rows(got["paging"])
    for how, label in (("actions", "DeltaTable + get_add_actions(flatten)"), ("files", "DeltaTable + file_uris()")):
        q = got.get(f"peer_{how}")
        if q and q.get("error"):
            rows.append((f"deltalake {label}", "failed", q["error"][:60], None, ""))
        elif q:
            detail = f"{q['files']:,} files, open {q['open_seconds']:.1f}s, RSS {_mb(q['peak_rss_mb'])}"
            rows.append(
                (
                    f"deltalake {label}",
                    _secs(q["seconds"]),
                    detail + f" (ru_maxrss {_mb(q['ru_maxrss_mb'])})",
                    None,
                    "peer",
                )
            )
    return rows


def server_rows(files: int, s: dict, reference: dict | None) -> list[Row]:
    """The cold /query against its targets; away from 1M files, the time per file against the 1M
    figure (the 1M target when no 1M run was recorded)."""
    per_file, ref_label = ONE_MILLION_TARGET_S / 1e6, "the 1M target (2 s / 1M)"
    ref = (reference or {}).get("server") or {}
    if ref.get("lines") and not ref.get("error"):
        per_file = ref["seconds"] / ref["lines"]
        ref_label = f"the 1M figure ({per_file * 1e6:.2f} us/file)"
    budget = ONE_MILLION_TARGET_S if files == 1_000_000 else per_file * live_files(files)
    ok = s["error"] is None
    state = s["error"] or f"{s['lines']:,} lines, {s['bytes'] / 1e9:.2f} GB, client CPU {s.get('client_cpu_s', 0):.1f}s"
    fb, ff, rss = s["first_byte_s"], s["first_file_s"], s["peak_rss_mb"]
    first = f"<= {FIRST_BYTE_TARGET_S:.0f} s"
    complete = ok and s["lines"] == live_files(files) + 2
    return [
        (
            "server /query cold: first byte",
            _secs(fb),
            f"headers {_secs(s.get('headers_s'))}",
            ok and fb is not None and fb <= FIRST_BYTE_TARGET_S,
            first,
        ),
        (
            "server /query cold: first file line",
            _secs(ff),
            "",
            ok and ff is not None and ff <= FIRST_BYTE_TARGET_S,
            first,
        ),
        (
            "server /query cold: whole answer",
            _secs(s["seconds"]),
            state,
            complete and s["seconds"] <= budget,
            f"<= {budget:.3g} s" + ("" if files == 1_000_000 else f": per file <= {ref_label}"),
        ),
        (
            "server /query cold: time per file",
            f"{s['seconds'] / s['lines'] * 1e6:.2f}us" if complete else "-",
            "",
            None,
            "",
        ),
        ("server /query cold: peak RSS (+children)", _mb(rss), "", ok and rss <= RSS_TARGET_MB, "<= 1 GB"),
    ]


def paging_rows(p: dict) -> list[Row]:
    if "error" in p or "late_pages_s" not in p:
        return [("paging", "failed", p.get("error", "?")[:60], False, "")]
    early, late = min(p["early_pages_s"]), min(p["late_pages_s"])
    medians = f"medians {statistics.median(p['early_pages_s']):.3f}s / {statistics.median(p['late_pages_s']):.3f}s"
    jump = p["jump"]
    last = f"last page {'HAS' if p['last_page_has_token'] else 'has no'} token"
    return [
        ("paging: first page (cold server)", _secs(p["first_page_s"]), f"maxFiles={PAGE}", None, ""),
        ("paging: early page (fastest)", _secs(early), f"{len(p['early_pages_s'])} pages, before and after", None, ""),
        ("paging: jump to the end (one page)", _secs(jump["seconds"]), f"{jump['files']:,} files", None, ""),
        (
            "paging: late page (fastest)",
            _secs(late),
            f"{late / early:.2f}x early, {len(p['late_pages_s'])} pages, {medians}, {last}",
            late <= LATE_PAGE_SLACK * early and not p["last_page_has_token"],
            f"<= {LATE_PAGE_SLACK}x early",
        ),
        ("paging: peak RSS (+children)", _mb(p["peak_rss_mb"]), "", p["peak_rss_mb"] <= RSS_TARGET_MB, "<= 1 GB"),
    ]


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}s"


def _mb(v: float) -> str:
    return f"{v:,.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=10_000_000, help="files in the checkpoint")
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    ap.add_argument("--parts", type=int, default=1, help="checkpoint part files of a newly made log")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one case may take before it is killed")
    ap.add_argument("--max-rss-gb", type=float, default=12, help="kill a server or peer whose RSS passes this")
    ap.add_argument("--only", default="server,paging,peer", help="cases to run, comma-separated")
    ap.add_argument("--serve-args", default="", help="extra `deltaport serve` flags, e.g. '--keying-processes 0'")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    t0 = time.perf_counter()
    table, made = table_for(args)
    got: dict = {"files": args.files, "table": str(table), "generate": made}
    if made:
        print(f"generated {table} in {time.perf_counter() - t0:.1f}s", flush=True)
    if "server" in only:
        got["server"] = run_server(table, args)
        print("server done", flush=True)
    if "paging" in only:
        got["paging"] = run_paging(table, live_files(args.files), args)
        print("paging done", flush=True)
    if "peer" in only:
        got["peer_actions"] = run_peer(table, "actions", args)
        got["peer_files"] = run_peer(table, "files", args)
    out = work / f"big-table-{args.files}.json"
    kept = json.loads(out.read_text()) if out.exists() else {}  # the cases not run this time
    out.write_text(json.dumps({**kept, **{k: v for k, v in got.items() if v is not None}}, indent=1))
    ref_path = work / "big-table-1000000.json"
    reference = json.loads(ref_path.read_text()) if ref_path.exists() and args.files != 1_000_000 else None
    print(f"\n{args.files:,}-file table {table}")
    print(f"{'case':44s} {'figure':>10s}  {'detail':48s} target")
    for name, value, detail, ok, target in report(args.files, got, reference):
        verdict = "" if ok is None else ("MET" if ok else "MISSED")
        print(f"{name:44s} {value:>10s}  {detail:48s} {target} {verdict}".rstrip())


if __name__ == "__main__":
    main()
