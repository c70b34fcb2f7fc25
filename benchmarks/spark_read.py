"""PySpark: ``count(*)`` + ``sum(value)`` over a shared table, deltaSharing vs local parquet.

    python benchmarks/spark_read.py [--size-mb 1024] [--files 64] [--workdir .bench/spark] [--runs 3]

Builds (once, reused while its parameters do not change) a Delta table of ``--files`` parquet
files of about ``--size-mb`` in all: ``id`` long, ``value`` double, ``qty`` int, ``category``
string, one commit. The table is served by ``deltaport serve`` in its own process on 127.0.0.1,
and one SparkSession (``local[2]``) runs the same aggregate two ways in the same run:

* ``deltaSharing``: ``spark.read.format("deltaSharing").load(...)`` (files fetched over HTTP by
  the Python data source, Arrow batches into Spark);
* ``parquet``: ``spark.read.parquet`` of the same files on local disk (Spark's native reader).

For reference it also times ``python-local``: a minimal Python data source that reads the same
local files with pyarrow and yields their record batches, in as many partitions. It has no
network, no sharing protocol and no deletion vectors, so it is the floor of any reader built on
PySpark's Python Data Source API (which cannot prune columns: every column crosses into the JVM,
while the native reader decodes only ``value``). ``python-1col`` is the same reader declaring
and reading ``value`` alone: what any Python data source would cost if the API passed it the
columns a query needs.

Each is run ``--runs`` times after a warm-up; the best time of each is compared with the target
ratio (deltaSharing <= 1.5x parquet).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from serve_process import ServeProcess

TARGET_RATIO = 1.5
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
        table = pa.table({
            "id": pa.array(np.arange(first, first + rows_per_file, dtype=np.int64)),
            "value": pa.array(values),
            "qty": pa.array(rng.integers(0, 1000, rows_per_file, dtype=np.int32)),
            "category": pa.array(CATEGORIES[rng.integers(0, len(CATEGORIES), rows_per_file)]),
        })
        name = f"part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(table, path / name, compression="snappy", row_group_size=1 << 20)
        size = (path / name).stat().st_size
        stats = {"numRecords": rows_per_file, "minValues": {"id": first},
                 "maxValues": {"id": first + rows_per_file - 1}, "nullCount": {"id": 0, "value": 0, "qty": 0, "category": 0}}
        adds.append({"add": {"path": name, "partitionValues": {}, "size": size, "modificationTime": 1_700_000_000_000,
                             "dataChange": True, "stats": json.dumps(stats)}})
        total_rows += rows_per_file
        total_bytes += size
        value_sum += float(values.sum())
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "double", "nullable": True, "metadata": {}},
        {"name": "qty", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "category", "type": "string", "nullable": True, "metadata": {}},
    ]}
    actions = [{"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}},
               {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                             "createdTime": 1_700_000_000_000}}, *adds]
    (path / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    info = {"params": wanted, "rows": total_rows, "bytes": total_bytes, "value_sum": value_sum,
            "build_seconds": round(time.perf_counter() - t0, 1)}
    marker.write_text(json.dumps(info))
    return info


class Server(ServeProcess):
    """``deltaport serve`` in its own process, sharing one table as ``b.d.t`` without auth."""

    def __init__(self, table: Path, workdir: Path) -> None:
        super().__init__({"version": 1, "preSignedUrlTimeoutSeconds": 3600, "shares": [
            {"name": "b", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}]}]}, workdir)
        self.profile = workdir / "bench.share"
        self.profile.write_text(json.dumps({"shareCredentialsVersion": 1, "bearerToken": "unused",
                                            "endpoint": f"{self.base}/delta-sharing"}))


def register_local_readers(spark, files: list[str], partitions: int) -> None:
    """The ``python-local`` reference readers (see the module docstring): all four columns, and
    ``value`` alone (what a reader could do if the API told it which columns a query needs)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    def source(name: str, columns: list[str] | None, schema: str):
        class LocalReader(DataSourceReader):
            def partitions(self):
                return [InputPartition(files[i::partitions]) for i in range(partitions)]

            def read(self, partition):
                for path in partition.value:
                    yield from pq.read_table(path, columns=columns).to_batches(max_chunksize=1 << 17)

        class LocalSource(DataSource):
            @classmethod
            def name(cls) -> str:
                return name

            def schema(self) -> str:
                return schema

            def reader(self, schema):
                return LocalReader()

        return LocalSource

    spark.dataSource.register(source("benchLocalParquet", None, "id long, value double, qty int, category string"))
    spark.dataSource.register(source("benchLocalValueOnly", ["value"], "value double"))


def timed(run) -> tuple[float, tuple]:
    t0 = time.perf_counter()
    result = run()
    return time.perf_counter() - t0, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="approximate table size (default 1024)")
    parser.add_argument("--files", type=int, default=64, help="number of data files (default 64)")
    parser.add_argument("--workdir", default=".bench/spark", help="where the table is built (default .bench/spark)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each reader (default 3)")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    table = workdir / f"table-{args.size_mb}mb-{args.files}"
    info = build_table(table, args.size_mb, args.files)
    print(f"table: {args.files} files, {info['bytes'] / (1 << 20):.0f} MiB, {info['rows']:,} rows "
          f"({table})", flush=True)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from deltaport.spark import register

    server = Server(table, workdir)
    spark = (SparkSession.builder.master("local[2]").appName("deltaport-spark-read-benchmark")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        url = f"{server.profile}#b.d.t"
        shared = spark.read.format("deltaSharing").load(url)
        local = spark.read.parquet(str(table))
        register_local_readers(spark, sorted(str(p) for p in table.glob("*.parquet")),
                               shared.rdd.getNumPartitions())
        floor = spark.read.format("benchLocalParquet").load()
        pruned_floor = spark.read.format("benchLocalValueOnly").load()
        readers = (("deltaSharing", shared), ("parquet", local), ("python-local", floor),
                   ("python-1col", pruned_floor))

        def aggregate(df) -> tuple:
            row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("s")).collect()[0]
            return int(row["n"]), float(row["s"])

        times: dict[str, list[float]] = {name: [] for name, _ in readers}
        results = {}
        for run in range(max(1, args.runs) + 1):  # the first round warms up the JVM and the Python workers
            for name, df in readers:
                seconds, result = timed(lambda: aggregate(df))
                if run:
                    times[name].append(seconds)
                results[name] = result
    finally:
        spark.stop()
        server.stop()

    n, total = results["deltaSharing"]
    for name, (count, value_sum) in results.items():
        assert count == info["rows"], (name, count, info["rows"])
        assert abs(value_sum - info["value_sum"]) <= 1e-6 * abs(info["value_sum"]), (name, value_sum)
    best = {name: min(values) for name, values in times.items()}
    ratio = best["deltaSharing"] / best["parquet"]
    for name, values in times.items():
        mb_s = info["bytes"] / (1 << 20) / best[name]
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:>12}: best {best[name]:6.2f} s  ({mb_s:5.0f} MiB/s)  runs {runs}")
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"count={n:,} sum(value)={total:,.1f}")
    print(f"ratio deltaSharing / parquet = {ratio:.2f}x  ({verdict} the target <= {TARGET_RATIO}x)")
    print(f"ratio python-local / parquet = {best['python-local'] / best['parquet']:.2f}x  "
          "(the Python Data Source API floor on this machine)")
    print(f"ratio python-1col  / parquet = {best['python-1col'] / best['parquet']:.2f}x  "
          "(the floor even with column pruning, which the 4.x API does not offer)")


if __name__ == "__main__":
    main()
