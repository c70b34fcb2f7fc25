"""Asynchronous queries: ``POST …/query`` with ``asyncquery=true`` and ``POST …/queries/{queryId}``.

A snapshot query sent with ``asyncquery=true`` is planned in a small pool of threads of its own:
planning resolves the snapshot the query reads (loading it into the snapshot cache) and checks it
can be served. The submission waits up to ``asyncQueryThresholdMs`` for that. Planned in time (a
table whose snapshot is cached plans in microseconds), the query is answered at once, as a
synchronous one. Otherwise the answer is one line, ``{"queryStatus": {"queryId", "status":
"pending"}}``, with ``asyncquery=true`` in the capabilities header, and the client polls.

Planning's product is the version it pinned; a poll of a succeeded query is answered by the
ordinary snapshot query at that version, with the submission's parameters and the poll's
``maxFiles`` and ``pageToken`` (its page tokens are the ordinary ones). A query whose planning
failed answers ``{"queryStatus": {"queryId", "status": "failed", "errorCode", "message"}}``.

A query id is ``<random>.<expiry ms>.<HMAC>``, the HMAC binding it to its recipient and table: an
id of another recipient or table is unknown (404), exactly like a made-up one; past its expiry
(``asyncQueryTtlSeconds``) it is 404 naming the expiry. The state (:class:`AsyncQuery`) is kept
in the catalog database when the server has one (a restart and other replicas see it), else in
memory (a restart forgets it: its ids answer 404 as expired). Expired states are deleted at the
next submission. A pending query that no thread of this process is planning (the process that
took it restarted, or another replica took it) is planned again by the one asked about it; the
first outcome recorded stays.

Submissions with the same ``idempotencyKey`` from the same recipient on the same table and with
the same parameters get the same query id; the same key with other parameters is refused (400).
The key is optional, as the protocol says: without one every submission is a new query.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import logging
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Protocol

import orjson

from deltaport.catalog.model import AsyncQuery
from deltaport.errors import DeltaportError, InvalidParameter, ResourceNotFound, public_message
from deltaport.protocol import lines
from deltaport.protocol.capabilities import HEADER
from deltaport.protocol.requests import QueryRequest
from deltaport.server.sharing.answers import Answer, Reply, binding
from deltaport.server.sharing.registry import Principal, SharedTable
from deltaport.server.sharing.tokens import TokenBinding, TokenCodec, params_checksum

if TYPE_CHECKING:
    from deltaport.catalog.store import CatalogDB

log = logging.getLogger("deltaport.server")

#: Threads planning asynchronous queries: a few, so slow tables cannot take every thread of the server.
THREADS = 4
#: The longest idempotency key accepted (the catalog stores up to this many characters).
MAX_KEY_LENGTH = 255

PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"


class QueryStates(Protocol):
    """Where the state of asynchronous queries is kept (memory, or the catalog database)."""

    def add_async_query(self, query: AsyncQuery) -> AsyncQuery: ...
    def async_query(self, query_id: str) -> AsyncQuery | None: ...
    def keyed_async_query(self, recipient: str, table: str, table_id: str, key: str) -> AsyncQuery | None: ...
    def finish_async_query(
        self,
        query_id: str,
        *,
        version: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None: ...


class MemoryQueryStates:
    """The states in this process's memory, under a lock; expired ones go at the next ``add``."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._by_id: dict[str, AsyncQuery] = {}

    def add_async_query(self, query: AsyncQuery) -> AsyncQuery:
        with self._lock:
            now = self._now_ms()
            self._by_id = {k: v for k, v in self._by_id.items() if v.expires_at > now}
            if query.idempotency_key is not None:
                found = self._keyed(query.recipient, query.table, query.table_id, query.idempotency_key)
                if found is not None:
                    return found
            self._by_id[query.query_id] = query
            return query

    def async_query(self, query_id: str) -> AsyncQuery | None:
        with self._lock:
            found = self._by_id.get(query_id)
            return found if found is not None and found.expires_at > self._now_ms() else None

    def keyed_async_query(self, recipient: str, table: str, table_id: str, key: str) -> AsyncQuery | None:
        with self._lock:
            return self._keyed(recipient, table, table_id, key)

    def _keyed(self, recipient: str, table: str, table_id: str, key: str) -> AsyncQuery | None:
        now = self._now_ms()
        for found in self._by_id.values():
            same = (found.recipient, found.table, found.table_id, found.idempotency_key) == (
                recipient,
                table,
                table_id,
                key,
            )
            if same and found.expires_at > now:
                return found
        return None

    def finish_async_query(
        self,
        query_id: str,
        *,
        version: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        with self._lock:
            found = self._by_id.get(query_id)
            if found is None or found.status != PENDING:
                return
            status = FAILED if error_code is not None else SUCCEEDED
            self._by_id[query_id] = dataclasses.replace(
                found, status=status, version=version, error_code=error_code, error_message=error_message
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)


#: plans a query: (recipient, table, request) -> the version it reads (raises what the query would)
Planner = Callable[[Principal, SharedTable, QueryRequest], int]
#: serves a planned query: (recipient, table, request, answer, pinned version) -> the reply
Server = Callable[[Principal, SharedTable, QueryRequest, Answer, int], Reply]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _status_line(query_id: str, status: str, **more: str) -> Reply:
    body = orjson.dumps({"queryStatus": {"queryId": query_id, "status": status, **more}}) + b"\n"
    return Reply(headers={"Content-Type": lines.NDJSON}, content=body)


class AsyncQueries:
    """Submissions and polls of asynchronous queries (see the module's doc)."""

    def __init__(
        self,
        codec: TokenCodec,
        *,
        plan: Planner,
        serve: Server,
        threshold_ms: int,
        ttl_seconds: int,
        states: QueryStates | None = None,
    ) -> None:
        self.codec = codec
        self._plan = plan
        self._serve = serve
        self.threshold_ms = threshold_ms
        self.ttl_ms = ttl_seconds * 1000
        self.states: QueryStates = states if states is not None else MemoryQueryStates(codec.now_ms)
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="deltaport-async-query")
        self._planning: dict[str, Future[int]] = {}
        self._lock = threading.Lock()

    def use_catalog(self, catalog: CatalogDB) -> None:
        """Keep the state in ``catalog`` from now on."""
        self.states = catalog

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- submission -------------------------------------------------------------------------------

    def submit(self, who: Principal, shared: SharedTable, req: QueryRequest, answer: Answer) -> Reply:
        """Answer a snapshot query sent with ``asyncquery=true``: its result when planned within
        the threshold, else a pending query status."""
        key = req.idempotency_key
        if key is not None and not 0 < len(key) <= MAX_KEY_LENGTH:
            raise InvalidParameter(f"idempotencyKey must be 1 to {MAX_KEY_LENGTH} characters long")
        bound = binding(who, shared)
        stored = dataclasses.replace(req, max_files=None, page_token=None, idempotency_key=None)
        digest = params_checksum(orjson.loads(stored.to_body()))
        if key is not None:
            found = self.states.keyed_async_query(bound.recipient, bound.table, bound.table_id, key)
            if found is not None:
                return self._resubmitted(found, digest, bound)
        future = self._pool.submit(self._plan, who, shared, stored)
        if self.threshold_ms == 0:  # every such query is answered with a queryId, however fast it plans
            return self._pending(who, shared, stored, future, bound, digest, key)
        try:
            version = future.result(timeout=self.threshold_ms / 1000)
        except FutureTimeout:
            return self._pending(who, shared, stored, future, bound, digest, key)
        return self._serve(who, shared, req, answer, version)

    def _resubmitted(self, found: AsyncQuery, digest: str, bound: TokenBinding) -> Reply:
        if found.params_digest != digest:
            raise InvalidParameter(
                "idempotencyKey was already used for another query on this table with other parameters: "
                "send a new idempotencyKey for a new query (a retry must repeat the parameters exactly)"
            )
        return self._pending_reply(self.query_id(found.query_id, found.expires_at, bound))

    def _pending(
        self,
        who: Principal,
        shared: SharedTable,
        stored: QueryRequest,
        future: Future[int],
        bound: TokenBinding,
        digest: str,
        key: str | None,
    ) -> Reply:
        state = AsyncQuery(
            query_id=secrets.token_hex(16),
            recipient=bound.recipient,
            table=bound.table,
            table_id=bound.table_id,
            params_digest=digest,
            request=stored.to_body().decode(),
            expires_at=self.codec.now_ms() + self.ttl_ms,
            idempotency_key=key,
        )
        kept = self.states.add_async_query(state)
        if kept.query_id != state.query_id:  # a concurrent retry with the same key came first
            future.cancel()
            return self._resubmitted(kept, digest, bound)
        self._track(state.query_id, future)
        return self._pending_reply(self.query_id(state.query_id, state.expires_at, bound))

    @staticmethod
    def _pending_reply(query_id: str) -> Reply:
        reply = _status_line(query_id, PENDING)
        reply.headers[HEADER] = "asyncquery=true"
        return reply

    def _track(self, query_id: str, future: Future[int]) -> None:
        """Record the outcome of ``future`` (planning ``query_id``) when it is done."""
        with self._lock:
            self._planning[query_id] = future
        self._watch(query_id, future)

    def _watch(self, query_id: str, future: Future[int]) -> None:
        def done(finished: Future[int]) -> None:
            try:
                self._record(query_id, finished)
            finally:
                with self._lock:
                    self._planning.pop(query_id, None)

        future.add_done_callback(done)

    def _record(self, query_id: str, finished: Future[int]) -> None:
        if finished.cancelled():
            return
        exc = finished.exception()
        try:
            if exc is None:
                self.states.finish_async_query(query_id, version=finished.result())
            elif isinstance(exc, DeltaportError):
                self.states.finish_async_query(query_id, error_code=exc.error_code, error_message=public_message(exc))
            else:
                log.error("planning an asynchronous query failed", exc_info=exc)
                self.states.finish_async_query(
                    query_id, error_code="INTERNAL_ERROR", error_message="the server failed while planning the query"
                )
        except DeltaportError as stored:  # the state's store (the catalog database) is down: a poll re-plans
            log.warning("the outcome of an asynchronous query was not recorded: %s", stored.operator_message)

    # --- ids ----------------------------------------------------------------------------------------

    def query_id(self, random: str, expires_at: int, bound: TokenBinding) -> str:
        """The id handed out: the random part, the expiry, and an HMAC binding both to ``bound``."""
        return f"{random}.{expires_at}.{_b64(self._mac(random, expires_at, bound))}"

    def _mac(self, random: str, expires_at: int, bound: TokenBinding) -> bytes:
        message = orjson.dumps(["query", random, expires_at, bound.recipient, bound.table, bound.table_id])
        return self.codec.mac(message)

    def _verified(self, query_id: str, bound: TokenBinding) -> str:
        """The random part of ``query_id`` once its HMAC and expiry check; else ResourceNotFound."""
        unknown = ResourceNotFound(
            "The query id is unknown for this table: use the queryId the query's submission answered, "
            "or submit the query again"
        )
        parts = query_id.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 18:
            raise unknown
        random, expires_at = parts[0], int(parts[1])
        if not hmac.compare_digest(parts[2], _b64(self._mac(random, expires_at, bound))):
            raise unknown
        if expires_at <= self.codec.now_ms():
            raise self._expired()
        return random

    def _expired(self) -> ResourceNotFound:
        return ResourceNotFound(
            f"The query has expired (queries are kept for {self.ttl_ms // 1000} seconds, and a restart of a "
            "server without a catalog database forgets them): submit the query again"
        )

    # --- polls --------------------------------------------------------------------------------------

    def poll(self, who: Principal, shared: SharedTable, query_id: str, body: bytes, answer: Answer) -> Reply:
        """``POST …/queries/{queryId}``: the query's status, or its result once planned."""
        asked = QueryRequest.parse(body if body.strip() else b"{}")
        if asked != QueryRequest(max_files=asked.max_files, page_token=asked.page_token):
            raise InvalidParameter("Get Query Info takes only maxFiles and pageToken in its body")
        bound = binding(who, shared)
        random = self._verified(query_id, bound)
        state = self.states.async_query(random)
        if state is None:
            raise self._expired()
        if state.status == FAILED:
            return _status_line(
                query_id, FAILED, errorCode=state.error_code or "INTERNAL_ERROR", message=state.error_message or ""
            )
        stored = QueryRequest.parse(state.request.encode())
        if state.status == PENDING or state.version is None:
            self._replan(random, who, shared, stored)
            return _status_line(query_id, PENDING)
        req = dataclasses.replace(stored, max_files=asked.max_files, page_token=asked.page_token)
        return self._serve(who, shared, req, answer, state.version)

    def _replan(self, random: str, who: Principal, shared: SharedTable, stored: QueryRequest) -> None:
        """Plan a pending query again unless this process is planning it already."""
        with self._lock:
            if random in self._planning:
                return
            future = self._planning[random] = self._pool.submit(self._plan, who, shared, stored)
        self._watch(random, future)
