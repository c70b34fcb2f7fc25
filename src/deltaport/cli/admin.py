"""``deltaport admin``: the admin API (Unity Catalog's sharing REST API under
``/api/2.1/unity-catalog``) from the command line, for people without the Databricks SDK.

It sends the SDK's paths and bodies over plain HTTP with the standard library, and prints readable
lines (``--json``: the server's JSON). The server: ``--host`` or ``DELTAPORT_HOST`` (default
``http://localhost:8080``; the admin listener's address when the server has an ``adminPort``). The
admin token: ``DELTAPORT_ADMIN_TOKEN`` (or ``--token``, which other users of the machine can see in
the process list); it is never printed. Any failure is one line ``error: <message>`` on stderr and
exit code 1.

    export DELTAPORT_ADMIN_TOKEN=...
    deltaport admin catalogs create main --storage-root /data
    deltaport admin schemas create main.sales
    deltaport admin tables create main.sales.orders --location /data/orders
    deltaport admin shares create partners
    deltaport admin shares add-table partners main.sales.orders --partition "region=EU"
    deltaport admin recipients create acme          # prints the activation link
    deltaport admin shares grant partners acme
    deltaport admin audit --since 2024-05-01 --principal acme
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from deltaport.cli.admin_io import (
    DEFAULT_HOST,
    HOST_ENV,
    JSON_OPTION,
    TOKEN_ENV,
    Settings,
    cell,
    client,
    done,
    fields,
    listing,
    names,
    print_json,
    quoted,
    table,
    time_ms,
    wants_json,
    when,
)
from deltaport.cli.admin_shares import recipients_app, shares_app

admin_app = typer.Typer(
    name="admin",
    help="Administer a deltaport server through its admin API: catalogs, schemas, tables, shares, "
    f"recipients, grants and the audit log. The admin token comes from {TOKEN_ENV}.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
catalogs_app = typer.Typer(
    help="Catalogs: where tables are registered, each under a storage root.", no_args_is_help=True
)
schemas_app = typer.Typer(help="Schemas of a catalog (CATALOG.SCHEMA).", no_args_is_help=True)
tables_app = typer.Typer(help="External Delta tables (CATALOG.SCHEMA.TABLE) at a location.", no_args_is_help=True)
admin_app.add_typer(catalogs_app, name="catalogs")
admin_app.add_typer(schemas_app, name="schemas")
admin_app.add_typer(tables_app, name="tables")
admin_app.add_typer(shares_app, name="shares")
admin_app.add_typer(recipients_app, name="recipients")


@admin_app.callback()
def _admin(
    ctx: typer.Context,
    host: str = typer.Option(
        DEFAULT_HOST,
        "--host",
        envvar=HOST_ENV,
        help="The server's base URL (the adminPort listener's, when the server has one).",
    ),
    token: Optional[str] = typer.Option(
        None,
        "--token",
        envvar=TOKEN_ENV,
        show_default=False,
        help=f"One of the server's admin tokens. Prefer {TOKEN_ENV}: other users can see a command line.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the server's JSON instead of lines, for every command."),
) -> None:
    """Administer a deltaport server through its admin API (Unity Catalog's sharing REST API)."""
    if not ctx.resilient_parsing:
        ctx.obj = Settings.checked(host, token, as_json)


# --- catalogs -------------------------------------------------------------------------------------

_CATALOG = typer.Argument(..., help="The catalog's name.")


@catalogs_app.command("create")
def create_catalog(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The new catalog's name."),
    storage_root: str = typer.Option(
        ..., "--storage-root", metavar="PATH", help="Where its tables may be: a path or s3://, az://, gs:// URL."
    ),
    comment: Optional[str] = typer.Option(None, "--comment", help="A description."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a catalog whose tables all lie under a storage root."""
    body = {"name": name, "storage_root": storage_root, "comment": comment}
    made = client(ctx).call("POST", "/catalogs", body=body)
    done(ctx, as_json, made, f"created catalog {made.get('name', name)}")


@catalogs_app.command("list")
def list_catalogs(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """List the catalogs."""
    columns = [
        ("name", lambda c: c.get("name")),
        ("storage root", lambda c: c.get("storage_root")),
        ("comment", lambda c: c.get("comment")),
    ]
    listing(ctx, as_json, "/catalogs", "catalogs", columns)


@catalogs_app.command("get")
def get_catalog(ctx: typer.Context, name: str = _CATALOG, as_json: bool = JSON_OPTION) -> None:
    """Show a catalog."""
    c = client(ctx).call("GET", "/catalogs" + quoted(name))
    if wants_json(ctx, as_json):
        print_json(c)
        return
    fields(
        [
            ("name", c.get("name")),
            ("storage root", c.get("storage_root")),
            ("comment", c.get("comment")),
            ("created", when(c.get("created_at"))),
            ("updated", when(c.get("updated_at"))),
        ]
    )


@catalogs_app.command("delete")
def delete_catalog(
    ctx: typer.Context,
    name: str = _CATALOG,
    force: bool = typer.Option(False, "--force", help="Delete it with its schemas and tables."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Delete a catalog (an empty one, unless --force)."""
    answer = client(ctx).call("DELETE", "/catalogs" + quoted(name), query={"force": force or None})
    done(ctx, as_json, answer, f"deleted catalog {name}")


# --- schemas --------------------------------------------------------------------------------------

_SCHEMA = typer.Argument(..., metavar="CATALOG.SCHEMA", help="The schema's full name.")


@schemas_app.command("create")
def create_schema(
    ctx: typer.Context,
    full_name: str = _SCHEMA,
    comment: Optional[str] = typer.Option(None, "--comment", help="A description."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a schema in a catalog."""
    catalog, schema = names(full_name, 2, "a schema's CATALOG.SCHEMA")
    body = {"name": schema, "catalog_name": catalog, "comment": comment}
    made = client(ctx).call("POST", "/schemas", body=body)
    done(ctx, as_json, made, f"created schema {made.get('full_name', full_name)}")


@schemas_app.command("list")
def list_schemas(
    ctx: typer.Context, catalog: str = typer.Argument(..., help="The catalog's name."), as_json: bool = JSON_OPTION
) -> None:
    """List the schemas of a catalog."""
    columns = [("name", lambda s: s.get("full_name")), ("comment", lambda s: s.get("comment"))]
    listing(ctx, as_json, "/schemas", "schemas", columns, {"catalog_name": catalog})


@schemas_app.command("get")
def get_schema(ctx: typer.Context, full_name: str = _SCHEMA, as_json: bool = JSON_OPTION) -> None:
    """Show a schema."""
    s = client(ctx).call("GET", "/schemas" + quoted(full_name))
    if wants_json(ctx, as_json):
        print_json(s)
    else:
        fields([("name", s.get("full_name")), ("comment", s.get("comment")), ("created", when(s.get("created_at")))])


@schemas_app.command("delete")
def delete_schema(
    ctx: typer.Context,
    full_name: str = _SCHEMA,
    force: bool = typer.Option(False, "--force", help="Delete it with its tables."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Delete a schema (an empty one, unless --force)."""
    answer = client(ctx).call("DELETE", "/schemas" + quoted(full_name), query={"force": force or None})
    done(ctx, as_json, answer, f"deleted schema {full_name}")


# --- tables ---------------------------------------------------------------------------------------

_TABLE = typer.Argument(..., metavar="CATALOG.SCHEMA.TABLE", help="The table's full name.")


@tables_app.command("create")
def create_table(
    ctx: typer.Context,
    full_name: str = _TABLE,
    location: str = typer.Option(..., "--location", metavar="PATH", help="The Delta table: a path or URL."),
    comment: Optional[str] = typer.Option(None, "--comment", help="A description."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Register an external Delta table (the server reads its log to check it)."""
    catalog, schema, name = names(full_name, 3, "a table's CATALOG.SCHEMA.TABLE")
    body = {
        "name": name,
        "catalog_name": catalog,
        "schema_name": schema,
        "table_type": "EXTERNAL",
        "data_source_format": "DELTA",
        "storage_location": location,
        "comment": comment,
    }
    made = client(ctx).call("POST", "/tables", body=body)
    done(ctx, as_json, made, f"created table {made.get('full_name', full_name)} at {location}")


@tables_app.command("list")
def list_tables(ctx: typer.Context, schema: str = _SCHEMA, as_json: bool = JSON_OPTION) -> None:
    """List the tables of a schema."""
    catalog, schema_name = names(schema, 2, "a schema's CATALOG.SCHEMA")
    columns = [("name", lambda t: t.get("full_name")), ("location", lambda t: t.get("storage_location"))]
    listing(ctx, as_json, "/tables", "tables", columns, {"catalog_name": catalog, "schema_name": schema_name})


@tables_app.command("get")
def get_table(ctx: typer.Context, full_name: str = _TABLE, as_json: bool = JSON_OPTION) -> None:
    """Show a table with its columns (read from its Delta log)."""
    t = client(ctx).call("GET", "/tables" + quoted(full_name))
    if wants_json(ctx, as_json):
        print_json(t)
        return
    fields(
        [
            ("name", t.get("full_name")),
            ("location", t.get("storage_location")),
            ("table id", t.get("table_id")),
            ("comment", t.get("comment")),
            ("created", when(t.get("created_at"))),
        ]
    )
    typer.echo("")
    table(
        t.get("columns") or [],
        [
            ("column", lambda c: c.get("name")),
            ("type", lambda c: c.get("type_text")),
            ("nullable", lambda c: c.get("nullable")),
            ("partition", lambda c: c.get("partition_index") is not None),
        ],
    )


@tables_app.command("delete")
def delete_table(ctx: typer.Context, full_name: str = _TABLE, as_json: bool = JSON_OPTION) -> None:
    """Unregister a table (its data is left alone)."""
    done(ctx, as_json, client(ctx).call("DELETE", "/tables" + quoted(full_name)), f"deleted table {full_name}")


# --- audit ----------------------------------------------------------------------------------------


def audit_line(e: dict[str, Any]) -> str:
    """One event as one line: time, status, principal, action, then what it names, as key=value."""
    target = ".".join(str(e[k]) for k in ("share", "schema", "table") if e.get(k) is not None)
    extra = {
        "version": e.get("version"),
        "files": e.get("files"),
        "bytes": e.get("bytes"),
        "ms": e.get("duration_ms"),
        "ip": e.get("client_ip"),
        "id": e.get("request_id"),
        "detail": e.get("detail"),
    }
    words = [when(e.get("time")), str(e.get("status", "-")), cell(e.get("principal")), cell(e.get("action"))]
    if target:
        words.append(target)
    words += [f"{k}={cell(v)}" for k, v in extra.items() if v not in (None, "", {})]
    return " ".join(words)


@admin_app.command("audit")
def audit(
    ctx: typer.Context,
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME", help="From this time: ISO-8601 or epoch ms."),
    until: Optional[str] = typer.Option(
        None, "--until", metavar="TIME", help="Before this time: ISO-8601 or epoch ms."
    ),
    principal: Optional[str] = typer.Option(
        None, "--principal", help="Only this principal: a recipient's name, admin, anonymous or unauthenticated."
    ),
    action: Optional[str] = typer.Option(None, "--action", help="Only this action, e.g. queryTable, createShare."),
    share: Optional[str] = typer.Option(None, "--share", help="Only requests naming this share."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Print at most this many events (oldest first)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per event (JSON lines)."),
) -> None:
    """Print the server's audit events, oldest first, one per line.

    A line: time, HTTP status, principal, action, share.schema.table, then key=value fields. Times
    given are ISO-8601 (UTC unless zoned) or epoch ms."""
    query: dict[str, Any] = {
        "start_time": time_ms(since, "--since") if since is not None else None,
        "end_time": time_ms(until, "--until") if until is not None else None,
        "principal": principal,
        "action": action,
        "share": share,
    }
    api, shown, token = client(ctx), 0, None
    json_lines = wants_json(ctx, as_json)
    while limit is None or shown < limit:
        size = 1000 if limit is None else min(1000, limit - shown)
        answer = api.call("GET", "/audit-events", query={**query, "max_results": size, "page_token": token})
        for event in answer.get("events") or []:
            typer.echo(json.dumps(event, ensure_ascii=False) if json_lines else audit_line(event))
            shown += 1
        token = answer.get("next_page_token")
        if not token:
            break


if __name__ == "__main__":  # pragma: no cover
    admin_app(prog_name="deltaport admin")
