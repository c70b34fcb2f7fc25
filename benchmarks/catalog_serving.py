"""Serving from a big catalog database versus from a YAML config: /version and /metadata requests/s.

    python benchmarks/catalog_serving.py [--shares 1000] [--recipients 10000] [--seconds 10]
                                         [--rounds 4] [--connections 16] [--workdir .bench] [--rebuild]

Three ``deltaport serve`` processes, as the CLI starts them (one uvicorn worker, the default keying
worker), on 127.0.0.1:

- ``catalog``: a SQLite catalog of ``--shares`` shares (share i holds 1 + i mod 10 tables, shared as
  ``s.t0`` … ``s.t9``; they point at ten corpus tables) and ``--recipients`` recipients, each with
  an activated token and 1-3 grants, plus the measured recipient; built once through
  ``deltaport.catalog.store.CatalogDB`` (on tmpfs, then copied into ``--workdir`` and reused; each
  run serves a fresh copy of it, where the measured recipient's token is rotated to a new one).
  Like every catalog server, it writes an audit event per request into its database.
- ``yaml``: a YAML config sharing the same table to one recipient, writing an audit event per
  request to its ``auditLog`` file: the catalog server's like, but for where the catalog lives.
- ``yaml-bare``: the same YAML config without an audit log.

All three are loaded at the same moment, pinned to CPU 0 (with their keying workers) when the
machine has two or more, so that a change in the machine's speed falls on all alike; the load is
one ``wrk -t1 -c16`` per server, pinned to CPU 1. The same recipient request, with its bearer
token, goes to each: GET .../tables/t0/version and .../metadata of basic_partitioned, the snapshot
warmed first. Every answer must be a 200: wrk's non-2xx count must be 0.

Printed: requests/s of each server per round; the catalog's mean against ``yaml``'s (target: the
catalog within 10 % of the YAML server, ratio >= 0.90) and against ``yaml-bare``'s (the catalog and
its audit log together, no target), with the ratio of each round; the least CPU time each server
process (all its threads) spent per request in a round, the steadier figure on a machine other
work shares; how long the catalog takes to load, in this process (the read, the server's registry
built from it, a reload as after a change, the whole app made from the catalog config against one
made from the YAML config) and each server's start to /health as a process; each server's RSS
after the load (and its peak, VmHWM), the keying worker's shown apart.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from serve_process import ServeProcess, children, status_mb  # beside this script

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
TABLES = SHARED / "delta-tables"
# ten corpus tables; the first one is the measured one
CORPUS = (
    "basic_partitioned",
    "table-without-dv-small",
    "table-with-dv-small",
    "cdf-table",
    "cdf-table-non-partitioned",
    "cdf-table-partitioned",
    "cdf-table-simple",
    "basic-decimal-table",
    "mixed-nulls",
    "parsed-stats",
)
MEASURED_SHARE = "share0009"  # one of the shares of ten tables
TABLE_PATH = "/delta-sharing/shares/{share}/schemas/s/tables/t0"
ROUTES = ("version", "metadata")
TARGET = 0.90
BARE = "yaml-bare"  # the YAML server without an audit log


# --- the catalog --------------------------------------------------------------------------------


def build_catalog(path: Path, shares: int, recipients: int) -> float:
    """The benchmark's catalog as the SQLite file ``path``, built on tmpfs (fsync costs nothing
    there) and copied in place; the seconds it took."""
    from deltaport.catalog.model import SharedObject
    from deltaport.catalog.store import CatalogDB, ObjectUpdate, PermissionChange

    started = time.perf_counter()
    scratch = Path(
        tempfile.mkdtemp(prefix="deltaport-catalog-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    try:
        db = CatalogDB(f"sqlite:///{scratch / 'catalog.db'}")
        db.create_catalog("main", storage_root=str(TABLES))
        db.create_schema("main", "bench")
        for i, name in enumerate(CORPUS):
            db.create_table("main", "bench", f"t{i}", str(TABLES / name))
        grants: dict[str, list[str]] = {}
        for i in range(shares):
            share = f"share{i:04d}"
            db.create_share(share)
            objects = [
                ObjectUpdate("ADD", SharedObject(name=f"main.bench.t{k}", shared_as=f"s.t{k}"))
                for k in range(1 + i % 10)
            ]
            db.update_share(share, updates=objects)
            grants[share] = []
        names = list(grants)
        for j in range(recipients):
            recipient = f"recipient{j:05d}"
            _, activation = db.create_recipient(recipient)
            db.activate(activation)  # the bearer token is made and dropped: only its digest is kept
            for g in range(1 + j % 3):
                grants[names[(j * 7 + g * 331) % len(names)]].append(recipient)
            if j and j % 2000 == 0:
                print(f"  {j:,} recipients ({time.perf_counter() - started:.0f} s)", flush=True)
        db.create_recipient("measured")
        grants[MEASURED_SHARE].append("measured")
        for share, principals in grants.items():
            if principals:
                db.update_permissions(share, [PermissionChange(p, add=("SELECT",)) for p in sorted(set(principals))])
        db.close()
        _copy_sqlite(scratch / "catalog.db", path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.perf_counter() - started


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy (the WAL folded in) through SQLite's backup API."""
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    src, dst = sqlite3.connect(source), sqlite3.connect(partial)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    partial.replace(target)


def measured_token(path: Path) -> str:
    """A fresh bearer token of the measured recipient in the catalog at ``path`` (its earlier one
    ends now)."""
    from deltaport.catalog.store import CatalogDB

    db = CatalogDB(f"sqlite:///{path}")
    try:
        _, activation = db.rotate_token("measured", 0)
        _, bearer, _ = db.activate(activation)
    finally:
        db.close()
    return bearer


def load_times(path: Path, yaml_config: dict) -> dict[str, float]:
    """How long loading the catalog at ``path`` takes, in this process (seconds): ``read``, the
    served catalog read in one transaction; ``registry``, the server's registry built from it;
    ``reload``, both as the catalog feed does after a change; ``app``, the server's app made from
    a catalog config (the database opened, its schema checked, the catalog loaded) and ``yaml_app``
    from the YAML config, for comparison. Also the counts: ``shares``, ``tables``, ``recipients``."""
    from deltaport.catalog.store import CatalogDB
    from deltaport.server import create_app, parse_config

    create_app(parse_config(yaml_config))  # the imports and first-call costs out of the way
    started = time.perf_counter()
    create_app(parse_config(yaml_config))
    yaml_app = time.perf_counter() - started
    started = time.perf_counter()
    app = create_app(parse_config({"version": 1, "catalog": str(path)}))  # loads the catalog before returning
    whole = time.perf_counter() - started
    db = CatalogDB(f"sqlite:///{path}")
    try:
        started = time.perf_counter()
        served = db.served()
        read = time.perf_counter() - started
    finally:
        db.close()
    started = time.perf_counter()
    app.state.service.serve_catalog(served.shares, served.recipients)
    registry = time.perf_counter() - started
    started = time.perf_counter()
    app.state.catalog_feed.reload_now()
    reload = time.perf_counter() - started
    return {
        "read": read,
        "registry": registry,
        "reload": reload,
        "app": whole,
        "yaml_app": yaml_app,
        "shares": len(served.shares),
        "tables": sum(len(schema.tables) for share in served.shares for schema in share.schemas),
        "recipients": len(served.recipients),
    }


# --- the servers and the load -------------------------------------------------------------------


def _pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` and of its children onto ``cpu`` (when the machine has two CPUs)."""
    if (os.cpu_count() or 1) < 2:
        return
    for process in (pid, *children(pid)):
        for task in Path(f"/proc/{process}/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), {cpu})
            except OSError:
                continue


def _pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


class Load:
    """wrk against URLs, the bearer token in a Lua script only this user can read (never on a
    command line)."""

    def __init__(self, bearer: str, workdir: Path, connections: int) -> None:
        self.bearer = bearer
        self.connections = connections
        self.script = workdir / "auth.lua"
        self.script.touch(mode=0o600)
        self.script.write_text(f'wrk.headers["Authorization"] = "Bearer {bearer}"\n')

    def rates_together(self, urls: list[str], seconds: int) -> list[tuple[float, int]]:
        """Requests per second and requests answered of each URL, all loaded at the same time by
        one wrk each (all on the load's CPU)."""
        if not shutil.which("wrk"):
            raise SystemExit("wrk is needed: apt-get install wrk")
        procs = [
            subprocess.Popen(
                [*_pinned(1), "wrk", "-t1", f"-c{self.connections}", f"-d{seconds}s", "-s", str(self.script), url],
                stdout=subprocess.PIPE,
                text=True,
            )
            for url in urls
        ]
        return [_wrk_figures(url, proc.communicate()[0]) for url, proc in zip(urls, procs)]


def _wrk_figures(url: str, out: str) -> tuple[float, int]:
    """Requests/s and requests answered from wrk's report; only 200s are accepted."""
    rate = next((float(line.split()[1]) for line in out.splitlines() if line.startswith("Requests/sec:")), None)
    count = next((int(line.split()[0]) for line in out.splitlines() if " requests in " in line), None)
    if rate is None or count is None or "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk did not get only 200s from {url}:\n{out}")
    return rate, count


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(config: dict, workdir: Path, bearer: str, path: str) -> tuple[ServeProcess, float]:
    """A server process, pinned, its table warmed; and the seconds from its start to /health."""
    started = time.perf_counter()
    server = ServeProcess(config, workdir)
    up = time.perf_counter() - started
    time.sleep(1)  # its keying worker starts in the background
    _pin(server.proc.pid, 0)
    headers = {"Authorization": f"Bearer {bearer}"}
    for route in ROUTES:
        answer = httpx.get(f"{server.base}{path}/{route}", headers=headers, timeout=60)
        if answer.status_code != 200:
            server.stop()
            raise SystemExit(f"{server.base}{path}/{route}: {answer.status_code} {answer.text}")
    return server, up


def _together(servers: dict, route: str, seconds: int, load: Load, rates: dict, cpus: dict, round_: int) -> None:
    """One round of ``route`` with every server loaded at the same time (they share CPU 0, so a
    change in the machine's speed falls on all alike)."""
    kinds = list(servers)
    used = {kind: cpu_seconds(servers[kind][0].proc.pid) for kind in kinds}
    figures = load.rates_together([f"{servers[k][0].base}{servers[k][1]}/{route}" for k in kinds], seconds)
    for kind, (rate, count) in zip(kinds, figures):
        cpu_us = (cpu_seconds(servers[kind][0].proc.pid) - used[kind]) / count * 1e6
        _note(rates, cpus, kind, route, round_, rate, cpu_us)


def _note(rates: dict, cpus: dict, kind: str, route: str, round_: int, rate: float, cpu_us: float) -> None:
    """One server's figures of one round: kept and printed."""
    rates[(kind, route)].append(rate)
    cpus[(kind, route)].append(cpu_us)
    print(
        f"  round {round_ + 1} {route:9s} {kind:9s} {rate:9,.0f} req/s {cpu_us:6.1f} us server CPU/request", flush=True
    )


def memory(server: ServeProcess) -> str:
    pid = server.proc.pid
    worker = sum(status_mb(child, "VmRSS:") for child in children(pid))
    return (
        f"RSS {status_mb(pid, 'VmRSS:'):5.0f} MB, peak {status_mb(pid, 'VmHWM:'):5.0f} MB "
        f"(+ keying worker {worker:.0f} MB)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shares", type=int, default=1000)
    ap.add_argument("--recipients", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=10, help="per measurement")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--workdir", default=str(HERE.parent / ".bench"))
    ap.add_argument("--rebuild", action="store_true", help="build the catalog again even when it is there")
    args = ap.parse_args()
    if args.shares < 10:
        ap.error("--shares must be at least 10 (the measured share is the tenth)")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    cached = work / f"catalog-{args.shares}-shares-{args.recipients}-recipients.db"
    if args.rebuild or not cached.exists():
        print(f"building the catalog: {args.shares:,} shares, {args.recipients:,} recipients ...", flush=True)
        print(f"  built in {build_catalog(cached, args.shares, args.recipients):.1f} s -> {cached}")

    with tempfile.TemporaryDirectory(prefix="deltaport-catalog-serving-", dir=work) as tmp:
        run = Path(tmp)
        os.chmod(run, 0o700)
        catalog = run / "catalog.db"
        shutil.copyfile(cached, catalog)
        bearer = measured_token(catalog)
        configs = {"catalog": {"version": 1, "catalog": str(catalog)}}
        configs["yaml"] = yaml_config(bearer, run / "yaml-audit.jsonl")
        configs[BARE] = yaml_config(bearer, None)
        loading = load_times(catalog, configs["yaml"])
        load = Load(bearer, run, args.connections)
        servers: dict[str, tuple[ServeProcess, str]] = {}
        ups: dict[str, float] = {}
        try:
            for kind, config in configs.items():
                (run / kind).mkdir()
                path = TABLE_PATH.format(share=MEASURED_SHARE if kind == "catalog" else "yamlshare")
                server, ups[kind] = start(config, run / kind, bearer, path)
                servers[kind] = (server, path)
            rates: dict[tuple[str, str], list[float]] = {(k, r): [] for k in servers for r in ROUTES}
            cpus: dict[tuple[str, str], list[float]] = {(k, r): [] for k in servers for r in ROUTES}
            for round_ in range(args.rounds):
                for route in ROUTES:
                    _together(servers, route, args.seconds, load, rates, cpus, round_)
            memories = {kind: memory(server) for kind, (server, _) in servers.items()}
        finally:
            for server, _ in servers.values():
                server.stop()

    print(
        f"\ncatalog: {loading['shares']:,} shares, {loading['tables']:,} shared tables, "
        f"{loading['recipients']:,} recipients with a token (SQLite), auditing into its database; "
        f"yaml: 1 share, 1 table, 1 recipient, auditing into its auditLog file; {BARE}: the same, no audit log. "
        f"Load: wrk -t1 -c{args.connections} per server, all servers loaded at once, {args.seconds} s each, "
        f"{args.rounds} rounds"
    )
    met = _compare(rates, cpus, "yaml", f"like for like, both auditing every request; target: >= {TARGET:.2f}")
    _compare(rates, cpus, BARE, "the catalog and its audit log together; no target", target=False)
    ms = {key: value * 1000 for key, value in loading.items()}
    print(
        f"\ncatalog load, in-process: read {ms['read']:.0f} ms + registry {ms['registry']:.0f} ms; a reload (as "
        f"after a change) {ms['reload']:.0f} ms; the server's app from the catalog config {ms['app']:.0f} ms "
        f"vs from the YAML config {ms['yaml_app']:.0f} ms"
    )
    print("process start to /health: " + ", ".join(f"{kind} {up:.2f} s" for kind, up in ups.items()))
    for kind, text in memories.items():
        print(f"{kind:9s} server after the load: {text}")
    print(f"overall: {'MET' if met else 'MISSED'} (catalog within {1 - TARGET:.0%} of yaml on every route)")


def yaml_config(bearer: str, audit_log: Path | None) -> dict:
    """The YAML server's config: the measured table shared to the measured recipient, writing an
    audit event per request to ``audit_log`` (None: no audit log)."""
    config: dict = {
        "version": 1,
        "shares": [
            {
                "name": "yamlshare",
                "schemas": [{"name": "s", "tables": [{"name": "t0", "location": str(TABLES / CORPUS[0])}]}],
            }
        ],
        "recipients": [{"name": "measured", "tokens": [f"sha256:{_digest(bearer)}"], "shares": ["yamlshare"]}],
    }
    if audit_log is not None:
        config["auditLog"] = str(audit_log)
    return config


def _compare(rates: dict, cpus: dict, other: str, what: str, *, target: bool = True) -> bool:
    """The catalog server's figures against ``other``'s, printed (with ``target``, whether each
    route met it); whether the catalog met the target on every route."""
    print(f"\ncatalog vs {other} ({what})")
    print(
        f"{'route':10s} {'catalog req/s':>14s} {other + ' req/s':>15s} {'ratio':>6s}  {'':7s}  "
        f"{'least server CPU/request: catalog':>34s} {other:>9s} {'ratio':>6s}"
    )
    met = True
    for route in ROUTES:
        cat, oth = statistics.mean(rates[("catalog", route)]), statistics.mean(rates[(other, route)])
        ratio = cat / oth
        met &= ratio >= TARGET
        cat_cpu, oth_cpu = min(cpus[("catalog", route)]), min(cpus[(other, route)])
        verdict = ("MET" if ratio >= TARGET else "MISSED") if target else ""
        print(
            f"/{route:9s} {cat:14,.0f} {oth:15,.0f} {ratio:6.3f}  {verdict:7s}  "
            f"{cat_cpu:31.1f} us {oth_cpu:6.1f} us {cat_cpu / oth_cpu:6.2f}"
        )
        rounds = zip(rates[("catalog", route)], rates[(other, route)])
        print(f"{'':10s} per round: " + " / ".join(f"{c / o:.3f}" for c, o in rounds))
    return met


def _digest(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


if __name__ == "__main__":
    main()
