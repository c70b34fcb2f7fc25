"""One page of a table query's answer: :class:`PageParser` reads its NDJSON lines as they stream
in, keeping the file actions compact (:class:`~deltaport.client.file_list.FileList`), and
:meth:`PageParser.finish` checks the page is whole and returns it as a :class:`ResponsePage`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from deltaport.client.errors import IncompleteResponse
from deltaport.client.file_list import FileList, FileListBuilder
from deltaport.client.model import EndStreamAction, FileAction, Metadata, Protocol
from deltaport.client.query_types import QueryResult
from deltaport.protocol.capabilities import DELTA, PARQUET

__all__ = ["PageParser", "ResponsePage", "merged_pages"]


@dataclass(frozen=True)
class ResponsePage:
    protocol: Protocol
    metadata: Metadata
    format: str
    files: FileList
    metadata_changes: tuple[Metadata, ...] = ()
    end_stream: EndStreamAction | None = None
    table_version: int | None = None


class PageParser:
    """Feed NDJSON lines (bytes); :meth:`finish` checks the page is whole and returns it."""

    def __init__(self, *, changes: bool, request: str) -> None:
        self.changes = changes
        self.request = request
        self.protocol: Protocol | None = None
        self.metadata: Metadata | None = None
        self.format: str | None = None
        self.files = FileListBuilder()
        self.metadata_changes: list[Metadata] = []
        self.end_stream: EndStreamAction | None = None
        #: an asynchronous query's ``queryStatus`` (pending or failed): the page has no result yet
        self.query_status: dict[str, Any] | None = None
        self.lines = 0

    def _fail(self, message: str, code: str = "MALFORMED_RESPONSE") -> IncompleteResponse:
        return IncompleteResponse(message, error_code=code, request=self.request)

    def feed(self, raw: bytes) -> None:
        self.lines += 1
        if self.end_stream is not None:
            raise self._fail("the response has lines after its endStreamAction")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self._fail(f"line {self.lines} of the response is not JSON: {raw[:80]!r}") from None
        if not isinstance(obj, dict) or len(obj) != 1:
            raise self._fail(f"line {self.lines} of the response is not a single action: {raw[:80]!r}")
        ((kind, body),) = obj.items()
        if not isinstance(body, dict):
            raise self._fail(f"line {self.lines} ('{kind}') is not a JSON object")
        if kind == "file":
            if "deltaSingleAction" in body:
                self._need_head(kind, DELTA)
                self.files.append(FileAction.from_delta_line(body, changes=self.changes))
            else:
                self._need_head(kind, PARQUET)
                self.files.append(FileAction.from_parquet_line(kind, body, changes=self.changes))
        elif kind in ("add", "remove", "cdf"):
            self._need_head(kind, PARQUET)
            self.files.append(FileAction.from_parquet_line(kind, body, changes=True))
        elif kind == "metaData":
            md = Metadata.from_line(body)
            if self.metadata is None:
                if self.protocol is None:
                    raise self._fail("the response sent metaData before protocol")
                self.metadata = md
            else:
                self.metadata_changes.append(md)
        elif kind == "protocol":
            if self.protocol is None:
                self.protocol = Protocol.from_line(body)
                self.format = DELTA if "deltaProtocol" in body else PARQUET
            # later protocol lines (historical protocol) need no action: the reader checks features
        elif kind == "endStreamAction":
            self.end_stream = EndStreamAction.from_line(body)
            if self.end_stream.error_message:
                message = self.end_stream.error_message
                code, _, rest = message.partition(": ")
                if code and code.replace("_", "").isalnum() and code.isupper() and rest:
                    raise self._fail(rest, code)
                raise self._fail(message, "SERVER_STREAM_ERROR")
        elif kind == "queryStatus" and self.lines == 1:
            self.query_status = body
        # unknown actions (future additions) are ignored

    def _need_head(self, kind: str, fmt: str) -> None:
        if self.metadata is None:
            raise self._fail(f"the response sent a '{kind}' line before protocol and metaData")
        if self.format != fmt:
            raise self._fail(f"the response mixes response formats ({self.format} protocol, {fmt} '{kind}' line)")

    def finish(self, *, table_version: int | None, expect_end_stream: bool) -> ResponsePage:
        if self.protocol is None or self.metadata is None:
            raise self._fail("the response ended before its protocol and metaData lines", "INCOMPLETE_RESPONSE")
        if expect_end_stream and self.end_stream is None:
            raise self._fail(
                "the response ended without its endStreamAction line: it was cut short", "INCOMPLETE_RESPONSE"
            )
        return ResponsePage(
            self.protocol,
            self.metadata,
            self.format or PARQUET,
            self.files.build(),
            tuple(self.metadata_changes),
            self.end_stream,
            table_version,
        )


def merged_pages(answer: Iterator[tuple[Any, ResponsePage]]) -> QueryResult:
    """The pages of one answer as one result (the first page's head and refresh token). A page's
    files join the result's list (within its memory budget) as it comes, and the page is let go."""
    files = FileListBuilder()
    pages: list[ResponsePage] = []
    for _, page in answer:
        files.add(page.files)
        pages.append(replace(page, files=FileList()))
        del page
    first = pages[0]
    expiries = [p.end_stream.min_url_expiration_timestamp for p in pages if p.end_stream is not None]
    known = [e for e in expiries if e is not None]
    return QueryResult(
        first.protocol,
        first.metadata,
        first.format,
        files.build(),
        first.table_version,
        first.end_stream.refresh_token if first.end_stream else None,
        len(pages),
        tuple(m for p in pages for m in p.metadata_changes),
        min(known) if known else None,
    )
