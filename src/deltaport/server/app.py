"""The HTTP app: routes of the Delta Sharing protocol, the server's own file URLs, health, docs."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import hashlib
import hmac
import logging
import os
import secrets
import signal
import stat
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import (
    FileResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)

from deltaport.catalog.store import CatalogDB
from deltaport.delta import SnapshotCache
from deltaport.errors import DeltaportError, InvalidParameter, PermissionDenied, ResourceNotFound
from deltaport.server import errors
from deltaport.server.admin import AdminParts, add_activation_routes, admin_router, create_admin_app
from deltaport.server.admin.activation import ACTIVATION_PAGE
from deltaport.server.admin.links import ActivationLinks, recipients_base
from deltaport.server.fast.file_keys import KeyingPool
from deltaport.server.fast.freshness import LatestState
from deltaport.server.fast.hot_paths import HotTableCalls
from deltaport.server.ops import api_doc
from deltaport.server.ops.audit import AuditLog, config_audit_log
from deltaport.server.ops.docs_pages import add_docs_pages
from deltaport.server.ops.metrics import scrape_digests
from deltaport.server.ops.observe import observe, observe_also
from deltaport.server.ops.request_info import current_request
from deltaport.server.sharing.registry import Principal, SharedTable, StoreOpener, recipient_key
from deltaport.server.sharing.service import Reply, SharingService, SignerFactory
from deltaport.server.sharing.tokens import TokenCodec
from deltaport.server.sources.catalog_feed import CatalogFeed, describe_delta_table
from deltaport.server.sources.config import ServerConfig
from deltaport.server.sources.config_file import ConfigCatalogView, ConfigFileSource, LoadedConfig, restart_needed
from deltaport.signing import LocalFileSigner, UrlSigner, signer_for
from deltaport.storage import store_for

access_log = logging.getLogger("deltaport.access")
log = logging.getLogger("deltaport.server")

_T = "/shares/{share}/schemas/{schema}/tables/{table}"


def _reply(reply: Reply, head: bool = False) -> Response:
    seen = current_request()
    if seen is not None:  # what the response serves, for its metrics and audit event
        seen.served = reply.served
        seen.streaming = reply.stream is not None and reply.content is None and not head
    if reply.stream is not None or reply.content is not None:
        if head:
            return Response(status_code=reply.status, headers=reply.headers)
        media = reply.headers.pop("Content-Type", "application/x-ndjson; charset=utf-8")
        if reply.content is not None:  # small and complete (e.g. /metadata): no streaming machinery
            return Response(reply.content, status_code=reply.status, headers=reply.headers, media_type=media)
        assert reply.stream is not None
        return StreamingResponse(
            _pieces(reply.stream), status_code=reply.status, headers=reply.headers, media_type=media
        )
    if reply.json is not None:
        return JSONResponse(
            reply.json, status_code=reply.status, headers=reply.headers, media_type="application/json; charset=utf-8"
        )
    return Response(status_code=reply.status, headers=reply.headers)


#: Largest piece handed to the server at once: the socket takes it whole, where a bigger one would be
#: copied into the transport's buffer first (a pass over the response, with the GIL held).
_PIECE = 1 << 20


async def _pieces(stream):
    """The stream's chunks, built in the thread pool, sent in pieces of at most ``_PIECE`` bytes."""
    async for chunk in iterate_in_threadpool(stream):
        if len(chunk) <= _PIECE:
            yield chunk
            continue
        view = memoryview(chunk)
        for start in range(0, len(view), _PIECE):
            yield view[start : start + _PIECE]


def _declared_params(route, kind: str) -> tuple[str, ...]:
    """The parameters of one kind (``query_params``, ``header_params``) a route declares, its own and
    its dependencies', by alias in signature order."""
    names: list[str] = []
    stack = [route.dependant]
    while stack:
        dependant = stack.pop(0)
        names.extend(f.alias for f in getattr(dependant, kind))
        stack.extend(dependant.dependencies)
    return tuple(dict.fromkeys(names))


def _declared_query_params(route) -> tuple[str, ...]:
    """The query parameters a route declares; worked out once and kept on the route (routes are
    unhashable, and ids are reused once an app is gone)."""
    known = getattr(route, "_deltaport_query_params", None)
    if known is None:
        known = route._deltaport_query_params = _declared_params(route, "query_params")
    return known


async def known_query_params(request: Request) -> None:
    """A dependency that refuses query parameters the route does not declare (a misspelt
    ``versoin`` would otherwise be ignored and the request answered as if it were not there).

    The route is named by the last segment of its path (``GET .../metadata``). Async, so it runs
    on the event loop: a sync dependency would cost every request a trip to the thread pool."""
    route = request.scope.get("route")
    if route is None or not request.scope.get("query_string"):
        return
    accepted = _declared_query_params(route)
    unknown = [k for k in request.query_params.keys() if k not in accepted]
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = [a for a in accepted if a.lower() == k.lower()] or difflib.get_close_matches(k, accepted, n=1)
        if close:
            hints.append(f"'{close[0]}' for '{k}'")
    where = route.path.rsplit("/", 1)[-1]  # one segment: a longer path would read as a location to redact
    raise InvalidParameter(
        f"Unknown query parameter{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)} for "
        f"{request.method} .../{where}; accepted: {', '.join(accepted) or 'none'}"
        + (f" (did you mean {', '.join(hints)}?)" if hints else "")
    )


_QUERY_CHECK = [Depends(known_query_params)]

#: Threads answering /version and /metadata: enough to wait on several slow object-store listings
#: at once, few enough that warm calls do not fight over the GIL.
_TABLE_CALL_THREADS = 8


class _LargeChunkFileResponse(FileResponse):
    """Files go out in 1 MiB pieces (the default 64 KiB costs the server ~2x the CPU per GB).

    A ``Range`` header that cannot be served is answered with the protocol's JSON error (416 with
    ``Content-Range: bytes */<size>`` when no byte of the file is asked for, 400 when the header
    cannot be parsed) rather than the base class's empty text/plain response. The base class
    decides (Range read only on a 200 GET or HEAD, and not when If-Range no longer matches) and
    serves valid ranges (206); its refusal is only replaced at the ASGI level, through ``send``,
    so nothing here leans on its private helpers.
    """

    chunk_size = 1024 * 1024

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "range" not in Headers(scope=scope):
            return await super().__call__(scope, receive, send)
        replaced = False

        async def refusal_as_json(message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] in (400, 416):
                replaced = True
                return await self._range_error(scope, message["status"])(scope, receive, send)
            if not replaced:
                await send(message)

        return await super().__call__(scope, receive, refusal_as_json)

    def _range_error(self, scope, status: int) -> Response:
        http_range = Headers(scope=scope)["range"]
        head = scope["method"].upper() == "HEAD"
        size = self.stat_result.st_size if self.stat_result is not None else 0
        if status == 416:
            last = f"; ask for bytes 0 to {size - 1}" if size else ""
            response = errors.json_error(
                416,
                "INVALID_PARAMETER_VALUE",
                f"Range {http_range!r} is not satisfiable: the file is {size} bytes{last}",
                head=head,
            )
            response.headers["Content-Range"] = f"bytes */{size}"
            return response
        return errors.json_error(
            400,
            "INVALID_PARAMETER_VALUE",
            f"invalid Range header {http_range!r}: use bytes=START-END, bytes=START- or bytes=-SUFFIX, "
            "with START <= END",
            head=head,
        )


#: Paths whose last segment is a secret (an activation token): logged without it.
_SECRET_TAILS = (errors.ACTIVATION_API + "/", ACTIVATION_PAGE + "/")


def logged_path(path: str) -> str:
    """``path`` as the access log shows it: an activation link's token left out."""
    if path.startswith(_SECRET_TAILS):
        return path.rsplit("/", 1)[0] + "/<activation token>"
    return path


class AccessLog:
    """Pure ASGI access log: method, path, status, time. Never the query string (URL signatures,
    tokens), never headers (bearer tokens), never an activation link's token."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [0]

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            access_log.info(
                "%s %s %s %.1fms",
                scope["method"],
                logged_path(scope["path"]),
                status[0],
                (time.perf_counter() - start) * 1000,
            )


def _file_url_keys(token_secret: bytes | None, file_secret: bytes | None) -> tuple[bytes, str]:
    """The secret and access key of the server's own file URLs: derived from ``tokenSecret`` when
    the config has one (so every replica sharing it honours the URLs any of them issued), else
    random per process."""
    if token_secret is None:
        return file_secret or secrets.token_bytes(32), "DELTAPORT" + secrets.token_hex(6).upper()
    derived = hmac.new(token_secret, b"deltaport file URLs", hashlib.sha256).digest()
    key_id = hmac.new(token_secret, b"deltaport file URL access key", hashlib.sha256).hexdigest()[:12]
    return file_secret or derived, "DELTAPORT" + key_id.upper()


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

    Long by choice: the wiring of every part, in the order it must happen.

    ``store`` opens a table's storage from its location and storage options (default: by URL
    scheme); ``signer`` makes a table's URL signer for a request's base URL (default: the server's
    own file URLs for local tables, the object store's presigned URLs otherwise); ``clock`` is
    the time in seconds. ``keying_processes`` worker processes hash file ids and sign URLs for
    large responses beside the server process (started with the app, stopped with it); 0 keeps
    that work in-process. ``hot_paths`` answers GET /version and /metadata without the
    framework's machinery (see hot_paths.py); off, the routes answer them, with the same bytes.
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
    codec = TokenCodec(config.token_secret or secrets.token_bytes(32), clock=clock)
    file_secret, access_key = _file_url_keys(config.token_secret, file_secret)
    prefix = config.endpoint.rstrip("/")

    def own_signer(shared: SharedTable, base_url: str, who: Principal) -> UrlSigner:
        public = config.public_url or base_url.rstrip("/")
        return signer_for(
            shared.delta(cache).store,
            base_url=public + prefix,
            table_key=_url_key(shared, who),
            access_key=access_key,
            secret=file_secret,
        )

    verifier = LocalFileSigner(
        base_url="http://verifier" + prefix, table_key="-", access_key=access_key, secret=file_secret
    )
    keying = KeyingPool(keying_processes)
    service = SharingService(
        config,
        signer_factory=signer or own_signer,
        cache=cache,
        codec=codec,
        clock=clock,
        keying=keying,
        open_store=store,
    )

    table_calls = ThreadPoolExecutor(_TABLE_CALL_THREADS, thread_name_prefix="deltaport-table-call")
    app = _new_app(service, keying, table_calls)
    _add_listing_routes(app, service, prefix)
    version_call, metadata_call = _table_calls(service, table_calls)
    _add_snapshot_routes(app, prefix, version_call, metadata_call)
    _add_query_routes(app, service, prefix)
    _add_changes_route(app, service, prefix)
    _add_file_routes(app, service, verifier, cache, prefix)
    if hot_paths:  # the calls read exactly the parameters and headers their routes declare
        _add_hot_paths(app, prefix, {"version": version_call, "metadata": metadata_call})
    opened = None  # a catalog database this app opens is closed at its shutdown, after the audit log
    if catalog is None and config.catalog_url is not None:
        catalog = opened = CatalogDB(config.catalog_url, activation_ttl_s=config.activation_link_ttl_seconds)
    if catalog is not None:
        _serve_catalog(app, service, catalog, cache, store, listener)
    elif config.source is not None:
        _serve_config_file(app, service, config.source, cache, store)
    close_audit = None
    if audit is None:
        audit, close_audit = config_audit_log(config.audit_log, catalog)
    observe(
        app,
        cache,
        prefix,
        metrics=metrics,
        metrics_digests=scrape_digests(config, metrics_token),
        audit=audit,
        trusted_proxies=tuple(trusted_proxies) or config.trusted_proxies,
    )
    if close_audit is not None:
        app.state.closing.append(close_audit)
    if opened is not None:
        app.state.closing.append(opened.close)
    if getattr(app.state, "admin_app", None) is not None:
        observe_also(app.state.admin_app, app, tuple(trusted_proxies) or config.trusted_proxies)
    app.add_middleware(AccessLog)  # added last: outermost, so it logs the hot paths too
    return app


def _serve_catalog(
    app: FastAPI,
    service: SharingService,
    catalog: CatalogDB,
    cache: SnapshotCache,
    store: StoreOpener,
    listener: tuple[str, int] | None = None,
) -> None:
    """Serves the catalog database: loaded now, then kept in step by a feed (started with the app),
    administered through the admin API, activated through the public activation routes."""
    config = service.config
    feed = CatalogFeed(
        catalog,
        lambda served: service.serve_catalog(served.shares, served.recipients),
        poll_seconds=config.catalog_poll_seconds,
    )
    feed.reload_now()
    app.state.catalog_feed = feed
    parts = _admin_parts(config, catalog, service, cache, store, feed.reload_now, listener=listener)
    add_activation_routes(
        app,
        parts,
        lambda request: (config.public_url or str(request.base_url)).rstrip("/") + config.endpoint.rstrip("/"),
    )
    _mount_admin(app, parts, config)


def _serve_config_file(
    app: FastAPI, service: SharingService, path: str, cache: SnapshotCache, store: StoreOpener
) -> None:
    """Serves a config file's shares and recipients: re-read when the file changes or on SIGHUP
    (config_file.py), shown read-only through the admin API when the config has admin tokens."""
    started = service.config
    view = ConfigCatalogView() if started.admin_token_hashes else None

    def apply(loaded: LoadedConfig) -> None:
        new = loaded.config
        waiting = restart_needed(started, new)
        if waiting:
            log.warning("config file %s: %s take effect when the server restarts", path, ", ".join(waiting))
        service.serve_catalog(new.shares, new.recipients, bearer_token_hash=new.bearer_token_hash)
        if view is not None:
            view.refresh(new)

    feed = CatalogFeed(
        ConfigFileSource(path), apply, poll_seconds=started.catalog_poll_seconds, what=f"config file {path}"
    )
    feed.reload_now()
    app.state.catalog_feed = feed
    if view is not None:
        parts = _admin_parts(started, view.catalog, service, cache, store, feed.reload_now, read_only=path)
        _mount_admin(app, parts, started)
        app.state.closing.append(view.close)


def _admin_parts(
    config: ServerConfig,
    catalog: CatalogDB,
    service: SharingService,
    cache: SnapshotCache,
    store: StoreOpener,
    reload: Callable[[], None],
    *,
    read_only: str | None = None,
    listener: tuple[str, int] | None = None,
) -> AdminParts:
    def describe_table(location: str):
        return describe_delta_table(location, config.storage_options, cache, store)

    return AdminParts(
        catalog=catalog,
        admin_digests=frozenset(config.admin_token_hashes),
        codec=service.codec,
        reload=reload,
        describe_table=describe_table,
        links=ActivationLinks(config.token_secret, recipients_base(config, listener), service.clock),
        read_only=read_only,
    )


def _mount_admin(app: FastAPI, parts: AdminParts, config: ServerConfig) -> None:
    """The admin API beside the protocol, or as ``app.state.admin_app`` for its own listener."""
    if config.admin_port is None:
        app.include_router(admin_router(parts))
    else:
        app.state.admin_app = create_admin_app(parts)


class _App(FastAPI):
    """The app, its API document described by api_doc (inputs as the server reads them)."""

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


def _new_app(service: SharingService, keying: KeyingPool, table_calls: ThreadPoolExecutor) -> FastAPI:
    """The FastAPI app with its lifespan (the keying pool, the table calls' threads) and error handlers."""

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
            table_calls.shutdown(wait=False, cancel_futures=True)
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
    app.state.closing = []  # called at shutdown, in order
    app.add_exception_handler(DeltaportError, errors.deltaport_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(StarletteHTTPException, errors.http_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(RequestValidationError, errors.validation_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(Exception, errors.unexpected_error)
    return app


def _add_listing_routes(app: FastAPI, service: SharingService, prefix: str) -> None:
    """Health, and the listing of shares, schemas and tables."""
    who = service.principal

    @app.get("/health", tags=["server"])
    async def health() -> dict:
        return {"status": "ok", "shares": len(service.config.shares)}

    @app.get(prefix + "/shares", tags=["shares"], dependencies=_QUERY_CHECK)
    def list_shares(
        maxResults: Optional[str] = None, pageToken: Optional[str] = None, authorization: Optional[str] = Header(None)
    ):
        return _reply(service.list_shares(who(authorization), maxResults, pageToken))

    @app.get(prefix + "/shares/{share}", tags=["shares"], dependencies=_QUERY_CHECK)
    def get_share(share: str, authorization: Optional[str] = Header(None)):
        return _reply(service.get_share(who(authorization), share))

    @app.get(prefix + "/shares/{share}/schemas", tags=["shares"], dependencies=_QUERY_CHECK)
    def list_schemas(
        share: str,
        maxResults: Optional[str] = None,
        pageToken: Optional[str] = None,
        authorization: Optional[str] = Header(None),
    ):
        return _reply(service.list_schemas(who(authorization), share, maxResults, pageToken))

    @app.get(prefix + "/shares/{share}/schemas/{schema}/tables", tags=["shares"], dependencies=_QUERY_CHECK)
    def list_tables(
        share: str,
        schema: str,
        maxResults: Optional[str] = None,
        pageToken: Optional[str] = None,
        authorization: Optional[str] = Header(None),
    ):
        return _reply(service.list_tables(who(authorization), share, schema, maxResults, pageToken))

    @app.get(prefix + "/shares/{share}/all-tables", tags=["shares"], dependencies=_QUERY_CHECK)
    def list_all_tables(
        share: str,
        maxResults: Optional[str] = None,
        pageToken: Optional[str] = None,
        authorization: Optional[str] = Header(None),
    ):
        return _reply(service.list_all_tables(who(authorization), share, maxResults, pageToken))


def _table_calls(service: SharingService, pool: ThreadPoolExecutor):
    """GET /version (and its HEAD) and /metadata, from their parameters and headers: called by their
    routes and by the hot paths alike. The table work runs in ``pool``, never on the event loop; the
    latest state, which clients poll, through :class:`LatestState` (one refresh per table at a time,
    shared by the requests that wait for it)."""
    latest = LatestState(pool)

    async def off_loop(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))

    async def version_call(
        share: str, schema: str, table: str, query: dict, headers: dict, head: bool = False
    ) -> Response:
        who = service.principal(headers.get("authorization"))
        since = query.get("startingTimestamp")
        if since is None:
            reply = await service.latest_table_version(who, share, schema, table, latest)
        else:
            reply = await off_loop(service.table_version, who, share, schema, table, since)
        return _reply(reply, head=head)

    async def metadata_call(share: str, schema: str, table: str, query: dict, headers: dict) -> Response:
        who = service.principal(headers.get("authorization"))
        version, timestamp = query.get("version"), query.get("timestamp")
        capabilities = headers.get("delta-sharing-capabilities")
        if version is None and timestamp is None:
            reply = await service.latest_metadata(who, share, schema, table, capabilities, latest)
        else:
            reply = await off_loop(service.metadata, who, share, schema, table, version, timestamp, capabilities)
        return _reply(reply)

    return version_call, metadata_call


def _add_snapshot_routes(app: FastAPI, prefix: str, version_call, metadata_call) -> None:
    """A table's version (GET, and HEAD on the table) and metadata."""

    @app.get(prefix + _T + "/version", tags=["tables"], dependencies=_QUERY_CHECK)
    async def table_version(
        share: str,
        schema: str,
        table: str,
        startingTimestamp: Optional[str] = None,
        authorization: Optional[str] = Header(None),
    ):
        return await version_call(
            share, schema, table, {"startingTimestamp": startingTimestamp}, {"authorization": authorization}
        )

    @app.head(prefix + _T, tags=["tables"], dependencies=_QUERY_CHECK)
    async def table_version_head(
        share: str,
        schema: str,
        table: str,
        startingTimestamp: Optional[str] = None,
        authorization: Optional[str] = Header(None),
    ):
        return await version_call(
            share, schema, table, {"startingTimestamp": startingTimestamp}, {"authorization": authorization}, head=True
        )

    @app.get(prefix + _T + "/metadata", tags=["tables"], dependencies=_QUERY_CHECK)
    async def metadata(
        share: str,
        schema: str,
        table: str,
        version: Optional[str] = None,
        timestamp: Optional[str] = None,
        authorization: Optional[str] = Header(None),
        delta_sharing_capabilities: Optional[str] = Header(None),
    ):
        return await metadata_call(
            share,
            schema,
            table,
            {"version": version, "timestamp": timestamp},
            {"authorization": authorization, "delta-sharing-capabilities": delta_sharing_capabilities},
        )


def _add_query_routes(app: FastAPI, service: SharingService, prefix: str) -> None:
    """A table's files (POST /query)."""
    who = service.principal

    @app.post(prefix + _T + "/query", tags=["tables"], openapi_extra={"requestBody": api_doc.query_body()})
    async def query(
        share: str,
        schema: str,
        table: str,
        request: Request,
        authorization: Optional[str] = Header(None),
        delta_sharing_capabilities: Optional[str] = Header(None),
        fileidhash: Optional[str] = Header(None),
    ):
        body = await request.body()
        reply = await run_in_threadpool(
            service.query,
            who(authorization),
            share,
            schema,
            table,
            body,
            delta_sharing_capabilities,
            fileidhash,
            str(request.base_url),
        )
        return _reply(reply)


def _add_changes_route(app: FastAPI, service: SharingService, prefix: str) -> None:
    """A table's change data feed (GET /changes)."""
    who = service.principal

    @app.get(prefix + _T + "/changes", tags=["tables"], dependencies=_QUERY_CHECK)
    def changes(
        share: str,
        schema: str,
        table: str,
        request: Request,
        startingVersion: Optional[str] = None,
        endingVersion: Optional[str] = None,
        startingTimestamp: Optional[str] = None,
        endingTimestamp: Optional[str] = None,
        includeHistoricalMetadata: Optional[str] = None,
        includeHistoricalProtocol: Optional[str] = None,
        maxFiles: Optional[str] = None,
        pageToken: Optional[str] = None,
        authorization: Optional[str] = Header(None),
        delta_sharing_capabilities: Optional[str] = Header(None),
        fileidhash: Optional[str] = Header(None),
    ):
        params = {
            "startingVersion": startingVersion,
            "endingVersion": endingVersion,
            "startingTimestamp": startingTimestamp,
            "endingTimestamp": endingTimestamp,
            "includeHistoricalMetadata": includeHistoricalMetadata,
            "includeHistoricalProtocol": includeHistoricalProtocol,
            "maxFiles": maxFiles,
            "pageToken": pageToken,
        }
        return _reply(
            service.changes(
                who(authorization),
                share,
                schema,
                table,
                params,
                delta_sharing_capabilities,
                str(request.base_url),
                fileidhash=fileidhash,
            )
        )


def _add_file_routes(
    app: FastAPI, service: SharingService, verifier: LocalFileSigner, cache: SnapshotCache, prefix: str
) -> None:
    """The server's own file URLs (local tables): GET and HEAD, checked by ``verifier``."""

    @app.get(
        prefix + "/files/{key}/{path:path}",
        tags=["files"],
        summary="Read a data or deletion-vector file through a presigned URL this server issued",
        openapi_extra={"parameters": api_doc.file_url_parameters()},
    )
    def read_file(key: str, path: str, request: Request):
        return serve_file(request)

    @app.head(
        prefix + "/files/{key}/{path:path}",
        tags=["files"],
        summary="Size of a data or deletion-vector file, through a presigned URL this server issued",
        openapi_extra={"parameters": api_doc.file_url_parameters()},
    )
    def head_file(key: str, path: str, request: Request):
        return serve_file(request)

    def serve_file(request: Request):
        raw_path = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
        key, rel = verifier.verify(
            request.method, request.headers.get("host", ""), raw_path, request.url.query, now=service.clock()
        )
        table_key, _, recipient = key.partition("~")
        shared = service.registry.by_key(table_key)
        who = service.registry.principal_for_key(recipient.partition("~")[0])
        if shared is None or who is None or not who.may_see(shared.share.name):
            raise PermissionDenied("this URL names no table this server shares with the recipient it was issued to")
        if _url_key(shared, who) != key:
            raise PermissionDenied(
                "this URL was issued for partitions of the table the recipient may no longer read: "
                "query the table again for current URLs"
            )
        _note_download(shared)
        service.admit(who)  # the recipient's IP access list
        local = getattr(shared.delta(cache).store, "local_path", None)
        if local is None:
            raise ResourceNotFound("this table's files are served by its object store, not by this server")
        full = local(rel).resolve()
        root = Path(local("")).resolve()
        if not full.is_relative_to(root):  # a symlink must not lead outside the shared table
            raise PermissionDenied("this URL names a file outside the shared table")
        try:
            info = full.stat()
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode):
            raise ResourceNotFound(f"file not found: {rel}")
        return _LargeChunkFileResponse(os.fspath(full), media_type="application/octet-stream", stat_result=info)


def _add_hot_paths(app: FastAPI, prefix: str, hot: dict) -> None:
    """Answer ``hot`` calls (by last path segment) before the framework's routing; each reads the
    query parameters and headers its route declares."""
    routes = {
        r.path.rsplit("/", 1)[-1]: r
        for r in app.routes
        if isinstance(r, APIRoute)
        and r.path in {prefix + _T + "/" + name for name in hot}
        and "GET" in (r.methods or ())
    }
    app.add_middleware(
        HotTableCalls,
        prefix=prefix,
        routes=routes,
        calls={
            name: (
                handler,
                _declared_query_params(routes[name]),
                tuple(h.lower() for h in _declared_params(routes[name], "header_params")),
            )
            for name, handler in hot.items()
        },
    )


def _url_key(shared: SharedTable, who: Principal) -> str:
    """What the server's own file URLs name, under their signature: the table, the recipient they
    were issued to, and that recipient's partition slice of it when it has one."""
    part = shared.slice(who)
    key = f"{shared.key}~{recipient_key(who.name)}"
    return key if part is None else f"{key}~{part.digest}"


def _note_download(shared: SharedTable) -> None:
    """The table a download of a file this server serves reads, for its metrics and audit event."""
    seen = current_request()
    if seen is not None:
        seen.download = True
        seen.share, seen.schema, seen.table = shared.share.name, shared.schema.name, shared.config.name
