"""The sharing server as the data source sees it: a few calls, each returning table info + files.

Driver-side code (schema, planning, streaming offsets) opens a :class:`Session` per operation;
executors only read presigned URLs (:func:`read_file`) and never need the profile, except to ask
for fresh URLs when the ones they were given have expired (:class:`Refresh`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa

from deltaport.client import transport as client_transport
from deltaport.client.model import Table
from deltaport.client.progress import PlanningProgress
from deltaport.client.reader import read_change_file
from deltaport.client.reader import read_file as client_read_file
from deltaport.client.renewal import UrlRenewer
from deltaport.client.rest import AUTO, ChangesOptions, QueryOptions, RestClient
from deltaport.client.schema import TableInfo
from deltaport.spark.options import TableUrl

__all__ = [
    "Files",
    "Refresh",
    "RemoteTable",
    "Session",
    "batch_request",
    "file_http_client",
    "read_file",
    "renewer_for",
]


@dataclass(frozen=True)
class Files:
    """Table info (protocol + metadata) of a response and its file actions, in server order."""

    table: TableInfo
    files: list[Any]  # deltaport.client.model.FileAction
    metadata_changes: list[tuple[int, TableInfo]]  # (version, table info) of metaData lines after the head
    table_version: int | None  # the Delta-Table-Version header


@dataclass(frozen=True)
class RemoteTable:
    """Where a shared table is, how to authenticate and which response format to ask for.

    Picklable: it holds the profile's location (or the credential options), not a connection.
    """

    url: TableUrl
    credentials: Mapping[str, str]
    response_format: str = AUTO  # "auto" (the server chooses), "parquet" or "delta"
    # The server answered this read before (a stream after its first offset): a connection error
    # is then waited for with retries, not reported at once as a wrong endpoint.
    answered: bool = False
    async_query: bool = False  # snapshots asked with asyncquery=true (options asyncQuery, asyncQueryTimeout)
    async_query_timeout: float | None = None

    def open(self) -> Session:
        profile: Any = self.url.profile if self.url.profile is not None else dict(self.credentials)
        return Session(
            RestClient(profile, user_agent="deltaport-spark", answered=self.answered),
            Table(self.url.table, self.url.share, self.url.schema),
            self.response_format,
            asynchronous=(self.async_query, self.async_query_timeout),
        )

    @property
    def name(self) -> str:
        return self.url.name


class Session:
    """One connection to the sharing server; use as a context manager."""

    def __init__(
        self,
        client: RestClient,
        table: Table,
        response_format: str,
        *,
        asynchronous: tuple[bool, float | None] = (False, None),
    ) -> None:
        self.client = client
        self.table = table
        self.response_format = response_format
        self.async_query, self.async_query_timeout = asynchronous

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.close()

    def version(self, starting_timestamp: str | None = None) -> int:
        """The latest table version, or the first version committed at or after ``starting_timestamp``."""
        return self.client.table_version(self.table, starting_timestamp)

    def metadata(self, *, version: int | None = None, timestamp: str | None = None) -> TableInfo:
        return self.client.metadata(
            self.table, version=version, timestamp=timestamp, response_format=self.response_format
        ).table_info()

    def snapshot(
        self,
        *,
        version: int | None = None,
        timestamp: str | None = None,
        json_predicate_hints: str | None = None,
        limit_hint: int | None = None,
    ) -> Files:
        options = QueryOptions(
            json_predicate_hints=json_predicate_hints, limit_hint=limit_hint, version=version, timestamp=timestamp
        )
        if not self.async_query:
            return _files(self.client.query_table(self.table, options, response_format=self.response_format))
        with PlanningProgress(self.table.full_name) as planning:  # a status line on a terminal
            result = self.client.query_table(
                self.table,
                options,
                response_format=self.response_format,
                async_query=True,
                timeout=self.async_query_timeout,
                on_pending=planning.update,
            )
        return _files(result)

    def commits(self, starting_version: int, ending_version: int) -> Files:
        """add/remove actions (with versions) of the commits in ``[starting, ending]``."""
        options = QueryOptions(starting_version=starting_version, ending_version=ending_version)
        return _files(self.client.query_table(self.table, options, response_format=self.response_format))

    def changes(
        self,
        *,
        starting_version: int | None = None,
        ending_version: int | None = None,
        starting_timestamp: str | None = None,
        ending_timestamp: str | None = None,
    ) -> Files:
        """The change data feed (``GET /changes``): cdf, add and remove actions with versions."""
        options = ChangesOptions(
            starting_version=starting_version,
            ending_version=ending_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            include_historical_metadata=True,
        )
        return _files(self.client.query_changes(self.table, options, response_format=self.response_format))


def _files(result: Any) -> Files:
    head = result.table_info()
    changes = [
        (int(md.version), TableInfo.from_metadata(md, result.protocol, format=result.format, version=md.version))
        for md in result.metadata_changes
        if md.version is not None
    ]
    return Files(head, list(result.files), changes, result.table_version)


@dataclass(frozen=True)
class Refresh:
    """How an executor asks the server again for the files of a partition, for fresh URLs.

    ``kind`` is ``snapshot`` (``params`` are :meth:`Session.snapshot` arguments), ``commits`` or
    ``changes``.
    """

    remote: RemoteTable
    kind: str
    params: Mapping[str, Any]

    def fetch(self) -> list[Any]:
        with self.remote.open() as session:
            return list(getattr(session, self.kind)(**self.params).files)


def batch_request(options: Any, json_predicate_hints: str | None = None) -> tuple[str, dict[str, Any]]:
    """The :class:`Session` call a batch read makes (``changes`` or ``snapshot``) and its arguments,
    from :class:`~deltaport.spark.options.ReadOptions`."""
    if options.read_change_feed:
        return "changes", {
            "starting_version": options.starting_version,
            "ending_version": options.ending_version,
            "starting_timestamp": options.starting_timestamp,
            "ending_timestamp": options.ending_timestamp,
        }
    return "snapshot", {
        "version": options.version_as_of,
        "timestamp": options.timestamp_as_of,
        "json_predicate_hints": json_predicate_hints,
    }


def file_http_client() -> httpx.Client:
    """An HTTP client for presigned file URLs (it never carries the sharing credentials): the
    connector's, on the download layer's connection pool."""
    return client_transport.file_http_client(timeout=300.0)


def read_file(
    action: Any,
    table: TableInfo,
    *,
    http: httpx.Client,
    change_feed: bool = False,
    refresh: Refresh | None = None,
    renewer: UrlRenewer | None = None,
) -> pa.Table:
    """One file as Arrow (the client's readers); a refused URL is renewed (by ``renewer``, else
    one made from ``refresh``) and the file read again.

    Pass one ``renewer`` for the files of a partition: it keeps their refreshed file list.
    """
    reader = read_change_file if change_feed else client_read_file
    if renewer is None:
        renewer = renewer_for(refresh)
    return renewer.read(action, lambda current: reader(current, table, http=http))


def renewer_for(refresh: Refresh | None) -> UrlRenewer:
    """The renewer of a Spark read: refused URLs only (executors' clocks are not the server's)."""
    return UrlRenewer(
        refresh.fetch if refresh is not None else None,
        preemptive=False,
        hint="read the table again (or pin a version with versionAsOf)",
    )
