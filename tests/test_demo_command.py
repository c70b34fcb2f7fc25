"""`deltaport demo --read-back`: the README's first command, end to end (server, connector, PySpark)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq


def test_demo_serves_reads_back_and_runs_the_spark_pipeline(tmp_path):
    import pyspark  # noqa: F401
    from servers import free_port

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "deltaport"),
            "demo",
            str(tmp_path),
            "--read-back",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "shared tables: demo.default.sales, demo.default.events_cdf, demo.default.customers_dv" in text
    assert "sales: 240 rows, version 2" in text and "customers_dv: 16 rows, version 2" in text
    by_region = pq.read_table(tmp_path / "output" / "sales_by_region")
    assert sorted(by_region.column("region").to_pylist()) == ["asia/pacific", "europe", "north america"]
    changes = pq.read_table(tmp_path / "output" / "events_changes").to_pylist()
    assert {(r["_commit_version"], r["_change_type"], r["count"]) for r in changes} == {
        (1, "insert", 10),
        (2, "update_preimage", 4),
        (2, "update_postimage", 4),
        (3, "delete", 4),
    }
    assert (tmp_path / "demo.share").stat().st_mode & 0o077 == 0  # the profile holds a token
