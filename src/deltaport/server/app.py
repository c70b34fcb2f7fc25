"""The HTTP app: the protocol's endpoints (sharing/), the server's own file URLs (sharing/files.py),
operations (ops/: health, metrics, audit, docs) and what is served (sources/), put together."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.errors import ServerErrorMiddleware

from deltaport.catalog.store import CatalogDB
from deltaport.delta import SnapshotCache
from deltaport.errors import DeltaportError
from deltaport.server import errors
from deltaport.server.fast import file_reads
from deltaport.server.fast.file_keys import KeyingPool
from deltaport.server.fast.file_reads import FileReads
from deltaport.server.fast.hot_paths import TAKEN, HotTableCalls
from deltaport.server.ops import api_doc, health
from deltaport.server.ops.access_log import AccessLog
from deltaport.server.ops.audit import AuditLog, config_audit_log
from deltaport.server.ops.docs_pages import add_docs_pages
from deltaport.server.ops.metrics import scrape_digests
from deltaport.server.ops.observe import observe, observe_also
from deltaport.server.s3face import routes as s3face
from deltaport.server.sharing import files, routes
from deltaport.server.sharing.answers import SignerFactory
from deltaport.server.sharing.params import declared_params, declared_query_params
from deltaport.server.sharing.registry import Principal, SharedTable, StoreOpener
from deltaport.server.sharing.service import SharingService
from deltaport.server.sharing.table_calls import TableCalls
from deltaport.server.sharing.tokens import TokenCodec
from deltaport.server.sources.catalog_feed import CatalogFeed
from deltaport.server.sources.config import ServerConfig
from deltaport.server.sources.serving import serve_catalog, serve_config_file
from deltaport.signing import LocalFileSigner, UrlSigner, signer_for
from deltaport.storage import store_for


def create_app(
    config: ServerConfig,
    *,
    store: StoreOpener = store_for,
    signer: SignerFactory | None = None,
    clock: Callable[[], float] = time.time,
    cache: SnapshotCache | None = None,
    file_secret: bytes | None = None,
    keying_processes: int = 0,
    hot_paths: bool = True,
    catalog: CatalogDB | None = None,
    metrics: bool = True,
    metrics_token: str | None = None,
    audit: AuditLog | None = None,
    trusted_proxies: Sequence[str] = (),
    listener: tuple[str, int] | None = None,
) -> FastAPI:
    """The sharing server for ``config``. Secrets default to fresh random ones per process.

    ``store`` opens a table's storage from its location and storage options (default: by URL
    scheme); ``signer`` makes a table's URL signer for a request's base URL (default: the server's
    own file URLs for local tables, the object store's presigned URLs otherwise); ``clock`` is
    the time in seconds. ``keying_processes`` worker processes hash file ids and sign URLs for
    large responses beside the server process (started with the app, stopped with it); 0 keeps
    that work in-process. ``hot_paths`` answers GET /version and /metadata without the
    framework's machinery (see hot_paths.py), and GET and HEAD of the server's own file URLs too
    (file_reads.py); off, the routes answer them, with the same bytes.
    ``catalog`` is the catalog database to serve (the caller closes it; by default the config's
    ``catalog``, if any, which the app closes at its shutdown); with one, the admin API is served
    too — beside the protocol, or as ``app.state.admin_app`` for a listener of its own when the
    config names an ``adminPort``.
    ``metrics``: Prometheus metrics at ``GET /metrics``, private (metrics.py): on the admin listener
    when there is one, else on this app for ``Authorization: Bearer`` with ``metrics_token``, the
    config's ``metricsToken`` or an admin token, else not served. ``audit``: the audit log that
    takes each protocol request's, download's, admin write's and activation's event (audit.py; the
    caller closes it); by default one writing to the config's ``auditLog`` file and the catalog
    database, if any. ``trusted_proxies``:
    addresses and CIDR blocks of proxies whose ``X-Forwarded-For`` names the client (access.py),
    for recipients' IP access lists, the audit log and nothing else. ``listener``: the host and
    port the recipients' listener binds (default: the config's), for activation links the admin
    API gives from a listener of its own when the config has no ``publicUrl``.
    """
    cache = cache if cache is not None else SnapshotCache()  # an empty cache is falsy: `or` would drop it
    keying = KeyingPool(keying_processes)
    service, verifier = _service(config, store, signer, clock, cache, file_secret, keying)
    app = _new_app(service, keying)
    app.state.file_access = files.FileAccess(service, verifier, cache)
    prefix = config.endpoint.rstrip("/")
    health.router.install(app)
    routes.router.install(app, prefix)
    files.router.install(app, prefix)
    app.state.face_credentials = service.directory.face  # mints what the face accepts
    app.state.s3face = s3face.Face(service, cache, app.state.face_credentials)
    s3face.router.install(app, "/" + config.directory_bucket)
    if hot_paths:  # the calls read exactly the parameters and headers their routes declare
        _add_hot_paths(
            app, prefix, {"version": app.state.table_calls.version, "metadata": app.state.table_calls.metadata}
        )
        _add_file_reads(app, prefix)
    opened = None  # a catalog database this app opens is closed at its shutdown, after the audit log
    if catalog is None and config.catalog_url is not None:
        catalog = opened = CatalogDB(config.catalog_url, activation_ttl_s=config.activation_link_ttl_seconds)
    if catalog is not None:
        service.async_queries.use_catalog(catalog)  # their state survives a restart, every replica sees it
        serve_catalog(app, service, catalog, cache, store, listener)
    elif config.source is not None:
        serve_config_file(app, service, config.source, cache, store)
    _observe(
        app, config, cache, catalog, audit, metrics, metrics_token, tuple(trusted_proxies) or config.trusted_proxies
    )
    if opened is not None:
        app.state.closing.append(opened.close)
    app.add_middleware(AccessLog)  # added last: outermost, so it logs the hot paths too
    return app


def _service(
    config: ServerConfig,
    store: StoreOpener,
    signer: SignerFactory | None,
    clock: Callable[[], float],
    cache: SnapshotCache,
    file_secret: bytes | None,
    keying: KeyingPool,
) -> tuple[SharingService, LocalFileSigner]:
    """The sharing service, and the verifier of the file URLs its default signer issues."""
    codec = TokenCodec(config.token_secret or secrets.token_bytes(32), clock=clock)
    file_secret, access_key = files.file_url_keys(config.token_secret, file_secret)
    prefix = config.endpoint.rstrip("/")

    def own_signer(shared: SharedTable, base_url: str, who: Principal) -> UrlSigner:
        public = config.public_url or base_url.rstrip("/")
        return signer_for(
            shared.delta(cache).store,
            base_url=public + prefix,
            table_key=files.url_key(shared, who),
            access_key=access_key,
            secret=file_secret,
        )

    verifier = LocalFileSigner(
        base_url="http://verifier" + prefix, table_key="-", access_key=access_key, secret=file_secret
    )
    service = SharingService(
        config,
        signer_factory=signer or own_signer,
        cache=cache,
        codec=codec,
        clock=clock,
        keying=keying,
        open_store=store,
    )
    return service, verifier


def _observe(
    app: FastAPI,
    config: ServerConfig,
    cache: SnapshotCache,
    catalog: CatalogDB | None,
    audit: AuditLog | None,
    metrics: bool,
    metrics_token: str | None,
    trusted_proxies: tuple[str, ...],
) -> None:
    """Metrics and the audit log for every request (ops/observe.py), the admin listener's too."""
    if audit is None:
        audit, close_audit = config_audit_log(config.audit_log, catalog)
        if close_audit is not None:
            app.state.closing.append(close_audit)
    observe(
        app,
        cache,
        config.endpoint.rstrip("/"),
        metrics=metrics,
        metrics_digests=scrape_digests(config, metrics_token),
        audit=audit,
        trusted_proxies=trusted_proxies,
    )
    if getattr(app.state, "admin_app", None) is not None:
        observe_also(app.state.admin_app, app, trusted_proxies)


class _App(FastAPI):
    """The app, its API document described by api_doc (inputs as the server reads them).

    A request the hot paths answer (``hot``: hot_paths.py; ``files``: file_reads.py) skips the framework's own layers
    around the app's middleware (its telemetry check, error and body-limit middleware): it goes
    through the app's middleware (access log, observer, hot paths) under the same
    ServerErrorMiddleware and 500 handler. With OpenTelemetry configured, every request takes
    the framework's way, whose spans it makes (the framework's check of that costs as much as
    the hot paths' own work, so it is made at most once a second: a provider configured while
    the server runs is seen within a second)."""

    hot: HotTableCalls | None = None
    files: FileReads | None = None
    _hot_stack: Any = None
    _untraced_until = 0.0  # monotonic time until which OpenTelemetry is known to be unconfigured

    def _untraced(self) -> bool:
        now = time.monotonic()
        if now < self._untraced_until:
            return True
        if self._native_telemetry.enabled():
            return False
        self._untraced_until = now + 1.0
        return True

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and "fastapi.telemetry" not in scope:
            taken = self._take(scope)
            if taken is not None and self._untraced():
                scope[taken[0]] = taken[1]
                scope["app"] = self
                if self._hot_stack is None:
                    self._hot_stack = self._build_hot_stack()
                return await self._hot_stack(scope, receive, send)
        await super().__call__(scope, receive, send)

    def _take(self, scope) -> tuple[str, Any] | None:
        """The scope key and what the hot paths read of ``scope`` when one of them answers it."""
        if self.files is not None:
            taken = self.files.take(scope)
            if taken is not None:
                return file_reads.TAKEN, taken
        if self.hot is not None:
            hot = self.hot.take(scope)
            if hot is not None:
                return TAKEN, hot
        return None

    def _build_hot_stack(self) -> Any:
        """The app's middleware, innermost the hot paths (which answer what they took), under the
        framework's ServerErrorMiddleware with the app's 500 handler."""
        app: Any = self.router  # never reached: the hot paths answer every request sent this way
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        handler = self.exception_handlers.get(500) or self.exception_handlers.get(Exception)
        return ServerErrorMiddleware(app, handler=handler, debug=self.debug)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            service = self.state.service
            self.openapi_schema = api_doc.describe(
                super().openapi(), service.config.endpoint.rstrip("/"), auth=service.config.auth_enabled
            )
        return self.openapi_schema


def _reload_on_sighup(feed: CatalogFeed) -> None:
    """SIGHUP makes ``feed`` look at its source now (where this loop may take signals: the main
    thread of a Unix process)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, feed.wake)
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        pass  # not the main thread (e.g. a test's server thread), or no SIGHUP on this platform


def _new_app(service: SharingService, keying: KeyingPool) -> FastAPI:
    """The FastAPI app with its lifespan (the keying pool, the table calls' threads, the feed) and
    error handlers."""
    table_calls = TableCalls(service)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        keying.start()
        feed = getattr(app.state, "catalog_feed", None)
        if feed is not None:
            feed.start_polling()
            _reload_on_sighup(feed)
        try:
            yield
        finally:
            keying.close()
            table_calls.close()
            service.async_queries.close()
            if feed is not None:
                feed.stop()
            for close in getattr(app.state, "closing", ()):
                close()

    app = _App(
        title="deltaport",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="A Delta Sharing server: shares, schemas and tables over the Delta Sharing REST "
        "protocol, for many recipients.",
    )
    add_docs_pages(app)
    app.state.service = service
    app.state.table_calls = table_calls
    app.state.closing = []  # called at shutdown, in order
    app.add_exception_handler(DeltaportError, errors.deltaport_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(StarletteHTTPException, errors.http_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(RequestValidationError, errors.validation_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(Exception, errors.unexpected_error)
    return app


def _add_hot_paths(app: FastAPI, prefix: str, hot: dict[str, Any]) -> None:
    """Answer ``hot`` calls (by last path segment) before the framework's routing; each reads the
    query parameters and headers its route declares."""
    paths = {prefix + routes.TABLE + "/" + name for name in hot}
    found = {
        r.path.rsplit("/", 1)[-1]: r
        for r in app.routes
        if isinstance(r, APIRoute) and r.path in paths and "GET" in (r.methods or ())
    }
    hot_paths: dict[str, Any] = {
        "prefix": prefix,
        "routes": found,
        "calls": {
            name: (
                handler,
                declared_query_params(found[name]),
                tuple(h.lower() for h in declared_params(found[name], "header_params")),
            )
            for name, handler in hot.items()
        },
    }
    app.add_middleware(HotTableCalls, **hot_paths)
    if isinstance(app, _App):
        app.hot = HotTableCalls(None, **hot_paths)


def _add_file_reads(app: FastAPI, prefix: str) -> None:
    """Answer GET and HEAD of the server's own file URLs before the framework's routing, standing
    in for the file routes (files.py), whose file access decides."""
    path = prefix + files.FILE_ROUTE
    found = {
        method: r
        for r in app.routes
        if isinstance(r, APIRoute) and r.path == path
        for method in (r.methods or ())
        if method in ("GET", "HEAD")
    }
    options: dict[str, Any] = {"prefix": prefix, "decide": app.state.file_access.file_for, "routes": found}
    app.add_middleware(FileReads, **options)
    if isinstance(app, _App):
        app.files = FileReads(None, **options)
