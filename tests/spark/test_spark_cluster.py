"""deltaport's native read on a real standalone cluster (a master, two one-core workers), through
a classic application and through a Spark Connect server: the same rows as ``load_as_arrow``, the
files fetched by the executors' Python workers (never by the driver or the Connect client), a
partial read (``columns=``) staging only column chunks on the executors, the session found from
other threads, and streaming through Connect.

The parts start once for the module and run in turn (each application takes both cores): the
classic application first, in its own process (cluster_driver.py), then the Connect server.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from cluster_support import ConnectServer, FetchRecorder, SparkCluster, executors_deltaport, read_all
from conftest import TABLES
from test_spark_batch import rows_of
from test_spark_native import CDF_TABLES, corpus_tables, share_name

import deltaport
import deltaport.client as ds
from deltaport.client.errors import ConnectionFailed
from deltaport.spark import read_table
from deltaport.spark.staging import StagingError

TOKEN = "cluster-token"
TABLE_NAMES = {
    "dv": "table-with-dv-small",
    "cm": "cdf-column-mapping-name-mode",
    "cm_id": "cdf-column-mapping-id-mode",
    "partitioned": "basic_partitioned",
    "history": "cdf-table-non-partitioned",
    "cdc_dv": "cdf-table-with-cdc-and-dvs",
    "sidecars": "v2-checkpoints-parquet-with-sidecars",
    "widening": "type-widening",
    "empty": "partition_cm/name",
}
#: a table also offered for directory access (its folder through the server's read-only S3 face)
DIR_MODES = {"accessModes": ["url", "dir"]}
#: name: (table, options, where the read is made: "here" by read_table, "thread" by load_*_as_spark)
CASES = {
    "deletion_vectors": ("dv", {}, "here"),
    "column_mapping": ("cm", {}, "here"),
    "partitions": ("partitioned", {}, "here"),
    "many_files": ("sidecars", {}, "here"),
    "type_widening": ("widening", {}, "here"),
    "time_travel": ("history", {"versionAsOf": 1}, "here"),
    "change_feed": ("cdc_dv", {"readChangeFeed": "true", "startingVersion": 0}, "here"),
    "change_feed_column_mapping": ("cm_id", {"readChangeFeed": "true", "startingVersion": 1}, "here"),
    "empty": ("empty", {}, "here"),
    "time_travel_on_a_thread": ("history", {"versionAsOf": 3}, "thread"),
    "change_feed_on_a_thread": ("history", {"readChangeFeed": "true", "startingVersion": 2}, "thread"),
}
# ... and every corpus table the connector reads, as a snapshot and (where it has one) a change feed
TABLE_NAMES.update({f"corpus_{share_name(t)}": t for t in corpus_tables()})
CASES.update({f"corpus {t}": (f"corpus_{share_name(t)}", {}, "here") for t in corpus_tables()})
CASES.update(
    {
        f"corpus {t} changes": (f"corpus_{share_name(t)}", {"readChangeFeed": "true", "startingVersion": v}, "here")
        for t, v in CDF_TABLES.items()
    }
)


class Served:
    def __init__(self, server, recorder: FetchRecorder, profile: Path) -> None:
        self.server = server
        self.recorder = recorder
        self.profile = profile

    def url(self, key: str) -> str:
        return f"{self.profile}#corpus.default.{key}"

    def cases(self) -> dict[str, tuple[str, dict, str]]:
        return {name: (self.url(key), options, via) for name, (key, options, via) in CASES.items()}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def cluster(workdir):
    started = SparkCluster(workdir)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def served(workdir):
    from servers import RunningServer

    from deltaport.server import create_app, parse_config

    tables = [
        {"name": key, "location": str(TABLES / table), "historyShared": True} for key, table in TABLE_NAMES.items()
    ]
    tables.append({"name": "dir", "location": str(TABLES / "basic_partitioned"), "historyShared": True, **DIR_MODES})
    tables.append({"name": "wide", "location": str(_wide_table(workdir / "wide")), "historyShared": True})
    config = {
        "version": 1,
        "shares": [{"name": "corpus", "schemas": [{"name": "default", "tables": tables}]}],
        "recipients": [{"name": "cluster", "tokens": [TOKEN], "shares": ["corpus"]}],
        "preSignedUrlTimeoutSeconds": 900,
    }
    recorder = FetchRecorder(create_app(parse_config(config)))
    server = RunningServer(recorder)
    profile = workdir / "profile.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    yield Served(server, recorder, profile)
    server.stop()


def _wide_table(path: Path) -> Path:
    """Two files of 2.6 MB each (the corpus's files are all smaller than the footer's fetched tail,
    so they are fetched whole even for a partial read)."""
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    for _ in range(2):
        columns = {name: rng.random(100_000) for name in ("a", "b")}
        write_deltalake(str(path), pa.table({"id": np.arange(100_000), **columns}), mode="append")
    return path


_expected: dict[str, pd.DataFrame] = {}


def expected(served: Served, name: str) -> pd.DataFrame:
    """The connector's rows of a case (read once, for both kinds of session)."""
    if name not in _expected:
        key, options, _ = CASES[name]
        url = served.url(key)
        if options.get("readChangeFeed"):
            table = ds.load_table_changes_as_arrow(url, starting_version=options["startingVersion"])
        else:
            table = deltaport.load_as_arrow(url, version=options.get("versionAsOf"))
        _expected[name] = table.to_pandas()
    return _expected[name]


def same_rows(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    assert list(ours.columns) == list(theirs.columns)
    if "_commit_timestamp" in ours.columns:  # Spark's timestamp; the connector's epoch milliseconds
        ours = ours.assign(
            _commit_timestamp=[int(ts.tz_localize("UTC").timestamp() * 1000) for ts in ours["_commit_timestamp"]]
        )
    assert len(ours) == len(theirs)
    assert rows_of(ours) == rows_of(theirs)


class Phase:
    """What one kind of session read, and which processes fetched the shared files meanwhile."""

    def __init__(
        self,
        results: dict,
        executors: list[str],
        fetches: list[tuple[int, bool]],
        driver_pids: set[int],
        no_dependencies: str = "",
    ):
        self.no_dependencies = no_dependencies  # a classic read's error on executors without pyarrow
        self.results = results
        self.executors = executors
        self.fetches = fetches
        self.driver_pids = driver_pids


@pytest.fixture(scope="module")
def classic(cluster, served, workdir) -> Phase:
    """A classic application on the cluster, in its own process, reads every case."""
    cases = workdir / "cases.json"
    cases.write_text(json.dumps(served.cases()))
    out = workdir / "classic.pickle"
    before = len(served.recorder.fetches)
    driver = Path(__file__).parent / "cluster_driver.py"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    run = subprocess.run(
        [sys.executable, str(driver), cluster.master, str(cases), str(workdir / "staging-classic"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = pickle.loads(out.read_bytes())
    fetches = served.recorder.fetches[before:]
    return Phase(report["results"], report["executors"], fetches, {report["pid"]}, report["no_dependencies"])


@pytest.fixture(scope="module")
def connect_server(cluster, classic, workdir):
    """A Spark Connect server on the cluster (after the classic application: each takes both cores)."""
    server = ConnectServer(cluster, workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def connect_session(connect_server):
    """A client session of the Connect server in this process; pyspark's functions answer for
    Connect meanwhile."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = ConnectSession.builder.remote(connect_server.url).getOrCreate()
    try:
        yield session
    finally:
        session.stop()
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture(scope="module")
def connect(connect_session, served, workdir) -> Phase:
    """The Connect session reads every case, from this process."""
    before = len(served.recorder.fetches)
    results = read_all(connect_session, served.cases(), str(workdir / "staging-connect"))
    fetches = served.recorder.fetches[before:]
    return Phase(results, executors_deltaport(connect_session), fetches, {os.getpid()})


@pytest.fixture(params=["classic", "connect"])
def phase(request) -> Phase:
    return request.getfixturevalue(request.param)


# --- the same rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_rows_as_load_as_arrow(phase, served, name):
    ours = phase.results[name]
    assert isinstance(ours, pd.DataFrame), ours
    same_rows(ours, expected(served, name))


# --- who fetched ----------------------------------------------------------------------------------------


def test_the_executors_fetched_every_file(phase):
    assert phase.fetches, "no shared file was fetched"
    pids = {pid for pid, _ in phase.fetches}
    assert not pids & (phase.driver_pids | {os.getpid()}), "the driver fetched files"
    assert all(executor for _, executor in phase.fetches), phase.fetches
    assert len(pids) >= 2  # both executors took a share


def test_the_executors_run_the_drivers_deltaport(phase):
    """The driver ships its own deltaport: the executors import it from the zip, not from the
    copy installed in their environment."""
    assert phase.executors and all(".zip" in f and "/deltaport-" in f for f in phase.executors), phase.executors


# --- Connect only ---------------------------------------------------------------------------------------


def test_the_connect_session_is_found_from_a_pool(connect_session, served, workdir):
    url = served.url("history")
    staging = str(workdir / "staging-pool")
    with ThreadPoolExecutor(2) as pool:
        snapshot = pool.submit(deltaport.load_as_spark, url, version=2, stagingLocation=staging)
        changes = pool.submit(deltaport.load_table_changes_as_spark, url, starting_version=3, stagingLocation=staging)
        same_rows(snapshot.result().toPandas(), deltaport.load_as_arrow(url, version=2).to_pandas())
        same_rows(changes.result().toPandas(), ds.load_table_changes_as_arrow(url, starting_version=3).to_pandas())


def test_a_partial_read_through_connect_stages_column_chunks_on_the_executors(connect_session, served, workdir):
    """``columns=`` through Connect: the executors stage entries of only the chunks asked for
    (``.part.parquet``), and the rows are load_as_arrow's column."""
    url = served.url("wide")
    staging = workdir / "staging-partial"
    before = len(served.recorder.fetches)
    ours = read_table(connect_session, url, columns=["a"], stagingLocation=str(staging)).toPandas()
    fetches = served.recorder.fetches[before:]
    assert fetches and all(executor for _, executor in fetches), fetches
    same_rows(ours, deltaport.load_as_arrow(url).to_pandas()[["a"]])
    entries = [p for p in staging.rglob("*.parquet") if not p.name.startswith(".tmp-")]
    assert entries and all(p.name.endswith(".part.parquet") for p in entries), entries


def test_register_ships_deltaport_to_the_connect_sessions_workers(connect_session, connect_server):
    """The data source runs in the cluster's Python: registering it on a session that never read
    natively (so never shipped anything) makes its workers import the driver's deltaport."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from deltaport.spark import register

    fresh = ConnectSession.builder.remote(connect_server.url).create()
    try:
        register(fresh)
        workers = executors_deltaport(fresh)
        assert workers and all(".zip" in f and "/deltaport-" in f for f in workers), workers
    finally:
        fresh.stop()
        ConnectSession._set_default_and_active_session(connect_session)  # create() made fresh the default


def test_streaming_through_connect(connect_session, served):
    from deltaport.spark import register

    url = served.url("partitioned")
    register(connect_session)  # ships deltaport: the data source runs in the cluster's Python too
    query = (
        connect_session.readStream.format("deltaSharing")
        .load(url)
        .writeStream.format("memory")
        .queryName("cluster_stream")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    streamed = connect_session.sql("SELECT * FROM cluster_stream").toPandas()
    query.stop()
    same_rows(streamed, deltaport.load_as_arrow(url).to_pandas())


def test_a_directory_read_through_connect(connect_session, served, workdir):
    """Planned and staged by the client (delta-rs under the vended credentials) into a location
    the cluster reads: the rows of the URL read."""
    url = served.url("dir")
    by_dir = read_table(connect_session, url, accessMode="dir", stagingLocation=str(workdir / "staging-dir"))
    same_rows(by_dir.toPandas(), deltaport.load_as_arrow(url).to_pandas())


def test_executors_without_deltaports_dependencies_fail_in_one_line_naming_the_fix(classic):
    error = classic.no_dependencies
    assert error.startswith("StagingError: the cluster's Python workers cannot run the fetch (No module named"), error
    assert "pip install 'deltaport[spark]'" in error and "stagingFetch=driver" in error and "\n" not in error


def test_executors_that_cannot_reach_the_file_urls_fail_in_one_line_naming_the_fix(connect_session, workdir):
    """The client reaches the server, the executors do not reach the file URLs it hands out (its
    publicUrl names a closed port): the executors' error comes back as one line."""
    from servers import RunningServer, free_port

    from deltaport.server import create_app, parse_config

    table = {"name": "t", "location": str(TABLES / "basic_partitioned")}
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}],
        "recipients": [{"name": "r", "tokens": [TOKEN], "shares": ["s"]}],
        "publicUrl": f"http://127.0.0.1:{free_port()}",
    }
    server = RunningServer(create_app(parse_config(config)))
    profile = workdir / "unreachable.share"
    endpoint = server.url + "/delta-sharing"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    try:
        with pytest.raises(ConnectionFailed) as err:
            read_table(connect_session, f"{profile}#s.d.t", stagingLocation=str(workdir / "staging-unreachable"))
    finally:
        server.stop()
    message = str(err.value)
    assert "could not download" in message and "the cluster's executors fetch the shared files" in message
    assert "stagingFetch=driver" in message and "\n" not in message


def test_a_cluster_needs_a_staging_location_it_sees(connect_session, served, tmp_path, monkeypatch):
    monkeypatch.setenv("DELTAPORT_STAGING", str(tmp_path / "driver-only"))
    with pytest.raises(StagingError, match="set the option stagingLocation"):
        read_table(connect_session, served.url("dv"))


def test_files_are_staged_whole_in_the_shared_folder(phase, workdir, request):
    kind = request.node.callspec.params["phase"]
    staged = list((workdir / f"staging-{kind}").rglob("*.parquet"))
    assert len(staged) >= len(TABLE_NAMES) and not [p for p in staged if p.name.startswith(".tmp-")]
