"""The sharing server as the data source sees it: a few calls, each returning table info + files.

Driver-side code (schema, planning, streaming offsets) opens a :class:`Session` per operation;
executors only read presigned URLs (:func:`read_file`) and never need the profile, except to ask
for fresh URLs when the ones they were given have expired (:class:`Refresh`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa

from deltaport.client.errors import UrlExpired
from deltaport.client.model import Table
from deltaport.client.reader import read_change_file
from deltaport.client.reader import read_file as client_read_file
from deltaport.client.rest import AUTO, ChangesOptions, QueryOptions, RestClient
from deltaport.client.schema import TableInfo
from deltaport.spark.options import TableUrl

__all__ = ["Files", "Refresh", "RemoteTable", "Session", "batch_request", "file_http_client", "read_file"]


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

    def open(self) -> Session:
        profile: Any = self.url.profile if self.url.profile is not None else dict(self.credentials)
        return Session(
            RestClient(profile, user_agent="deltaport-spark", answered=self.answered),
            Table(self.url.table, self.url.share, self.url.schema),
            self.response_format,
        )

    @property
    def name(self) -> str:
        return self.url.name


class Session:
    """One connection to the sharing server; use as a context manager."""

    def __init__(self, client: RestClient, table: Table, response_format: str) -> None:
        self.client = client
        self.table = table
        self.response_format = response_format

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
        return _files(self.client.query_table(self.table, options, response_format=self.response_format))

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


def _match(action: Any, candidates: Sequence[Any]) -> Any | None:
    """The fresh action for ``action``: same file id, and same change type and version if ambiguous."""
    same_id = [c for c in candidates if c.id == action.id]
    if len(same_id) > 1:
        same_id = [c for c in same_id if (c.change_type, c.version) == (action.change_type, action.version)]
    return same_id[0] if same_id else None


def file_http_client() -> httpx.Client:
    """An HTTP client for presigned file URLs (it never carries the sharing credentials)."""
    return httpx.Client(timeout=httpx.Timeout(300.0, connect=30.0), follow_redirects=True)


def read_file(
    action: Any,
    table: TableInfo,
    *,
    http: httpx.Client,
    change_feed: bool = False,
    refresh: Refresh | None = None,
    fresh: list[Any] | None = None,
) -> pa.Table:
    """One file as Arrow (the client's readers); on an expired URL, once more with a fresh one.

    ``fresh`` keeps the refreshed file list of a partition between calls (pass an empty list).
    """
    reader = read_change_file if change_feed else client_read_file
    try:
        return reader(action, table, http=http)
    except UrlExpired:
        if refresh is None:
            raise
        if fresh is None:
            fresh = []
        if not fresh:
            fresh.extend(refresh.fetch())
        renewed = _match(action, fresh)
        if renewed is None:
            raise
        # keep what the data source set on the action (version, change type of snapshot inserts)
        renewed = dataclasses.replace(
            action,
            url=renewed.url,
            deletion_vector=renewed.deletion_vector,
            paired_deletion_vector=renewed.paired_deletion_vector,
            expiration_timestamp=renewed.expiration_timestamp,
        )
        return reader(renewed, table, http=http)
