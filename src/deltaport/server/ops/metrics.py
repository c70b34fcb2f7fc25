"""Prometheus metrics of the sharing server, served at ``GET /metrics`` (text exposition format, or
OpenMetrics when the scraper asks for it).

Metrics (label values are bounded: route templates, never concrete paths; known HTTP methods; the
recipient and share names of the served config; never a token or a URL's query):

- ``deltaport_requests_total{route,method,status}`` and
  ``deltaport_request_duration_seconds{route,method}`` (until the last byte is sent). ``route`` is
  the template of the route that answered without the sharing prefix, e.g.
  ``/shares/{share}/schemas/{schema}/tables/{table}/query``; ``other`` when none matched.
- ``deltaport_files_served_total{recipient,share}`` and ``deltaport_bytes_served_total{recipient,share}``:
  the data files /query and /changes responses hand out, and the sizes the responses declare for
  them (successful responses; a stream cut short still counts what it was to name).
- ``deltaport_download_bytes_total{recipient,share}``: bytes this server actually sent for its own
  file URLs (local tables; a ``Range`` request counts what was sent). Kept apart from
  ``bytes_served``, which the same files were already counted in when they were handed out.
- ``deltaport_snapshot_cache_hits_total``, ``..._misses_total``, ``..._entries``, ``..._bytes``: the
  snapshot cache (its lookups since it was made; what it holds).
- ``deltaport_active_streams``: NDJSON responses being streamed now.
- ``deltaport_arrow_allocated_bytes{pool}``: bytes allocated from Arrow's memory pool and not yet
  freed; ``pool`` names its allocator (``deltaport serve`` uses jemalloc: see server/fast/memory.py).

Each app has its own :class:`~prometheus_client.CollectorRegistry` (two apps in one process never
collide), except in multi-process mode: when ``PROMETHEUS_MULTIPROC_DIR`` names a directory (set
before the server starts, e.g. for ``uvicorn --workers N``; empty it between runs), every worker
writes its values there and ``/metrics`` aggregates all workers (prometheus_client's multiprocess
mode): counters and histograms add up, gauges add up over live workers (a worker marks itself
dead when its app shuts down). A worker publishes its snapshot cache's figures after each request
that changed them, its Arrow pool's at most once a second after a request, and the scraped worker
both just before answering.

``/metrics`` is private (the series name recipients and shares): it is served on the admin
listener when the server has one, else on the recipients' port only to a scraper that sends a
metrics token or an admin token (:func:`serve_metrics`); a recipient's token never reads it.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from typing import Optional

import pyarrow as pa
from fastapi import FastAPI, Header, Request
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

from deltaport.delta import SnapshotCache
from deltaport.errors import Unauthenticated
from deltaport.server.ops.request_info import RequestInfo
from deltaport.server.sources.config import ServerConfig, hash_token

log = logging.getLogger("deltaport.server")

#: Seconds between publications of the Arrow pool's figure after requests, in multi-process mode
#: (the scraped worker publishes its own just before answering).
ARROW_EVERY_S = 1.0
#: Seconds: polled calls answer in well under a millisecond, large streams take minutes.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))


def multiprocess_dir() -> str | None:
    """The directory of multi-process mode, or None when each process reports only itself."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")  # noqa: SIM112  # prometheus_client reads this spelling too
    if not path:
        return None
    if values.ValueClass is values.MutexValue:  # prometheus_client chose its values before the variable was set
        log.warning(
            "PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported: /metrics reports this "
            "process only; set it before the server starts"
        )
        return None
    return path


class _CacheFigures:
    """The snapshot cache's counts mirrored into metrics (``sync``), so that multi-process mode can
    add them up like any other metric. Hits and misses grow by what the cache counted since the
    last sync."""

    def __init__(self, cache: SnapshotCache, registry: CollectorRegistry) -> None:
        self.cache = cache
        self.hits = Counter("deltaport_snapshot_cache_hits", "Snapshot cache lookups that hit", registry=registry)
        self.misses = Counter(
            "deltaport_snapshot_cache_misses", "Snapshot cache lookups that missed", registry=registry
        )
        self.entries = Gauge(
            "deltaport_snapshot_cache_entries", "Snapshots held", registry=registry, multiprocess_mode="livesum"
        )
        self.bytes = Gauge(
            "deltaport_snapshot_cache_bytes",
            "Arrow bytes of the snapshots held",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._seen = (0, 0)
        self._lock = threading.Lock()

    def sync(self, *, always: bool = True) -> None:
        """Publish the cache's figures; with ``always`` False only when lookups happened since the
        last sync (a cheap check, made after every request in multi-process mode)."""
        hits, misses = self.cache.hits, self.cache.misses
        if not always and (hits, misses) == self._seen:
            return
        with self._lock:
            seen_hits, seen_misses = self._seen
            self._seen = (max(hits, seen_hits), max(misses, seen_misses))
        if hits > seen_hits:
            self.hits.inc(hits - seen_hits)
        if misses > seen_misses:
            self.misses.inc(misses - seen_misses)
        self.entries.set(len(self.cache))
        if always or misses != seen_misses:  # what it holds changes only after a miss
            self.bytes.set(self.cache.bytes_held)


class ServerMetrics:
    """The metrics of one app (see the module's docstring). ``record`` is called once per request,
    after its response; it keeps the labelled children it made, so a request costs two dict
    lookups and three lock-guarded updates."""

    def __init__(self, cache: SnapshotCache) -> None:
        self.multiprocess_dir = multiprocess_dir()
        registry = CollectorRegistry()
        self.requests = Counter(
            "deltaport_requests", "HTTP requests answered", ("route", "method", "status"), registry=registry
        )
        self.duration = Histogram(
            "deltaport_request_duration_seconds",
            "Time from a request's arrival to the last byte of its response",
            ("route", "method"),
            buckets=BUCKETS,
            registry=registry,
        )
        self.files_served = Counter(
            "deltaport_files_served",
            "Data files handed out by /query and /changes",
            ("recipient", "share"),
            registry=registry,
        )
        self.bytes_served = Counter(
            "deltaport_bytes_served",
            "Declared sizes of the data files handed out",
            ("recipient", "share"),
            registry=registry,
        )
        self.download_bytes = Counter(
            "deltaport_download_bytes",
            "Bytes sent for this server's own file URLs",
            ("recipient", "share"),
            registry=registry,
        )
        self.active_streams = Gauge(
            "deltaport_active_streams",
            "NDJSON responses being streamed",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.arrow_bytes = Gauge(
            "deltaport_arrow_allocated_bytes",
            "Bytes held by allocations from Arrow's memory pool, by the pool's allocator",
            ("pool",),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.cache = _CacheFigures(cache, registry)
        self.exposed = registry
        if self.multiprocess_dir is not None:
            self.exposed = CollectorRegistry()
            multiprocess.MultiProcessCollector(self.exposed, path=self.multiprocess_dir)
        self._answered: dict[tuple[str, str, int], Counter] = {}
        self._arrow_due = 0.0  # monotonic time the Arrow pool's figure is next published after a request
        self._timers: dict[tuple[str, str], Histogram] = {}

    def record(self, route: str, method: str, info: RequestInfo, seconds: float) -> None:
        """One answered request: its count and time, and the files it served."""
        if method not in _METHODS:
            method = "other"
        key = (route, method, info.status)
        answered = self._answered.get(key)
        if answered is None:
            answered = self._answered[key] = self.requests.labels(route, method, str(info.status))
        answered.inc()
        timer = self._timers.get((route, method))
        if timer is None:
            timer = self._timers[(route, method)] = self.duration.labels(route, method)
        timer.observe(seconds)
        if info.status < 400:
            self._served(info)
        if self.multiprocess_dir is not None:
            self.cache.sync(always=False)
            now = time.monotonic()
            if now >= self._arrow_due:  # ~5 us a write to the shared file: at most once per ARROW_EVERY_S
                self._arrow_due = now + ARROW_EVERY_S
                self._arrow()

    def _served(self, info: RequestInfo) -> None:
        who = info.principal or "anonymous"
        if info.served is not None:
            self.files_served.labels(who, info.served.share).inc(info.served.files)
            self.bytes_served.labels(who, info.served.share).inc(info.served.bytes)
        if info.download and info.bytes_sent and info.share is not None:
            self.download_bytes.labels(who, info.share).inc(info.bytes_sent)

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition for a scraper that sent ``accept``, and its content type."""
        self.cache.sync()
        self._arrow()
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.exposed), content_type

    def _arrow(self) -> None:
        pool = pa.default_memory_pool()
        self.arrow_bytes.labels(pool.backend_name).set(pool.bytes_allocated())

    def close(self) -> None:
        """The app shuts down: in multi-process mode this worker's live gauges stop counting."""
        if self.multiprocess_dir is not None:
            multiprocess.mark_process_dead(os.getpid(), self.multiprocess_dir)


def scrape_digests(config: ServerConfig, token: str | None = None) -> tuple[bytes, ...]:
    """The SHA-256 digests of the tokens that read ``/metrics``: the config's ``metricsToken``,
    ``token`` (``deltaport serve --metrics-token``) and the admin tokens. Recipients' tokens are
    never among them."""
    digests = [d for d in (config.metrics_token_hash, hash_token(token) if token else None) if d is not None]
    return (*digests, *config.admin_token_hashes)


def serve_metrics(app: FastAPI, metrics: ServerMetrics, digests: tuple[bytes, ...]) -> str | None:
    """Add ``GET /metrics`` where it is private, and say where: on the admin listener when there is
    one (``app.state.admin_app``), else on ``app`` (the recipients' port) only when ``digests``
    names a token to ask of the scraper; else nowhere (None), and the log says how to turn it on."""
    admin_app = getattr(app.state, "admin_app", None)
    if admin_app is not None:
        add_metrics_route(admin_app, metrics, digests)
        return "the admin listener" + (", with a metrics or admin token" if digests else "")
    if digests:
        add_metrics_route(app, metrics, digests)
        return "the recipients' port, with a metrics or admin token"
    log.info("/metrics is not served: %s", ENABLE_METRICS)
    return None


#: How an operator turns /metrics on when it is not served.
ENABLE_METRICS = (
    "give the server a metrics token ('metricsToken' in the config, 'deltaport serve --metrics-token' or "
    "DELTAPORT_METRICS_TOKEN), an admin token ('adminTokens', DELTAPORT_ADMIN_TOKEN) or an admin "
    "listener ('adminPort')"
)


def add_metrics_route(app: FastAPI, metrics: ServerMetrics, digests: tuple[bytes, ...]) -> None:
    """``GET /metrics``; with ``digests``, only for ``Authorization: Bearer <token>`` of a token with
    one of those SHA-256 digests (each compared in constant time). Left out of the API document: it
    is for the operator's scraper."""

    def scrape(request: Request, authorization: Optional[str] = Header(None)) -> Response:
        if digests:
            _check_scraper(authorization, digests)
        body, content_type = metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    app.add_api_route("/metrics", scrape, methods=["GET"], include_in_schema=False)


def _check_scraper(authorization: str | None, digests: tuple[bytes, ...]) -> None:
    if not authorization or not authorization[:7].lower() == "bearer ":
        raise Unauthenticated(
            "/metrics needs the header 'Authorization: Bearer <token>' with the server's metrics token "
            "or an admin token"
        )
    given = hash_token(authorization[7:].strip())
    found = False
    for digest in digests:  # every digest compared, so timing tells nothing
        found |= hmac.compare_digest(given, digest)
    if not found:
        raise Unauthenticated(
            "this token does not read /metrics: send the server's metrics token ('metricsToken') or an admin token"
        )
