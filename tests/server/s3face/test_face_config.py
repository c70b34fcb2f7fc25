"""directoryBucket: a valid S3 bucket name that hides none of the server's own paths."""

from __future__ import annotations

import pytest

from deltaport.server.sources.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("bucket", "endpoint", "needle"),
    [
        ("delta-sharing", "/delta-sharing", "is also a path this server serves"),
        ("sharing", "/sharing/v1", "is also a path this server serves"),
        ("health", "/delta-sharing", "is also a path this server serves"),
        ("Upper", "/delta-sharing", "must be a valid S3 bucket name"),
        ("ab", "/delta-sharing", "must be a valid S3 bucket name"),
        ("a..b", "/delta-sharing", "must be a valid S3 bucket name"),
        ("192.168.1.1", "/delta-sharing", "must be a valid S3 bucket name"),
        ("bad_name", "/delta-sharing", "must be a valid S3 bucket name"),
    ],
)
def test_a_bucket_that_collides_or_is_not_a_bucket_name_is_refused(bucket, endpoint, needle):
    with pytest.raises(ConfigError) as caught:
        parse_config({"version": 1, "shares": [], "directoryBucket": bucket, "endpoint": endpoint})
    assert needle in caught.value.message


def test_a_valid_bucket_is_taken():
    config = parse_config({"version": 1, "shares": [], "directoryBucket": "tables.example-1"})
    assert config.directory_bucket == "tables.example-1"
    assert parse_config({"version": 1, "shares": []}).directory_bucket == "deltaport"
