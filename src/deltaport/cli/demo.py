"""`deltaport demo`: sample tables served and read back, ending in a PySpark pipeline."""

from __future__ import annotations

import os
import sys

import typer

from deltaport.cli.common import fail, to_json
from deltaport.cli.serve import _run


def demo(
    directory: str = typer.Argument(".demo", help="Where to write the demo tables, config and profile."),
    port: int = typer.Option(8080, "--port", "-p", help="Port to serve on."),
    read_back: bool = typer.Option(
        False,
        "--read-back",
        help="Serve, read every table back through the Delta "
        "Sharing protocol, print what came back, and stop (instead of serving on).",
    ),
) -> None:
    """Build sample tables (partitioned, change data feed, deletion vectors), write a server config and a
    recipient profile for them, and serve them."""
    import secrets
    from pathlib import Path

    import yaml

    from deltaport.demo import DEMO_TABLES, build_demo_tables
    from deltaport.server import create_app, parse_config

    root = Path(directory).resolve()
    tables = build_demo_tables(root / "tables")
    token = secrets.token_urlsafe(24)
    config = {
        "version": 1,
        "shares": [
            {
                "name": "demo",
                "schemas": [
                    {
                        "name": "default",
                        "tables": [
                            {"name": name, "location": path, "id": f"demo-{name}", "historyShared": True}
                            for name, path in tables.items()
                        ],
                    }
                ],
            }
        ],
        "recipients": [{"name": "demo-recipient", "tokens": [token], "shares": ["demo"]}],
        "host": "127.0.0.1",
        "port": port,
    }
    (root / "server.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    profile = root / "demo.share"
    profile.write_text(
        to_json(
            {"shareCredentialsVersion": 1, "endpoint": f"http://127.0.0.1:{port}/delta-sharing", "bearerToken": token}
        )
    )
    profile.chmod(0o600)
    for name in tables:
        typer.echo(f"table {name:13s} {DEMO_TABLES[name]}")
    typer.echo(f"config  {root / 'server.yaml'}\nprofile {profile}")
    cfg = parse_config(config)
    if not read_back:
        _run(create_app(cfg), cfg.host, port, cfg)
        return
    _demo_read_back(create_app(cfg), port, str(profile), list(tables))


def _demo_read_back(application, port: int, profile: str, names: list[str]) -> None:
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            fail(RuntimeError(f"the server did not start on port {port} (is the port in use? try --port)"))
        time.sleep(0.05)
    import deltaport.client as delta_sharing

    try:
        client = delta_sharing.SharingClient(profile)
        typer.echo("\nshared tables: " + ", ".join(f"{t.share}.{t.schema}.{t.name}" for t in client.list_all_tables()))
        for name in names:
            url = f"{profile}#demo.default.{name}"
            df = delta_sharing.load_as_pandas(url, progress=False)
            typer.echo(f"\n{name}: {len(df)} rows, version {delta_sharing.get_table_version(url)}")
            typer.echo(df.head(3).to_string(index=False))
        changes = delta_sharing.load_table_changes_as_pandas(
            f"{profile}#demo.default.events_cdf", starting_version=1, progress=False
        )
        typer.echo("\nevents_cdf changes since version 1:")
        typer.echo(changes.groupby(["_commit_version", "_change_type"]).size().to_string())
        _demo_spark_pipeline(profile)
    finally:
        server.should_exit = True
        thread.join(10)


def _demo_spark_pipeline(profile: str) -> None:
    """Read a shared table and its change feed in PySpark, transform, write the result."""
    from pathlib import Path

    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError:
        typer.echo("\n(PySpark is not installed: pip install 'deltaport[spark]' to run the Spark pipeline)")
        return
    from deltaport.spark import read_table

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    out = Path(profile).parent / "output"
    staging = str(Path(profile).parent / "staging")
    typer.echo(f"\nPySpark pipeline (files staged in {staging}, read by Spark's parquet reader, no JVM jar):")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("deltaport-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        sales = read_table(spark, f"{profile}#demo.default.sales", stagingLocation=staging)
        by_region = (
            sales.where(F.col("amount").isNotNull())
            .groupBy("region")
            .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("revenue"))
            .orderBy(F.desc("revenue"))
        )
        by_region.write.mode("overwrite").parquet(str(out / "sales_by_region"))
        typer.echo(f"sales by region -> {out / 'sales_by_region'}")
        for row in by_region.collect():
            typer.echo(f"  {row['region']:15s} {row['orders']:5d} orders  {row['revenue']:10.2f}")
        feed = read_table(
            spark, f"{profile}#demo.default.events_cdf", stagingLocation=staging, readChangeFeed=True, startingVersion=1
        )
        summary = feed.groupBy("_commit_version", "_change_type").count().orderBy("_commit_version", "_change_type")
        summary.write.mode("overwrite").parquet(str(out / "events_changes"))
        typer.echo(f"events change feed by version -> {out / 'events_changes'}")
        for row in summary.collect():
            typer.echo(f"  version {row['_commit_version']}: {row['_change_type']:17s} {row['count']}")
    finally:
        spark.stop()
