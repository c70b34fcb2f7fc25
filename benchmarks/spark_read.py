"""PySpark: shared tables read by Spark's own parquet reader (staged), against local parquet.

    python benchmarks/spark_read.py [--size-mb 1024] [--files 64] [--workdir .bench/spark] [--runs 3]

Builds (once, reused while its parameters do not change) a Delta table of ``--files`` parquet
files of about ``--size-mb`` in all (``id`` long, ``value`` double, ``qty`` int, ``category``
string, one commit), and a second table over the same files whose later commit puts deletion
vectors (1 % of rows) on 10 % of them. Both are served by ``deltaport serve`` in its own process
on 127.0.0.1; one SparkSession (``local[2]``) runs, in the same run:

* ``parquet``: ``spark.read.parquet`` of the same files on local disk (the peer);
* ``staged, first read``: ``deltaport.spark.read_table`` with an empty cache (plan, fetch every
  file over loopback, read with Spark's parquet reader);
* ``staged, cached``: the same with the files already in the cache (plan, check, read);
* ``staged DV table``: the table with deletion vectors, first read and cached;
* ``deltaSharing``: the Python data source, for the record.

Queries: count + sum(value); a full-row scan (``write.format("noop")``); a group-by over all
columns. Each case is run ``--runs`` times after a warm-up round and its best time kept. Fetch
throughput is the staging of the whole table into an empty cache, with the CPU seconds the
server process and this (driver) process spent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from serve_process import ServeProcess

TARGETS = {
    "count+sum, first read": 2.5,
    "count+sum, cached": 1.2,
    "full-row scan, first read": 1.5,
    "group-by, first read": 1.5,
}
DV_TARGET = 1.2
FETCH_TARGET_MB_S = 800
BYTES_PER_ROW = 14.75  # measured for this schema with snappy (random doubles dominate)
CATEGORIES = np.array([f"category_{i:03d}" for i in range(100)])


def build_table(path: Path, size_mb: int, files: int) -> dict:
    marker = path / "_bench.json"
    wanted = {"size_mb": size_mb, "files": files, "version": 2}
    if marker.exists() and json.loads(marker.read_text()).get("params") == wanted:
        return json.loads(marker.read_text())
    if path.exists():
        import shutil

        shutil.rmtree(path)
    (path / "_delta_log").mkdir(parents=True)
    rows_per_file = int(size_mb * (1 << 20) / files / BYTES_PER_ROW)
    rng = np.random.default_rng(7)
    adds, total_rows, total_bytes, value_sum = [], 0, 0, 0.0
    t0 = time.perf_counter()
    for i in range(files):
        first = i * rows_per_file
        values = rng.random(rows_per_file) * 1000
        table = pa.table(
            {
                "id": pa.array(np.arange(first, first + rows_per_file, dtype=np.int64)),
                "value": pa.array(values),
                "qty": pa.array(rng.integers(0, 1000, rows_per_file, dtype=np.int32)),
                "category": pa.array(CATEGORIES[rng.integers(0, len(CATEGORIES), rows_per_file)]),
            }
        )
        name = f"part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(table, path / name, compression="snappy", row_group_size=1 << 20)
        size = (path / name).stat().st_size
        stats = {
            "numRecords": rows_per_file,
            "minValues": {"id": first},
            "maxValues": {"id": first + rows_per_file - 1},
            "nullCount": {"id": 0, "value": 0, "qty": 0, "category": 0},
        }
        adds.append(
            {
                "add": {
                    "path": name,
                    "partitionValues": {},
                    "size": size,
                    "modificationTime": 1_700_000_000_000,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                }
            }
        )
        total_rows += rows_per_file
        total_bytes += size
        value_sum += float(values.sum())
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "qty", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "category", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1_700_000_000_000,
            }
        },
        *adds,
    ]
    (path / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    info = {
        "params": wanted,
        "rows": total_rows,
        "bytes": total_bytes,
        "value_sum": value_sum,
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    marker.write_text(json.dumps(info))
    return info


def build_dv_table(source: Path, path: Path, info: dict) -> dict:
    """The table at ``source`` (files hard-linked), plus a commit that deletes 1 % of the rows of
    10 % of its files with on-disk deletion vectors."""
    from deltaport.dv import write_dv_file_many

    marker = path / "_bench.json"
    if marker.exists() and json.loads(marker.read_text()).get("source") == info:
        return json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    (path / "_delta_log").mkdir(parents=True)
    for data in source.glob("*.parquet"):
        os.link(data, path / data.name)
    shutil.copy(source / "_delta_log" / f"{0:020d}.json", path / "_delta_log")
    adds = [
        json.loads(line)["add"]
        for line in (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
        if "add" in json.loads(line)
    ]
    chosen = adds[::10][: max(1, len(adds) // 10)]
    rng = np.random.default_rng(11)
    rows_per_file = json.loads(chosen[0]["stats"])["numRecords"]
    row_sets = [np.sort(rng.choice(rows_per_file, rows_per_file // 100, replace=False)) for _ in chosen]
    descriptors = write_dv_file_many(path, row_sets)
    deleted, deleted_sum = 0, 0.0
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_100_000, "operation": "DELETE"}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors"],
            }
        },
    ]
    for add, rows, dv in zip(chosen, row_sets, descriptors):
        values = pq.read_table(path / add["path"], columns=["value"]).column("value").to_numpy()
        deleted += len(rows)
        deleted_sum += float(values[rows].sum())
        actions.append(
            {
                "remove": {
                    "path": add["path"],
                    "deletionTimestamp": 1_700_000_100_000,
                    "dataChange": True,
                    "size": add["size"],
                    "partitionValues": {},
                }
            }
        )
        actions.append({"add": {**add, "modificationTime": 1_700_000_100_000, "deletionVector": dv.to_dict()}})
    (path / "_delta_log" / f"{1:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    result = {
        "source": info,
        "rows": info["rows"] - deleted,
        "value_sum": info["value_sum"] - deleted_sum,
        "dv_files": len(chosen),
    }
    marker.write_text(json.dumps(result))
    return result


class Server(ServeProcess):
    """``deltaport serve`` in its own process, sharing the tables as ``b.d.<name>`` without auth."""

    def __init__(self, tables: dict[str, Path], workdir: Path) -> None:
        super().__init__(
            {
                "version": 1,
                "preSignedUrlTimeoutSeconds": 3600,
                "shares": [
                    {
                        "name": "b",
                        "schemas": [
                            {
                                "name": "d",
                                "tables": [{"name": name, "location": str(table)} for name, table in tables.items()],
                            }
                        ],
                    }
                ],
            },
            workdir,
        )
        self.profile = workdir / "bench.share"
        self.profile.write_text(
            json.dumps(
                {"shareCredentialsVersion": 1, "bearerToken": "unused", "endpoint": f"{self.base}/delta-sharing"}
            )
        )

    def cpu_seconds(self) -> float:
        import psutil

        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system


def count_and_sum(df) -> tuple:
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("s")).collect()[0]
    return int(row["n"]), float(row["s"])


def full_scan(df) -> tuple:
    df.write.format("noop").mode("overwrite").save()
    return ()


def group_by(df) -> tuple:
    from pyspark.sql import functions as F

    rows = df.groupBy("category").agg(F.count(F.lit(1)), F.sum("value"), F.sum("qty"), F.max("id")).collect()
    return (len(rows),)


class Bench:
    """Times named cases over several rounds (the first is a warm-up) and keeps the best."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.times: dict[str, list[float]] = {}
        self.results: dict[str, tuple] = {}

    def case(self, name: str, run, *, before=None) -> None:
        for round_ in range(self.runs + 1):
            if before is not None:
                before()
            t0 = time.perf_counter()
            result = run()
            seconds = time.perf_counter() - t0
            if round_:
                self.times.setdefault(name, []).append(seconds)
            self.results[name] = result

    def best(self, name: str) -> float:
        return min(self.times[name])


def measure_fetch(spark, url: str, cache: Path, server: Server, size_bytes: int) -> str:
    from deltaport.spark import stage

    shutil.rmtree(cache, ignore_errors=True)
    server_cpu, own_cpu, t0 = server.cpu_seconds(), time.process_time(), time.perf_counter()
    staged = stage(spark, url, stagingLocation=str(cache))
    seconds = time.perf_counter() - t0
    server_cpu, own_cpu = server.cpu_seconds() - server_cpu, time.process_time() - own_cpu
    fetch = staged.fetched
    mb_s = fetch.bytes / (1 << 20) / fetch.seconds
    verdict = "meets" if mb_s >= FETCH_TARGET_MB_S else "misses"
    return (
        f"fetch: {fetch.files} files, {fetch.bytes / (1 << 20):.0f} MiB in {fetch.seconds:.2f} s = {mb_s:.0f} MiB/s "
        f"({verdict} >= {FETCH_TARGET_MB_S}); whole stage() {seconds:.2f} s; CPU: server {server_cpu:.2f} s, "
        f"driver {own_cpu:.2f} s; size on disk {size_bytes / (1 << 20):.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="approximate table size (default 1024)")
    parser.add_argument("--files", type=int, default=64, help="number of data files (default 64)")
    parser.add_argument("--workdir", default=".bench/spark", help="where the tables are built (default .bench/spark)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each case (default 3)")
    parser.add_argument("--skip-data-source", action="store_true", help="do not time the deltaSharing source")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import deltaport too
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    table = workdir / f"table-{args.size_mb}mb-{args.files}"
    info = build_table(table, args.size_mb, args.files)
    dv_table = workdir / f"table-{args.size_mb}mb-{args.files}-dv"
    dv_info = build_dv_table(table, dv_table, info)
    print(
        f"table: {args.files} files, {info['bytes'] / (1 << 20):.0f} MiB, {info['rows']:,} rows ({table}); "
        f"DV table: {dv_info['dv_files']} files with deletion vectors",
        flush=True,
    )

    from pyspark.sql import SparkSession

    from deltaport.spark import read_table, register

    server = Server({"t": table, "dv": dv_table}, workdir)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("deltaport-spark-read-benchmark")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    cache = workdir / "staging"
    bench = Bench(args.runs)
    try:
        url, dv_url = f"{server.profile}#b.d.t", f"{server.profile}#b.d.dv"
        local = spark.read.parquet(str(table))

        def empty_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        def staged(target: str):
            return lambda query: lambda: query(read_table(spark, target, stagingLocation=str(cache)))

        for query_name, query in (("count+sum", count_and_sum), ("full-row scan", full_scan), ("group-by", group_by)):
            bench.case(f"{query_name}, parquet", lambda q=query: q(local))
            bench.case(f"{query_name}, first read", staged(url)(query), before=empty_cache)
        bench.case("count+sum, cached", staged(url)(count_and_sum))
        bench.case("DV table count+sum, first read", staged(dv_url)(count_and_sum), before=empty_cache)
        bench.case("count+sum, first read (same run as DV)", staged(url)(count_and_sum), before=empty_cache)
        bench.case("DV table count+sum, cached", staged(dv_url)(count_and_sum))
        fetch_line = measure_fetch(spark, url, cache, server, info["bytes"])
        if not args.skip_data_source:
            shared = spark.read.format("deltaSharing").load(url)
            bench.case("count+sum, deltaSharing (Python data source)", lambda: count_and_sum(shared))
            bench.case("full-row scan, deltaSharing (Python data source)", lambda: full_scan(shared))
    finally:
        spark.stop()
        server.stop()
    report(bench, info, dv_info, fetch_line)


def report(bench: Bench, info: dict, dv_info: dict, fetch_line: str) -> None:
    for name, result in bench.results.items():
        if name.startswith("count+sum"):
            assert result[0] == info["rows"], (name, result)
            assert abs(result[1] - info["value_sum"]) <= 1e-6 * abs(info["value_sum"]), (name, result)
        if name.startswith("DV table"):
            assert result[0] == dv_info["rows"], (name, result)
            assert abs(result[1] - dv_info["value_sum"]) <= 1e-6 * abs(dv_info["value_sum"]), (name, result)
    for name, values in bench.times.items():
        print(f"{name:>52}: best {min(values):6.2f} s   runs {', '.join(f'{v:.2f}' for v in values)}")
    for name, target in TARGETS.items():
        peer = bench.best(name.split(",")[0] + ", parquet")
        ratio = bench.best(name) / peer
        print(f"{name:>40} / parquet = {ratio:5.2f}x  ({'meets' if ratio <= target else 'misses'} <= {target}x)")
    dv_ratio = bench.best("DV table count+sum, first read") / bench.best("count+sum, first read (same run as DV)")
    dv_cached = bench.best("DV table count+sum, cached") / bench.best("count+sum, cached")
    print(
        f"DV table / same table without DVs: first read {dv_ratio:.2f}x, cached {dv_cached:.2f}x "
        f"({'meets' if dv_ratio <= DV_TARGET else 'misses'} <= {DV_TARGET}x on the first read)"
    )
    for query in ("count+sum", "full-row scan"):
        name = f"{query}, deltaSharing (Python data source)"
        if name in bench.times:
            print(f"{name:>52} / parquet = {bench.best(name) / bench.best(query + ', parquet'):.2f}x (for the record)")
    print(fetch_line)


if __name__ == "__main__":
    main()
