"""Tables offered for directory access (``accessModes`` with ``dir``), read by Spark: staged through
the vended credentials.

Spark reaches the table's store only with credentials and a file system it may not have (the s3a
jars, a cloud's connector), so the driver reads the table with delta-rs under the temporary
credentials (``deltaport.client.directory``: the version pinned, deletion vectors and column
mapping applied, credentials renewed between scans) and stages each scan as one parquet file in
the staging cache (:mod:`deltaport.spark.staging`)::

    <root>/deltaport-staging-v1/<table key>/dir-v<version>/part-<i>-of-<n>.parquet

A version once staged is found again by name (its files are complete or absent), so a second
read of it reads no byte of the share. Spark's own parquet reader then reads the files. The
rows are the table's logical rows (names and types as the metadata gives them); a change feed
is read by file URLs.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltaport.client.directory import DIR, MODES, DirectoryRead, choose_mode
from deltaport.errors import InvalidParameter, UnsupportedOperation
from deltaport.spark.fetching import StageReport
from deltaport.spark.options import ReadOptions, StagingOptions
from deltaport.spark.staging import CacheArea, evict_now_and_then, open_area, table_key

__all__ = ["ACCESS_MODE_OPTION", "access_mode", "stage_by_directory"]

ACCESS_MODE_OPTION = "accessMode"


def access_mode(options: dict[str, Any]) -> str | None:
    """The ``accessMode`` option (taken out of ``options``): None, ``url`` or ``dir``."""
    key = next((k for k in options if k.lower() == ACCESS_MODE_OPTION.lower()), None)
    if key is None:
        return None
    mode = str(options.pop(key)).lower()
    if mode not in MODES:
        raise InvalidParameter(f"accessMode must be 'url' or 'dir', not {mode!r}")
    return mode


def _part(folder: str, index: int, count: int) -> str:
    return f"{folder}/part-{index:05d}-of-{count:05d}.parquet"


def _write(area: CacheArea, relpath: str, tables: list[pa.Table], schema: pa.Schema) -> int:
    """One parquet file of ``tables`` at ``relpath``, complete or absent; its size."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema) as writer:
        for table in tables:
            writer.write_table(table)
    data = sink.getvalue()
    out = area.write(relpath)
    try:
        out.write(data)
        out.commit()
    except BaseException:
        out.abort()
        raise
    return data.size


def stage_by_directory(
    spark: Any, read: ReadOptions, staging: StagingOptions, asked: str | None
) -> tuple[Any, int, StageReport, str]:
    """The table read by directory and staged: (DataFrame, files, what was fetched, staging root)."""
    if read.read_change_feed:
        raise UnsupportedOperation(
            "a change feed is read by file URLs: read it without accessMode=dir (the table must offer 'url')"
        )
    area = open_area(staging.location)
    area.check_writable()
    started = time.monotonic()
    with read.remote.open() as session:
        rest, table = session.client, session.table
        meta = rest.metadata(table, version=read.version_as_of, timestamp=read.timestamp_as_of)
        choose_mode(asked or DIR, meta.metadata.access_modes, table.full_name)
        directory = DirectoryRead(rest, table, meta)
        folder = f"{table_key(rest.endpoint, read.remote.name, meta.metadata.id)}/dir-v{meta.table_version}"
        count = len(directory.scans())
        parts = [_part(folder, i, count) for i in range(count)]
        schema = directory.info.arrow_schema
        fetched = staged_bytes = 0
        for index, relpath in enumerate(parts):
            if not area.valid(relpath, None):
                staged_bytes += _write(area, relpath, list(directory.scan(index)), schema)
                fetched += 1
    area.touch(parts)
    evict_now_and_then(
        area,
        staged=staged_bytes,
        max_bytes=staging.cache_max_bytes,
        max_age_seconds=staging.cache_max_age_seconds,
        grace_seconds=staging.cache_grace_seconds,
        keep=parts,
    )
    frame = spark.read.parquet(*[area.uri(p) for p in parts])
    report = StageReport(fetched, staged_bytes, time.monotonic() - started)
    return frame.select(*[f"`{name}`" for name in schema.names]), len(parts), report, area.root
