"""Option parsing and validation of the deltaSharing data source."""

from __future__ import annotations

import pytest

from deltaport.errors import InvalidParameter
from deltaport.spark.options import (
    CREDENTIAL_OPTIONS,
    DATA_SOURCE,
    READ_TABLE,
    SPARK_OPTIONS,
    ReadOptions,
    parse_size,
    parse_table_url,
    to_utc_instant,
)

URL = "/p/profile.share#s.sc.t"


def parse(**options):
    return ReadOptions.parse({"path": URL, **{k.lower(): str(v) for k, v in options.items()}})


def test_table_url_splits_at_the_last_hash():
    url = parse_table_url("/a#b/profile.share#share.schema.table")
    assert (url.profile, url.share, url.schema, url.table) == ("/a#b/profile.share", "share", "schema", "table")
    assert parse_table_url("share.schema.table").profile is None
    for bad in ("", "p#", "p#a.b", "p#a.b.", "#a.b.c", "p#a..c"):
        with pytest.raises(InvalidParameter, match="is not valid|needs a path"):
            parse_table_url(bad)


def test_credentials_as_options_instead_of_a_profile():
    options = ReadOptions.parse(
        {"path": "s.sc.t", "endpoint": "http://x/delta-sharing", "bearertoken": "tok", "sharecredentialsversion": "1"}
    )
    assert options.credentials == {
        "shareCredentialsVersion": "1",
        "endpoint": "http://x/delta-sharing",
        "bearerToken": "tok",
    }
    with pytest.raises(InvalidParameter, match="cannot specify both"):
        ReadOptions.parse({"path": URL, "bearertoken": "tok"})
    with pytest.raises(InvalidParameter, match="is not valid"):
        ReadOptions.parse({"path": "s.sc.t"})


def test_defaults_and_values():
    o = parse()
    assert (o.read_change_feed, o.version_as_of, o.max_files_per_trigger, o.response_format) == (
        False,
        None,
        None,
        "auto",
    )
    o = parse(
        versionAsOf=3,
        readChangeFeed="TRUE",
        maxFilesPerTrigger=5,
        maxBytesPerTrigger="10m",
        ignoreDeletes="true",
        skipChangeCommits="false",
        responseFormat="Delta",
        startingVersion="latest",
    )
    assert (o.version_as_of, o.read_change_feed, o.max_files_per_trigger, o.max_bytes_per_trigger) == (
        3,
        True,
        5,
        10 << 20,
    )
    assert (o.ignore_deletes, o.skip_change_commits, o.response_format, o.starting_latest) == (
        True,
        False,
        "delta",
        True,
    )
    assert parse(readChangeData="true").read_change_feed


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"versionAsOf": -1}, "non-negative"),
        ({"versionAsOf": "x"}, "non-negative"),
        ({"versionAsOf": 1, "timestampAsOf": "2024-01-01"}, "versionAsOf' or 'timestampAsOf"),
        ({"startingVersion": 1, "startingTimestamp": "2024-01-01"}, "startingVersion' or 'startingTimestamp"),
        ({"endingVersion": 1, "endingTimestamp": "2024-01-01"}, "endingVersion' or 'endingTimestamp"),
        ({"maxFilesPerTrigger": 0}, "positive"),
        ({"maxBytesPerTrigger": "lots"}, "size"),
        ({"ignoreDeletes": "yes"}, "'true' or 'false'"),
        ({"responseFormat": "csv"}, "responseFormat"),
        ({"timestampAsOf": "yesterday"}, "cannot be converted to a valid timestamp"),
    ],
)
def test_invalid_options(options, message):
    with pytest.raises(InvalidParameter, match=message):
        parse(**options)


def test_batch_and_stream_rules():
    with pytest.raises(InvalidParameter, match="No startingVersion or startingTimestamp"):
        parse(readChangeFeed="true").check_batch()
    with pytest.raises(InvalidParameter, match="End cannot be before start"):
        parse(readChangeFeed="true", startingVersion=3, endingVersion=2).check_batch()
    with pytest.raises(InvalidParameter, match="Cannot time travel streams"):
        parse(versionAsOf=1).check_stream()
    parse(readChangeFeed="true", startingTimestamp="2024-01-01").check_batch()
    parse(startingVersion=2).check_stream()


def test_timestamps_and_sizes():
    assert to_utc_instant("2022") == "2022-01-01T00:00:00Z"
    assert to_utc_instant("2022-03-04") == "2022-03-04T00:00:00Z"
    assert to_utc_instant("2022-03-04 05:06:07.25") == "2022-03-04T05:06:07.25Z"
    assert to_utc_instant("2022-03-04T05:06:07-08:00") == "2022-03-04T13:06:07Z"
    assert to_utc_instant("2022-03-04 05:06:07", "America/Los_Angeles") == "2022-03-04T13:06:07Z"
    assert to_utc_instant("2022-03-04 05:06:07", "+02:00") == "2022-03-04T03:06:07Z"
    assert parse(timestampAsOf="2024-06-01 11:30").timestamp_as_of == "2024-06-01T11:30:00Z"
    assert [parse_size(s, "o") for s in ("1024", "1k", "2m", "1g", "1gb", "3KiB")] == [
        1024,
        1024,
        2 << 20,
        1 << 30,
        1 << 30,
        3072,
    ]


# --- option names: one parser for every entry point ------------------------------------------------

#: a valid value for every option some entry point reads (each is parsed alone)
VALID = {
    "versionAsOf": "0",
    "timestampAsOf": "2024-06-01",
    "readChangeFeed": "false",
    "readChangeData": "false",
    "startingVersion": "1",
    "endingVersion": "2",
    "startingTimestamp": "2024-06-01",
    "endingTimestamp": "2024-06-02",
    "responseFormat": "parquet",
    "asyncQuery": "true",
    "asyncQueryTimeout": "10m",
    "jsonPredicateHints": '{"op":"isNull","children":[{"op":"column","name":"a","valueType":"int"}]}',
    "maxPartitionBytes": "64m",
    "maxFilesPerTrigger": "5",
    "maxBytesPerTrigger": "1g",
    "maxVersionsPerRpc": "10",
    "ignoreDeletes": "true",
    "ignoreChanges": "true",
    "skipChangeCommits": "true",
    "queryTableVersionIntervalSeconds": "30",
    "stagingLocation": "/tmp/staging",
    "stagingCacheSize": "10g",
    "stagingCacheMaxAge": "7d",
    "stagingCacheGrace": "1h",
    "stagingFetch": "driver",
    "stagingThreads": "2",
    "accessMode": "url",
    "shareCredentialsVersion": "1",
    "type": "bearer_token",
    "endpoint": "http://127.0.0.1:1/delta-sharing",
    "tokenEndpoint": "http://127.0.0.1:1/token",
    "clientId": "id",
    "clientSecret": "secret",
    "scope": "all",
    "bearerToken": "tok",
    "expirationTime": "2030-01-01T00:00:00Z",
}


@pytest.mark.parametrize("accepted", [DATA_SOURCE, READ_TABLE], ids=["data source", "read_table"])
def test_every_option_of_an_entry_point_passes_lower_cased_or_not(accepted):
    assert set(accepted.names) <= set(VALID), "give VALID a value for each new option"
    for name in accepted.names:
        base = {"path": "s.sc.t", "endpoint": VALID["endpoint"]} if name in CREDENTIAL_OPTIONS else {"path": URL}
        if name == "asyncQueryTimeout":
            base["asyncQuery"] = "true"  # a timeout only with an asynchronous query
        for key in (name, name.lower()):
            ReadOptions.parse({**base, key: VALID[name]}, accepted=accepted)


def test_the_keys_spark_adds_pass():
    # measured: load(path) gives 'path'; a catalog table (CREATE TABLE ... USING deltaSharing OPTIONS
    # (...)) gives its properties and repeats each option as 'option.<name>'
    catalog = {"location": URL, "owner": "me", "provider": "deltaSharing", "option.versionasof": "0"}
    o = ReadOptions.parse({"path": URL, "versionasof": "0", **catalog, "checkpointlocation": "/chk"})
    assert o.version_as_of == 0
    assert {"path", "paths", "checkpointLocation"} <= set(SPARK_OPTIONS)
    with pytest.raises(InvalidParameter, match="reads one table"):
        ReadOptions.parse({"paths": '["a#s.sc.t","b#s.sc.t"]'})


@pytest.mark.parametrize(
    ("accepted", "key", "message"),
    [
        (DATA_SOURCE, "versonasof", "unknown option 'versonasof'; did you mean 'versionAsOf'?"),
        (DATA_SOURCE, "maxfilespertriger", "unknown option 'maxfilespertriger'; did you mean 'maxFilesPerTrigger'?"),
        (DATA_SOURCE, "startingversions", "unknown option 'startingversions'; did you mean 'startingVersion'?"),
        (READ_TABLE, "versionAsOff", "unknown option 'versionAsOff'; did you mean 'versionAsOf'?"),
        (READ_TABLE, "stagingLocaton", "unknown option 'stagingLocaton'; did you mean 'stagingLocation'?"),
        (DATA_SOURCE, "stagingLocation", "option 'stagingLocation' is read by deltaport.spark.read_table, not by the "),
        (READ_TABLE, "maxFilesPerTrigger", "option 'maxFilesPerTrigger' is read by the deltaSharing data source, not "),
    ],
)
def test_an_unknown_option_is_refused_naming_the_nearest_valid_one(accepted, key, message):
    with pytest.raises(InvalidParameter) as caught:
        ReadOptions.parse({"path": URL, key: "1"}, accepted=accepted)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_name_nothing_resembles_lists_the_valid_options():
    with pytest.raises(InvalidParameter, match="the options of the deltaSharing data source are versionAsOf, "):
        ReadOptions.parse({"path": URL, "zzz": "1"})


# --- through Spark: the data source, batch and stream, and read_table ---------------------------------


def _requests_for(sharing, table: str) -> int:
    return sum(1 for _, path, _, _ in sharing.recorder.requests if f"/tables/{table}/" in path)


def test_a_typo_in_a_batch_read_is_refused_before_any_request(spark, sharing):
    url, before = sharing.url("sales"), _requests_for(sharing, "sales")
    with pytest.raises(Exception, match="unknown option 'versonasof'; did you mean 'versionAsOf'\\?"):
        spark.read.format("deltaSharing").option("versonAsOf", 0).load(url).count()
    with pytest.raises(Exception, match="unknown option 'versonasof'"):  # schema given: no schema() call
        spark.read.format("deltaSharing").schema("a int").option("versonAsOf", 0).load(url).count()
    assert _requests_for(sharing, "sales") == before


def test_a_typo_in_a_stream_is_refused_before_any_request(spark, sharing, tmp_path):
    url, before = sharing.url("stream_limits"), _requests_for(sharing, "stream_limits")
    with pytest.raises(Exception, match="unknown option 'maxfilespertriger'; did you mean 'maxFilesPerTrigger'"):
        spark.readStream.format("deltaSharing").option("maxFilesPerTriger", 1).load(url)
    assert _requests_for(sharing, "stream_limits") == before


def test_valid_options_still_read_batch_and_stream(spark, sharing, tmp_path):
    url = sharing.url("sales")
    reader = spark.read.format("deltaSharing")
    for key, value in {"versionAsOf": 0, "responseFormat": "parquet", "maxPartitionBytes": "1m"}.items():
        reader = reader.option(key, value)
    assert reader.load(url).count() == 200  # version 0, not the latest (240)
    stream_options = {
        "maxFilesPerTrigger": 2,
        "maxBytesPerTrigger": "1g",
        "maxVersionsPerRpc": 5,
        "ignoreDeletes": "true",
        "ignoreChanges": "true",
        "queryTableVersionIntervalSeconds": 1,
        "responseFormat": "parquet",
    }
    stream = spark.readStream.format("deltaSharing")
    for key, value in stream_options.items():
        stream = stream.option(key, value)
    query = (
        stream.load(url)
        .writeStream.format("memory")
        .queryName("valid_options")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert spark.table("valid_options").count() == 240


def test_read_table_and_the_official_function_names_refuse_typos(spark, sharing):
    import deltaport.spark as dps

    url, before = sharing.url("sales"), _requests_for(sharing, "sales")
    with pytest.raises(InvalidParameter, match="unknown option 'versonAsOf'; did you mean 'versionAsOf'"):
        dps.read_table(spark, url, versonAsOf=0)
    with pytest.raises(InvalidParameter, match="unknown option 'versonAsOf'; did you mean 'versionAsOf'"):
        dps.load_as_spark(url, versonAsOf=0)
    with pytest.raises(InvalidParameter, match="'maxFilesPerTrigger' is read by the deltaSharing data source"):
        dps.load_table_changes_as_spark(url, starting_version=0, maxFilesPerTrigger=1)
    assert _requests_for(sharing, "sales") == before
