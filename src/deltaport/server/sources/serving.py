"""What the app serves from, wired to the service: a catalog database (loaded, kept in step by a feed,
administered through the admin API, activated through the public activation routes) or a config
file (re-read when it changes or on SIGHUP, shown read-only through the admin API)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI

from deltaport.catalog.store import CatalogDB
from deltaport.delta import SnapshotCache
from deltaport.server.admin import AdminParts, add_activation_routes, admin_router, create_admin_app
from deltaport.server.admin.links import ActivationLinks, recipients_base
from deltaport.server.sharing.registry import StoreOpener
from deltaport.server.sharing.service import SharingService
from deltaport.server.sources.catalog_feed import CatalogFeed, describe_delta_table
from deltaport.server.sources.config import ServerConfig
from deltaport.server.sources.config_file import ConfigCatalogView, ConfigFileSource, LoadedConfig, restart_needed

log = logging.getLogger("deltaport.server")


def serve_catalog(
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


def serve_config_file(
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
