"""One read of one shared table by file URLs, as the readers of :mod:`deltaport.client.sharing` do it:
the options they take (:class:`ReadOptions`), the query (synchronous, or asynchronous with a status
line while the server plans it), URL refreshes, and the downloads with their progress bar."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pyarrow as pa

from deltaport.client.fetch import FileFetcher, default_workers
from deltaport.client.file_list import FileList
from deltaport.client.model import FileAction, Table
from deltaport.client.pages import ResponsePage
from deltaport.client.profile import parse_url
from deltaport.client.progress import PlanningProgress, ReadProgress
from deltaport.client.query_types import ChangesOptions, QueryOptions, QueryResult
from deltaport.client.rest import RestClient
from deltaport.client.retry import RetryPolicy
from deltaport.client.schema import TableInfo
from deltaport.client.transport import file_http_client

__all__ = ["PAGE_FILES", "ReadOptions", "TableRead", "read_options"]

#: files per page of a streamed read that pages through the listing (``max_files`` changes it)
PAGE_FILES = 100_000


@dataclass(frozen=True)
class ReadOptions:
    """``async_query``: query with ``asyncquery=true`` (off by default: one plain synchronous
    query); ``timeout``: then the most seconds to wait for the server to
    plan it (None: no limit)."""

    max_files: int | None = None
    max_workers: int | None = None
    progress: bool | None = None
    refresh_margin_seconds: float | None = None
    transport: httpx.BaseTransport | None = None
    retry: RetryPolicy | None = None
    async_query: bool = False
    timeout: float | None = None


def read_options(
    max_files,
    max_workers,
    progress,
    refresh_margin_seconds,
    transport,
    retry,
    async_query: bool = False,
    timeout: float | None = None,
) -> ReadOptions:
    """The readers' keyword extras, checked."""
    if max_files is not None and (not isinstance(max_files, int) or max_files <= 0):
        raise ValueError(f"max_files must be a positive int, not {max_files!r}")
    if not isinstance(async_query, bool):
        raise ValueError(f"async_query must be True or False, not {async_query!r}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not async_query:
            raise ValueError("timeout limits the wait for an asynchronous query: pass async_query=True with it")
    return ReadOptions(
        max_files,
        max_workers,
        progress,
        None if refresh_margin_seconds is None else float(refresh_margin_seconds),
        transport,
        retry,
        async_query,
        None if timeout is None else float(timeout),
    )


class TableRead:
    """One read of one table: a REST client, a client for presigned URLs, and the plan."""

    def __init__(self, url: str, opts: ReadOptions) -> None:
        profile, share, schema, name = parse_url(url)
        self.opts = opts
        self.table = Table(name, share, schema)
        self.rest = RestClient(profile, transport=opts.transport, retry=opts.retry)
        workers = opts.max_workers or default_workers()
        self.http = file_http_client(transport=opts.transport, max_connections=2 * workers)

    def close(self) -> None:
        self.http.close()
        self.rest.close()

    def _query(self, query: QueryOptions, response_format: str, *, show: bool) -> QueryResult:
        if not self.opts.async_query:
            return self.rest.query_table(self.table, query, response_format=response_format)
        enabled = self.opts.progress if show else False
        with PlanningProgress(self.table.full_name, enabled=enabled) as planning:
            return self.rest.query_table(
                self.table,
                query,
                response_format=response_format,
                async_query=True,
                timeout=self.opts.timeout,
                on_pending=planning.update,
            )

    def snapshot(self, query: QueryOptions, response_format: str) -> tuple[TableInfo, QueryResult, Any]:
        latest = not query.specific_version
        query = replace(query, max_files=self.opts.max_files, include_refresh_token=latest)
        result = self._query(query, response_format, show=True)
        state = {"token": result.refresh_token}

        def refresher() -> Sequence[FileAction]:  # during the downloads: their bar is the one shown
            again = query
            if state["token"]:
                again = replace(query, refresh_token=state["token"])
            fresh = self._query(again, result.format, show=False)
            state["token"] = fresh.refresh_token or state["token"]
            return fresh.files

        return result.table_info(), result, refresher

    def snapshot_pages(
        self, query: QueryOptions, response_format: str, page_files: int
    ) -> tuple[TableInfo, Iterator[tuple[Sequence[FileAction], Callable[[], Sequence[FileAction]]]]]:
        """The table and its files a page of ``page_files`` at a time, each page with a refresher that
        asks that page again (fresh URLs, same version: a page token pins it, a refresh token the
        first page's). The next page is asked for once the caller takes it: a caller that reads a
        page's files before taking the next holds one page of the listing at a time."""
        latest = not query.specific_version
        query = replace(query, max_files=page_files, include_refresh_token=latest)

        def ask(on_pending: Callable[[float], None] | None = None):
            return self.rest.query_pages(
                self.table,
                query,
                response_format=response_format,
                async_query=self.opts.async_query,
                timeout=self.opts.timeout,
                on_pending=on_pending,
            )

        if self.opts.async_query:
            with PlanningProgress(self.table.full_name, enabled=self.opts.progress) as planning:
                pages = ask(planning.update)
                first_options, first = next(pages)
        else:
            pages = ask()
            first_options, first = next(pages)
        info = TableInfo.from_metadata(first.metadata, first.protocol, format=first.format, version=first.table_version)
        state = {"token": first.end_stream.refresh_token if first.end_stream else None}

        def refresher(opts: QueryOptions) -> Callable[[], Sequence[FileAction]]:
            def again() -> Sequence[FileAction]:
                ask = opts
                if opts.page_token is None and state["token"]:
                    ask = replace(opts, refresh_token=state["token"])
                fresh = self.rest.query_table(self.table, ask, response_format=info.format, follow_pages=False)
                if opts.page_token is None:
                    state["token"] = fresh.refresh_token or state["token"]
                return fresh.files

            return again

        def each(head: list[tuple[QueryOptions, ResponsePage]]) -> Iterator[tuple[Sequence[FileAction], Any]]:
            opts, page = head.pop()  # not kept once read
            yield page.files, refresher(opts)
            del page
            for opts, page in pages:
                yield page.files, refresher(opts)

        return info, each([(first_options, first)])

    def changes(self, options: ChangesOptions, response_format: str) -> tuple[TableInfo, QueryResult, Any]:
        options = replace(options, max_files=self.opts.max_files)
        result = self.rest.query_changes(self.table, options, response_format=response_format)

        def refresher() -> Sequence[FileAction]:
            return self.rest.query_changes(self.table, options, response_format=result.format).files

        return result.table_info(), result, refresher

    def tables(
        self,
        info: TableInfo,
        files: Sequence[FileAction],
        refresher: Any,
        *,
        change: bool,
        limit: int | None = None,
        columns: list[str] | None = None,
        page: int | None = None,
        dictionaries: bool = False,
    ) -> Iterator[pa.Table]:
        """The files' tables in order; with ``dictionaries``, string columns as dictionary arrays
        (for :func:`deltaport.client.frames.to_pandas`)."""
        progress = ReadProgress(
            total_bytes=files.total_bytes if isinstance(files, FileList) else sum(f.size for f in files),
            total_files=len(files),
            description=f"reading {self.table.full_name}" + (f" (page {page})" if page else ""),
            enabled=self.opts.progress,
        )
        fetcher = FileFetcher(
            info,
            http=self.http,
            change=change,
            columns=columns,
            refresher=refresher,
            max_workers=self.opts.max_workers,
            progress=progress,
            refresh_margin_seconds=self.opts.refresh_margin_seconds,
            dictionaries=dictionaries,
        )
        with progress:
            yield from fetcher.tables(files, limit=limit)
