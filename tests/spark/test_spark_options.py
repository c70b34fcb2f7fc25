"""Option parsing and validation of the deltaSharing data source."""

from __future__ import annotations

import pytest

from deltaport.errors import InvalidParameter
from deltaport.spark.options import ReadOptions, parse_size, parse_table_url, to_utc_instant

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
