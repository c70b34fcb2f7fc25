"""A local SparkSession with ``deltaSharing`` registered, and our server sharing test tables.

Writable tables (copies of the demo tables and a table of every type) live in a temporary
directory, so streaming tests can append commits. Commit timestamps (log file mtimes) are set to
the commits' own ``commitInfo.timestamp`` so time travel by timestamp is deterministic.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"
TOKEN = "test-token-spark"
CORPUS = {
    "dv": "table-with-dv-small",
    "cdf": "cdf-table",
    "cm_name": "cdf-column-mapping-name-mode",
    "ntz": "data-reader-timestamp_ntz",
    "partitioned": "basic_partitioned",
    "decimal": "basic-decimal-table",
    "widening": "type-widening",
}
STREAM_TABLES = ("stream_sales", "stream_events", "stream_restart", "stream_cdf", "stream_limits", "stream_midway")


# --- writing commits ----------------------------------------------------------------------------------


def set_commit_times(table: Path) -> None:
    """Give each ``_delta_log/<v>.json`` the mtime of its ``commitInfo.timestamp``."""
    for log in sorted((table / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and "timestamp" in info:
                seconds = info["timestamp"] / 1000
                os.utime(log, (seconds, seconds))
                break


def latest_version(table: Path) -> int:
    return max(int(p.stem) for p in (table / "_delta_log").glob("*.json"))


def append_rows(table: Path, rows: pa.Table, *, partition_by: tuple[str, ...] = ()) -> int:
    """Commit ``rows`` as one new data file per partition value; returns the new version."""
    from deltaport.demo import file_stats, partition_dir, partition_string, write_commit

    version = latest_version(table) + 1
    keys = [tuple(partition_string(rows.column(c)[i].as_py()) for c in partition_by) for i in range(rows.num_rows)]
    actions = []
    for key in dict.fromkeys(keys):
        part = rows.filter(pa.array([k == key for k in keys])).drop_columns(list(partition_by))
        values = dict(zip(partition_by, key))
        folder = partition_dir(list(partition_by), values) if partition_by else ""
        name = f"part-{version:05d}-{uuid.uuid4()}.c000.snappy.parquet"
        relative = f"{folder}/{name}" if folder else name
        (table / relative).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, table / relative, compression="snappy")
        actions.append(
            {
                "add": {
                    "path": quote(relative, safe="/-_.=~"),
                    "partitionValues": values,
                    "size": (table / relative).stat().st_size,
                    "modificationTime": 1_717_236_000_000 + version * 3_600_000,
                    "dataChange": True,
                    "stats": file_stats(part),
                }
            }
        )
    info = {
        "timestamp": 1_717_236_000_000 + version * 3_600_000,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "isBlindAppend": True,
    }
    write_commit(table, version, [{"commitInfo": info}, *actions])
    set_commit_times(table)
    return version


# --- a table with every type ---------------------------------------------------------------------------

TYPES_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "b", "type": "boolean", "nullable": True, "metadata": {}},
        {"name": "i8", "type": "byte", "nullable": True, "metadata": {}},
        {"name": "i16", "type": "short", "nullable": True, "metadata": {}},
        {"name": "i32", "type": "integer", "nullable": False, "metadata": {}},
        {"name": "i64", "type": "long", "nullable": True, "metadata": {"comment": "a long"}},
        {"name": "f32", "type": "float", "nullable": True, "metadata": {}},
        {"name": "f64", "type": "double", "nullable": True, "metadata": {}},
        {"name": "dec", "type": "decimal(12,3)", "nullable": True, "metadata": {}},
        {"name": "s", "type": "string", "nullable": True, "metadata": {}},
        {"name": "bin", "type": "binary", "nullable": True, "metadata": {}},
        {"name": "d", "type": "date", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "ntz", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
        {
            "name": "st",
            "type": {
                "type": "struct",
                "fields": [
                    {"name": "x", "type": "integer", "nullable": False, "metadata": {}},
                    {"name": "y", "type": "string", "nullable": True, "metadata": {}},
                ],
            },
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "arr",
            "type": {"type": "array", "elementType": "long", "containsNull": True},
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "m",
            "type": {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
            "nullable": True,
            "metadata": {},
        },
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ],
}
TYPES_ROWS = [
    {
        "b": True,
        "i8": 1,
        "i16": 300,
        "i32": 70000,
        "i64": 1 << 40,
        "f32": 1.5,
        "f64": 2.25,
        "dec": Decimal("123.456"),
        "s": "héllo",
        "bin": b"\x00\x01",
        "d": dt.date(2024, 2, 29),
        "ts": dt.datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone.utc),
        "ntz": dt.datetime(2024, 3, 1, 12, 30, 15, 654321),
        "st": {"x": 1, "y": "a"},
        "arr": [1, None, 3],
        "m": [("k", 0.5)],
        "p": "one",
    },
    {
        "b": None,
        "i8": None,
        "i16": None,
        "i32": -1,
        "i64": None,
        "f32": None,
        "f64": None,
        "dec": None,
        "s": None,
        "bin": None,
        "d": None,
        "ts": None,
        "ntz": None,
        "st": None,
        "arr": None,
        "m": None,
        "p": "two",
    },
]


def _write_types_table(path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("b", pa.bool_()),
            pa.field("i8", pa.int8()),
            pa.field("i16", pa.int16()),
            pa.field("i32", pa.int32(), nullable=False),
            pa.field("i64", pa.int64()),
            pa.field("f32", pa.float32()),
            pa.field("f64", pa.float64()),
            pa.field("dec", pa.decimal128(12, 3)),
            pa.field("s", pa.string()),
            pa.field("bin", pa.binary()),
            pa.field("d", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("ntz", pa.timestamp("us")),
            pa.field("st", pa.struct([pa.field("x", pa.int32(), nullable=False), pa.field("y", pa.string())])),
            pa.field("arr", pa.list_(pa.int64())),
            pa.field("m", pa.map_(pa.string(), pa.float64())),
        ]
    )
    from deltaport.demo import write_commit

    actions = []
    for row in TYPES_ROWS:
        data = pa.Table.from_pylist([{k: v for k, v in row.items() if k != "p"}], schema)
        relative = f"p={row['p']}/part-{uuid.uuid4()}.parquet"
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path / relative)
        actions.append(
            {
                "add": {
                    "path": relative,
                    "partitionValues": {"p": row["p"]},
                    "size": (path / relative).stat().st_size,
                    "modificationTime": 1_717_236_000_000,
                    "dataChange": True,
                    "stats": json.dumps({"numRecords": 1}),
                }
            }
        )
    write_commit(
        path,
        0,
        [
            {"commitInfo": {"timestamp": 1_717_236_000_000, "operation": "WRITE"}},
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["timestampNtz"],
                    "writerFeatures": ["timestampNtz"],
                }
            },
            {
                "metaData": {
                    "id": str(uuid.uuid4()),
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(TYPES_SCHEMA),
                    "partitionColumns": ["p"],
                    "configuration": {},
                    "createdTime": 1_717_236_000_000,
                }
            },
            *actions,
        ],
    )
    set_commit_times(path)


# --- the server -----------------------------------------------------------------------------------------


class RequestRecorder:
    """ASGI middleware keeping (method, path, query string, body) of every request, from the moment
    it arrives (a request counted only once the app returned would be missed by a test that reads
    the count while a streamed answer's last bytes are still being sent)."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests: list[tuple[str, str, str, bytearray]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = bytearray()  # filled as the app reads it, before it answers
        self.requests.append((scope["method"], scope["path"], scope.get("query_string", b"").decode(), body))

        async def receive_and_keep():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        await self.app(scope, receive_and_keep, send)

    def queries(self, table: str) -> list[dict]:
        """Bodies of POST /query requests for ``table``."""
        return [
            json.loads(bytes(body) or b"{}")
            for method, path, _, body in self.requests
            if method == "POST" and path.endswith(f"/tables/{table}/query")
        ]


class Sharing:
    def __init__(self, server, recorder: RequestRecorder, profile: str, tables: dict[str, Path]) -> None:
        self.server = server
        self.recorder = recorder
        self.profile = profile
        self.tables = tables

    def url(self, table: str) -> str:
        return f"{self.profile}#corpus.default.{table}"


@pytest.fixture(scope="session")
def sharing(tmp_path_factory):
    from servers import RunningServer

    from deltaport.demo import build_demo_tables
    from deltaport.server import create_app, parse_config

    root = tmp_path_factory.mktemp("spark-tables")
    tables: dict[str, Path] = {name: Path(p) for name, p in build_demo_tables(root / "demo").items()}
    for name in STREAM_TABLES:
        built = build_demo_tables(root / name)
        source = "events_cdf" if name in ("stream_events", "stream_cdf") else "sales"
        tables[name] = Path(built[source])
    tables["types"] = root / "types"
    tables["types"].mkdir()
    _write_types_table(tables["types"])
    for path in tables.values():
        set_commit_times(path)
    locations = {name: str(TABLES / path) for name, path in CORPUS.items()}
    locations.update({name: str(path) for name, path in tables.items()})
    config = {
        "version": 1,
        "shares": [
            {
                "name": "corpus",
                "schemas": [
                    {
                        "name": "default",
                        "tables": [
                            {"name": name, "location": location, "id": f"id-{name}", "historyShared": True}
                            for name, location in locations.items()
                        ],
                    }
                ],
            }
        ],
        "recipients": [{"name": "spark", "tokens": [TOKEN], "shares": ["corpus"]}],
        "preSignedUrlTimeoutSeconds": 900,
    }
    recorder = RequestRecorder(create_app(parse_config(config)))
    server = RunningServer(recorder)
    profile = root / "profile.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    yield Sharing(server, recorder, str(profile), tables)
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    from deltaport.spark import register

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must see this environment's packages
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deltaport-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
