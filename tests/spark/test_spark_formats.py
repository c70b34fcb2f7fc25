"""Batch reads with an explicit ``responseFormat``, and change feeds bounded by commit timestamps."""

from __future__ import annotations

import datetime as dt

import delta_sharing
import pytest
from test_spark_batch import rows_of

from deltaport.client.rest import RestClient
from deltaport.spark.options import parse_table_url


def served_format(url: str, response_format: str) -> str:
    """The format the server answers a query for ``url`` in, when asked for ``response_format``."""
    table = parse_table_url(url)
    with RestClient(table.profile) as rest:
        return rest.query_table(table.name, response_format=response_format).format


@pytest.mark.parametrize("response_format", ["parquet", "delta"])
def test_response_format_reads_match_official_client(spark, sharing, response_format):
    url = sharing.url("sales")
    assert served_format(url, response_format) == response_format  # the server answers both for this table
    ours = spark.read.format("deltaSharing").option("responseFormat", response_format).load(url).toPandas()
    official = delta_sharing.load_as_pandas(url)
    assert list(ours.columns) == list(official.columns)
    assert len(ours) == len(official) > 0
    assert rows_of(ours) == rows_of(official)


def test_response_format_is_sent_to_the_server(spark, sharing):
    # a table with deletion vectors has no parquet form: asking for it must reach the server and fail there
    with pytest.raises(Exception, match="UNSUPPORTED_OPERATION"):
        spark.read.format("deltaSharing").option("responseFormat", "parquet").load(sharing.url("customers_dv"))


def _iso(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_change_feed_by_timestamps_equals_the_same_versions(spark, sharing):
    url = sharing.url("events_cdf")
    everything = delta_sharing.load_table_changes_as_pandas(url, starting_version=0)
    stamps = everything.groupby("_commit_version")["_commit_timestamp"].min().astype("int64").to_dict()
    assert sorted(stamps) == [0, 1, 2, 3]
    start, end = _iso(stamps[1]), _iso(stamps[2])  # both bounds inclusive: exactly versions 1 and 2

    ours = (
        spark.read.format("deltaSharing")
        .option("readChangeFeed", "true")
        .option("startingTimestamp", start)
        .option("endingTimestamp", end)
        .load(url)
        .toPandas()
    )
    by_versions = delta_sharing.load_table_changes_as_pandas(url, starting_version=1, ending_version=2)
    assert sorted(set(ours["_commit_version"])) == [1, 2]
    assert len(ours) == len(by_versions) < len(everything)
    columns = [c for c in ours.columns if c != "_commit_timestamp"]
    assert rows_of(ours, columns) == rows_of(by_versions, columns)
    ours_stamps = {int(ts.timestamp() * 1000) for ts in ours["_commit_timestamp"].dt.tz_localize("UTC")}
    assert ours_stamps == {stamps[1], stamps[2]}
    official_by_time = delta_sharing.load_table_changes_as_pandas(url, starting_timestamp=start, ending_timestamp=end)
    assert rows_of(official_by_time, columns) == rows_of(by_versions, columns)
