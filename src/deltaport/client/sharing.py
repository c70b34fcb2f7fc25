"""The official connector's public functions (same names, parameters and URL syntax), and more.

``url`` is ``<profile-file>#<share>.<schema>.<table>`` everywhere. Keyword-only extras, all
optional: ``max_files`` (ask the server for pages of that many files; :func:`load_as_arrow_reader`
pages by default, 100,000 files a page), ``max_workers`` (parallel downloads), ``progress``
(True/False/None = when stderr is a terminal),
``refresh_margin_seconds`` (refresh URLs that expire within that many seconds before using them;
by default a quarter of their lifetime, at most 30 s),
``transport`` and ``retry`` (HTTP transport and backoff, for proxies and tests).
Snapshot readers also take ``async_query`` (send the query with ``asyncquery=true``: a server that
plans it for long answers a queryId, polled until the result is ready; off by default: polling
adds up to its backoff to a plan just past the server's threshold) and ``timeout`` (with
``async_query``, the most seconds to wait for the plan, then ``QUERY_TIMEOUT``; None: no limit).
While the server plans, ``progress`` shows "waiting for the server to plan the query (12 s)".
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa

from deltaport.client import frames
from deltaport.client.directory import DIR, MODES, URL, DirectoryRead, choose_mode, directory_only
from deltaport.client.errors import AccessModeError, SharingServerError
from deltaport.client.model import Metadata, Protocol, Schema, Share, Table
from deltaport.client.profile import DeltaSharingProfile, ProfileSource, parse_url, read_profile
from deltaport.client.rest import (
    AUTO,
    PARQUET,
    ChangesOptions,
    QueryOptions,
    RestClient,
    response_format_arg,
)
from deltaport.client.retry import RetryPolicy
from deltaport.client.schema import TableInfo
from deltaport.client.spark_session import active_session
from deltaport.client.table_read import PAGE_FILES, ReadOptions, TableRead, read_options

__all__ = [
    "ReadOptions",
    "SharingClient",
    "get_table_metadata",
    "get_table_protocol",
    "get_table_version",
    "load_as_arrow",
    "load_as_arrow_reader",
    "load_as_pandas",
    "load_as_polars",
    "load_as_spark",
    "load_table_changes_as_arrow",
    "load_table_changes_as_pandas",
    "load_table_changes_as_polars",
    "load_table_changes_as_spark",
]


# --- listing --------------------------------------------------------------------------------------------


class SharingClient:
    """Lists what a recipient can read. ``profile``: a path, open file, dict or profile object."""

    def __init__(
        self, profile: ProfileSource, *, transport: httpx.BaseTransport | None = None, retry: RetryPolicy | None = None
    ) -> None:
        self._profile = read_profile(profile)
        self._rest = RestClient(self._profile, transport=transport, retry=retry)

    @property
    def profile(self) -> DeltaSharingProfile:
        return self._profile

    def close(self) -> None:
        self._rest.close()

    def __enter__(self) -> SharingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def list_shares(self) -> list[Share]:
        return list(RestClient.iterate(self._rest.list_shares))

    def list_schemas(self, share: Share | Any) -> list[Schema]:
        return list(RestClient.iterate(self._rest.list_schemas, share.name if hasattr(share, "name") else share))

    def list_tables(self, schema: Schema | Any) -> list[Table]:
        return list(RestClient.iterate(self._rest.list_tables, Schema(schema.name, schema.share)))

    def list_all_tables(self) -> list[Table]:
        tables: list[Table] = []
        for share in self.list_shares():
            try:
                tables.extend(RestClient.iterate(self._rest.list_all_tables, share.name))
            except SharingServerError as exc:
                if exc.http_status != 404:
                    raise
                for schema in self.list_schemas(share):  # a server without /all-tables
                    tables.extend(self.list_tables(schema))
        return tables


# --- reading -------------------------------------------------------------------------------------------


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"'limit' must be a non-negative int, not {limit!r}")


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _import_pandas_meanwhile() -> None:
    """Import pandas on a thread of its own while the files download: its import (a few tenths of a
    second of one core, in one thread) then overlaps the downloads rather than delaying the
    conversion, which imports it anyway (waiting for this import if it is still running)."""
    if "pandas" in sys.modules:
        return

    def load() -> None:
        try:
            importlib.import_module("pandas")
        except ImportError:  # pragma: no cover - the conversion says so itself
            pass

    threading.Thread(target=load, name="deltaport-import-pandas", daemon=True).start()


def _snapshot_tables(
    url,
    limit,
    version,
    timestamp,
    jsonPredicateHints,
    use_delta_format,
    opts,
    columns=None,
    access_mode=None,
    dictionaries=False,
) -> tuple[TableInfo, list[pa.Table]]:
    """The tables of a snapshot read; ``dictionaries``: string columns read by URLs may come as
    dictionary arrays (for :func:`frames.to_pandas`)."""
    _check_limit(limit)
    choose_mode(access_mode, MODES, "")  # a bad value fails before any request
    read = TableRead(url, opts)

    def by_urls() -> tuple[TableInfo, list[pa.Table]]:
        query = QueryOptions(
            json_predicate_hints=jsonPredicateHints, limit_hint=limit, version=version, timestamp=timestamp
        )
        info, result, refresher = read.snapshot(query, response_format_arg(use_delta_format))
        tables = read.tables(
            info, result.files, refresher, change=False, limit=limit, columns=columns, dictionaries=dictionaries
        )
        return info, list(tables)

    try:
        if access_mode == DIR:
            return _by_directory(read, version, timestamp, limit, access_mode, by_urls)
        try:
            return by_urls()
        except SharingServerError as exc:
            directory_only(read.rest, read.table, access_mode, exc)
            return _by_directory(read, version, timestamp, limit, access_mode, by_urls)
    finally:
        read.close()


def _by_directory(read: TableRead, version, timestamp, limit, access_mode, by_urls) -> tuple[TableInfo, list[pa.Table]]:
    """Read with delta-rs at the table's location (directory.py); by URLs instead when the table also
    offers them and delta-rs cannot read it (auxiliary locations, credentials it cannot use)."""
    meta = read.rest.metadata(read.table, version=version, timestamp=timestamp)
    offered = meta.metadata.access_modes
    choose_mode(access_mode, offered, read.table.full_name)
    try:
        if meta.metadata.auxiliary_locations:
            raise AccessModeError(
                f"table {read.table.full_name} has auxiliary locations "
                f"({', '.join(meta.metadata.auxiliary_locations)}) and delta-rs reads with one set of credentials"
            )
        directory = DirectoryRead(read.rest, read.table, meta, refresh_margin_seconds=read.opts.refresh_margin_seconds)
    except AccessModeError:
        if URL not in offered:
            raise
        return by_urls()
    return directory.info, list(directory.tables(limit))


def load_as_arrow(
    url: str,
    limit: int | None = None,
    version: int | None = None,
    timestamp: str | None = None,
    jsonPredicateHints: str | None = None,
    use_delta_format: bool | None = None,
    *,
    max_files: int | None = None,
    max_workers: int | None = None,
    progress: bool | None = None,
    refresh_margin_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
    access_mode: str | None = None,
    async_query: bool = False,
    timeout: float | None = None,
) -> pa.Table:
    """The shared table (or ``limit`` rows of it, at ``version``/``timestamp``) as a ``pyarrow.Table``.

    ``use_delta_format``: None lets the server choose (this client reads both formats natively),
    True asks for the delta format, False for the parquet format.
    ``access_mode``: None reads by file URLs unless the table offers only directory access; ``"dir"``
    reads the table's directory with delta-rs (the ``dir`` extra) and temporary credentials, renewed
    before they expire (``refresh_margin_seconds``); ``"url"`` by file URLs. ``jsonPredicateHints``
    are hints: a directory read returns every row, as a server that ignores them would.
    ``async_query`` and ``timeout``: see the module's documentation (a directory read plans nothing).
    """
    opts = read_options(
        max_files, max_workers, progress, refresh_margin_seconds, transport, retry, async_query, timeout
    )
    info, tables = _snapshot_tables(
        url, limit, version, timestamp, jsonPredicateHints, use_delta_format, opts, access_mode=access_mode
    )
    return _concat(tables, info.arrow_schema)


def load_as_pandas(
    url: str,
    limit: int | None = None,
    version: int | None = None,
    timestamp: str | None = None,
    jsonPredicateHints: str | None = None,
    use_delta_format: bool | None = None,
    convert_in_batches: bool = False,
    *,
    max_files: int | None = None,
    max_workers: int | None = None,
    progress: bool | None = None,
    refresh_margin_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
    access_mode: str | None = None,
    async_query: bool = False,
    timeout: float | None = None,
):
    """The shared table as a pandas DataFrame (dates as ``datetime.date``, timestamps in UTC).

    ``convert_in_batches`` converts file by file, lowering peak memory. ``access_mode`` as in
    :func:`load_as_arrow`.
    """
    opts = read_options(
        max_files, max_workers, progress, refresh_margin_seconds, transport, retry, async_query, timeout
    )
    _import_pandas_meanwhile()
    read = (url, limit, version, timestamp, jsonPredicateHints, use_delta_format, opts)
    info, tables = _snapshot_tables(*read, access_mode=access_mode, dictionaries=True)
    return frames.to_pandas(tables, info.arrow_schema, convert_in_batches)


def load_as_polars(
    url: str,
    limit: int | None = None,
    version: int | None = None,
    timestamp: str | None = None,
    jsonPredicateHints: str | None = None,
    use_delta_format: bool | None = None,
    **kwargs: Any,
):
    """The shared table as a polars DataFrame (same keyword extras as :func:`load_as_arrow`)."""
    import polars as pl

    return pl.from_arrow(
        load_as_arrow(url, limit, version, timestamp, jsonPredicateHints, use_delta_format, **kwargs), rechunk=False
    )


def load_as_arrow_reader(
    url: str,
    limit: int | None = None,
    version: int | None = None,
    timestamp: str | None = None,
    jsonPredicateHints: str | None = None,
    use_delta_format: bool | None = None,
    *,
    columns: list[str] | None = None,
    max_files: int | None = None,
    max_workers: int | None = None,
    progress: bool | None = None,
    refresh_margin_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
    async_query: bool = False,
    timeout: float | None = None,
) -> pa.RecordBatchReader:
    """A streaming ``pyarrow.RecordBatchReader``: files are fetched as batches are consumed, at most
    a few per download thread ahead, so memory stays bounded whatever the table size.

    The listing is asked for in pages of ``max_files`` files (default 100,000) and a page's files
    are read before the next page is asked for, so the listing held is one page at a time as
    well; the server's page tokens keep every page at the first page's table version."""
    _check_limit(limit)
    opts = read_options(
        max_files, max_workers, progress, refresh_margin_seconds, transport, retry, async_query, timeout
    )
    read = TableRead(url, opts)
    try:
        query = QueryOptions(
            json_predicate_hints=jsonPredicateHints, limit_hint=limit, version=version, timestamp=timestamp
        )
        page_files = opts.max_files or PAGE_FILES
        info, pages = read.snapshot_pages(query, response_format_arg(use_delta_format), page_files)
    except BaseException:
        read.close()
        raise
    schema = (
        info.arrow_schema
        if columns is None
        else pa.schema([f for f in info.arrow_schema if f.name in {info.column(c).name for c in columns}])
    )
    return pa.RecordBatchReader.from_batches(schema, _paged_batches(read, info, pages, limit, columns))


def _paged_batches(read: TableRead, info: TableInfo, pages, limit: int | None, columns) -> Iterator[pa.RecordBatch]:
    """The rows of each page's files in turn, ``limit`` carried across pages; ``read`` closed at the end."""
    remaining = limit
    try:
        for number, (files, refresher) in enumerate(pages, start=1):
            tables = read.tables(
                info,
                files,
                refresher,
                change=False,
                limit=remaining,
                columns=columns,
                page=number if number > 1 else None,
            )
            del files
            for table in tables:
                if remaining is not None:
                    remaining -= table.num_rows
                yield from table.to_batches()
            if remaining is not None and remaining <= 0:
                return
    finally:
        read.close()


def _changes_tables(
    url,
    starting_version,
    ending_version,
    starting_timestamp,
    ending_timestamp,
    use_delta_format,
    opts,
    dictionaries=False,
) -> tuple[TableInfo, list[pa.Table]]:
    read = TableRead(url, opts)
    try:
        options = ChangesOptions(
            starting_version=starting_version,
            ending_version=ending_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
        )
        info, result, refresher = read.changes(options, response_format_arg(use_delta_format))
        return info, list(read.tables(info, result.files, refresher, change=True, dictionaries=dictionaries))
    finally:
        read.close()


def load_table_changes_as_arrow(
    url: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
    use_delta_format: bool | None = None,
    *,
    max_files: int | None = None,
    max_workers: int | None = None,
    progress: bool | None = None,
    refresh_margin_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
) -> pa.Table:
    """The change data feed between two versions or timestamps (inclusive): the table's columns plus
    ``_change_type``, ``_commit_version`` (int64) and ``_commit_timestamp`` (int64, ms)."""
    opts = read_options(max_files, max_workers, progress, refresh_margin_seconds, transport, retry)
    info, tables = _changes_tables(
        url, starting_version, ending_version, starting_timestamp, ending_timestamp, use_delta_format, opts
    )
    return _concat(tables, info.change_schema)


def load_table_changes_as_pandas(
    url: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
    use_delta_format: bool | None = None,
    convert_in_batches: bool = False,
    *,
    max_files: int | None = None,
    max_workers: int | None = None,
    progress: bool | None = None,
    refresh_margin_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
):
    """The change data feed as a pandas DataFrame (see :func:`load_table_changes_as_arrow`)."""
    opts = read_options(max_files, max_workers, progress, refresh_margin_seconds, transport, retry)
    _import_pandas_meanwhile()
    span = (starting_version, ending_version, starting_timestamp, ending_timestamp)
    info, tables = _changes_tables(url, *span, use_delta_format, opts, dictionaries=True)
    return frames.to_pandas(tables, info.change_schema, convert_in_batches)


def load_table_changes_as_polars(
    url: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
    use_delta_format: bool | None = None,
    **kwargs: Any,
):
    import polars as pl

    return pl.from_arrow(
        load_table_changes_as_arrow(
            url, starting_version, ending_version, starting_timestamp, ending_timestamp, use_delta_format, **kwargs
        ),
        rechunk=False,
    )


# --- table facts -----------------------------------------------------------------------------------------


def _rest(url: str, transport: httpx.BaseTransport | None, retry: RetryPolicy | None) -> tuple[RestClient, Table]:
    profile, share, schema, name = parse_url(url)
    return RestClient(profile, transport=transport, retry=retry), Table(name, share, schema)


def get_table_version(
    url: str,
    starting_timestamp: str | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
) -> int:
    """The table's latest version, or the first version at or after ``starting_timestamp``."""
    rest, table = _rest(url, transport, retry)
    with rest:
        return rest.table_version(table, starting_timestamp)


def get_table_metadata(
    url: str,
    use_delta_format: bool = True,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
) -> Metadata:
    rest, table = _rest(url, transport, retry)
    with rest:
        return rest.metadata(table, response_format=AUTO if use_delta_format else PARQUET).metadata


def get_table_protocol(
    url: str,
    use_delta_format: bool = True,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
) -> Protocol:
    rest, table = _rest(url, transport, retry)
    with rest:
        return rest.metadata(table, response_format=AUTO if use_delta_format else PARQUET).protocol


# --- Spark ------------------------------------------------------------------------------------------------


def _spark_reader(what: str, delta_sharing_profile: DeltaSharingProfile | None, url: str, spark: Any):
    reader = active_session(what, spark).read.format("deltaSharing")
    if delta_sharing_profile is not None:
        if "#" in url:
            raise ValueError(f"Invalid 'url': {url}; with delta_sharing_profile the url is '<share>.<schema>.<table>'")
        p = delta_sharing_profile
        for key, value in (
            ("shareCredentialsVersion", p.share_credentials_version),
            ("type", p.type),
            ("endpoint", p.endpoint),
            ("tokenEndpoint", p.token_endpoint),
            ("clientId", p.client_id),
            ("clientSecret", p.client_secret),
            ("scope", p.scope),
            ("bearerToken", p.bearer_token),
            ("expirationTime", p.expiration_time),
        ):
            if value is not None:
                reader = reader.option(key, str(value))
    return reader


def load_as_spark(
    url: str,
    version: int | None = None,
    timestamp: str | None = None,
    delta_sharing_profile: DeltaSharingProfile | None = None,
    *,
    spark: Any = None,
):
    """A Spark DataFrame of the shared table, through the ``deltaSharing`` data source of ``spark``
    (by default the thread's active session, else the process's default one)."""
    reader = _spark_reader("load_as_spark", delta_sharing_profile, url, spark)
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if timestamp is not None:
        reader = reader.option("timestampAsOf", timestamp)
    return reader.load(url)


def load_table_changes_as_spark(
    url: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
    delta_sharing_profile: DeltaSharingProfile | None = None,
    *,
    spark: Any = None,
):
    """A Spark DataFrame of the change data feed, through the ``deltaSharing`` data source
    (``spark`` as in :func:`load_as_spark`)."""
    reader = _spark_reader("load_table_changes_as_spark", delta_sharing_profile, url, spark)
    options = change_feed_options(starting_version, ending_version, starting_timestamp, ending_timestamp)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(url)


def change_feed_options(
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
) -> dict[str, Any]:
    """The Spark read options of a change-feed read (those given), for the ``deltaSharing`` data
    source and the staged read alike."""
    options = {
        "readChangeFeed": "true",
        "startingVersion": starting_version,
        "endingVersion": ending_version,
        "startingTimestamp": starting_timestamp,
        "endingTimestamp": ending_timestamp,
    }
    return {key: value for key, value in options.items() if value is not None}
