"""`deltaport catalog`: the catalog database."""

from __future__ import annotations

from typing import Optional

import typer

from deltaport.cli.common import fail

catalog_app = typer.Typer(
    help="The catalog database: move a config file's shares and recipients into it.", no_args_is_help=True
)


@catalog_app.command("import")
def catalog_import(
    config: str = typer.Argument(..., help="A server config YAML with 'shares' (and recipients) to import."),
    into: Optional[str] = typer.Option(
        None,
        "--into",
        help="The catalog database: a SQLite file path or a postgresql:// URL (default: catalog.db beside the config).",
    ),
) -> None:
    """Load a config file's shares, tables, recipients (with their tokens) and grants into a catalog
    database, to serve and administer them there. Recipients' profiles keep working."""
    from pathlib import Path

    from deltaport.catalog.db import display_url
    from deltaport.catalog.import_served import import_served
    from deltaport.catalog.store import CatalogDB
    from deltaport.errors import DeltaportError
    from deltaport.server.sources.config import catalog_url, load_config

    try:
        cfg = load_config(config)
        base = Path(config).resolve().parent
        url = catalog_url(into, Path.cwd()) if into else catalog_url("catalog.db", base)
        db = CatalogDB(url)
        try:
            done = import_served(db, cfg.shares, cfg.recipients, cfg.bearer_token_hash)
        finally:
            db.close()
    except DeltaportError as exc:
        fail(exc)
    counts = f"{done.shares} share(s), {done.tables} table(s), {done.recipients} recipient(s)"
    typer.echo(f"imported {counts} into {display_url(url)}")
    for name in done.expired:
        typer.echo(f"left out recipient '{name}': its expirationTime has passed")
    where = " and set 'catalog' to the database's URL" if into else ""
    typer.echo(f"to serve from it: remove 'shares', 'recipients' and 'authorization' from {config}{where}; restart")
