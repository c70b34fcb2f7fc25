"""A classic Spark application on the test cluster (its own process: a process holds one
SparkContext, and the other Spark tests' local one may already run in pytest's).

    python cluster_driver.py <master> <cases.json> <staging folder> <results.pickle>

Reads every case with deltaport's native read and pickles {"results", "executors", "pid"}.
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


def main(master: str, cases_file: str, staging: str, out: str) -> None:
    spark = (
        SparkSession.builder.master(master)
        .appName("deltaport-cluster-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        cases = {name: tuple(case) for name, case in json.loads(Path(cases_file).read_text()).items()}
        results = read_all(spark, cases, staging)
        report = {"results": results, "executors": executors_deltaport(spark), "pid": os.getpid()}
        Path(out).write_bytes(pickle.dumps(report))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
