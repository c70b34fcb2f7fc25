"""``deltaport admin shares ...`` and ``deltaport admin recipients ...``: what is shared, with whom.

Partition filters of a shared table (``shares add-table --partition``) are written as conditions
joined by ',' (all must hold); repeating the option gives alternatives (any may hold), as the
admin API's ``partitions`` (OR of partitions, AND of values) says. A condition is ``COL=VALUE``,
``COL LIKE PATTERN`` or ``COL=CURRENT_RECIPIENT('KEY')`` for a recipient's property, the spelling
of Databricks SQL's ``ALTER SHARE ... PARTITION``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional

import typer

from deltaport.cli.admin_io import (
    JSON_OPTION,
    client,
    done,
    fail,
    fields,
    listing,
    names,
    pairs,
    print_json,
    quoted,
    table,
    time_ms,
    wants_json,
    when,
)

shares_app = typer.Typer(help="Shares: named sets of tables and schemas granted to recipients.", no_args_is_help=True)
recipients_app = typer.Typer(help="Recipients: who reads shares, each with bearer tokens.", no_args_is_help=True)

_SHARE = typer.Argument(..., help="The share's name.")
_ACCESS_MODE_HELP = (
    "How recipients may read it: url (the server lists its files) or dir (the server vends "
    "credentials for its directory); repeat for both (default: url)."
)
_RECIPIENT = typer.Argument(..., help="The recipient's name.")

# --- partition filters ----------------------------------------------------------------------------

PARTITION_HELP = (
    "A partition filter: conditions joined by ',', all of which must hold; repeat the option for "
    "alternatives (any may hold). A condition is COL=VALUE, COL LIKE PATTERN (% and _ wildcards), or "
    "COL=CURRENT_RECIPIENT('KEY') (or COL LIKE CURRENT_RECIPIENT('KEY')) for the value of the "
    "recipient's property KEY. Quote a value holding ',' as 'a,b' ('' is a quote inside quotes)."
)
_CONDITION = re.compile(r"\s*([^\s=']+)\s*(=|\s[Ll][Ii][Kk][Ee]\s)\s*(.*?)\s*", re.S)
_BY_RECIPIENT = re.compile(r"current_recipient\(\s*'((?:[^']|'')*)'\s*\)", re.I)


def _split(text: str) -> list[str]:
    """``text`` cut at the commas outside single quotes."""
    pieces, current, inside = [], "", False
    for char in text:
        if char == "'":
            inside = not inside
        if char == "," and not inside:
            pieces.append(current)
            current = ""
        else:
            current += char
    if inside:
        fail(f'--partition "{text}" has a quote that is not closed')
    return [*pieces, current]


def _condition(text: str, whole: str) -> dict[str, str]:
    match = _CONDITION.fullmatch(text)
    if match is None or not match.group(3):
        fail(
            f'--partition condition "{text.strip()}" (in "{whole}") is not COL=VALUE, COL LIKE PATTERN '
            "or COL=CURRENT_RECIPIENT('KEY')"
        )
    column, op, rhs = match.group(1), "EQUAL" if match.group(2) == "=" else "LIKE", match.group(3)
    by_recipient = _BY_RECIPIENT.fullmatch(rhs)
    if by_recipient is not None:
        return {"name": column, "op": op, "recipient_property_key": by_recipient.group(1).replace("''", "'")}
    if len(rhs) >= 2 and rhs[0] == rhs[-1] == "'":
        rhs = rhs[1:-1].replace("''", "'")
    elif "'" in rhs:
        fail(f"--partition value {rhs} has a stray quote: quote the whole value, as in 'it''s'")
    return {"name": column, "op": op, "value": rhs}


def partitions_body(partitions: Sequence[str], properties: Sequence[str]) -> list[dict[str, Any]] | None:
    """The ``partitions`` of a shared table: one per ``--partition`` (OR), its conditions AND'ed;
    each ``--partition-property COL=KEY`` is AND'ed into every one (or, alone, is the one)."""
    by_property = [
        {"name": column, "op": "EQUAL", "recipient_property_key": key}
        for column, key in pairs(properties, "--partition-property").items()
    ]
    if any(not v["recipient_property_key"] for v in by_property):
        fail("--partition-property needs COL=KEY, KEY being the name of a recipient property")
    chosen = [[_condition(c, text) for c in _split(text)] + by_property for text in partitions]
    if not chosen and by_property:
        chosen = [by_property]
    return [{"values": values} for values in chosen] or None


def partition_text(partition: dict[str, Any]) -> str:
    """A partition as ``--partition`` takes it."""
    out = []
    for v in partition.get("values") or []:
        op = "=" if v.get("op", "EQUAL") == "EQUAL" else " LIKE "
        if v.get("recipient_property_key") is not None:
            rhs = "CURRENT_RECIPIENT('{}')".format(v["recipient_property_key"].replace("'", "''"))
        else:
            value = str(v.get("value", ""))
            rhs = "'{}'".format(value.replace("'", "''")) if re.search(r"[',\s]", value) or not value else value
        out.append(f"{v.get('name')}{op}{rhs}")
    return ",".join(out)


# --- shares ---------------------------------------------------------------------------------------


def _update(ctx: typer.Context, share: str, action: str, data_object: dict[str, Any]) -> Any:
    body = {"updates": [{"action": action, "data_object": data_object}]}
    return client(ctx).call("PATCH", "/shares" + quoted(share), body=body)


@shares_app.command("create")
def create_share(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The new share's name."),
    comment: Optional[str] = typer.Option(None, "--comment", help="A description (at most 65,536 characters)."),
    display_name: Optional[str] = typer.Option(
        None, "--display-name", help="The name recipients' tools show (at most 255 characters)."
    ),
    prop: list[str] = typer.Option(
        [], "--property", metavar="KEY=VALUE", help="A property recipients see; repeat for more (at most 50)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create an empty share."""
    body: dict[str, Any] = {"name": name, "comment": comment, "display_name": display_name}
    if prop:
        body["properties"] = pairs(prop, "--property")
    made = client(ctx).call("POST", "/shares", body=body)
    done(ctx, as_json, made, f"created share {made.get('name', name)}")


@shares_app.command("list")
def list_shares(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """List the shares."""
    columns = [("name", lambda s: s.get("name")), ("comment", lambda s: s.get("comment"))]
    listing(ctx, as_json, "/shares", "shares", [*columns, ("created", lambda s: when(s.get("created_at")))])


@shares_app.command("get")
def get_share(ctx: typer.Context, name: str = _SHARE, as_json: bool = JSON_OPTION) -> None:
    """Show a share with the tables and schemas it shares."""
    share = client(ctx).call("GET", "/shares" + quoted(name), query={"include_shared_data": True})
    if wants_json(ctx, as_json):
        print_json(share)
        return
    properties = ", ".join(f"{k}={v}" for k, v in (share.get("properties") or {}).items())
    fields(
        [
            ("name", share.get("name")),
            ("display name", share.get("display_name")),
            ("comment", share.get("comment")),
            ("properties", properties or None),
            ("created", when(share.get("created_at"))),
        ]
    )
    objects = share.get("objects") or []
    if not objects:
        typer.echo("no shared objects: add some with 'shares add-table' or 'shares add-schema'")
        return
    typer.echo("")
    table(
        objects,
        [
            ("object", lambda o: o.get("name")),
            ("type", lambda o: o.get("data_object_type")),
            ("shared as", lambda o: o.get("shared_as")),
            ("history", lambda o: o.get("history_data_sharing_status") == "ENABLED"),
            ("cdf", lambda o: o.get("cdf_enabled")),
            ("start version", lambda o: o.get("start_version")),
            ("partitions", lambda o: " OR ".join(partition_text(p) for p in o.get("partitions") or [])),
            ("access", lambda o: ",".join(o.get("access_modes") or ["url"])),
        ],
    )


@shares_app.command("add-table")
def add_table(
    ctx: typer.Context,
    share: str = _SHARE,
    table_name: str = typer.Argument(..., metavar="CATALOG.SCHEMA.TABLE", help="The table to share."),
    shared_as: Optional[str] = typer.Option(
        None, "--as", metavar="SCHEMA.TABLE", help="The name recipients see (default: the table's schema.table)."
    ),
    history: bool = typer.Option(False, "--history", help="Share the table's history: time travel and changes."),
    cdf: bool = typer.Option(False, "--cdf", help="Share the table's change data feed."),
    start_version: Optional[int] = typer.Option(
        None, "--start-version", min=0, help="The first version recipients may read (with --history or --cdf)."
    ),
    partition: list[str] = typer.Option([], "--partition", help=PARTITION_HELP),
    partition_property: list[str] = typer.Option(
        [],
        "--partition-property",
        metavar="COL=KEY",
        help="Only rows whose COL equals the recipient's property KEY: AND'ed into every --partition "
        "(alone, the only filter). Short for --partition \"COL=CURRENT_RECIPIENT('KEY')\".",
    ),
    comment: Optional[str] = typer.Option(None, "--comment", help="A description."),
    access_mode: list[str] = typer.Option([], "--access-mode", metavar="url|dir", help=_ACCESS_MODE_HELP),
    auxiliary_location: list[str] = typer.Option(
        [],
        "--auxiliary-location",
        metavar="URL",
        help="Another root the table's log names files under (a storage URL); repeat for more.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Add a table to a share, whole or filtered by partition values."""
    names(table_name, 3, "a table's CATALOG.SCHEMA.TABLE")
    if shared_as is not None:
        names(shared_as, 2, "a SCHEMA.TABLE for --as")
    data_object: dict[str, Any] = {"name": table_name, "data_object_type": "TABLE"}
    optional = {
        "shared_as": shared_as,
        "history_data_sharing_status": "ENABLED" if history else None,
        "cdf_enabled": True if cdf else None,
        "start_version": start_version,
        "partitions": partitions_body(partition, partition_property),
        "comment": comment,
        "access_modes": access_mode or None,
        "auxiliary_locations": auxiliary_location or None,
    }
    data_object.update({k: v for k, v in optional.items() if v is not None})
    changed = _update(ctx, share, "ADD", data_object)
    done(ctx, as_json, changed, f"added table {table_name} to share {share}")


@shares_app.command("add-schema")
def add_schema(
    ctx: typer.Context,
    share: str = _SHARE,
    schema: str = typer.Argument(..., metavar="CATALOG.SCHEMA", help="The schema to share, with its future tables."),
    shared_as: Optional[str] = typer.Option(None, "--as", metavar="SCHEMA", help="The name recipients see."),
    history: bool = typer.Option(False, "--history", help="Share the tables' history: time travel and changes."),
    access_mode: list[str] = typer.Option([], "--access-mode", metavar="url|dir", help=_ACCESS_MODE_HELP),
    as_json: bool = JSON_OPTION,
) -> None:
    """Add a whole schema to a share: its tables, present and future."""
    names(schema, 2, "a schema's CATALOG.SCHEMA")
    data_object: dict[str, Any] = {"name": schema, "data_object_type": "SCHEMA"}
    if access_mode:
        data_object["access_modes"] = access_mode
    if shared_as is not None:
        data_object["shared_as"] = shared_as
    if history:
        data_object["history_data_sharing_status"] = "ENABLED"
    changed = _update(ctx, share, "ADD", data_object)
    done(ctx, as_json, changed, f"added schema {schema} to share {share}")


@shares_app.command("remove")
def remove_object(
    ctx: typer.Context,
    share: str = _SHARE,
    name: str = typer.Argument(..., help="The table (CATALOG.SCHEMA.TABLE) or schema (CATALOG.SCHEMA) to remove."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Remove a table or schema from a share."""
    kind = "SCHEMA" if name.count(".") == 1 else "TABLE"
    changed = _update(ctx, share, "REMOVE", {"name": name, "data_object_type": kind})
    done(ctx, as_json, changed, f"removed {kind.lower()} {name} from share {share}")


@shares_app.command("delete")
def delete_share(ctx: typer.Context, name: str = _SHARE, as_json: bool = JSON_OPTION) -> None:
    """Delete a share: no recipient reads it from then on."""
    done(ctx, as_json, client(ctx).call("DELETE", "/shares" + quoted(name)), f"deleted share {name}")


def _permissions(ctx: typer.Context, share: str, recipient: str, change: str) -> Any:
    body = {"changes": [{"principal": recipient, change: ["SELECT"]}]}
    return client(ctx).call("PATCH", "/shares" + quoted(share) + "/permissions", body=body)


@shares_app.command("grant")
def grant(ctx: typer.Context, share: str = _SHARE, recipient: str = _RECIPIENT, as_json: bool = JSON_OPTION) -> None:
    """Let a recipient read a share (SELECT)."""
    done(ctx, as_json, _permissions(ctx, share, recipient, "add"), f"granted share {share} to {recipient}")


@shares_app.command("revoke")
def revoke(ctx: typer.Context, share: str = _SHARE, recipient: str = _RECIPIENT, as_json: bool = JSON_OPTION) -> None:
    """Stop a recipient reading a share, from its next request on."""
    done(ctx, as_json, _permissions(ctx, share, recipient, "remove"), f"revoked share {share} from {recipient}")


@shares_app.command("permissions")
def share_permissions(ctx: typer.Context, share: str = _SHARE, as_json: bool = JSON_OPTION) -> None:
    """List the recipients a share is granted to."""
    columns = [("recipient", lambda g: g.get("principal")), ("privileges", lambda g: g.get("privileges"))]
    listing(ctx, as_json, "/shares" + quoted(share) + "/permissions", "privilege_assignments", columns)


# --- recipients -----------------------------------------------------------------------------------


def _link(ctx: typer.Context, as_json: bool, recipient: dict[str, Any], line: str) -> None:
    """What a new token gives: the activation link, shown this once."""
    if wants_json(ctx, as_json):
        print_json(recipient)
        return
    typer.echo(line)
    typer.echo(f"activation link (works once; send it to the recipient): {recipient.get('activation_url')}")


@recipients_app.command("create")
def create_recipient(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The new recipient's name."),
    comment: Optional[str] = typer.Option(None, "--comment", help="A description."),
    expires: Optional[str] = typer.Option(
        None, "--expires", metavar="TIME", help="When its tokens stop working: ISO-8601 (UTC unless zoned) or epoch ms."
    ),
    allow_ip: list[str] = typer.Option(
        [], "--allow-ip", metavar="CIDR", help="Accept its requests only from these addresses (repeatable)."
    ),
    prop: list[str] = typer.Option(
        [], "--property", metavar="KEY=VALUE", help="A property, e.g. for partition filters (repeatable)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a recipient and print its activation link (from which it downloads its profile)."""
    body: dict[str, Any] = {"name": name, "authentication_type": "TOKEN", "comment": comment}
    if expires is not None:
        body["expiration_time"] = time_ms(expires, "--expires")
    if allow_ip:
        body["ip_access_list"] = {"allowed_ip_addresses": list(allow_ip)}
    if prop:
        body["properties_kvpairs"] = {"properties": pairs(prop, "--property")}
    made = client(ctx).call("POST", "/recipients", body=body)
    _link(ctx, as_json, made, f"created recipient {made.get('name', name)}")


@recipients_app.command("list")
def list_recipients(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """List the recipients."""
    columns = [
        ("name", lambda r: r.get("name")),
        ("activated", lambda r: r.get("activated")),
        ("expires", lambda r: when(r.get("expiration_time"))),
        ("comment", lambda r: r.get("comment")),
    ]
    listing(ctx, as_json, "/recipients", "recipients", columns)


@recipients_app.command("get")
def get_recipient(ctx: typer.Context, name: str = _RECIPIENT, as_json: bool = JSON_OPTION) -> None:
    """Show a recipient: its settings and tokens (never a token itself)."""
    r = client(ctx).call("GET", "/recipients" + quoted(name))
    if wants_json(ctx, as_json):
        print_json(r)
        return
    fields(
        [
            ("name", r.get("name")),
            ("comment", r.get("comment")),
            ("activated", r.get("activated")),
            ("expires", when(r.get("expiration_time"))),
            ("allowed IPs", (r.get("ip_access_list") or {}).get("allowed_ip_addresses")),
            ("properties", (r.get("properties_kvpairs") or {}).get("properties")),
            ("created", when(r.get("created_at"))),
        ]
    )
    tokens = r.get("tokens") or []
    if tokens:
        typer.echo("")
        table(
            tokens,
            [
                ("token id", lambda t: t.get("id")),
                ("created", lambda t: when(t.get("created_at"))),
                ("expires", lambda t: when(t.get("expiration_time"))),
            ],
        )


@recipients_app.command("delete")
def delete_recipient(ctx: typer.Context, name: str = _RECIPIENT, as_json: bool = JSON_OPTION) -> None:
    """Delete a recipient: its tokens stop working at once."""
    done(ctx, as_json, client(ctx).call("DELETE", "/recipients" + quoted(name)), f"deleted recipient {name}")


@recipients_app.command("rotate-token")
def rotate_token(
    ctx: typer.Context,
    name: str = _RECIPIENT,
    grace_seconds: int = typer.Option(
        ..., "--grace-seconds", min=0, help="How long the current token keeps working (0: it stops now)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Make a new token for a recipient and print its activation link; the old one works for the grace."""
    body = {"existing_token_expire_in_seconds": grace_seconds}
    rotated = client(ctx).call("POST", "/recipients" + quoted(name) + "/rotate-token", body=body)
    _link(ctx, as_json, rotated, f"rotated the token of recipient {name}; the old one works {grace_seconds} s more")


@recipients_app.command("permissions")
def recipient_permissions(ctx: typer.Context, name: str = _RECIPIENT, as_json: bool = JSON_OPTION) -> None:
    """List the shares a recipient may read."""
    columns = [
        ("share", lambda p: p.get("share_name")),
        ("privileges", lambda p: sorted({x for a in p.get("privilege_assignments") or [] for x in a["privileges"]})),
    ]
    listing(ctx, as_json, "/recipients" + quoted(name) + "/share-permissions", "permissions_out", columns)
