"""The Delta Sharing REST API as plain methods, over httpx.

:class:`RestClient` sends every request with the profile's credentials, retries 429/5xx and
connection errors with exponential backoff (never other 4xx), and turns error responses into
:class:`~deltaport.client.errors.SharingServerError` with the server's ``errorCode`` and
``message``. Table queries ask for end-stream actions, follow ``maxFiles``/``pageToken`` pages,
and refuse a response that was cut short or that ends with ``endStreamAction.errorMessage``.
"""

from __future__ import annotations

import functools
import os
import platform
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from deltaport import __version__
from deltaport.client.async_query import AsyncQuery, Pending, with_idempotency_key
from deltaport.client.auth import AuthProvider, auth_for_profile
from deltaport.client.errors import IncompleteResponse, SharingServerError
from deltaport.client.file_list import FileList
from deltaport.client.model import (
    Schema,
    Share,
    Table,
    TemporaryCredentials,
    pair_deletion_vector_changes,
    placement,
)
from deltaport.client.pages import PageParser, ResponsePage, merged_pages
from deltaport.client.profile import DeltaSharingProfile, ProfileSource, parse_table_name, read_profile
from deltaport.client.query_types import ChangesOptions, MetadataResult, QueryOptions, QueryResult
from deltaport.client.retry import RetryPolicy, call_with_retries, unreachable
from deltaport.protocol.capabilities import DELTA, HEADER, PARQUET, Capabilities
from deltaport.protocol.lines import VERSION_HEADER

__all__ = [
    "AUTO",
    "DELTA",
    "PARQUET",
    "ChangesOptions",
    "MetadataResult",
    "QueryOptions",
    "QueryResult",
    "RestClient",
    "capabilities_header",
]

AUTO = "auto"
READER_FEATURES = "deletionvectors,columnmapping,timestampntz"
MAX_PAGES = 1_000_000


def capabilities_header(response_format: str, *, end_stream: bool = True) -> str:
    """The ``delta-sharing-capabilities`` value for ``auto`` (server chooses), ``delta`` or ``parquet``."""
    if response_format == AUTO:
        value = f"responseformat=delta,parquet;readerfeatures={READER_FEATURES}"
    elif response_format == DELTA:
        value = f"responseformat=delta;readerfeatures={READER_FEATURES}"
    elif response_format == PARQUET:
        value = "responseformat=parquet"
    else:
        raise ValueError(f"response_format must be 'auto', 'delta' or 'parquet', not {response_format!r}")
    return value + (";includeendstreamaction=true" if end_stream else "")


def response_format_arg(use_delta_format: bool | None) -> str:
    return AUTO if use_delta_format is None else (DELTA if use_delta_format else PARQUET)


# --- request options --------------------------------------------------------------------------------


# --- shapes of JSON answers --------------------------------------------------------------------------

_ITEM_STRINGS = ("name", "id", "share", "schema", "shareId")


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _malformed(what: str, problem: str) -> IncompleteResponse:
    return IncompleteResponse(
        f"the answer to {what} is malformed: {problem}",
        error_code="MALFORMED_RESPONSE",
        request=what,
        hint="the server does not follow the Delta Sharing protocol; ask the data provider to check it",
    )


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _malformed(what, f"the body is a JSON {_kind(body)}, not an object")
    return body


def _named(item: Any, what: str, where: str) -> dict[str, Any]:
    """``item`` as an object with a non-empty string ``name`` (and string ``id``/``share``/... if present)."""
    if not isinstance(item, dict):
        raise _malformed(what, f"{where} is a JSON {_kind(item)}, not an object")
    if not isinstance(item.get("name"), str) or not item["name"]:
        raise _malformed(what, f"{where} has no string 'name'")
    for key in _ITEM_STRINGS:
        if item.get(key) is not None and not isinstance(item[key], str):
            raise _malformed(what, f"{where}.{key} is a JSON {_kind(item[key])}, not a string")
    return item


# --- the client --------------------------------------------------------------------------------------


def _table(table: Table | str | Any) -> Table:
    if isinstance(table, Table):
        return table
    if isinstance(table, str):
        share, schema, name = parse_table_name(table)
        return Table(name, share, schema)
    return Table(table.name, table.share, table.schema)  # the official connector's Table, or alike


def _q(name: str) -> str:
    return quote(name, safe="")


def _status(body: Mapping[str, Any], what: str) -> Pending:
    query_id, status = body.get("queryId"), body.get("status", "pending")
    if not isinstance(query_id, str) or not query_id or status not in ("pending", "failed"):
        raise _malformed(what, f"its queryStatus line is not a pending or failed query: {dict(body)!r:.200}")
    return Pending(query_id, status, str(body.get("errorCode") or "QUERY_FAILED"), str(body.get("message") or ""))


def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set),
    made once per process and setting: loading the roots takes ~20 ms, which every client paid, an
    ``http://`` endpoint's too."""
    return _tls_context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _tls_context_for(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    if cert_file:  # as httpx reads the environment
        return ssl.create_default_context(cafile=cert_file)
    if cert_dir:
        return ssl.create_default_context(capath=cert_dir)
    return httpx.create_ssl_context()


class RestClient:
    """Delta Sharing REST calls for one profile. Use as a context manager, or call :meth:`close`.

    ``transport`` replaces httpx's network transport (tests, proxies); ``retry`` sets the backoff.
    Until the endpoint has answered once (or with ``answered=True``), a connection that cannot be
    opened fails at once, naming the endpoint: a wrong profile is not retried for a minute.
    """

    def __init__(
        self,
        profile: ProfileSource,
        *,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
        auth: AuthProvider | None = None,
        user_agent: str | None = None,
        clock: Callable[[], float] = time.time,
        answered: bool = False,
    ) -> None:
        self.profile: DeltaSharingProfile = read_profile(profile)
        self.answered = answered  # the endpoint has answered (any status): connection errors are retried
        self.retry = retry or RetryPolicy()
        self._auth = auth or auth_for_profile(self.profile, transport=transport, retry=self.retry, clock=clock)
        self._http = httpx.Client(
            transport=transport, timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)), verify=_tls_context()
        )
        self._user_agent = user_agent or (
            f"deltaport/{__version__} httpx/{httpx.__version__} "
            f"Python/{platform.python_version()} System/{platform.system()}"
        )
        self.endpoint = self.profile.endpoint

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plumbing ---------------------------------------------------------------------------------

    def _headers(self, capabilities: str | None = None) -> dict[str, str]:
        headers = {"User-Agent": self._user_agent, **self._auth.headers()}
        if capabilities is not None:
            headers[HEADER] = capabilities
        return headers

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        capabilities: str | None = None,
        consume: Callable[[httpx.Response], None] | None = None,
    ) -> httpx.Response:
        """One call with retries. ``consume`` reads a 200 body while it streams (inside the retry)."""
        url = self.endpoint + path
        what = f"{method} {path}"
        reauthenticated = False
        while True:

            def once() -> httpx.Response:
                headers = self._headers(capabilities)
                if body is not None:
                    headers["Content-Type"] = "application/json; charset=utf-8"
                with self._http.stream(method, url, params=params, content=body, headers=headers) as response:
                    self.answered = True
                    if response.status_code == 200 and consume is not None:
                        consume(response)
                    else:
                        response.read()
                    return response

            response = call_with_retries(
                once,
                self.retry,
                what=what,
                unreachable=lambda e: None if self.answered else unreachable(self.endpoint, e),
            )
            if response.status_code == 401 and not reauthenticated and self._auth.invalidate():
                reauthenticated = True  # an OAuth token revoked early: fetch a new one, once
                continue
            if response.status_code >= 400:
                raise self._error(response, what)
            return response

    @staticmethod
    def _error(response: httpx.Response, what: str) -> SharingServerError:
        code, message = "", ""
        try:
            body = orjson.loads(response.content)
            if isinstance(body, dict):
                code = str(body.get("errorCode") or "")
                message = str(body.get("message") or "")
        except orjson.JSONDecodeError:
            message = response.text[:300]
        if not code:
            code = {
                401: "UNAUTHENTICATED",
                403: "PERMISSION_DENIED",
                404: "RESOURCE_DOES_NOT_EXIST",
                429: "TOO_MANY_REQUESTS",
            }.get(response.status_code, "INTERNAL_ERROR" if response.status_code >= 500 else "BAD_REQUEST")
        return SharingServerError(response.status_code, code, message, request=what)

    def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        response = self._send("GET", path, params=params)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise IncompleteResponse(
                f"the server answered GET {path} with something that is not JSON",
                error_code="MALFORMED_RESPONSE",
                request=f"GET {path}",
            ) from None

    @staticmethod
    def _version(response: httpx.Response, required: bool, what: str) -> int | None:
        raw = response.headers.get(VERSION_HEADER)
        if raw is None:
            if required:
                raise IncompleteResponse(
                    f"the response has no {VERSION_HEADER} header",
                    error_code="MALFORMED_RESPONSE",
                    request=what,
                    hint="the server does not follow the Delta Sharing protocol",
                )
            return None
        try:
            return int(raw)
        except ValueError:
            raise IncompleteResponse(
                f"the {VERSION_HEADER} header is not a number: {raw!r}", error_code="MALFORMED_RESPONSE", request=what
            ) from None

    def _ndjson(
        self,
        method: str,
        path: str,
        *,
        changes: bool,
        capabilities: str,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        end_stream_required: bool = False,
    ) -> Any:
        """The page the response holds; an asynchronous query's pending status as :class:`Pending`."""
        what = f"{method} {path}"
        state: dict[str, PageParser] = {}

        def consume(response: httpx.Response) -> None:
            parser = PageParser(changes=changes, request=what)
            state["parser"] = parser
            pending = b""
            for chunk in response.iter_bytes():
                if pending:
                    chunk = pending + chunk
                lines = chunk.split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line.strip():
                        parser.feed(line)
            if pending.strip():
                parser.feed(pending)

        response = self._send(method, path, params=params, body=body, capabilities=capabilities, consume=consume)
        status = state["parser"].query_status
        if status is not None:
            return _status(status, what)
        echoed = Capabilities.parse(response.headers.get(HEADER))
        expect = end_stream_required or echoed.include_end_stream_action
        return state["parser"].finish(table_version=self._version(response, False, what), expect_end_stream=expect)

    # --- listing --------------------------------------------------------------------------------------

    @staticmethod
    def _page_params(max_results: int | None, page_token: str | None) -> dict[str, str]:
        params = {}
        if max_results is not None:
            params["maxResults"] = str(max_results)
        if page_token:
            params["pageToken"] = page_token
        return params

    def _listing(self, path: str, params: Mapping[str, str]) -> tuple[list[dict[str, Any]], str | None]:
        """The ``items`` and ``nextPageToken`` of a listing, each item an object with a string ``name``."""
        body = _object(self._get_json(path, params), f"GET {path}")
        items = body.get("items")
        if items is None:
            items = []
        elif not isinstance(items, list):
            raise _malformed(f"GET {path}", f"'items' is a JSON {_kind(items)}, not an array")
        for index, item in enumerate(items):
            _named(item, f"GET {path}", f"items[{index}]")
        token = body.get("nextPageToken")
        if token is not None and not isinstance(token, str):
            raise _malformed(f"GET {path}", f"'nextPageToken' is a JSON {_kind(token)}, not a string")
        return items, token or None

    def list_shares(
        self, *, max_results: int | None = None, page_token: str | None = None
    ) -> tuple[list[Share], str | None]:
        items, token = self._listing("/shares", self._page_params(max_results, page_token))
        return [Share(i["name"], i.get("id")) for i in items], token

    def get_share(self, share: str) -> Share:
        path = f"/shares/{_q(share)}"
        item = _named(_object(self._get_json(path), f"GET {path}").get("share"), f"GET {path}", "'share'")
        return Share(item["name"], item.get("id"))

    def list_schemas(
        self, share: Share | str, *, max_results: int | None = None, page_token: str | None = None
    ) -> tuple[list[Schema], str | None]:
        name = share if isinstance(share, str) else share.name
        items, token = self._listing(f"/shares/{_q(name)}/schemas", self._page_params(max_results, page_token))
        return [Schema(i["name"], i.get("share") or name) for i in items], token

    def list_tables(
        self, schema: Schema, *, max_results: int | None = None, page_token: str | None = None
    ) -> tuple[list[Table], str | None]:
        items, token = self._listing(
            f"/shares/{_q(schema.share)}/schemas/{_q(schema.name)}/tables", self._page_params(max_results, page_token)
        )
        return [self._table_item(i, schema.share, schema.name) for i in items], token

    def list_all_tables(
        self, share: Share | str, *, max_results: int | None = None, page_token: str | None = None
    ) -> tuple[list[Table], str | None]:
        name = share if isinstance(share, str) else share.name
        items, token = self._listing(f"/shares/{_q(name)}/all-tables", self._page_params(max_results, page_token))
        return [self._table_item(i, name, None) for i in items], token

    @staticmethod
    def _table_item(item: Mapping[str, Any], share: str, schema: str | None) -> Table:
        return Table(
            item["name"],
            item.get("share") or share,
            item.get("schema") or schema or "",
            item.get("id"),
            item.get("shareId"),
            **placement(item, f"the listing item of table {item['name']!r}"),
        )

    @staticmethod
    def iterate(call: Callable[..., tuple[list, str | None]], *args: Any) -> Iterator[Any]:
        """Every item of a listing, following ``nextPageToken`` (e.g. ``iterate(rest.list_shares)``)."""
        token: str | None = None
        seen: set[str] = set()
        while True:
            items, token = call(*args, page_token=token)
            yield from items
            if not token:
                return
            if token in seen:
                raise IncompleteResponse("the server repeated a listing page token", error_code="MALFORMED_RESPONSE")
            seen.add(token)

    # --- tables ----------------------------------------------------------------------------------------

    def _table_path(self, table: Table | str) -> str:
        t = _table(table)
        return f"/shares/{_q(t.share)}/schemas/{_q(t.schema)}/tables/{_q(t.name)}"

    def table_version(self, table: Table | str, starting_timestamp: str | None = None) -> int:
        path = self._table_path(table) + "/version"
        params = {"startingTimestamp": starting_timestamp} if starting_timestamp else None
        response = self._send("GET", path, params=params)
        return self._version(response, True, f"GET {path}")  # type: ignore[return-value]

    def metadata(
        self,
        table: Table | str,
        *,
        version: int | None = None,
        timestamp: str | None = None,
        response_format: str = AUTO,
    ) -> MetadataResult:
        params = {}
        if version is not None:
            params["version"] = str(version)
        if timestamp is not None:
            params["timestamp"] = timestamp
        page = self._ndjson(
            "GET",
            self._table_path(table) + "/metadata",
            changes=False,
            params=params,
            capabilities=capabilities_header(response_format, end_stream=False),
        )
        return MetadataResult(page.protocol, page.metadata, page.format, page.table_version)

    def temporary_table_credentials(self, table: Table | str, location: str | None = None) -> TemporaryCredentials:
        """``POST .../temporary-table-credentials``: credentials that read the table's root, or
        ``location`` (one of its auxiliary locations, or a directory under either)."""
        path = self._table_path(table) + "/temporary-table-credentials"
        body = orjson.dumps({} if location is None else {"location": location})
        response = self._send("POST", path, body=body)
        try:
            answer = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            answer = None
        return TemporaryCredentials.from_answer(answer, f"POST {path}")

    def query_table(
        self,
        table: Table | str,
        options: QueryOptions = QueryOptions(),
        *,
        response_format: str = AUTO,
        follow_pages: bool = True,
        async_query: bool = False,
        timeout: float | None = None,
        on_pending: Callable[[float], None] | None = None,
    ) -> QueryResult:
        """``POST .../query``; with ``follow_pages`` every page (``options.max_files`` per page) is fetched.
        The files are held compactly (:class:`~deltaport.client.file_list.FileList`).

        ``async_query``: send ``asyncquery=true`` and poll the server's ``queryId`` for at most
        ``timeout`` seconds (None: no limit), ``on_pending`` called with the seconds waited before
        each poll (see :mod:`deltaport.client.async_query`). Off by default; change queries are
        never asynchronous."""
        pages = self.query_pages(
            table,
            options,
            response_format=response_format,
            follow_pages=follow_pages,
            async_query=async_query,
            timeout=timeout,
            on_pending=on_pending,
        )
        return merged_pages(pages)

    def query_pages(
        self,
        table: Table | str,
        options: QueryOptions = QueryOptions(),
        *,
        response_format: str = AUTO,
        follow_pages: bool = True,
        async_query: bool = False,
        timeout: float | None = None,
        on_pending: Callable[[float], None] | None = None,
    ) -> Iterator[tuple[QueryOptions, ResponsePage]]:
        """The pages of ``POST .../query`` one at a time, each with the options that asked for it
        (asking them again renews the page's URLs: a page token pins the version and position). The
        next page is asked for only when the caller is done with one, so a caller that reads each
        page's files before the next holds one page at a time. Every page must describe the
        first's table version and format (else ``INCONSISTENT_PAGES``). Options as :meth:`query_table`."""
        path = self._table_path(table) + "/query"
        changes = options.starting_version is not None
        asynchronous: AsyncQuery | None = None
        if async_query and not changes:
            options = with_idempotency_key(options)
            asynchronous = AsyncQuery(self._post_page, self._table_path(table), timeout=timeout, on_pending=on_pending)

        def page(opts: QueryOptions) -> ResponsePage:
            required = opts.max_files is not None or opts.include_refresh_token
            capabilities = capabilities_header(response_format)
            if asynchronous is not None:
                return asynchronous.page(opts, capabilities, required)
            body = opts.to_body()
            answer = self._ndjson(
                "POST", path, changes=changes, capabilities=capabilities, body=body, end_stream_required=required
            )
            if isinstance(answer, Pending):
                raise _malformed(f"POST {path}", "it answers a queryId to a query not asked to run asynchronously")
            return answer

        def next_options(opts: QueryOptions, token: str) -> QueryOptions:
            return replace(opts, page_token=token, include_refresh_token=False, refresh_token=None)

        return self._pages(page, options, next_options, follow_pages, changes, f"POST {path}")

    def _post_page(self, path: str, capabilities: str, body: bytes, required: bool) -> ResponsePage | Pending:
        return self._ndjson(
            "POST", path, changes=False, capabilities=capabilities, body=body, end_stream_required=required
        )

    def query_changes(
        self,
        table: Table | str,
        options: ChangesOptions = ChangesOptions(),
        *,
        response_format: str = AUTO,
        follow_pages: bool = True,
    ) -> QueryResult:
        """``GET .../changes``; add/remove pairs that differ by deletion vector are marked (see
        :func:`~deltaport.client.model.pair_deletion_vector_changes`)."""
        path = self._table_path(table) + "/changes"

        def page(opts: ChangesOptions) -> ResponsePage:
            return self._ndjson(
                "GET",
                path,
                changes=True,
                params=opts.params(),
                capabilities=capabilities_header(response_format),
                end_stream_required=opts.max_files is not None,
            )

        def next_options(opts: ChangesOptions, token: str) -> ChangesOptions:
            return replace(opts, page_token=token)

        result = merged_pages(self._pages(page, options, next_options, follow_pages, True, f"GET {path}"))
        if not any(f.deletion_vector for f in result.files):
            return result  # nothing to pair (the usual case): the files stay compact
        return replace(result, files=FileList.of(pair_deletion_vector_changes(result.files)))

    def _pages(
        self,
        page: Callable[[Any], ResponsePage],
        options: Any,
        next_options: Callable[[Any, str], Any],
        follow_pages: bool,
        changes: bool,
        what: str,
    ) -> Iterator[tuple[Any, ResponsePage]]:
        first = page(options)
        fmt, version, end = first.format, first.table_version, first.end_stream
        yield options, first
        del first  # a page is not held here while the next streams in
        pages = 1
        seen: set[str] = set()
        while follow_pages and end is not None and end.next_page_token:
            token = end.next_page_token
            if token in seen or pages >= MAX_PAGES:
                raise IncompleteResponse(
                    "the server repeated a page token", error_code="MALFORMED_RESPONSE", request=what
                )
            seen.add(token)
            options = next_options(options, token)
            nxt = page(options)
            if nxt.format != fmt or (not changes and nxt.table_version != version):
                raise IncompleteResponse(
                    f"page {pages + 1} describes another table version or format "
                    f"({nxt.table_version}/{nxt.format}, first page {version}/{fmt})",
                    error_code="INCONSISTENT_PAGES",
                    request=what,
                )
            if nxt.end_stream is None:
                raise IncompleteResponse(f"page {pages + 1} ended without its endStreamAction", request=what)
            yield options, nxt
            end = nxt.end_stream
            del nxt
            pages += 1
