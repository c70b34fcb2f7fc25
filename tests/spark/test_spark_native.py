"""Shared tables read by Spark's own parquet reader (deltaport.spark.read_table), against the
connector's ``load_as_pandas`` and the ``deltaSharing`` data source, on every corpus table the
connector reads."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from conftest import TABLES, RequestRecorder
from pyspark.sql.types import TimestampType
from test_spark_batch import rows_of

import deltaport
import deltaport.client as ds
from deltaport.spark import read_table, stage

TOKEN = "native-token"
#: corpus tables nobody can read: their data files are not in the corpus (the connector fails too)
MISSING_FILES = {"app-txn-with-last-updated", "with_checkpoint_no_last_checkpoint"}
#: tables the server refuses on purpose (unsupported reader features), and the log-only benchmark
NOT_SERVED = {"table-with-geo", "unshredded-variant", "crc-malformed", "300k-add-files-100-col-partitioned"}


def corpus_tables() -> list[str]:
    names = []
    for log in sorted(TABLES.rglob("_delta_log")):
        name = log.parent.relative_to(TABLES).as_posix()
        if name not in MISSING_FILES and name.split("/")[0] not in NOT_SERVED:
            names.append(name)
    return names


def share_name(table: str) -> str:
    return table.replace("/", "_").replace("-", "_")


#: tables with a change data feed, and the first version it can be read from
CDF_TABLES = {
    "cdf-table": 0,
    "cdf-table-with-dv": 0,
    "cdf-table-with-cdc-and-dvs": 0,
    "cdf-table-partitioned": 0,
    "cdf-table-non-partitioned": 0,
    "cdf-column-mapping-name-mode": 1,
    "cdf-column-mapping-id-mode": 1,
    "cdf-table-update-ops": 0,
    "cdf-table-delete-conditional-two-rows": 0,
    "table-with-cdf": 3,
}


class Corpus:
    def __init__(self, server, recorder: RequestRecorder, profile: Path) -> None:
        self.server = server
        self.recorder = recorder
        self.profile = profile

    def url(self, table: str) -> str:
        return f"{self.profile}#corpus.default.{share_name(table)}"

    def file_requests(self) -> int:
        return sum(1 for method, path, _, _ in self.recorder.requests if method == "GET" and "/files/" in path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from servers import RunningServer

    from deltaport.server import create_app, parse_config

    tables = [{"name": share_name(t), "location": str(TABLES / t), "historyShared": True} for t in corpus_tables()]
    config = {
        "version": 1,
        "shares": [{"name": "corpus", "schemas": [{"name": "default", "tables": tables}]}],
        "recipients": [{"name": "native", "tokens": [TOKEN], "shares": ["corpus"]}],
        "preSignedUrlTimeoutSeconds": 900,
    }
    recorder = RequestRecorder(create_app(parse_config(config)))
    server = RunningServer(recorder)
    profile = tmp_path_factory.mktemp("native") / "profile.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    yield Corpus(server, recorder, profile)
    server.stop()


@pytest.fixture
def cache(tmp_path) -> str:
    return str(tmp_path / "staging")


def same_rows(native, other: pd.DataFrame) -> None:
    ours = native.toPandas()
    assert list(ours.columns) == list(other.columns)
    assert len(ours) == len(other)
    assert rows_of(ours) == rows_of(other)


# --- the same rows as the connector and the data source ------------------------------------------------


@pytest.mark.parametrize("table", corpus_tables())
def test_snapshot_same_rows_as_connector_and_data_source(spark, corpus, cache, table):
    url = corpus.url(table)
    native = read_table(spark, url, stagingLocation=cache)
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString() or native.count() == 0
    connector = ds.load_as_pandas(url, progress=False)
    same_rows(native, connector)
    data_source = spark.read.format("deltaSharing").load(url)
    assert [(f.name, f.dataType) for f in native.schema] == [(f.name, f.dataType) for f in data_source.schema]
    same_rows(native, data_source.toPandas())


@pytest.mark.parametrize("table", sorted(CDF_TABLES))
def test_change_feed_same_rows_as_connector_and_data_source(spark, corpus, cache, table):
    url = corpus.url(table)
    start = CDF_TABLES[table]
    native = read_table(spark, url, stagingLocation=cache, readChangeFeed="true", startingVersion=start)
    assert native.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    assert native.schema["_commit_timestamp"].dataType == TimestampType()
    data_source = (
        spark.read.format("deltaSharing").option("readChangeFeed", "true").option("startingVersion", start).load(url)
    )
    same_rows(native, data_source.toPandas())
    connector = ds.load_table_changes_as_pandas(url, starting_version=start, progress=False)
    ours = native.toPandas()
    ours["_commit_timestamp"] = [int(ts.tz_localize("UTC").timestamp() * 1000) for ts in ours["_commit_timestamp"]]
    assert rows_of(ours) == rows_of(connector)


def test_time_travel_and_the_official_function_names(spark, corpus, cache, monkeypatch):
    monkeypatch.setenv("DELTAPORT_STAGING", cache)
    url = corpus.url("cdf-table-non-partitioned")
    for version in (1, 3):
        native = deltaport.load_as_spark(url, version=version)
        same_rows(native, ds.load_as_pandas(url, version=version, progress=False))
    changes = deltaport.load_table_changes_as_spark(url, starting_version=2, ending_version=3)
    assert sorted({r["_commit_version"] for r in changes.collect()}) == [2, 3]


def test_the_session_is_found_from_any_thread(spark, corpus, cache, monkeypatch):
    """A thread that did not build the session finds the process's default one (or is given it)."""
    monkeypatch.setenv("DELTAPORT_STAGING", cache)
    url = corpus.url("cdf-table-non-partitioned")
    outcome: list = []

    def read() -> None:
        try:
            outcome.append(deltaport.load_as_spark(url, version=1).toPandas())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert not isinstance(outcome[0], Exception), outcome[0]
    assert rows_of(outcome[0]) == rows_of(ds.load_as_pandas(url, version=1, progress=False))
    with ThreadPoolExecutor(2) as pool:
        changes = pool.submit(deltaport.load_table_changes_as_spark, url, starting_version=2, ending_version=3)
        given = pool.submit(deltaport.load_as_spark, url, version=3, spark=spark)
        assert sorted({r["_commit_version"] for r in changes.result().collect()}) == [2, 3]
        assert given.result().count() == len(ds.load_as_pandas(url, version=3, progress=False))


# --- Spark's own reader: pruning and pushdown ----------------------------------------------------------


def test_explain_shows_pruned_columns_pushed_and_partition_filters(spark, corpus, cache):
    df = read_table(spark, corpus.url("cdf-table"), stagingLocation=cache)
    query = df.where("id > 3 AND birthday = DATE'2023-12-23'").select("name")
    plan = query._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan
    assert "ReadSchema: struct<name:string>" in plan.replace("id:int,", "")  # id is read for the filter only
    assert "PushedFilters: [IsNotNull(id), GreaterThan(id,3)]" in plan
    assert "PartitionFilters: [isnotnull(__dp_p0" in plan and "2023-12-23" in plan
    expected = ds.load_as_pandas(corpus.url("cdf-table"), progress=False)
    expected = expected[(expected["id"] > 3) & (expected["birthday"].astype(str) == "2023-12-23")]
    assert sorted(r["name"] for r in query.collect()) == sorted(expected["name"])


def test_a_table_read_as_it_is_stored_gets_no_projection(spark, corpus, cache):
    """No partition column, no column mapping: the staged files' columns are the table's, and the
    frame is Spark's relation itself (no analysis step for a projection); otherwise one rename."""
    plain = read_table(spark, corpus.url("cdf-table-non-partitioned"), stagingLocation=cache)
    parted = read_table(spark, corpus.url("cdf-table"), stagingLocation=cache)
    assert plain._jdf.queryExecution().analyzed().toString().startswith("Relation")
    assert parted._jdf.queryExecution().analyzed().toString().startswith("Project")
    for url, frame in ((corpus.url("cdf-table-non-partitioned"), plain), (corpus.url("cdf-table"), parted)):
        expected = ds.load_as_pandas(url, progress=False)
        assert frame.columns == list(expected.columns)
        assert sorted(map(str, frame.toPandas().astype(str).values.tolist())) == sorted(
            map(str, expected.astype(str).values.tolist())
        )


def test_where_is_sent_as_a_predicate_hint_and_applied(spark, corpus, cache):
    url = corpus.url("basic_partitioned")
    before = len(corpus.recorder.requests)
    df = read_table(spark, url, stagingLocation=cache, where="letter = 'a'")
    bodies = [
        json.loads(body)
        for method, path, _, body in corpus.recorder.requests[before:]
        if method == "POST" and path.endswith("/query")
    ]
    assert json.loads(bodies[-1]["jsonPredicateHints"]) == {
        "op": "equal",
        "children": [
            {"op": "column", "name": "letter", "valueType": "string"},
            {"op": "literal", "value": "a", "valueType": "string"},
        ],
    }
    assert {r["letter"] for r in df.collect()} == {"a"}


# --- the cache ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("table", ["v2-checkpoints-parquet-with-sidecars", "cdf-table-with-cdc-and-dvs"])
def test_a_second_read_fetches_nothing(spark, corpus, cache, table):
    url = corpus.url(table)
    first = stage(spark, url, stagingLocation=cache)
    assert first.fetched.files == first.files > 0
    before = corpus.file_requests()
    again = stage(spark, url, stagingLocation=cache)
    assert again.fetched.files == 0 and corpus.file_requests() == before
    assert again.dataframe.count() == first.dataframe.count() == len(ds.load_as_pandas(url, progress=False))
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"


def test_a_truncated_entry_is_fetched_again(spark, corpus, cache):
    url = corpus.url("table-with-dv-small")
    first = stage(spark, url, stagingLocation=cache)
    expected = sorted(r["value"] for r in first.dataframe.collect())
    staged = [p for p in Path(cache).rglob("*.parquet")]
    assert len(staged) == first.files
    for path in staged:
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
    again = stage(spark, url, stagingLocation=cache)
    assert again.fetched.files == first.files
    assert sorted(r["value"] for r in again.dataframe.collect()) == expected


def test_two_pipelines_staging_one_cache_at_once(spark, corpus, cache):
    url = corpus.url("v2-checkpoints-json-with-sidecars")
    results, errors = [], []

    def pipeline() -> None:
        try:
            results.append(stage(spark, url, stagingLocation=cache).dataframe.count())
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pipeline) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [1233, 1233]
    assert not [p for p in Path(cache).rglob(".tmp-*")]


def test_fetching_as_a_spark_job(spark, corpus, cache):
    url = corpus.url("cdf-table-with-dv")
    staged = stage(spark, url, stagingLocation=cache, stagingFetch="spark", stagingThreads=2)
    assert staged.fetched.files == staged.files > 0
    same_rows(staged.dataframe, ds.load_as_pandas(url, progress=False))


# --- empty results ------------------------------------------------------------------------------------


def test_an_empty_table_and_an_empty_change_range(spark, corpus, cache):
    empty = read_table(spark, corpus.url("partition_cm/name"), stagingLocation=cache)
    assert empty.count() == 0 and empty.columns == list(ds.load_as_pandas(corpus.url("partition_cm/name")).columns)
    source = spark.read.format("deltaSharing").load(corpus.url("partition_cm/name"))
    assert source.count() == 0 and source.columns == empty.columns
    url = corpus.url("cdf-table-data-change")  # version 1 changes no data
    native = read_table(spark, url, stagingLocation=cache, readChangeFeed="true", startingVersion=1)
    feed = spark.read.format("deltaSharing").option("readChangeFeed", "true").option("startingVersion", 1).load(url)
    assert native.count() == feed.count() == 0
    assert native.columns == feed.columns


def test_an_error_on_an_executor_is_raised_as_it_is(spark, tmp_path):
    """A file gone from storage fails the fetching task; the driver raises the task's own error in
    one line (not Spark's job failure), and nothing is left half-written."""
    import shutil

    from servers import RunningServer

    from deltaport.client.errors import FileDownloadError
    from deltaport.server import create_app, parse_config

    table = tmp_path / "table"
    shutil.copytree(TABLES / "table-without-dv-small", table)
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}]}],
        "recipients": [{"name": "r", "tokens": [TOKEN], "shares": ["s"]}],
    }
    server = RunningServer(create_app(parse_config(config)))
    try:
        profile = tmp_path / "profile.share"
        endpoint = server.url + "/delta-sharing"
        profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
        for data in table.glob("*.parquet"):
            data.unlink()
        with pytest.raises(FileDownloadError, match="was not found in storage"):
            stage(spark, f"{profile}#s.d.t", stagingLocation=str(tmp_path / "staging"), stagingFetch="spark")
    finally:
        server.stop()
    assert not [p for p in (tmp_path / "staging").rglob("*") if p.is_file()]
