"""SharingClient listings, table version / metadata / protocol, and the Spark entry points."""

from __future__ import annotations

import sys
import types

import delta_sharing
import httpx
import pytest
from client_support import CORPUS

import deltaport.client as ds
from deltaport.client.rest import RestClient

pytest_plugins = ["client_fixtures"]


def test_the_official_api_is_there():
    for name in delta_sharing.__all__:
        if name != "__version__":
            assert hasattr(ds, name), name
    import inspect

    for name in (
        "load_as_pandas",
        "load_table_changes_as_pandas",
        "load_as_spark",
        "load_table_changes_as_spark",
        "get_table_version",
        "get_table_metadata",
        "get_table_protocol",
    ):
        theirs = list(inspect.signature(getattr(delta_sharing, name)).parameters)
        ours = list(inspect.signature(getattr(ds, name)).parameters)
        assert ours[: len(theirs)] == theirs, name


def test_listings_match_the_official_client(sharing_profile):
    ours, theirs = ds.SharingClient(sharing_profile), delta_sharing.SharingClient(sharing_profile)
    assert [s.name for s in ours.list_shares()] == [s.name for s in theirs.list_shares()] == ["corpus", "second"]
    share = ours.list_shares()[1]
    assert [(s.name, s.share) for s in ours.list_schemas(share)] == [("s1", "second"), ("s2", "second")]
    assert [(t.name, t.share, t.schema) for t in ours.list_tables(ds.Schema("s1", "second"))] == [
        ("t1", "second", "s1")
    ]
    all_ours = sorted((t.share, t.schema, t.name) for t in ours.list_all_tables())
    all_theirs = sorted((t.share, t.schema, t.name) for t in theirs.list_all_tables())
    assert all_ours == all_theirs
    assert {name for _, _, name in all_ours} >= set(CORPUS) | {"nohistory", "t1"}
    # the official connector's own objects are accepted too
    assert ours.list_schemas(theirs.list_shares()[1]) == ours.list_schemas(share)


def test_listing_pages_are_followed(sharing_profile, recording):
    with RestClient(sharing_profile, transport=recording) as rest:
        tables = list(RestClient.iterate(lambda **kw: rest.list_all_tables("corpus", max_results=5, **kw)))
    assert len(tables) == len(ds.SharingClient(sharing_profile).list_all_tables()) - 1  # all of share corpus
    assert recording.count("GET", "/all-tables") >= 5


def test_list_all_tables_falls_back_when_the_server_has_no_all_tables(sharing_profile, recording):
    recording.add_rule(
        lambda r: r.url.path.endswith("/all-tables"),
        lambda r: httpx.Response(404, json={"errorCode": "RESOURCE_DOES_NOT_EXIST", "message": "no"}),
        times=10,
    )
    tables = ds.SharingClient(sharing_profile, transport=recording).list_all_tables()
    expected = ds.SharingClient(sharing_profile).list_all_tables()
    assert sorted(t.name for t in tables) == sorted(t.name for t in expected)
    assert recording.count("GET", "/schemas") == 2


def test_version_metadata_protocol_match_the_official_client(table_url):
    for name in ("dv", "cm_name", "partitioned", "ntz"):
        url = table_url(name)
        assert ds.get_table_version(url) == delta_sharing.get_table_version(url)
        ours, theirs = ds.get_table_metadata(url), delta_sharing.get_table_metadata(url)
        for attr in ("id", "name", "description", "schema_string", "configuration"):
            assert getattr(ours, attr) == getattr(theirs, attr), (name, attr)
        assert list(ours.partition_columns) == list(theirs.partition_columns)
        assert ours.format.provider == theirs.format.provider
        p_ours, p_theirs = ds.get_table_protocol(url), delta_sharing.get_table_protocol(url)
        assert p_ours.min_reader_version == p_theirs.min_reader_version
        assert p_ours.min_writer_version == p_theirs.min_writer_version
        assert list(p_ours.reader_features or []) == list(p_theirs.reader_features or [])
    parquet = ds.get_table_metadata(table_url("partitioned"), use_delta_format=False)
    assert parquet.partition_columns == ("letter",)


def test_version_at_a_timestamp(table_url, table_paths):
    import datetime as dt

    from deltaport.delta import DeltaTable, SnapshotCache

    ts = DeltaTable(table_paths["cdf"], cache=SnapshotCache()).history().timestamps
    iso = dt.datetime.fromtimestamp(ts[1] / 1000, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")
    assert ds.get_table_version(table_url("cdf"), starting_timestamp=iso) == delta_sharing.get_table_version(
        table_url("cdf"), starting_timestamp=iso
    )


def test_unknown_table_errors(table_url):
    with pytest.raises(ds.SharingServerError) as err:
        ds.get_table_version(table_url("missing"))
    assert err.value.http_status == 404 and err.value.error_code == "RESOURCE_DOES_NOT_EXIST"


# --- Spark entry points (a stand-in SparkSession records what they ask for) -----------------------------


class _Reader:
    def __init__(self, log):
        self.log = log

    def format(self, name):
        self.log.append(("format", name))
        return self

    def option(self, key, value):
        self.log.append(("option", key, value))
        return self

    def load(self, path):
        self.log.append(("load", path))
        return "dataframe"


@pytest.fixture
def fake_spark(monkeypatch):
    log: list = []
    session = types.SimpleNamespace(read=_Reader(log))
    sql = types.ModuleType("pyspark.sql")
    sql.SparkSession = types.SimpleNamespace(active=lambda: session)
    monkeypatch.setitem(sys.modules, "pyspark", types.ModuleType("pyspark"))
    monkeypatch.setitem(sys.modules, "pyspark.sql", sql)
    return log


def test_load_as_spark_uses_the_deltasharing_source(fake_spark):
    assert ds.load_as_spark("p.share#s.sc.t", version=3) == "dataframe"
    assert fake_spark == [("format", "deltaSharing"), ("option", "versionAsOf", 3), ("load", "p.share#s.sc.t")]
    fake_spark.clear()
    ds.load_as_spark("p.share#s.sc.t", timestamp="2024-01-01T00:00:00Z")
    assert ("option", "timestampAsOf", "2024-01-01T00:00:00Z") in fake_spark


def test_load_table_changes_as_spark_options(fake_spark):
    ds.load_table_changes_as_spark("p.share#s.sc.t", starting_version=1, ending_version=4)
    assert fake_spark == [
        ("format", "deltaSharing"),
        ("option", "readChangeFeed", "true"),
        ("option", "startingVersion", 1),
        ("option", "endingVersion", 4),
        ("load", "p.share#s.sc.t"),
    ]
    fake_spark.clear()
    ds.load_table_changes_as_spark("p#s.sc.t", starting_timestamp="a", ending_timestamp="b")
    assert ("option", "startingTimestamp", "a") in fake_spark and ("option", "endingTimestamp", "b") in fake_spark


def test_load_as_spark_with_a_profile_object_passes_credentials(fake_spark):
    profile = ds.read_profile({"shareCredentialsVersion": 1, "endpoint": "https://h/ds", "bearerToken": "tok"})
    ds.load_as_spark("s.sc.t", delta_sharing_profile=profile)
    assert ("option", "bearerToken", "tok") in fake_spark and ("option", "endpoint", "https://h/ds") in fake_spark
    with pytest.raises(ValueError):
        ds.load_as_spark("p#s.sc.t", delta_sharing_profile=profile)


def test_load_as_spark_needs_an_active_session(monkeypatch):
    sql = types.ModuleType("pyspark.sql")

    def no_session():
        raise RuntimeError("[NO_ACTIVE_OR_DEFAULT_SESSION]")

    sql.SparkSession = types.SimpleNamespace(active=no_session)
    monkeypatch.setitem(sys.modules, "pyspark", types.ModuleType("pyspark"))
    monkeypatch.setitem(sys.modules, "pyspark.sql", sql)
    with pytest.raises(RuntimeError, match="No active SparkSession"):
        ds.load_as_spark("p#s.sc.t")
