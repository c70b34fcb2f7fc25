"""Tables offered for directory access, read by Spark (deltaport.spark.read_table with accessMode):
the driver reads them with delta-rs under the credentials the server vends (tables on a moto S3
server, credentials from its STS) and stages them; the rows are those of the URL path."""

from __future__ import annotations

import json

import pytest
from conftest import TABLES
from directory_support import serve_with_dir
from test_spark_batch import rows_of

from deltaport.client.errors import AccessModeError
from deltaport.errors import UnsupportedOperation
from deltaport.spark import read_table, stage

TOKEN = "spark-dir-token"
SOURCES = {"partitioned": "basic_partitioned", "dv": "table-with-dv-small", "cdf": "cdf-table"}
MODES = {"partitioned": ("url", "dir"), "dv": ("url", "dir"), "cdf": ("url", "dir"), "dironly": ("dir",)}


@pytest.fixture(scope="module")
def share(moto_server, tmp_path_factory, secrets_used):
    secrets_used.add(TOKEN)
    locations = {name: moto_server.upload_dir("spark-dir", name, TABLES / source) for name, source in SOURCES.items()}
    locations["dironly"] = locations["partitioned"]
    tables = [{"name": name, "location": location} for name, location in locations.items()]
    raw = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "recipients": [{"name": "spark", "tokens": [TOKEN], "shares": ["s"]}],
        "storageOptions": moto_server.storage_options(),
    }
    running, vendors = serve_with_dir(raw, MODES, moto_server)
    profile = tmp_path_factory.mktemp("spark-dir") / "p.share"
    endpoint = running.url + "/delta-sharing"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    yield (lambda name: f"{profile}#s.d.{name}"), vendors
    running.stop()


def _staging(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("staging"))


@pytest.mark.parametrize("name", ["partitioned", "dv", "cdf"])
def test_a_dir_read_has_the_rows_of_the_url_read(spark, share, tmp_path_factory, name):
    url, _ = share
    where = _staging(tmp_path_factory)
    by_dir = read_table(spark, url(name), accessMode="dir", stagingLocation=where).toPandas()
    by_url = read_table(spark, url(name), stagingLocation=where).toPandas()
    assert list(by_dir.columns) == list(by_url.columns)
    assert len(by_dir) > 0 and rows_of(by_dir) == rows_of(by_url)


def test_time_travel_by_directory(spark, share, tmp_path_factory):
    url, _ = share
    where = _staging(tmp_path_factory)
    old = read_table(spark, url("cdf"), accessMode="dir", versionAsOf=1, stagingLocation=where).toPandas()
    assert rows_of(old) == rows_of(read_table(spark, url("cdf"), versionAsOf=1, stagingLocation=where).toPandas())
    assert len(old) != len(read_table(spark, url("cdf"), accessMode="dir", stagingLocation=where).toPandas())


def test_a_dir_only_table_is_read_by_directory_unasked_and_staged_once(spark, share, tmp_path_factory):
    url, vendors = share
    where = _staging(tmp_path_factory)
    before = vendors.issued
    first = stage(spark, url("dironly"), stagingLocation=where)
    assert vendors.issued > before and first.fetched.files == first.files > 0
    again = stage(spark, url("dironly"), stagingLocation=where)
    assert again.fetched.files == 0  # the version is staged already: found by name
    expected = read_table(spark, url("partitioned"), stagingLocation=where).toPandas()
    assert rows_of(again.dataframe.toPandas()) == rows_of(expected)
    assert again.dataframe.where("number > 3").count() == (expected["number"] > 3).sum()


def test_modes_the_table_does_not_offer_and_change_feeds_are_refused(spark, share, tmp_path_factory):
    url, _ = share
    where = _staging(tmp_path_factory)
    with pytest.raises(AccessModeError, match="offers accessModes \\[dir\\]"):
        read_table(spark, url("dironly"), accessMode="url", stagingLocation=where)
    with pytest.raises(UnsupportedOperation, match="change feed is read by file URLs"):
        read_table(spark, url("cdf"), accessMode="dir", readChangeFeed="true", startingVersion=0)
    with pytest.raises(Exception, match="accessMode must be 'url' or 'dir'"):
        read_table(spark, url("cdf"), accessMode="directory")
