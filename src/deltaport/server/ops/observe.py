"""The app's observing middleware: each request noted (request_info.py), then counted in the
metrics (metrics.py) and written to the audit log (audit.py).

:class:`RequestObserver` is cheap on purpose (the server answers warm ``/version`` calls at
thousands per second): one pass over the request's headers, no parsing of addresses unless
trusted proxies are configured, metric children cached per label set.

The request id is the client's ``X-Request-Id`` when sane (at most 64 of ``[A-Za-z0-9._-]``),
else a fresh one; every response carries it back as ``X-Request-Id``. Routes are named by the
template of the route that answered (the router's, or the one the hot paths stand in for), never
the concrete path.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI

from deltaport.delta import SnapshotCache
from deltaport.server.fast.zerocopy import EXTENSION as ZERO_COPY
from deltaport.server.ops.access import IpAllowList, client_ip
from deltaport.server.ops.audit import AuditLog
from deltaport.server.ops.metrics import ServerMetrics, serve_metrics
from deltaport.server.ops.request_info import RequestInfo, current_info

_SANE_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")
_ID_PREFIX = secrets.token_hex(4)  # per process: ids of several workers never collide
_ids = itertools.count(1)
_VERSION_HEADER = b"delta-table-version"
_MAX_USER_AGENT = 256


def request_id(given: bytes | None) -> str:
    """The client's id when sane, else a new one: unique in this process, and across processes
    but for a 1 in 2**32 chance (random prefix, counter)."""
    if given is not None and _SANE_ID.fullmatch(given):
        return given.decode("ascii")
    return f"{_ID_PREFIX}-{next(_ids):x}"


def _new_info(scope: dict[str, Any], proxies: IpAllowList) -> RequestInfo:
    given = agent = None
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            given = value
        elif name == b"user-agent":
            agent = value[:_MAX_USER_AGENT].decode("latin-1")
    return RequestInfo(
        request_id(given), client_ip(scope, proxies), agent, int(time.time() * 1000), time.perf_counter()
    )


class RequestObserver:
    """Pure ASGI middleware: a :class:`RequestInfo` per HTTP request, the ``X-Request-Id`` response
    header, and the request recorded in ``metrics`` and ``audit`` (either may be None) once its
    response is sent. Must sit outside the hot paths (hot_paths.py). ``prefix``: the sharing
    endpoint's path prefix, left out of route labels."""

    def __init__(
        self,
        app,
        *,
        prefix: str,
        proxies: IpAllowList,
        metrics: ServerMetrics | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.app = app
        self.prefix = prefix
        self.proxies = proxies
        self.metrics = metrics
        self.audit = audit
        self._labels: dict[str, str] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        info = _new_info(scope, self.proxies)
        token = current_info.set(info)
        id_header = (b"x-request-id", info.request_id.encode("ascii"))
        streams = self.metrics.active_streams if self.metrics is not None else None
        want_version = self.audit is not None
        streaming = False

        async def send_noting(message):
            nonlocal streaming
            kind = message["type"]
            if kind == "http.response.start":
                info.status = message["status"]
                headers = message.get("headers") or []
                if want_version:
                    info.version = _version(headers)
                message["headers"] = [*headers, id_header]
                if info.streaming and streams is not None:
                    streaming = True
                    streams.inc()
            elif info.download and kind == "http.response.body":
                info.bytes_sent += len(message.get("body", b""))
            elif info.download and kind == ZERO_COPY:  # a file range sent by the server itself
                info.bytes_sent += message["count"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        except BaseException:
            info.status = info.status or 500
            raise
        finally:
            current_info.reset(token)
            if streaming and streams is not None:
                streams.dec()
            self._record(scope, info)

    def _record(self, scope, info: RequestInfo) -> None:
        seconds = time.perf_counter() - info.started
        route = self.route_label(scope)
        method = scope["method"]
        if self.metrics is not None:
            self.metrics.record(route, method, info, seconds)
        if self.audit is not None:
            self.audit.request(info, route, method, seconds, scope.get("path_params") or {})

    def route_label(self, scope) -> str:
        """The route template that answered (without the sharing prefix), never the concrete path;
        "other" when no route matched."""
        path = getattr(scope.get("route"), "path", None)
        if path is None:
            return "other"
        label = self._labels.get(path)
        if label is None:
            label = path[len(self.prefix) :] if path.startswith(self.prefix + "/") else path
            self._labels[path] = label
        return label


def _version(headers) -> int | None:
    """The table version a response declares (its ``Delta-Table-Version`` header)."""
    for name, value in headers:
        if name == _VERSION_HEADER:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def observe_also(other: FastAPI, app: FastAPI, trusted_proxies: Sequence[str]) -> None:
    """Give ``other`` (the admin API on a listener of its own) the request ids and audit events of
    ``app``, which :func:`observe` has set up (its metrics stay ``app``'s)."""
    other.add_middleware(
        RequestObserver, prefix="", proxies=IpAllowList.parse(trusted_proxies), metrics=None, audit=app.state.audit
    )


def observe(
    app: FastAPI,
    cache: SnapshotCache,
    prefix: str,
    *,
    metrics: bool,
    metrics_digests: tuple[bytes, ...],
    audit: AuditLog | None,
    trusted_proxies: Sequence[str],
) -> None:
    """Add the request observer to ``app``, feeding the metrics and the audit log when asked for.
    ``/metrics`` is served where :func:`~deltaport.server.ops.metrics.serve_metrics` decides (the admin
    listener, else the recipients' port for ``metrics_digests``' tokens, else nowhere);
    ``app.state.metrics_at`` says where, for the startup log. Call it after the hot paths are
    added, so it sees their requests.
    The app's shutdown (``app.state.closing``) marks this worker's live metrics dead and waits
    for the audit log to write what it was given. ``app.state.audit`` is the audit log (None
    without one)."""
    server_metrics = ServerMetrics(cache) if metrics else None
    closing: list[Callable[[], object]] = getattr(app.state, "closing", [])
    if server_metrics is not None:
        app.state.metrics_at = serve_metrics(app, server_metrics, metrics_digests)
        closing.append(server_metrics.close)
    if audit is not None:
        closing.append(audit.flush)
    app.state.audit = audit
    app.state.closing = closing
    app.add_middleware(
        RequestObserver,
        prefix=prefix,
        proxies=IpAllowList.parse(trusted_proxies),
        metrics=server_metrics,
        audit=audit,
    )
