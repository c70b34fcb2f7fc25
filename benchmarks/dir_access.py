"""Directory access through the S3 face, measured: delta-rs reading a ~1 GB table from its folder vs
through the face (`deltaport serve` as its own process, credentials from its temporary-table-credentials
endpoint),
and a 100k-file `_delta_log` listed in ListObjectsV2 pages of 1,000.

    PYTHONPATH=src .venv/bin/python benchmarks/dir_access.py [--runs 3]

Tables are cached under .bench/dir_access/.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "server" / "s3face")]
CACHE = ROOT / ".bench" / "dir_access"
TOKEN = "bench-token"  # a benchmark's own recipient token


def build_big(path: Path, files: int = 8, rows_per_file: int = 4_000_000) -> None:
    """~1 GB: four 8-byte columns of random values (parquet barely compresses them), ``files`` files."""
    if (path / "_delta_log").exists():
        return
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    for i in range(files):
        batch = pa.table(
            {
                "id": pa.array(np.arange(i * rows_per_file, (i + 1) * rows_per_file, dtype=np.int64)),
                "a": pa.array(rng.random(rows_per_file)),
                "b": pa.array(rng.integers(0, 2**62, rows_per_file)),
                "c": pa.array(rng.random(rows_per_file)),
            }
        )
        write_deltalake(str(path), batch, mode="append")


def build_long_log(path: Path, commits: int = 100_000) -> None:
    """A table whose _delta_log holds ``commits`` small commit files (only listed, never replayed)."""
    log = path / "_delta_log"
    if log.exists() and sum(1 for _ in log.iterdir()) >= commits:
        return
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(path), pa.table({"x": [1]}))
    for v in range(1, commits):
        (log / f"{v:020d}.json").write_text('{"commitInfo":{}}\n')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    big, long_log = CACHE / "big", CACHE / "long_log"
    started = time.perf_counter()
    build_big(big)
    build_long_log(long_log)
    size = sum(p.stat().st_size for p in big.rglob("*.parquet"))
    print(f"tables ready in {time.perf_counter() - started:.1f}s; big table {size / 1e9:.2f} GB")

    import httpx
    from servers import ServeProcess

    from deltaport.signing.vending import TemporaryCredentials

    access = {"historyShared": True, "accessModes": ["dir"]}
    tables = [{"name": "big", "location": str(big), **access}, {"name": "log", "location": str(long_log), **access}]
    config = {
        "version": 1,
        "tokenSecret": "bench-secret",
        "shares": [{"name": "b", "schemas": [{"name": "s", "tables": tables}]}],
        "recipients": [{"name": "r", "tokens": [TOKEN], "shares": ["b"]}],
    }
    server = ServeProcess(config, CACHE)
    try:

        def creds(table: str) -> TemporaryCredentials:
            """Credentials as a recipient gets them: from the temporary-table-credentials endpoint."""
            url = f"{server.url}/delta-sharing/shares/b/schemas/s/tables/{table}/temporary-table-credentials"
            answer = httpx.post(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()["credentials"]
            return TemporaryCredentials(
                answer["location"], "aws", answer["awsTempCredentials"], answer["expirationTime"]
            )

        read_compare(big, creds("big"), args.runs, size)
        list_log(creds("log"))
    finally:
        server.stop()


def read_compare(big: Path, creds, runs: int, size: int) -> None:
    import deltalake
    from face_support import storage_options

    def read(location: str, options: dict | None) -> tuple[float, int]:
        t0 = time.perf_counter()
        table = deltalake.DeltaTable(location, storage_options=options).scan().read_all()
        return time.perf_counter() - t0, table.num_rows

    local = [read(str(big), None) for _ in range(runs)]
    face = [read(creds.location, storage_options(creds)) for _ in range(runs)]
    assert {n for _, n in local} == {n for _, n in face}
    lm, fm = statistics.median(t for t, _ in local), statistics.median(t for t, _ in face)
    print(f"delta-rs local : median {lm:.2f}s ({size / lm / 1e6:.0f} MB/s) runs {[round(t, 2) for t, _ in local]}")
    print(f"delta-rs face  : median {fm:.2f}s ({size / fm / 1e6:.0f} MB/s) runs {[round(t, 2) for t, _ in face]}")
    print(f"face / local throughput: {lm / fm:.0%} (target >= 60%)")


def list_log(creds) -> None:
    from face_support import s3_client

    client = s3_client(creds)
    prefix = creds.location.split("/", 3)[3] + "/_delta_log/"
    for attempt in ("cold", "warm"):
        t0 = time.perf_counter()
        pages = keys = 0
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket="deltaport", Prefix=prefix, PaginationConfig={"PageSize": 1000}
        ):
            pages += 1
            keys += page["KeyCount"]
        took = time.perf_counter() - t0
        print(
            f"list _delta_log ({attempt}): {keys} keys in {pages} pages, {took:.2f}s "
            f"({took / pages * 1000:.1f} ms/page, boto3 parsing included)"
        )


if __name__ == "__main__":
    main()
