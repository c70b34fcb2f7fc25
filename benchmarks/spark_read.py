"""PySpark: shared tables read by Spark's own parquet reader (staged), against local parquet.

    python benchmarks/spark_read.py [--size-mb 1024] [--files 64] [--workdir .bench/spark] [--runs 3]

Builds (once, reused while its parameters do not change) a Delta table of ``--files`` parquet
files of about ``--size-mb`` in all (``id`` long sorted, ``value`` double, ``qty`` int,
``category`` string, one commit, about 10 row groups per file), a second table over the same
files whose later commit puts deletion vectors (1 % of rows) on 10 % of them, and a third of
6 columns (``day`` date and ``note`` string more) partitioned by ``region``. All are served by
``deltaport serve`` in its own process on 127.0.0.1; one SparkSession (``local[2]``) runs, in the
same run, each case against ``spark.read.parquet`` of the same local files with the same query
(the peer's time includes ``spark.read.parquet(path)``, where Spark lists the files, as a first read
starts from a path; that call's own time is printed too):

* ``count+sum, first read``: ``read_table(columns=["value"])`` with an empty cache (only the
  value chunks are fetched), then ``cached``: the same again;
* ``filter, first read``: ``where="id < <10 %>"`` with ``columns=["id", "value"]``: ~90 % of the
  row groups are ruled out by their statistics and not fetched;
* ``full-row scan`` (``write.format("noop")``) and ``group-by`` over all columns, first read
  (whole files);
* the DV table (whole files, rewritten) and the partitioned table (count+sum, a filter on the
  partition column, full-row scan);
* ``deltaSharing``: the Python data source, for the record; and the fetch throughput of the
  whole table into an empty cache (best of ``--runs``, median beside it), with the CPU seconds
  of the server process and this one.

The JVM is warmed up first (``--warm-up`` rounds of the parquet peers' queries: its JIT compiler
takes about ten count+sums to reach a steady speed, 6.2 s down to 1.4 s on a 2-core machine, and a
case timed on that slope compares two points of a moving curve). Then each case is run
``--runs`` times after a warm-up round and its best time kept; a case and its
peer run in turn within each round (peer, first read), so that a slow spell of the machine falls on
both; the cached read runs in turn with a peer of its own (``count+sum, parquet (beside cached)``),
after the first reads filled the cache, rather than straight after a first read each round, which
no peer follows. Before each timed case the page cache's dirty pages are written out (``os.sync``,
not timed): a first read leaves about 0.7 GB of staged files for the kernel to write back within
30 s, and that writeback slowed whichever case ran next by 0.1-0.2 s, peer or not. How long those
syncs took is printed: it is the writeback a first read leaves behind. Targets are judged on the
best times; the ratio of the medians is printed beside each, since one lucky run on either side
moves a best time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from serve_process import ServeProcess

#: case -> (the parquet case it is compared with, the target ratio)
TARGETS = {
    "count+sum, first read": ("count+sum, parquet", 1.5),
    "filter, first read": ("filter, parquet", 1.5),
    "full-row scan, first read": ("full-row scan, parquet", 1.3),
    "group-by, first read": ("group-by, parquet", 1.3),
    "count+sum, cached": ("count+sum, parquet (beside cached)", 1.05),
    "partitioned count+sum, first read": ("partitioned count+sum, parquet", 1.5),
    "partitioned filter, first read": ("partitioned filter, parquet", 1.5),
    "partitioned full-row scan, first read": ("partitioned full-row scan, parquet", 1.3),
}
GROUPS_PER_FILE = 10
DV_TARGET = 1.2
FETCH_TARGET_GB_S = 1.5  # decimal: 1.5e9 bytes/s
BYTES_PER_ROW = 14.75  # measured for this schema with snappy (random doubles dominate)
CATEGORIES = np.array([f"category_{i:03d}" for i in range(100)])


def base_columns(rng: np.random.Generator, first: int, rows: int) -> dict[str, pa.Array]:
    """``id`` (sorted from ``first``), ``value``, ``qty`` and ``category``: the columns every table shares."""
    return {
        "id": pa.array(np.arange(first, first + rows, dtype=np.int64)),
        "value": pa.array(rng.random(rows) * 1000),
        "qty": pa.array(rng.integers(0, 1000, rows, dtype=np.int32)),
        "category": pa.array(CATEGORIES[rng.integers(0, len(CATEGORIES), rows)]),
    }


def build_table(path: Path, size_mb: int, files: int) -> dict:
    marker = path / "_bench.json"
    wanted = {"size_mb": size_mb, "files": files, "version": 3}
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
        columns = base_columns(rng, first, rows_per_file)
        values = columns["value"].to_numpy()
        table = pa.table(columns)
        name = f"part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        group = max(1, rows_per_file // GROUPS_PER_FILE)
        pq.write_table(table, path / name, compression="snappy", row_group_size=group)
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


REGIONS = ("africa", "americas", "asia", "europe")


def build_partitioned_table(path: Path, size_mb: int, files: int) -> dict:
    """6 columns (``id``, ``value``, ``qty``, ``category``, ``day``, ``note``) in ``files`` files
    partitioned by ``region`` (a folder per value, as Spark writes them)."""
    from deltaport.demo import file_stats

    marker = path / "_bench.json"
    wanted = {"size_mb": size_mb, "files": files, "version": 1}
    if marker.exists() and json.loads(marker.read_text()).get("params") == wanted:
        return json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    (path / "_delta_log").mkdir(parents=True)
    rows_per_file = int(size_mb * (1 << 20) / files / (BYTES_PER_ROW + 6))
    rng = np.random.default_rng(17)
    adds, rows, value_sum, europe = [], 0, 0.0, 0
    for i in range(files):
        region = REGIONS[i % len(REGIONS)]
        first = i * rows_per_file
        columns = base_columns(rng, first, rows_per_file)
        values = columns["value"].to_numpy()
        table = pa.table(
            {
                **columns,
                "day": pa.array(rng.integers(19000, 19365, rows_per_file, dtype=np.int32)).cast(pa.date32()),
                "note": pa.array(CATEGORIES[rng.integers(0, 10, rows_per_file)]),
            }
        )
        name = f"region={region}/part-{i:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        (path / name).parent.mkdir(exist_ok=True)
        group = max(1, rows_per_file // GROUPS_PER_FILE)
        pq.write_table(table, path / name, compression="snappy", row_group_size=group)
        add = {"path": name, "partitionValues": {"region": region}, "size": (path / name).stat().st_size}
        add.update({"modificationTime": 1_700_000_000_000, "dataChange": True, "stats": file_stats(table)})
        adds.append({"add": add})
        rows += rows_per_file
        value_sum += float(values.sum())
        europe += rows_per_file if region == "europe" else 0
    fields = [("id", "long"), ("value", "double"), ("qty", "integer"), ("category", "string"), ("day", "date")]
    fields += [("note", "string"), ("region", "string")]
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}
    metadata = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}}
    metadata.update({"schemaString": json.dumps(schema), "partitionColumns": ["region"], "configuration": {}})
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": metadata}, *adds]
    (path / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    info = {"params": wanted, "rows": rows, "value_sum": value_sum, "europe_rows": europe}
    marker.write_text(json.dumps(info))
    return info


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
    """Times named cases over several rounds (the first is a warm-up) and keeps the best. Cases
    compared with each other run in turn within each round, so that a slow spell of a shared
    machine falls on both sides rather than on one."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.times: dict[str, list[float]] = {}
        self.results: dict[str, tuple] = {}
        self.listing: dict[str, list[float]] = {}  # table -> seconds of each spark.read.parquet(path)
        self.syncs: dict[str, list[float]] = {}  # case -> seconds of the sync after it (writeback it left)
        self.last: str | None = None  # the case timed last, until its writeback is synced

    def parquet(self, spark, path: Path):
        """``spark.read.parquet(path)``, its time kept (Spark lists the files then)."""
        t0 = time.perf_counter()
        frame = spark.read.parquet(str(path))
        self.listing.setdefault(path.name, []).append(time.perf_counter() - t0)
        return frame

    def case(self, name: str, run, *, before=None) -> None:
        self.in_turn([(name, run, before)])

    def in_turn(self, cases: list) -> None:
        """``cases`` = [(name, run, before or None), …], each round running every one in order."""
        for round_ in range(self.runs + 1):
            for name, run, before in cases:
                if before is not None:
                    before()
                self.settle()
                t0 = time.perf_counter()
                result = run()
                seconds = time.perf_counter() - t0
                if round_:
                    self.times.setdefault(name, []).append(seconds)
                    self.last = name
                self.results[name] = result
        self.settle()

    def settle(self) -> None:
        """Write out the dirty pages the last timed case left (its time kept as that case's)."""
        t0 = time.perf_counter()
        os.sync()
        if self.last is not None:
            self.syncs.setdefault(self.last, []).append(time.perf_counter() - t0)
            self.last = None

    def best(self, name: str) -> float:
        return min(self.times[name])

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])


def measure_fetch(spark, url: str, cache: Path, server: Server, size_bytes: int, runs: int) -> str:
    """The whole table staged into an empty cache ``runs`` times: the fastest, as the cases keep
    their best time (one staging is a second of a machine whose spells last longer), with the CPU
    of that run and the median throughput."""
    from deltaport.spark import stage

    rounds = []
    for _ in range(runs):
        shutil.rmtree(cache, ignore_errors=True)
        os.sync()  # as before each case: no round pays for the one before's writeback
        server_cpu, own_cpu, t0 = server.cpu_seconds(), time.process_time(), time.perf_counter()
        fetch = stage(spark, url, stagingLocation=str(cache)).fetched
        seconds = time.perf_counter() - t0
        rounds.append((fetch, seconds, server.cpu_seconds() - server_cpu, time.process_time() - own_cpu))
    speeds = [fetch.bytes / 1e9 / fetch.seconds for fetch, *_ in rounds]
    fetch, seconds, server_cpu, own_cpu = rounds[speeds.index(max(speeds))]
    gb_s = max(speeds)
    verdict = "meets" if gb_s >= FETCH_TARGET_GB_S else "misses"
    return (
        f"fetch, best of {runs}: {fetch.files} files, {fetch.bytes / 1e9:.2f} GB in {fetch.seconds:.2f} s = "
        f"{gb_s:.2f} GB/s ({verdict} >= {FETCH_TARGET_GB_S} GB/s; median {statistics.median(speeds):.2f} GB/s); "
        f"whole stage() {seconds:.2f} s; CPU: server {server_cpu:.2f} s, driver {own_cpu:.2f} s; "
        f"size on disk {size_bytes / (1 << 20):.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="approximate table size (default 1024)")
    parser.add_argument("--files", type=int, default=64, help="number of data files (default 64)")
    parser.add_argument("--workdir", default=".bench/spark", help="where the tables are built (default .bench/spark)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each case (default 3)")
    parser.add_argument("--skip-data-source", action="store_true", help="do not time the deltaSharing source")
    parser.add_argument("--warm-up", type=int, default=10, help="rounds of JVM warm-up before the cases (default 10)")
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import deltaport too
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    table = workdir / f"table-{args.size_mb}mb-{args.files}"
    info = build_table(table, args.size_mb, args.files)
    dv_table = workdir / f"table-{args.size_mb}mb-{args.files}-dv"
    dv_info = build_dv_table(table, dv_table, info)
    parted = workdir / f"table-{args.size_mb}mb-{args.files}-partitioned"
    parted_info = build_partitioned_table(parted, args.size_mb, args.files)
    print(
        f"table: {args.files} files, {info['bytes'] / (1 << 20):.0f} MiB, {info['rows']:,} rows ({table}); "
        f"DV table: {dv_info['dv_files']} files with deletion vectors; partitioned: {parted_info['rows']:,} rows",
        flush=True,
    )

    from pyspark.sql import SparkSession

    from deltaport.spark import register

    server = Server({"t": table, "dv": dv_table, "p": parted}, workdir)
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
    bench = Bench(args.runs)
    try:
        warm_up(spark, table, parted, args.warm_up)
        run_cases(spark, bench, server, workdir, {"t": table, "p": parted}, info)
        fetch_line = measure_fetch(
            spark, f"{server.profile}#b.d.t", workdir / "staging", server, info["bytes"], args.runs
        )
        if not args.skip_data_source:
            shared = spark.read.format("deltaSharing").load(f"{server.profile}#b.d.t")
            bench.case("count+sum, deltaSharing (Python data source)", lambda: count_and_sum(shared))
            bench.case("full-row scan, deltaSharing (Python data source)", lambda: full_scan(shared))
    finally:
        spark.stop()
        server.stop()
    report(bench, info, dv_info, parted_info, fetch_line)


def warm_up(spark, table: Path, parted: Path, rounds: int) -> None:
    """The peers' queries on the local tables until the JVM's JIT compiler has compiled what both
    sides run (the same parquet reader and aggregations): count+sum each round, a full-row scan
    and a group-by every third. Prints the count+sums' times, which should level off."""
    seconds = []
    for round_ in range(rounds):
        t0 = time.perf_counter()
        count_and_sum(spark.read.parquet(str(table)))
        seconds.append(time.perf_counter() - t0)
        count_and_sum(spark.read.parquet(str(parted)))
        if round_ % 3 == 0:
            full_scan(spark.read.parquet(str(table)))
            group_by(spark.read.parquet(str(parted)))
    if seconds:
        print("JVM warm-up, count+sum parquet:", ", ".join(f"{s:.2f}" for s in seconds), "s", flush=True)


def run_cases(spark, bench: Bench, server: Server, workdir: Path, tables: dict[str, Path], info: dict) -> None:
    """Every case against its parquet peer (same files on local disk, same query)."""
    from deltaport.spark import read_table

    cache = workdir / "staging"
    url, dv_url, parted_url = (f"{server.profile}#b.d.{name}" for name in ("t", "dv", "p"))

    def local():  # a first read of local parquet starts from its path, as read_table starts from the share's
        return bench.parquet(spark, tables["t"])

    def parted():
        return bench.parquet(spark, tables["p"])

    def empty_cache() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    def read(target: str, **kw):
        return read_table(spark, target, stagingLocation=str(cache), **kw)

    cut = f"id < {info['rows'] // 10}"
    europe = "region = 'europe'"
    cases = [  # (name, deltaport's query, the parquet peer's query)
        ("count+sum", lambda: count_and_sum(read(url, columns=["value"])), lambda: count_and_sum(local())),
        ("filter", lambda: count_and_sum(read(url, columns=["id", "value"], where=cut)),
         lambda: count_and_sum(local().where(cut))),
        ("full-row scan", lambda: full_scan(read(url)), lambda: full_scan(local())),
        ("group-by", lambda: group_by(read(url)), lambda: group_by(local())),
        ("partitioned count+sum", lambda: count_and_sum(read(parted_url, columns=["value"])),
         lambda: count_and_sum(parted())),
        ("partitioned filter", lambda: count_and_sum(read(parted_url, columns=["value"], where=europe)),
         lambda: count_and_sum(parted().where(europe))),
        ("partitioned full-row scan", lambda: full_scan(read(parted_url)), lambda: full_scan(parted())),
    ]  # fmt: skip
    for name, ours, peer in cases:
        bench.in_turn([(f"{name}, parquet", peer, None), (f"{name}, first read", ours, empty_cache)])
        if name == "count+sum":  # the last first read filled the cache
            bench.in_turn([("count+sum, parquet (beside cached)", peer, None), ("count+sum, cached", ours, None)])
    dv, same = (lambda: count_and_sum(read(dv_url))), (lambda: count_and_sum(read(url)))
    bench.in_turn(
        [
            ("DV table count+sum, first read", dv, empty_cache),
            ("DV table count+sum, cached", dv, None),
            ("count+sum, first read (same run as DV)", same, empty_cache),
        ]
    )


def check(bench: Bench, info: dict, dv_info: dict, parted_info: dict) -> None:
    """Every case answered what the tables hold."""
    expected = {
        "count+sum": (info["rows"], info["value_sum"]),
        "DV table": (dv_info["rows"], dv_info["value_sum"]),
        "partitioned count+sum": (parted_info["rows"], parted_info["value_sum"]),
    }
    for name, result in bench.results.items():
        key = next((k for k in sorted(expected, key=len, reverse=True) if name.startswith(k)), None)
        if key is not None:
            rows, total = expected[key]
            assert result[0] == rows and abs(result[1] - total) <= 1e-6 * abs(total), (name, result)
        if name.startswith("filter"):
            assert result[0] == info["rows"] // 10, (name, result)
        if name.startswith("partitioned filter"):
            assert result[0] == parted_info["europe_rows"], (name, result)


def report(bench: Bench, info: dict, dv_info: dict, parted_info: dict, fetch_line: str) -> None:
    check(bench, info, dv_info, parted_info)
    for name, values in bench.times.items():
        print(f"{name:>52}: best {min(values):6.2f} s   runs {', '.join(f'{v:.2f}' for v in values)}")
    for name, (peer, target) in TARGETS.items():
        ours, theirs = bench.best(name), bench.best(peer)
        verdict = "meets" if ours / theirs <= target else "misses"
        medians = bench.median(name) / bench.median(peer)  # for the record: a lucky run on either side moves the best
        print(
            f"{name:>40}: deltaport {ours:6.2f} s, parquet {theirs:6.2f} s = {ours / theirs:5.2f}x "
            f"({verdict} <= {target}x; medians {medians:.2f}x)"
        )
    for name, seconds in bench.syncs.items():
        if max(seconds) >= 0.05:
            print(f"{name:>52}: left writeback that os.sync took {statistics.median(seconds):.2f} s (median) to write")
    for table, seconds in bench.listing.items():
        median = sorted(seconds)[len(seconds) // 2]
        print(
            f"the parquet peers' spark.read.parquet({table}) alone: median {1000 * median:.0f} ms "
            f"over {len(seconds)} reads (part of each parquet time above)"
        )
    dv_ratio = bench.best("DV table count+sum, first read") / bench.best("count+sum, first read (same run as DV)")
    dv_medians = bench.median("DV table count+sum, first read") / bench.median("count+sum, first read (same run as DV)")
    dv_cached = bench.best("DV table count+sum, cached") / bench.best("count+sum, cached")
    print(
        f"DV table / same table without DVs: first read {dv_ratio:.2f}x, cached {dv_cached:.2f}x "
        f"({'meets' if dv_ratio <= DV_TARGET else 'misses'} <= {DV_TARGET}x on the first read; "
        f"medians {dv_medians:.2f}x)"
    )
    for query in ("count+sum", "full-row scan"):
        name = f"{query}, deltaSharing (Python data source)"
        if name in bench.times:
            print(f"{name:>52} / parquet = {bench.best(name) / bench.best(query + ', parquet'):.2f}x (for the record)")
    print(fetch_line)


if __name__ == "__main__":
    main()
