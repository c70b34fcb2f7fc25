"""How soon every replica refuses a revoked token: N `deltaport serve` replicas on one PostgreSQL catalog.

    python benchmarks/revocation.py [--replicas 2] [--rounds 10] [--poll 1.0] [--kinds delete,rotate,unshare]

A throwaway PostgreSQL cluster (tests/postgres.py's, started the same way: initdb in a temporary
folder, loopback only, fsync off) holds the catalog; ``--replicas`` server processes serve it, each
with the same config (the catalog, one admin token given as its digest, one tokenSecret,
``catalogPollSeconds`` = ``--poll``), without keying workers (the routes read here never use
them). The admin API of replica 1 is driven with the Databricks SDK. ``--bystanders N`` first puts
N other recipients (each with an activated token and a grant) in the catalog, directly through
``CatalogDB``: every replica reloads the whole catalog on each change, so its size adds to the
time a revocation takes to reach the other replicas.

Each round makes a recipient, activates its token and grants it a share holding basic_partitioned,
through replica 1; one reader thread per replica then reads GET .../version with that token back to
back on a kept-alive connection. Once every replica answers 200 and a random fraction of one poll
interval more has passed (so the revocation falls anywhere between two polls of the other
replicas, not just after the poll that brought them the grant), the token is revoked through
replica 1 in one of three ways:
  delete    the recipient is deleted                           (refused: 401)
  rotate    rotate_token with existing_token_expire_in_seconds=0 (refused: 401)
  unshare   the share's SELECT is revoked from the recipient     (refused: 404)
Measured per replica: the time from the admin call's return to the arrival of its first refused
answer (0 when replica 1 refused a request that was already in flight), and whether any 200 came
after it (a replica flipping back). Printed per kind and replica: p50 and max over the rounds, the
refusal status, flips, and whether max <= 2 s (the target). No peer is measured: the reference
Delta Sharing server has no admin API and reads its recipients from a config file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from serve_process import ServeProcess  # beside this script

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("DELTAPORT_SHARED", HERE.parents[1] / "shared"))
TABLES = SHARED / "delta-tables"
KINDS = ("delete", "rotate", "unshare")
REFUSED = {"delete": 401, "rotate": 401, "unshare": 404}
TARGET_S = 2.0
ROUND_TIMEOUT_S = 15.0
PATH = "/delta-sharing/shares/revocable/schemas/retail/tables/orders/version"


def postgres_cluster():
    """A started throwaway cluster: tests/postgres.py's PostgresCluster (imported from there)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("the PostgreSQL server binaries (initdb, pg_ctl) are missing: apt-get install postgresql-15")
    return PostgresCluster(bindir)


@dataclass
class Reader:
    """Reads the table's version on one replica with ``bearer`` until stopped; keeps every answer's
    arrival time and status."""

    base: str
    bearer: str
    answers: list[tuple[float, int]] = field(default_factory=list)
    marked: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.bearer}"}, timeout=30) as c:
            while not self.stop.is_set():
                status = c.get(PATH).status_code
                self.answers.append((time.perf_counter(), status))

    def accepted(self) -> bool:
        return bool(self.answers) and self.answers[-1][1] == 200

    def mark(self) -> None:
        """From here on an answer other than 200 is a refusal (the last one before was a 200)."""
        self.marked = len(self.answers)

    def refusal(self) -> tuple[float, int] | None:
        """The arrival time and status of the first answer other than 200 since :meth:`mark`."""
        return next(((t, s) for t, s in self.answers[self.marked :] if s != 200), None)

    def flips_after(self, first_refused: float) -> int:
        """200s that arrived after the first refusal."""
        return sum(1 for arrived, seen in self.answers if arrived > first_refused and seen == 200)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def _wait(condition, seconds: float, what: str) -> None:
    deadline = time.perf_counter() + seconds
    while not condition():
        if time.perf_counter() > deadline:
            raise SystemExit(f"{what}: not within {seconds} s")
        time.sleep(0.01)


def run_round(w, replicas: list[ServeProcess], kind: str, n: int, poll: float) -> Round:
    """One revocation of ``kind`` through replica 1, the recipient made for it."""
    from databricks.sdk.service.sharing import AuthenticationType, PermissionsChange

    name = f"reader_{kind}_{n}"
    made = w.recipients.create(name, authentication_type=AuthenticationType.TOKEN)
    bearer = w.recipient_activation.retrieve_token(made.activation_url.rsplit("/", 1)[1]).bearer_token
    w.shares.update_permissions("revocable", changes=[PermissionsChange(principal=name, add=["SELECT"])])
    readers = [Reader(replica.base, bearer) for replica in replicas]
    try:
        _wait(lambda: all(r.accepted() for r in readers), ROUND_TIMEOUT_S, "every replica serving the new recipient")
        time.sleep(random.uniform(0, poll))
        for reader in readers:
            reader.mark()
        if kind == "delete":
            w.recipients.delete(name)
        elif kind == "rotate":
            w.recipients.rotate_token(name, existing_token_expire_in_seconds=0)
        else:
            w.shares.update_permissions("revocable", changes=[PermissionsChange(principal=name, remove=["SELECT"])])
        returned = time.perf_counter()
        deadline = returned + ROUND_TIMEOUT_S
        while time.perf_counter() < deadline and any(r.refusal() is None for r in readers):
            time.sleep(0.01)
        time.sleep(0.2)  # a little longer: a replica that flips back would show it
    finally:
        for reader in readers:
            reader.close()
    refusals = [r.refusal() for r in readers]
    took = [None if f is None else max(0.0, f[0] - returned) for f in refusals]
    statuses = [None if f is None else f[1] for f in refusals]
    flips = [0 if f is None else r.flips_after(f[0]) for r, f in zip(readers, refusals)]
    gaps = [b[0] - a[0] for r in readers for a, b in zip(r.answers, r.answers[1:])]
    if kind != "delete":
        w.recipients.delete(name)
    return Round(took, statuses, flips, statistics.median(gaps) if gaps else float("nan"))


@dataclass(frozen=True)
class Round:
    """One revocation, per replica: seconds from the admin call's return to the first refusal
    (None: none within the round's time; 0: refused before the call returned), the refusal's
    status, the 200s after it; and the median time between a reader's answers."""

    took: list[float | None]
    statuses: list[int | None]
    flips: list[int]
    request_s: float


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10, help="revocations of each kind")
    ap.add_argument("--poll", type=float, default=1.0, help="catalogPollSeconds of every replica")
    ap.add_argument("--bystanders", type=int, default=0, help="other recipients in the catalog")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, from: " + ", ".join(KINDS))
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in KINDS for k in kinds):
        ap.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.replicas < 1:
        ap.error("--replicas must be at least 1")

    import logging

    from databricks.sdk import WorkspaceClient

    logging.getLogger("databricks.sdk").setLevel(logging.ERROR)  # its debug log would print the tokens
    admin = secrets.token_urlsafe(24)
    cluster = postgres_cluster()
    replicas: list[ServeProcess] = []
    results: dict[str, list[Round]] = {k: [] for k in kinds}
    try:
        with tempfile.TemporaryDirectory(prefix="deltaport-revocation-bench-") as tmp:
            os.chmod(tmp, 0o700)  # the configs hold the token secret
            catalog = cluster.create_database()
            if args.bystanders:
                _bystanders(catalog, args.bystanders)
            config = {
                "version": 1,
                "catalog": catalog,
                "adminTokens": [f"sha256:{hashlib.sha256(admin.encode()).hexdigest()}"],
                "tokenSecret": secrets.token_urlsafe(32),
                "catalogPollSeconds": args.poll,
            }
            for _ in range(args.replicas):
                replicas.append(ServeProcess(config, Path(tmp), "--keying-processes", "0"))
            w = WorkspaceClient(host=replicas[0].base, token=admin, auth_type="pat")
            _setup(w)
            for n in range(args.rounds):
                for kind in kinds:
                    results[kind].append(run_round(w, replicas, kind, n, args.poll))
                done = ", ".join(f"{k} " + " ".join(_shown(t) for t in results[k][-1].took) for k in kinds)
                print(f"  round {n + 1}/{args.rounds}: {done}", flush=True)
    finally:
        for replica in replicas:
            replica.stop()
        cluster.destroy()
    _report(args, kinds, results)


def _bystanders(url: str, n: int) -> None:
    """``n`` recipients with an activated token (dropped: only its digest is stored), granted a share."""
    from deltaport.catalog.store import CatalogDB, PermissionChange

    started = time.perf_counter()
    db = CatalogDB(url)
    try:
        db.create_share("bystanders")
        for i in range(n):
            _, activation = db.create_recipient(f"bystander{i:05d}")
            db.activate(activation)
        db.update_permissions("bystanders", [PermissionChange(f"bystander{i:05d}", add=("SELECT",)) for i in range(n)])
    finally:
        db.close()
    print(f"  {n:,} bystander recipients in the catalog ({time.perf_counter() - started:.0f} s)", flush=True)


def _setup(w) -> None:
    from databricks.sdk.service.catalog import DataSourceFormat, TableType
    from databricks.sdk.service.sharing import (
        SharedDataObject,
        SharedDataObjectUpdate,
        SharedDataObjectUpdateAction,
    )

    w.catalogs.create("main", storage_root=str(TABLES))
    w.schemas.create("sales", "main")
    w.tables.create(
        name="orders",
        catalog_name="main",
        schema_name="sales",
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=str(TABLES / "basic_partitioned"),
    )
    w.shares.create("revocable")
    table = SharedDataObject(name="main.sales.orders", shared_as="retail.orders")
    w.shares.update(
        "revocable", updates=[SharedDataObjectUpdate(action=SharedDataObjectUpdateAction.ADD, data_object=table)]
    )


def _shown(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.3f}s"


def _report(args, kinds: list[str], results: dict[str, list[Round]]) -> None:
    label = {"delete": "recipient deleted", "rotate": "rotated, 0 s grace", "unshare": "share permission revoked"}
    request = statistics.median(r.request_s for k in kinds for r in results[k])
    print(
        f"\nrevocation through replica 1 -> first refused answer, per replica: {args.replicas} replicas on one "
        f"PostgreSQL catalog ({args.bystanders:,} other recipients), catalogPollSeconds {args.poll}, "
        f"{args.rounds} rounds per kind; readers: GET /version back to back (median {request * 1000:.1f} ms "
        "between answers)"
    )
    print(f"{'kind':26s} {'replica':>7s} {'p50':>8s} {'max':>8s} {'status':>8s} {'flips':>5s}  target")
    met = True
    for kind in kinds:
        for i in range(args.replicas):
            took = [r.took[i] for r in results[kind]]
            seen = [t for t in took if t is not None]
            statuses = sorted({str(r.statuses[i]) for r in results[kind]})
            flips = sum(r.flips[i] for r in results[kind])
            worst = max(seen) if len(seen) == len(took) else None
            ok = worst is not None and worst <= TARGET_S and flips == 0 and statuses == [str(REFUSED[kind])]
            met &= ok
            p50 = statistics.median(seen) if seen else None
            print(
                f"{label[kind]:26s} {i + 1:7d} {_shown(p50):>8s} {_shown(worst):>8s} {'/'.join(statuses):>8s} "
                f"{flips:5d}  max <= {TARGET_S:.0f} s, {REFUSED[kind]}, no flips: {'MET' if ok else 'MISSED'}"
            )
    print(f"overall: {'MET' if met else 'MISSED'} (every replica refuses within {TARGET_S:.0f} s, never accepts again)")
    print("peer: none measured (the reference Delta Sharing server has no admin API; its recipients come from a file)")


if __name__ == "__main__":
    main()
