"""Batch reads through ``spark.read.format("deltaSharing")``, checked against the official client."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import delta_sharing
import httpx
import numpy as np
import pandas as pd
import pytest
from conftest import TOKEN, TYPES_ROWS
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)


def normalize(value):
    """Comparable form of a cell, from Arrow's to_pylist or from pandas (either client)."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, float):
        if value != value:
            return None  # pandas turns nulls of numeric columns into NaN
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return tuple(sorted((k, normalize(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(normalize(v) for v in value)
    return value


def rows_of(data: pd.DataFrame, columns=None) -> list:
    columns = list(columns or data.columns)
    return sorted((tuple(normalize(v) for v in row) for row in data[columns].itertuples(index=False)), key=repr)


@pytest.mark.parametrize(
    "table",
    ["sales", "customers_dv", "events_cdf", "dv", "cdf", "cm_name", "ntz", "partitioned", "decimal", "widening"],
)
def test_snapshot_matches_official_client(spark, sharing, table):
    url = sharing.url(table)
    ours = spark.read.format("deltaSharing").load(url).toPandas()
    official = delta_sharing.load_as_pandas(url)
    assert list(ours.columns) == list(official.columns)
    assert len(ours) == len(official)
    assert rows_of(ours) == rows_of(official)


def test_every_type_is_declared_exactly(spark, sharing):
    df = spark.read.format("deltaSharing").load(sharing.url("types"))
    assert df.schema == StructType(
        [
            StructField("b", BooleanType()),
            StructField("i8", ByteType()),
            StructField("i16", ShortType()),
            StructField("i32", IntegerType(), nullable=False),
            StructField("i64", LongType(), metadata={"comment": "a long"}),
            StructField("f32", FloatType()),
            StructField("f64", DoubleType()),
            StructField("dec", DecimalType(12, 3)),
            StructField("s", StringType()),
            StructField("bin", BinaryType()),
            StructField("d", DateType()),
            StructField("ts", TimestampType()),
            StructField("ntz", TimestampNTZType()),
            StructField(
                "st", StructType([StructField("x", IntegerType(), nullable=False), StructField("y", StringType())])
            ),
            StructField("arr", ArrayType(LongType())),
            StructField("m", MapType(StringType(), DoubleType())),
            StructField("p", StringType()),
        ]
    )
    assert df.schema["i64"].metadata == {"comment": "a long"}
    rows = {r["p"]: r.asDict(recursive=True) for r in df.collect()}
    first = rows["one"]
    expected = TYPES_ROWS[0]
    for name in ("b", "i8", "i16", "i32", "i64", "f32", "f64", "dec", "s", "d", "ntz", "arr", "p"):
        assert first[name] == expected[name], name
    assert bytes(first["bin"]) == expected["bin"]
    assert first["ts"] == expected["ts"].replace(tzinfo=None)  # the session time zone is UTC
    assert first["st"] == {"x": 1, "y": "a"} and first["m"] == {"k": 0.5}
    assert all(v is None for k, v in rows["two"].items() if k not in ("i32", "p"))
    assert df.filter("i32 < 0").count() == 1


def test_version_as_of_through_the_official_load_as_spark(spark, sharing):
    url = sharing.url("sales")
    latest = delta_sharing.load_as_spark(url)
    at_v1 = delta_sharing.load_as_spark(url, version=1)
    at_v0 = delta_sharing.load_as_spark(url, version=0)
    assert (latest.count(), at_v1.count(), at_v0.count()) == (240, 320, 200)
    official = delta_sharing.load_as_pandas(url, version=1)
    assert rows_of(at_v1.toPandas()) == rows_of(official)


def test_the_connectors_load_as_spark_finds_the_session_from_any_thread(spark, sharing):
    """A thread that did not build the session (a web service's, a pool's) still finds it; spark=
    names it explicitly."""
    from concurrent.futures import ThreadPoolExecutor

    import deltaport.client as ours

    url = sharing.url("sales")
    with ThreadPoolExecutor(2) as pool:
        found = pool.submit(ours.load_as_spark, url, version=1)
        given = pool.submit(ours.load_as_spark, url, version=0, spark=spark)
        assert (found.result().count(), given.result().count()) == (320, 200)


def test_timestamp_as_of(spark, sharing):
    url = sharing.url("sales")
    # commits are at 10:00 (v0), 11:00 (v1) and 12:00 (v2) UTC on 2024-06-01
    reader = spark.read.format("deltaSharing")
    assert reader.option("timestampAsOf", "2024-06-01 11:30:00").load(url).count() == 320
    assert reader.option("timestampAsOf", "2024-06-01T10:59:59Z").load(url).count() == 200
    assert delta_sharing.load_as_spark(url, timestamp="2024-06-01T12:00:00Z").count() == 240
    with pytest.raises(Exception, match="versionAsOf' or 'timestampAsOf"):
        spark.read.format("deltaSharing").option("versionAsOf", 1).option("timestampAsOf", "2024-06-01").load(
            url
        ).count()


@pytest.mark.parametrize(("table", "start", "end"), [("events_cdf", 0, 3), ("events_cdf", 2, 2), ("cdf", 0, None)])
def test_change_feed_matches_official_client(spark, sharing, table, start, end):
    url = sharing.url(table)
    reader = spark.read.format("deltaSharing").option("readChangeFeed", "true").option("startingVersion", start)
    if end is not None:
        reader = reader.option("endingVersion", end)
    df = reader.load(url)
    assert df.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    assert df.schema["_commit_timestamp"].dataType == TimestampType()
    ours = df.toPandas()
    official = delta_sharing.load_table_changes_as_pandas(url, start, end)
    columns = [c for c in ours.columns if c != "_commit_timestamp"]
    assert rows_of(ours, columns) == rows_of(official, columns)
    stamps = sorted({int(ts.timestamp() * 1000) for ts in ours["_commit_timestamp"].dt.tz_localize("UTC")})
    assert stamps == sorted(set(int(v) for v in official["_commit_timestamp"]))


def test_change_feed_through_the_official_function(spark, sharing):
    df = delta_sharing.load_table_changes_as_spark(sharing.url("events_cdf"), starting_version=3)
    kinds = sorted(r["_change_type"] for r in df.collect())
    assert kinds == ["delete"] * 4
    by_timestamp = (
        spark.read.format("deltaSharing")
        .option("readChangeFeed", "true")
        .option("startingTimestamp", "2024-06-01 12:30:00")
        .load(sharing.url("events_cdf"))
    )
    assert sorted(r["_commit_version"] for r in by_timestamp.collect()) == [3] * 4


def test_deletion_vectors_and_column_mapping(spark, sharing):
    dv = spark.read.format("deltaSharing").load(sharing.url("customers_dv"))
    assert sorted(r["id"] for r in dv.collect()) == [i for i in range(1, 21) if i not in (2, 5, 8, 16)]
    before_inline_dv = spark.read.format("deltaSharing").option("versionAsOf", 1).load(sharing.url("customers_dv"))
    assert before_inline_dv.count() == 17
    cm = spark.read.format("deltaSharing").load(sharing.url("cm_name"))
    assert cm.columns == ["id", "name", "value"]
    assert not any(f.metadata for f in cm.schema.fields)
    assert cm.filter("name is not null").count() == cm.count() > 0


def _files_for(sharing, table: str, body: dict) -> int:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{sharing.server.url}/delta-sharing/shares/corpus/schemas/default/tables/{table}/query"
    response = httpx.post(url, json=body, headers=headers)
    response.raise_for_status()
    return sum(1 for line in response.text.splitlines() if '"file"' in line[:10])


@pytest.fixture
def filter_pushdown(spark):
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    yield
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")


def test_filters_are_sent_as_json_predicate_hints(spark, sharing, filter_pushdown):
    url = sharing.url("sales")
    df = spark.read.format("deltaSharing").load(url)
    before = len(sharing.recorder.queries("sales"))
    europe = df.filter("region = 'europe' and order_id >= 100")
    rows = europe.collect()
    assert sorted(r["order_id"] for r in rows) == [i for i in range(100, 321) if i % 4 == 0]
    sent = [q for q in sharing.recorder.queries("sales")[before:] if "jsonPredicateHints" in q]
    assert sent, "the scan did not send jsonPredicateHints"
    hint = json.loads(sent[-1]["jsonPredicateHints"])
    assert hint["op"] == "and"
    assert {"op": "column", "name": "region", "valueType": "string"} in _leaves(hint)
    assert _files_for(sharing, "sales", {"jsonPredicateHints": sent[-1]["jsonPredicateHints"]}) < _files_for(
        sharing, "sales", {}
    )

    # stats-based skipping on a data column, IN lists, and filters without a wire form
    assert df.filter("order_id > 300").count() == 15
    assert df.filter("region in ('asia/pacific', 'north america')").count() == 160
    assert (
        df.filter("region like 'eur%' and amount is not null").count()
        == df.filter("substring(region, 1, 3) = 'eur' and amount is not null").count()
    )
    assert df.filter("not (region = 'europe')").count() == 160
    assert df.filter("region <=> 'europe'").count() == 80
    assert (
        df.filter("ts >= timestamp'2024-03-01 00:00:00'").count()
        == df.filter("cast(ts as string) >= '2024-03-01'").count()
    )


def _leaves(node):
    if node.get("op") in ("column", "literal"):
        return [node]
    return [leaf for child in node.get("children", []) for leaf in _leaves(child)]


def test_filters_work_without_pushdown(spark, sharing):
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") in ("false", None)
    before = len(sharing.recorder.queries("sales"))
    df = spark.read.format("deltaSharing").load(sharing.url("sales"))
    assert df.filter("region = 'europe'").count() == 80
    assert not any("jsonPredicateHints" in q for q in sharing.recorder.queries("sales")[before:])


def test_errors_name_the_problem(spark, sharing):
    reader = spark.read.format("deltaSharing")
    with pytest.raises(Exception, match="is not valid"):
        reader.load(sharing.profile + "#corpus.default").collect()
    with pytest.raises(Exception, match="No startingVersion or startingTimestamp"):
        reader.option("readChangeFeed", "true").load(sharing.url("events_cdf")).collect()
    with pytest.raises(Exception, match="does not exist|not found"):
        spark.read.format("deltaSharing").load(sharing.url("missing")).collect()


def test_a_wrong_endpoint_fails_at_once_naming_it(spark, tmp_path):
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}/delta-sharing"
    profile = tmp_path / "wrong.share"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    started = time.monotonic()
    with pytest.raises(Exception, match=f"cannot reach the sharing server at {endpoint}: the connection was refused"):
        spark.read.format("deltaSharing").load(f"{profile}#corpus.default.sales").count()
    assert time.monotonic() - started < 10
