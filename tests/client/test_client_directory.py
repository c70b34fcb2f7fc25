"""Directory access: the corpus on a moto S3 server read with delta-rs and credentials from the
server equals what file URLs give; modes chosen by the protocol's compatibility table; renewal."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from client_support import CORPUS, TABLES, RecordingTransport, server_config, write_profile
from directory_support import serve_with_dir

import deltaport.client as ds
from deltaport.client.errors import AccessModeError
from deltaport.client.rest import RestClient

#: the corpus tables delta-rs reads (it refuses a partition column under column mapping with no rows)
DIR_TABLES = sorted(set(CORPUS) - {"cm_partition"})
#: tables with history to travel back in
TRAVEL = {"cdf": 1, "dv": 0, "partitioned": 0, "cm_name": 2, "cdf_plain": 2}
BUCKET = "dirs"


@pytest.fixture(scope="module")
def dir_server(moto_server):
    tables = {name: moto_server.upload_dir(BUCKET, name, TABLES / CORPUS[name]) for name in DIR_TABLES}
    tables["dironly"] = tables["partitioned"]
    tables["local"] = str(TABLES / "basic_partitioned")
    config = server_config(tables, storageOptions=moto_server.storage_options())
    modes = {name: ("url", "dir") for name in DIR_TABLES} | {"dironly": ("dir",)}
    running, vendor = serve_with_dir(config, modes, moto_server)
    yield running, vendor
    running.stop()


@pytest.fixture(scope="module")
def url_of(dir_server, tmp_path_factory):
    profile = write_profile(tmp_path_factory.mktemp("dir") / "p.share", dir_server[0].url + "/delta-sharing")
    return lambda name: f"{profile}#corpus.default.{name}"


def _rows(table: pa.Table) -> list:
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def _requests(transport: RecordingTransport, suffix: str) -> int:
    return sum(r.url.path.endswith(suffix) for r in transport.requests)


@pytest.mark.parametrize("name", DIR_TABLES)
def test_dir_reads_the_rows_urls_read(url_of, name):
    transport = RecordingTransport()
    by_dir = ds.load_as_arrow(url_of(name), access_mode="dir", transport=transport)
    by_url = ds.load_as_arrow(url_of(name))
    assert _requests(transport, "/temporary-table-credentials") == 1 and _requests(transport, "/query") == 0
    assert by_dir.column_names == by_url.column_names
    assert _rows(by_dir) == _rows(by_url)


@pytest.mark.parametrize(("name", "version"), sorted(TRAVEL.items()))
def test_time_travel_by_version(url_of, name, version):
    by_url = ds.load_as_arrow(url_of(name), version=version)
    assert _rows(ds.load_as_arrow(url_of(name), version=version, access_mode="dir")) == _rows(by_url)
    assert _rows(ds.load_as_arrow(url_of(name), access_mode="dir")) != _rows(by_url)  # the travel shows


@pytest.mark.parametrize(("name", "version"), [("cdf", 1), ("cdf_plain", 2)])
def test_time_travel_by_timestamp(url_of, name, version):
    """At the time the server gives a version's commit (its change feed says it), both paths read
    the same snapshot, the server resolving the timestamp for both."""
    with RestClient(url_of(name).split("#")[0]) as rest:
        commits = rest.query_changes(f"corpus.default.{name}", ds.ChangesOptions(starting_version=0))
    (stamp,) = {f.timestamp for f in commits.files if f.version == version}
    at = dt.datetime.fromtimestamp(stamp / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    by_dir = ds.load_as_arrow(url_of(name), timestamp=at, access_mode="dir")
    assert _rows(by_dir) == _rows(ds.load_as_arrow(url_of(name), timestamp=at))
    assert _rows(by_dir) != _rows(ds.load_as_arrow(url_of(name), access_mode="dir"))


def test_limit(url_of):
    table = ds.load_as_arrow(url_of("cdf_plain"), limit=3, access_mode="dir")
    assert table.num_rows == 3
    assert set(_rows(table)) <= set(_rows(ds.load_as_arrow(url_of("cdf_plain"))))


def test_pandas_and_polars(url_of):
    frame = ds.load_as_pandas(url_of("partitioned"), access_mode="dir")
    assert sorted(map(repr, frame.to_dict("records"))) == sorted(
        map(repr, ds.load_as_pandas(url_of("partitioned")).to_dict("records"))
    )
    assert ds.load_as_polars(url_of("partitioned"), access_mode="dir").height == len(frame)


def test_a_dir_only_table_is_read_by_its_directory_unasked(url_of):
    transport = RecordingTransport()
    table = ds.load_as_arrow(url_of("dironly"), transport=transport)
    assert _rows(table) == _rows(ds.load_as_arrow(url_of("partitioned")))
    assert _requests(transport, "/temporary-table-credentials") == 1


def test_asking_a_mode_the_table_does_not_offer_names_what_it_offers(url_of):
    with pytest.raises(AccessModeError, match=r"offers accessModes \[dir\]"):
        ds.load_as_arrow(url_of("dironly"), access_mode="url")
    with pytest.raises(AccessModeError, match=r"offers accessModes \[url\]"):
        ds.load_as_arrow(url_of("local"), access_mode="dir")
    with pytest.raises(ValueError, match="access_mode must be"):
        ds.load_as_arrow(url_of("local"), access_mode="directory")


def test_both_modes_default_to_urls(url_of):
    transport = RecordingTransport()
    ds.load_as_arrow(url_of("partitioned"), transport=transport)
    assert _requests(transport, "/temporary-table-credentials") == 0 and _requests(transport, "/query") == 1


@pytest.mark.parametrize("name", ["partitioned", "cdf", "multipart", "mixed_nulls", "cdf_plain"])
def test_credentials_are_renewed_before_they_expire(url_of, dir_server, name):
    """A margin as long as the credentials' life makes every scan after the first renew them."""
    vendor = dir_server[1]
    before = vendor.issued
    transport = RecordingTransport()
    table = ds.load_as_arrow(url_of(name), access_mode="dir", refresh_margin_seconds=7200, transport=transport)
    asked = _requests(transport, "/temporary-table-credentials")
    assert _rows(table) == _rows(ds.load_as_arrow(url_of(name)))
    if name == "cdf_plain":  # no partitions: one scan, one set of credentials
        assert asked == 1
    else:
        assert asked > 1 and vendor.issued - before == asked


def test_listing_and_metadata_carry_placement(url_of, dir_server):
    client = ds.SharingClient(url_of("x").split("#")[0])
    tables = {t.name: t for t in client.list_all_tables() if t.share == "corpus"}
    assert tables["dironly"].access_modes == ("dir",)
    assert tables["partitioned"].access_modes == ("url", "dir")
    assert tables["partitioned"].location == f"s3://{BUCKET}/partitioned"
    assert tables["local"].access_modes == ("url",) and tables["local"].location is None
    for fmt in (True, False):
        meta = ds.get_table_metadata(url_of("dironly"), use_delta_format=fmt)
        assert meta.access_modes == ("dir",) and meta.location == f"s3://{BUCKET}/partitioned"


def test_temporary_table_credentials(url_of):
    with RestClient(url_of("x").split("#")[0]) as rest:
        creds = rest.temporary_table_credentials("corpus.default.cdf")
        assert creds.kind == "aws" and creds.location == f"s3://{BUCKET}/cdf"
        assert set(creds.values) >= {"accessKeyId", "secretAccessKey", "sessionToken", "endpoint"}
        assert creds.values["accessKeyId"] not in repr(creds)
        under = rest.temporary_table_credentials("corpus.default.cdf", f"s3://{BUCKET}/cdf/_delta_log")
        assert under.location == f"s3://{BUCKET}/cdf/_delta_log"
        with pytest.raises(ds.SharingServerError) as refused:
            rest.temporary_table_credentials("corpus.default.cdf", f"s3://{BUCKET}/dv")
        assert refused.value.http_status == 400
