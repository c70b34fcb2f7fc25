"""Spark reads with asynchronous queries (options ``asyncQuery``, ``asyncQueryTimeout``) against a
real server on loopback that answers every asynchronous query with a queryId (threshold 0 ms) and
whose planning can be made slow: the staged read and the ``deltaSharing`` data source poll the
query and read the rows of a synchronous read; the timeout's error; options checked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from conftest import TABLES, RequestRecorder
from servers import RunningServer, SlowPlanning
from test_spark_batch import rows_of

import deltaport.client as ds
from deltaport.client.errors import SharingServerError
from deltaport.server import create_app, parse_config
from deltaport.spark import read_table, register

TOKEN = "spark-async-token-7d2e"


class Served:
    def __init__(self, url: str, recorder: RequestRecorder, slow: SlowPlanning) -> None:
        self.url, self.recorder, self.slow = url, recorder, slow

    def polls(self) -> int:
        return sum(1 for _, path, _, _ in self.recorder.requests if "/queries/" in path)

    def async_queries(self) -> int:
        return sum(1 for body in self.recorder.queries("t") if "idempotencyKey" in body)  # the protocol's spelling


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    table = {"name": "t", "location": str(TABLES / "basic_partitioned"), "id": "id-t"}
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}],
        "recipients": [{"name": "alice", "tokens": [TOKEN], "shares": ["s"]}],
        "asyncQueryThresholdMs": 0,
    }
    slow = SlowPlanning()
    recorder = RequestRecorder(create_app(parse_config(config), store=slow))
    running = RunningServer(recorder)
    profile = tmp_path / "p.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": running.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    yield Served(f"{profile}#s.d.t", recorder, slow)
    running.stop()


def test_a_staged_read_polls_an_async_query_and_reads_the_rows(spark, served, tmp_path):
    served.slow.delay = 0.2
    frame = read_table(spark, served.url, asyncQuery="true", stagingLocation=str(tmp_path / "cache"))
    assert served.async_queries() == 1 and served.polls() >= 1
    assert rows_of(frame.toPandas()) == rows_of(ds.load_as_pandas(served.url, progress=False))


def test_the_data_source_polls_an_async_query_too(spark, served):
    register(spark)
    frame = spark.read.format("deltaSharing").option("asyncQuery", "true").load(served.url)
    assert rows_of(frame.toPandas()) == rows_of(ds.load_as_pandas(served.url, progress=False))
    assert served.async_queries() >= 1 and served.polls() >= 1


def test_without_the_option_the_query_is_synchronous(spark, served, tmp_path):
    read_table(spark, served.url, stagingLocation=str(tmp_path / "cache")).count()
    assert served.async_queries() == 0 and served.polls() == 0


def test_a_query_still_pending_after_the_timeout_fails_naming_it(spark, served, tmp_path):
    served.slow.delay = 3.0
    started = time.monotonic()
    with pytest.raises(SharingServerError, match="still pending after 1 s"):
        read_table(spark, served.url, asyncQuery="true", asyncQueryTimeout="1s", stagingLocation=str(tmp_path))
    assert time.monotonic() - started < 6


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"asyncQuery": "yes"}, "Invalid value 'yes' for option 'asyncQuery'"),
        ({"asyncQueryTimeout": "10s"}, "set asyncQuery=true with it"),
        ({"asyncQuery": "true", "asyncQueryTimeout": "soon"}, "for option 'asyncQueryTimeout'"),
        ({"asyncQuery": "true", "asyncQueryTimeout": "0"}, "a positive duration"),
        ({"asyncQueryTimout": "10s"}, "asyncQueryTimeout"),
    ],
)
def test_bad_async_options_are_refused_before_any_request(spark, served, options, message):
    with pytest.raises(Exception, match=message):
        read_table(spark, served.url, **options)
    assert not served.recorder.requests
