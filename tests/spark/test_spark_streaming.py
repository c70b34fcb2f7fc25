"""Structured Streaming from ``spark.readStream.format("deltaSharing")``: AvailableNow runs to a parquet
sink with a checkpoint, admission limits, remove handling, change data feed, restarts."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pyarrow as pa
import pytest
from conftest import append_rows


def run(spark, tmp_path, url, name, **options):
    """Run the stream to completion with Trigger.AvailableNow; returns (rows written so far, progress)."""
    out, checkpoint = tmp_path / f"{name}out", tmp_path / f"{name}checkpoint"
    reader = spark.readStream.format("deltaSharing")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load(url)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        try:
            query.awaitTermination(120)
        except Exception as exc:  # StreamingQueryException: keep the message, drop the JVM trace
            raise RuntimeError(str(exc).splitlines()[0] + " " + str(exc)) from None
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect() if out.exists() else []
    return rows, progress


def sales_rows(first: int, last: int) -> pa.Table:
    from deltaport.demo import sales_rows as demo_rows

    return demo_rows(first, last)


def test_latest_snapshot_then_new_commits_after_a_restart(spark, sharing, tmp_path):
    url, table = sharing.url("stream_restart"), sharing.tables["stream_restart"]
    rows, progress = run(spark, tmp_path, url, "q", maxFilesPerTrigger=2)
    assert sorted(r["order_id"] for r in rows) == [i for i in range(1, 321) if i % 4 != 3]  # latam was deleted
    assert [p["numInputRows"] for p in progress] == [80, 80, 80]  # 6 files of 40 rows, 2 per batch

    append_rows(table, sales_rows(321, 330), partition_by=("region",))
    append_rows(table, sales_rows(331, 340), partition_by=("region",))
    rows, progress = run(spark, tmp_path, url, "q", maxFilesPerTrigger=2)
    counts = Counter(r["order_id"] for r in rows)
    assert set(counts.values()) == {1}, "a row was read twice"
    assert sorted(counts) == [i for i in range(1, 321) if i % 4 != 3] + list(range(321, 341))
    assert len(progress) == 4  # two commits of 4 files each, 2 files per batch

    rows, progress = run(spark, tmp_path, url, "q")
    assert len(rows) == 260 and progress == []


def test_a_query_stopped_midway_resumes_from_its_checkpoint(spark, sharing, tmp_path):
    url, table = sharing.url("stream_midway"), sharing.tables["stream_midway"]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        spark.readStream.format("deltaSharing")
        .option("maxFilesPerTrigger", 1)
        .load(url)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.time() + 60
        while sum(p["numInputRows"] > 0 for p in query.recentProgress) < 2 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    assert 0 < len(spark.read.parquet(str(out)).collect()) < 240  # stopped inside the initial snapshot
    append_rows(table, sales_rows(501, 508), partition_by=("region",))
    rows, _ = run(spark, tmp_path, url, "", maxFilesPerTrigger=3)
    counts = Counter(r["order_id"] for r in rows)
    assert set(counts.values()) == {1}
    assert sorted(counts) == [i for i in range(1, 321) if i % 4 != 3] + list(range(501, 509))


def test_removes_need_ignore_deletes(spark, sharing, tmp_path):
    url = sharing.url("stream_sales")
    with pytest.raises(RuntimeError, match="ignoreDeletes"):
        run(spark, tmp_path, url, "fails", startingVersion=0)
    rows, _ = run(spark, tmp_path, url, "ok", startingVersion=0, ignoreDeletes="true")
    assert sorted(r["order_id"] for r in rows) == list(range(1, 321))
    # commits are at 10:00 (v0), 11:00 (v1) and 12:00 (v2): the stream starts at v1
    rows, _ = run(spark, tmp_path, url, "ts", startingTimestamp="2024-06-01 10:30:00", ignoreDeletes="true")
    assert sorted(r["order_id"] for r in rows) == list(range(201, 321))


def test_change_commits_need_skip_change_commits(spark, sharing, tmp_path):
    url = sharing.url("stream_events")
    with pytest.raises(RuntimeError, match="skipChangeCommits"):
        run(spark, tmp_path, url, "fails", startingVersion=0)
    rows, _ = run(spark, tmp_path, url, "skip", startingVersion=0, skipChangeCommits="true")
    assert sorted((r["id"], r["score"]) for r in rows) == [(i, i * 37 % 100) for i in range(1, 21)]
    rows, _ = run(spark, tmp_path, url, "ignore", startingVersion=1, ignoreChanges="true")
    scores = Counter((r["id"], r["score"]) for r in rows)
    # v1 adds ids 11..20; v2 and v3 rewrite both files (20, then 16 rows): rewritten rows come again
    assert sum(scores.values()) == 10 + 20 + 16
    assert scores[(5, 185)] == 2 and scores[(11, 7)] == 2 and scores[(11, 11)] == 0


def test_max_bytes_per_trigger_and_starting_version_latest(spark, sharing, tmp_path):
    url, table = sharing.url("stream_limits"), sharing.tables["stream_limits"]
    rows, progress = run(spark, tmp_path, url, "bytes", maxBytesPerTrigger="1k")
    assert len(rows) == 240 and len(progress) == 6  # a soft limit: one file per batch
    latest, _ = run(spark, tmp_path, url, "latest", startingVersion="latest")
    assert latest == []
    append_rows(table, sales_rows(401, 404), partition_by=("region",))
    latest, _ = run(spark, tmp_path, url, "latest", startingVersion="latest")
    assert sorted(r["order_id"] for r in latest) == [401, 402, 403, 404]


def test_change_data_feed_stream(spark, sharing, tmp_path):
    url = sharing.url("stream_cdf")
    rows, progress = run(spark, tmp_path, url, "cdf", readChangeFeed="true", startingVersion=0, maxFilesPerTrigger=1)
    batch = spark.read.format("deltaSharing").option("readChangeFeed", "true").option("startingVersion", 0).load(url)
    key = lambda r: (r["id"], r["score"], r["_change_type"], r["_commit_version"])  # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, batch.collect()))
    assert len(progress) == 4  # whole commits per batch: pre- and post-images stay together

    snapshot, _ = run(spark, tmp_path, url, "cdf-snapshot", readChangeFeed="true")
    assert {(r["_change_type"], r["_commit_version"]) for r in snapshot} == {("insert", 3)}
    assert len(snapshot) == 16 and all(r["_commit_timestamp"] is not None for r in snapshot)


def test_stream_options_are_validated(spark, sharing, tmp_path):
    url = sharing.url("stream_sales")
    for options, message in (
        ({"versionAsOf": 1}, "Cannot time travel streams"),
        ({"startingVersion": 0, "startingTimestamp": "2024-06-01"}, "startingTimestamp"),
        ({"maxFilesPerTrigger": 0}, "maxFilesPerTrigger"),
    ):
        with pytest.raises(Exception, match=message):
            run(spark, tmp_path, url, f"bad-{uuid.uuid4().hex[:6]}", **options)


def test_a_stream_waits_for_a_restarting_server_once_its_first_offset_is_read(spark, sharing):
    from deltaport.spark.options import ReadOptions
    from deltaport.spark.streaming import DeltaSharingStreamReader

    url = sharing.url("stream_sales")
    reader = DeltaSharingStreamReader(
        ReadOptions.parse({"path": url}), spark.read.format("deltaSharing").load(url).schema
    )
    with reader.remote.open() as session:
        assert not session.client.answered  # a wrong endpoint fails the first request at once
    reader.initialOffset()
    with reader.remote.open() as session:
        assert session.client.answered  # later micro-batches retry connection errors
