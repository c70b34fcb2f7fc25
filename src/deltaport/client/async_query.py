"""Asynchronous queries on the recipient side (``asyncquery=true``).

:class:`AsyncQuery` sends one query's pages: the first to ``…/query`` with ``asyncquery=true`` and
an ``idempotencyKey`` (made up when the options have none, kept across retries). A server that
answers a ``queryId`` is polled at ``…/queries/{queryId}``, backing off from 0.1 to 5 s, until the
result is ready, the query failed (its error is raised) or ``timeout`` seconds passed
(``QUERY_TIMEOUT``); later pages come from the same endpoint. A server that does not know the
capability answers at once, as the protocol allows. The HTTP call itself is injected (``send``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import quote

import orjson

from deltaport.client.errors import SharingServerError
from deltaport.client.pages import ResponsePage
from deltaport.protocol.requests import QueryRequest

__all__ = ["ASYNC_CAPABILITY", "AsyncQuery", "Pending", "Send", "with_idempotency_key"]

ASYNC_CAPABILITY = ";asyncquery=true"
FIRST_DELAY, MAX_DELAY = 0.1, 5.0


@dataclass(frozen=True)
class Pending:
    """An asynchronous query's ``queryStatus`` line: pending, or failed with the server's error."""

    query_id: str
    status: str
    error_code: str = ""
    message: str = ""


#: one POST: (path, capabilities header, body, end-stream action required) → a page, or Pending
Send = Callable[[str, str, bytes, bool], "ResponsePage | Pending"]


def with_idempotency_key(options: QueryRequest) -> QueryRequest:
    """``options`` with an idempotency key: one per logical query, kept across its retries."""
    return options if options.idempotency_key is not None else replace(options, idempotency_key=uuid.uuid4().hex)


class AsyncQuery:
    """The pages of one asynchronous query on the table at ``table_path`` (``/shares/…/tables/t``).

    ``on_pending`` is called with the seconds waited before each poll; ``sleep`` and ``clock`` are
    injected for tests."""

    def __init__(
        self,
        send: Send,
        table_path: str,
        *,
        timeout: float | None = None,
        on_pending: Callable[[float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._table_path = table_path
        self._timeout = timeout
        self._on_pending = on_pending
        self._sleep = sleep
        self._clock = clock
        self._info_path: str | None = None  # …/queries/{queryId} once the server answered one

    def page(self, opts: QueryRequest, capabilities: str, required: bool) -> ResponsePage:
        """The page ``opts`` asks for (the first, or a later one by ``opts.page_token``)."""
        if self._info_path is not None:  # a later page of an asynchronous query: from Get Query Info
            body = orjson.dumps({k: v for k, v in (("maxFiles", opts.max_files), ("pageToken", opts.page_token)) if v})
            return self._send(self._info_path, capabilities, body, True)  # type: ignore[return-value]
        capabilities += ASYNC_CAPABILITY
        first = self._send(self._table_path + "/query", capabilities, opts.to_body(), required)
        if isinstance(first, Pending):
            self._info_path = self._table_path + "/queries/" + quote(first.query_id, safe="")
            return self._await(first, self._info_path, opts, capabilities, required)
        return first

    def _await(
        self, pending: Pending, path: str, opts: QueryRequest, capabilities: str, required: bool
    ) -> ResponsePage:
        """Poll until the query has its first page (or failed, or the timeout passed)."""
        started, delay, timeout = self._clock(), FIRST_DELAY, self._timeout
        body = orjson.dumps({"maxFiles": opts.max_files} if opts.max_files else {})
        answer: ResponsePage | Pending = pending
        while isinstance(answer, Pending):
            if answer.status == "failed":
                raise SharingServerError(200, answer.error_code, answer.message, request=f"POST {path}")
            waited = self._clock() - started
            if timeout is not None and waited >= timeout:
                raise SharingServerError(
                    408,
                    "QUERY_TIMEOUT",
                    f"the asynchronous query was still pending after {timeout:g} s",
                    request=f"POST {path}",
                    hint="raise the timeout, or query again later (a retry with the same idempotencyKey "
                    "finds the same query)",
                )
            if self._on_pending is not None:
                self._on_pending(waited)
            self._sleep(delay if timeout is None else max(0.0, min(delay, timeout - waited)))
            delay = min(delay * 2, MAX_DELAY)
            answer = self._send(path, capabilities, body, required)
        return answer
