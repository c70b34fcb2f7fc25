"""What a recipient may read of an error: never where the provider stores the table."""

from __future__ import annotations

import pytest

from deltaport.errors import REDACTED, CorruptLog, StorageError, public_message, redact_locations


@pytest.mark.parametrize(
    "text",
    [
        "checkpoint cannot be read (table: file:///srv/data/sales)",
        "storage error: s3://bucket/warehouse/sales/_delta_log",
        "s3a://bucket/t abfss://c@acct.dfs.core.windows.net/t wasbs://c@acct.blob.core.windows.net/t gs://b/t",
        "permission denied listing /srv/data/sales/_delta_log",
        "GET https://bucket.s3.us-east-1.amazonaws.com/warehouse/sales failed",
    ],
)
def test_storage_locations_are_redacted(text):
    out = redact_locations(text)
    assert REDACTED in out
    for leak in ("/srv/data", "bucket", "acct", "gs://b", "warehouse"):
        assert leak not in out


@pytest.mark.parametrize(
    "text",
    [
        "[Share/Schema/Table] 'corpus/default/t' does not exist, please contact your share provider for further "
        "information.",
        "unsupported storage scheme 'hdfs' in a table location: use a local path, file://, s3://, az://, abfss://, "
        "wasbs:// or gs://",
        "not a file URL: the path must start with /files/",
        "_delta_log/00000000000000000001.json line 2: truncated JSON",
        "The provided timestamp (2000-01-01 00:00:00.0) is before the earliest version available to this table "
        "(2020-09-13 12:26:40.0). Please use a timestamp greater than or equal to 2020-09-13 12:26:40.0.",
    ],
)
def test_messages_without_a_location_are_left_alone(text):
    assert redact_locations(text) == text


def test_the_location_is_for_the_operator_only():
    err = CorruptLog("the log has no metaData action", table="file:///srv/data/sales")
    assert str(err) == err.message == "the log has no metaData action"
    assert public_message(err) == "the log has no metaData action"
    assert err.operator_message == "the log has no metaData action (table: file:///srv/data/sales)"
    # a location that slipped into a message is still not sent, whatever its spelling
    err = StorageError("cannot list /srv/data/sales/_delta_log", location="file:///srv/data/sales/")
    assert public_message(err) == f"cannot list {REDACTED}/_delta_log"
    err = StorageError("x", detail="HTTP 403 from https://acct.blob.core.windows.net/c/t", location="az://c/t")
    assert public_message(err) == "x" and "acct" in err.operator_message
