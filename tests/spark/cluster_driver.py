"""A classic Spark application on the test cluster (its own process: a process holds one
SparkContext, and the other Spark tests' local one may already run in pytest's).

    python cluster_driver.py <master> <cases.json> <staging folder> <results.pickle>

Reads every case with deltaport's native read and pickles {"results", "executors", "pid",
"no_dependencies"}: the last is the error of a read whose executors run a Python without
deltaport's dependencies (the system's python3, without pyarrow), made by a second application.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

from cluster_support import executors_deltaport, read_all  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"


def _session(master: str, *conf: tuple[str, str]) -> SparkSession:
    builder = (
        SparkSession.builder.master(master)
        .appName("deltaport-cluster-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _without_dependencies(master: str, url: str, staging: str) -> str:
    """The error of a read whose executors' Python lacks deltaport's dependencies."""
    from deltaport.spark import read_table

    os.environ["PYSPARK_PYTHON"] = SYSTEM_PYTHON  # what a SparkContext gives its executors to run
    spark = _session(master)
    try:
        read_table(spark, url, stagingLocation=staging, stagingFetch="spark").count()
        return "no error"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        spark.stop()


def main(master: str, cases_file: str, staging: str, out: str) -> None:
    spark = _session(master)
    try:
        cases = {name: tuple(case) for name, case in json.loads(Path(cases_file).read_text()).items()}
        results = read_all(spark, cases, staging)
        report = {"results": results, "executors": executors_deltaport(spark), "pid": os.getpid()}
    finally:
        spark.stop()
    url = next(iter(cases.values()))[0]
    report["no_dependencies"] = _without_dependencies(master, url, staging + "-no-dependencies")
    Path(out).write_bytes(pickle.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
