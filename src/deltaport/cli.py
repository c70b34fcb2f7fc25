"""The ``deltaport`` command line."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import orjson
import typer

from deltaport.admin_cli import admin_app

app = typer.Typer(
    name="deltaport",
    help="Delta Sharing, whole: inspect Delta tables, serve shares, read them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


app.add_typer(admin_app, name="admin")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"deltaport {version('deltaport')}")
        raise typer.Exit()


@app.callback()
def _group(
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print deltaport's version and exit."
    ),
) -> None:
    """Delta Sharing, whole: inspect Delta tables, serve shares, read them back."""


def _fail(exc: Exception) -> None:
    # the operator runs the CLI: show the cause and the table's location, which recipients never see
    typer.echo(f"error: {getattr(exc, 'operator_message', exc)}", err=True)
    raise typer.Exit(code=2)


def _parse_range(text: str) -> tuple[int, Optional[int]]:
    if ".." in text:
        a, b = text.split("..", 1)
        return int(a), (int(b) if b else None)
    return int(text), None


def _json(obj) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()


@app.command()
def inspect(
    table: str = typer.Argument(..., help="Table location: a path, file:// URI or s3://, az://, gs:// URL."),
    version: Optional[int] = typer.Option(None, "--version", "-v", help="Read this version."),
    timestamp: Optional[str] = typer.Option(
        None, "--timestamp", "-t", help="Read the latest version committed at or before this ISO-8601 time."
    ),
    files: bool = typer.Option(False, "--files", help="Print the live files as JSON lines (add actions)."),
    changes: Optional[str] = typer.Option(
        None, "--changes", help="Print the changes of versions FROM[..TO] as JSON lines, commit by commit."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
) -> None:
    """Check a Delta table before sharing it: version, protocol, features, schema, partitions, files, size."""
    from deltaport.delta import DeltaTable
    from deltaport.errors import DeltaportError

    if version is not None and timestamp is not None:
        _fail(ValueError("give --version or --timestamp, not both"))
    try:
        dt = DeltaTable(table)
        if changes is not None:
            try:
                start, end = _parse_range(changes)
            except ValueError:
                _fail(ValueError(f"--changes takes FROM or FROM..TO (versions), not {changes!r}"))
            for change in dt.changes(start, end):
                header: dict[str, Any] = {"version": change.version, "timestamp": change.timestamp}
                if change.commit_info is not None:
                    header["operation"] = change.commit_info.operation
                typer.echo(_json({"commit": header}))
                if change.protocol is not None:
                    typer.echo(_json({"protocol": change.protocol.to_dict()}))
                if change.metadata is not None:
                    typer.echo(_json({"metaData": change.metadata.to_dict()}))
                for kind in ("add", "remove", "cdc"):
                    for action in change.actions(kind):
                        typer.echo(_json({kind: action}))
            return
        snap = dt.snapshot(version, timestamp=timestamp)
        summary = snap.summary()
        if files:
            for action in snap.add_actions():
                typer.echo(_json({"add": action}))
            return
        if as_json:
            typer.echo(_json(summary))
            return
        _print_summary(summary)
    except DeltaportError as exc:
        _fail(exc)
    except ValueError as exc:
        _fail(exc)


@app.command()
def serve(
    config: str = typer.Option(
        ...,
        "--config",
        "-c",
        help="Server config YAML: the reference server's format (with 'shares'), plus optional recipients; "
        "or, without 'shares', a catalog database (catalog.db beside the config, or 'catalog: URL') "
        "administered through the admin API.",
    ),
    host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (default: the config's host)."),
    port: Optional[int] = typer.Option(None, "--port", "-p", help="Port (default: the config's port)."),
    allow_anonymous: bool = typer.Option(
        False,
        "--allow-anonymous",
        help="Serve a config without recipients or authorization (every share to anyone, no token) on an "
        "address other than loopback; without this flag such a server listens only on loopback.",
    ),
    keying_processes: Optional[int] = typer.Option(
        None,
        "--keying-processes",
        min=0,
        max=16,
        help="Worker processes that hash file ids and sign URLs for large /query responses beside the "
        "server process (default: 1 when the machine has 2 or more CPUs, else 0; 0 keeps that work "
        "in the server process).",
    ),
    metrics_token: Optional[str] = typer.Option(
        None,
        "--metrics-token",
        envvar="DELTAPORT_METRICS_TOKEN",
        show_envvar=True,
        help="A token that reads /metrics on the recipients' port (besides the config's 'metricsToken' and "
        "the admin tokens). Prefer the environment variable: a command line is visible to every user.",
    ),
) -> None:
    """Serve the shares of a config file, or of its catalog database, over the Delta Sharing protocol."""
    from deltaport.errors import DeltaportError
    from deltaport.server import create_app, load_config
    from deltaport.server.memory import use_server_pool

    try:
        cfg = load_config(config)
    except DeltaportError as exc:
        _fail(exc)
    host = host or cfg.host
    _log_to_stderr()
    _check_open(cfg, host, allow_anonymous)
    use_server_pool()
    if keying_processes is None:
        keying_processes = 1 if (os.cpu_count() or 1) >= 2 else 0
    listen_port = port if port is not None else cfg.port
    try:
        application = create_app(
            cfg, keying_processes=keying_processes, metrics_token=metrics_token, listener=(host, listen_port)
        )
    except DeltaportError as exc:  # the catalog database cannot be opened, say
        _fail(exc)
    _run(
        application,
        host,
        listen_port,
        cfg,
    )


@app.command()
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
        _json(
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


@app.command()
def conformance(
    profile: str = typer.Option(
        ..., "--profile", help="Recipient profile file (bearer token) of the Delta Sharing server to check."
    ),
    share: Optional[str] = typer.Option(
        None, "--share", help="Check only this share (default: every share the profile reads)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per check instead of a line."),
) -> None:
    """Check any Delta Sharing server against the protocol, black-box, through a recipient profile.

    Each check prints PASS, FAIL or SKIP, its name and the protocol section it tests.

    A failure adds what was expected and what came back; a skip says why the check could not run.

    Exit status: 0 when no check failed, 1 when one did, 2 when the kit could not start (profile, connection, token).
    """
    from deltaport.conformance import KitError, run, summary

    def emit(result) -> None:
        typer.echo(_json(result.to_json()) if as_json else result.line())

    try:
        results = run(profile, share, emit=emit)
    except KitError as exc:
        _fail(exc)
    if not as_json:
        typer.echo(summary(results))
    if any(result.status == "FAIL" for result in results):
        raise typer.Exit(code=1)


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
            _fail(RuntimeError(f"the server did not start on port {port} (is the port in use? try --port)"))
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
    import os
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


def _warm_up() -> None:
    """Pay first-call costs at start-up, not on the first recipient's request (pyarrow imports
    pandas lazily on its first conversion; compute kernels and the JSON reader initialise once)."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        import pandas  # noqa: F401
    except ImportError:
        pass
    table = pj.read_json(io.BytesIO(b'{"a":"x=1"}\n'))
    pc.binary_join_element_wise(pc.replace_substring(table.column("a"), "=", "%3D"), "", "")
    pa.array([1]).to_pylist()


def _run(application, host: str, port: int, cfg) -> None:

    import uvicorn

    _log_to_stderr()
    ssl: dict[str, Any] = {}
    if cfg.ssl is not None and cfg.ssl.self_signed:
        import tempfile
        from pathlib import Path

        from deltaport.server.tls import self_signed_certificate

        cert, key = self_signed_certificate(Path(tempfile.mkdtemp(prefix="deltaport-tls-")), host)
        ssl = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    elif cfg.ssl is not None:
        ssl = {"ssl_certfile": cfg.ssl.certificate_file, "ssl_keyfile": cfg.ssl.certificate_key_file}
        if cfg.ssl.certificate_password_file:
            from pathlib import Path

            ssl["ssl_keyfile_password"] = Path(cfg.ssl.certificate_password_file).read_text().strip()
    _warm_up()
    scheme = f"http{'s' if ssl else ''}"
    shares = len(application.state.service.config.shares)
    typer.echo(f"serving {shares} share(s) on {scheme}://{host}:{port}{cfg.endpoint}")
    admin_app = getattr(application.state, "admin_app", None)
    _say_metrics(application)
    if cfg.catalog_url is not None:
        _say_catalog(cfg, shares, f"{scheme}://{cfg.admin_host or host}:{cfg.admin_port or port}")
    # uvicorn's own access log would print query strings (URL signatures): ours logs paths only
    # proxy_headers off: X-Forwarded-For is trusted only from the configured proxies (server/access.py)
    settings = {"access_log": False, "log_level": "info", "proxy_headers": False, **ssl}
    listeners = [(application, _listen(host, port, "--port (or 'port' in the config)"))]
    if admin_app is not None:
        admin_host = cfg.admin_host or "127.0.0.1"
        listeners.append((admin_app, _listen(admin_host, cfg.admin_port, "'adminPort' in the config")))
    import asyncio

    async def serve_all() -> None:
        await asyncio.gather(
            *(
                uvicorn.Server(uvicorn.Config(app_, host=sock_host, port=sock_port, **settings)).serve(sockets=[sock])
                for app_, sock in listeners
                for sock_host, sock_port in [sock.getsockname()[:2]]
            )
        )

    asyncio.run(serve_all())


def _log_to_stderr() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _listen(host: str, port: int, setting: str):
    """A socket bound to ``host``:``port``, or a one-line error naming ``setting`` (a port in use, an
    address this machine does not have)."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            _fail(ValueError(f"port {port} on {host} is already in use: stop what listens there, or set {setting}"))
        _fail(ValueError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): set {setting} or --host"))
    sock.set_inheritable(True)
    return sock


def _check_open(cfg, host: str, allow_anonymous: bool) -> None:
    """A server with neither ``authorization`` nor recipients serves every share to anyone: refused on
    an address other machines reach unless ``--allow-anonymous`` says it is meant; warned of always."""
    import ipaddress
    import logging

    if cfg.auth_enabled:
        return
    fix = "add 'recipients' (each with its tokens and shares) or 'authorization: {bearerToken: ...}' to the config"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_anonymous:
        _fail(
            ValueError(
                f"the config has no recipients and no authorization, so every share would be served to anyone "
                f"who reaches {host}: {fix}, or pass --allow-anonymous if that is meant"
            )
        )
    logging.getLogger("deltaport.server").warning(
        "the config has no recipients and no authorization: every share is served to anyone, without a token; "
        "to require tokens, %s",
        fix,
    )


def _say_metrics(application) -> None:
    """Where /metrics is served, or how to serve it."""
    from deltaport.server.metrics import ENABLE_METRICS

    if not hasattr(application.state, "metrics_at"):
        return
    where = application.state.metrics_at
    typer.echo(f"metrics: /metrics on {where}" if where else f"metrics: /metrics is not served; {ENABLE_METRICS}")


def _say_catalog(cfg, shares: int, admin_url: str) -> None:
    """Where the catalog is and how to administer it; for an empty one, how to make the first share."""
    from deltaport.catalog.db import display_url

    typer.echo(f"catalog database: {display_url(cfg.catalog_url)}; admin API: {admin_url}/api/2.1/unity-catalog")
    if not cfg.admin_token_hashes:
        typer.echo("no admin token: set DELTAPORT_ADMIN_TOKEN or 'adminTokens' in the config to use the admin API")
    if shares == 0:
        typer.echo(
            "the catalog is empty. Create the first share with the Databricks SDK "
            f"(WorkspaceClient(host='{admin_url}', token=ADMIN_TOKEN)): catalogs.create, schemas.create, "
            "tables.create(..., storage_location=PATH), shares.create, shares.update(ADD the table), "
            "recipients.create (its activation_url gives the recipient a profile), shares.update_permissions; "
            f"or with 'deltaport admin --host {admin_url} ...' (see deltaport admin --help)."
        )


def _print_summary(s: dict) -> None:
    from deltaport.delta.history import format_ms

    p = s["protocol"]
    lines = [
        f"table       {s['table']}",
        f"version     {s['version']}" + (f"  (committed {format_ms(s['timestamp'])})" if s["timestamp"] else ""),
        f"table id    {s['id']}" + (f"  name {s['name']}" if s["name"] else ""),
        f"protocol    reader {p['minReaderVersion']}, writer {p['minWriterVersion']}",
        f"features    {', '.join(s['features']) or '-'}",
        f"partitions  {', '.join(s['partitionColumns']) or '-'}",
        f"files       {s['numFiles']}",
        f"size        {_human(s['sizeInBytes'])} ({s['sizeInBytes']} bytes)",
        "schema",
    ]
    for f in s["schema"]:
        t = f["type"] if isinstance(f["type"], str) else f["type"].get("type")
        lines.append(f"  {f['name']}: {t}{'' if f['nullable'] else ' not null'}")
    if s["configuration"]:
        lines.append("configuration")
        lines.extend(f"  {k} = {v}" for k, v in sorted(s["configuration"].items()))
    typer.echo("\n".join(lines))


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


catalog_app = typer.Typer(
    help="The catalog database: move a config file's shares and recipients into it.", no_args_is_help=True
)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("import")
def catalog_import(
    config: str = typer.Argument(..., help="A server config YAML with 'shares' (and recipients) to import."),
    into: Optional[str] = typer.Option(
        None,
        "--into",
        help="The catalog database: a SQLite file path or a postgresql:// URL (default: catalog.db beside the config).",
    ),
) -> None:
    """Load a config file's shares, tables, recipients (with their tokens) and grants into a catalog
    database, to serve and administer them there. Recipients' profiles keep working."""
    from pathlib import Path

    from deltaport.catalog.db import display_url
    from deltaport.catalog.import_served import import_served
    from deltaport.catalog.store import CatalogDB
    from deltaport.errors import DeltaportError
    from deltaport.server.config import catalog_url, load_config

    try:
        cfg = load_config(config)
        base = Path(config).resolve().parent
        url = catalog_url(into, Path.cwd()) if into else catalog_url("catalog.db", base)
        db = CatalogDB(url)
        try:
            done = import_served(db, cfg.shares, cfg.recipients, cfg.bearer_token_hash)
        finally:
            db.close()
    except DeltaportError as exc:
        _fail(exc)
    counts = f"{done.shares} share(s), {done.tables} table(s), {done.recipients} recipient(s)"
    typer.echo(f"imported {counts} into {display_url(url)}")
    for name in done.expired:
        typer.echo(f"left out recipient '{name}': its expirationTime has passed")
    where = " and set 'catalog' to the database's URL" if into else ""
    typer.echo(f"to serve from it: remove 'shares', 'recipients' and 'authorization' from {config}{where}; restart")


#: Modules an optional part needs -> the extra that installs them.
_EXTRAS = {
    **dict.fromkeys(
        ("fastapi", "fastapi_offline", "uvicorn", "starlette", "pydantic", "cryptography", "prometheus_client"),
        "server",
    ),
    **dict.fromkeys(("sqlalchemy", "alembic"), "server"),
    "psycopg": "postgres",
    "pyspark": "spark",
    "polars": "polars",
    "obstore": "s3",
}


def main() -> None:
    try:
        app(prog_name="deltaport")
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        typer.echo(f"error: this command needs the '{extra}' extra: pip install \"deltaport[{extra}]\"", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
