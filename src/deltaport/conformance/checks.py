"""The checks: one small function per rule of the protocol, registered in the order they run.

A check returns a short note on success, raises :class:`Failed` (what was expected, what came back)
or :class:`Skipped` (why it cannot run here). Sections are named as the protocol documents name them.
This module holds the server-wide checks (listing, authentication, errors, version, metadata);
``query_checks``, ``feed_checks`` and ``directory_checks`` the rest; :data:`CHECKS` puts them in order.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import quote

import orjson

from deltaport.conformance.directory_checks import DIRECTORY
from deltaport.conformance.discovery import Target, item_names, list_items
from deltaport.conformance.feed_checks import FEED
from deltaport.conformance.query_checks import QUERY
from deltaport.conformance.registry import Checks
from deltaport.conformance.shapes import CAPABILITIES, DELTA, PARQUET, Answer, format_named, read_answer
from deltaport.conformance.wire import (
    NO_TOKEN,
    Failed,
    Skipped,
    error_problem,
    expect,
    expect_error,
    expect_status,
    json_object,
    table_path,
    unique_name,
    version_header,
)

SERVER = Checks()
LAST = Checks()  # error-shape: it judges every error answer the other checks saw


def _shares(t: Target) -> list[str]:
    if not t.found.shares:
        raise Skipped(t.found.problem or "the profile reads no share")
    return t.found.shares[:5]


def _fields(items: list[dict], keys: tuple[str, ...], path: str) -> None:
    for item in items:
        expect(
            all(isinstance(item.get(k), str) for k in keys),
            f"string {', '.join(keys)} on each item of GET {path}",
            item,
        )


# --- discovery and listing ------------------------------------------------------------------------


@SERVER.check("list-shares", "List Shares")
def list_shares(t: Target) -> str:
    items, _ = list_items(t.wire, "/shares")
    names = item_names(items, "/shares")
    bad_ids = [i["id"] for i in items if "id" in i and not isinstance(i["id"], str)]
    expect(not bad_ids, "share ids to be strings when present", bad_ids)
    lowered = [n.lower() for n in names]
    expect(len(set(lowered)) == len(lowered), "each share listed once", names)
    return f"{len(names)} share(s)"


@SERVER.check("get-share", "Get Share")
def get_share(t: Target) -> None:
    for share in _shares(t):
        path = f"/shares/{quote(share, safe='')}"
        body = json_object(t.wire.get(path), f"GET {path}")
        found = body.get("share")
        if not (isinstance(found, dict) and isinstance(found.get("name"), str)):
            raise Failed(f'{{"share": {{"name"}}}} from GET {path}', str(body))
        expect(found["name"].lower() == share.lower(), f"the share named {share!r} from GET {path}", found["name"])


@SERVER.check("list-schemas", "List Schemas in a Share")
def list_schemas(t: Target) -> None:
    for share in _shares(t):
        path = f"/shares/{quote(share, safe='')}/schemas"
        items, _ = list_items(t.wire, path)
        item_names(items, path)
        _fields(items, ("name", "share"), path)
        wrong = [i["share"] for i in items if i["share"].lower() != share.lower()]
        expect(not wrong, f"share {share!r} on each schema of GET {path}", wrong)


@SERVER.check("list-tables", "List Tables in a Schema")
def list_tables(t: Target) -> str:
    schemas = sorted({(ref.share, ref.schema) for ref in t.found.tables})
    if not schemas:
        raise Skipped(t.found.problem or "no schema with a table is shared")
    for share, schema in schemas[:10]:
        path = f"/shares/{quote(share, safe='')}/schemas/{quote(schema, safe='')}/tables"
        items, _ = list_items(t.wire, path)
        _fields(items, ("name", "schema", "share"), path)
        wrong = [i for i in items if (i["share"].lower(), i["schema"].lower()) != (share.lower(), schema.lower())]
        expect(not wrong, f"share {share!r} and schema {schema!r} on each table of GET {path}", wrong[:2])
    return f"{len(t.found.tables)} table(s) in {len(schemas)} schema(s)"


@SERVER.check("list-all-tables", "List all Tables in a Share")
def list_all_tables(t: Target) -> None:
    for share in _shares(t):
        path = f"/shares/{quote(share, safe='')}/all-tables"
        items, _ = list_items(t.wire, path)
        _fields(items, ("name", "schema", "share"), path)
        listed = sorted((i["schema"].lower(), i["name"].lower()) for i in items)
        per_schema = sorted((r.schema.lower(), r.name.lower()) for r in t.found.tables if r.share == share)
        expect(
            listed == per_schema, f"GET {path} to list the tables the schemas list", f"{listed[:5]} vs {per_schema[:5]}"
        )


@SERVER.check("list-paging", "Pagination Support (maxResults, pageToken)")
def list_paging(t: Target) -> str:
    share = quote(_shares(t)[0], safe="")
    paths = ["/shares", f"/shares/{share}/schemas", f"/shares/{share}/all-tables"]
    if t.found.tables:
        ref = t.found.tables[0]
        paths.append(table_path(ref.share, ref.schema, "x").rsplit("/", 1)[0])
    paged = []
    for path in paths:
        whole, _ = list_items(t.wire, path)
        items, pages = list_items(t.wire, path, max_results=1)
        key = lambda item: orjson.dumps(item, option=orjson.OPT_SORT_KEYS)  # noqa: E731
        expect(
            sorted(map(key, items)) == sorted(map(key, whole)),
            f"the pages of GET {path}?maxResults=1 to hold exactly the unpaged items, once each",
            f"{len(items)} item(s) in {pages} page(s) against {len(whole)} unpaged",
        )
        if len(whole) > 1:
            paged.append(f"{path.rsplit('/', 1)[-1]} {pages} pages")
    if not paged:
        raise Skipped("no listing has 2 or more items to page")
    return ", ".join(paged)


# --- authentication and errors ------------------------------------------------------------------


def _auth_requests(t: Target) -> list[tuple[str, str]]:
    requests = [("GET", "/shares")]
    if t.found.tables:
        requests.append(("POST", t.found.tables[0].path + "/query"))
    return requests


@SERVER.check("auth-missing-token", "REST APIs (Authorization: Bearer {token})")
def auth_missing_token(t: Target) -> None:
    for method, path in _auth_requests(t):
        resp = t.wire.request(method, path, body={} if method == "POST" else None, token=NO_TOKEN)
        expect_error(resp, 401, f"{method} {path} without a bearer token")


@SERVER.check("auth-wrong-token", "REST APIs (Authorization: Bearer {token})")
def auth_wrong_token(t: Target) -> None:
    wrong = "conformance-" + secrets.token_urlsafe(18)
    for method, path in _auth_requests(t):
        resp = t.wire.request(method, path, body={} if method == "POST" else None, token=wrong)
        expect_error(resp, 401, f"{method} {path} with a wrong bearer token")


@SERVER.check("not-found", "REST APIs (unknown share, schema or table)")
def not_found(t: Target) -> None:
    missing = unique_name()
    requests = [("GET", f"/shares/{missing}"), ("GET", f"/shares/{missing}/schemas")]
    if t.found.tables:
        ref = t.found.tables[0]
        requests += [
            ("GET", table_path(ref.share, missing, "t").rsplit("/", 1)[0]),
            ("GET", table_path(ref.share, ref.schema, missing) + "/metadata"),
            ("POST", table_path(ref.share, ref.schema, missing) + "/query"),
        ]
    for method, path in requests:
        expect_error(t.wire.request(method, path, body={} if method == "POST" else None), 404, f"{method} {path}")


# --- version and metadata -----------------------------------------------------------------------


@SERVER.check("table-version", "Query Table Version")
def table_version(t: Target) -> str:
    table = t.need("readable")
    resp = t.wire.get(table.ref.path + "/version")
    expect_status(resp, 200, "GET .../version")
    version = version_header(resp, "GET .../version")
    expect(version >= table.version, f"a version at least {table.version} (the /metadata answer's)", version)
    return f"{table.ref}: version {version}"


@SERVER.check("table-version-head", "Query Table Version (HEAD)")
def table_version_head(t: Target) -> None:
    table = t.need("readable")
    resp = t.wire.request("HEAD", table.ref.path)
    expect_status(resp, 200, "HEAD on the table")
    version = version_header(resp, "HEAD on the table")
    expect(version >= table.version, f"a version at least {table.version} (the /metadata answer's)", version)


@SERVER.check("metadata-parquet", "Query Table Metadata")
def metadata_parquet(t: Target) -> str:
    bad = "; ".join(f"{ref}: {why}" for ref, why in t.found.malformed[:2])
    expect(not t.found.malformed, "a well-formed GET .../metadata answer from every table", bad)
    table = t.need("readable")
    answer = read_answer(t.wire.get(table.ref.path + "/metadata"), "GET .../metadata")
    _header_only(answer, "GET .../metadata")
    expect(answer.fmt == PARQUET, "the parquet format's lines when no format is asked for", answer.fmt)
    named = format_named(answer.capabilities)
    expect(named in (None, PARQUET), "delta-sharing-capabilities (when sent) naming parquet", answer.capabilities)
    return f"{len(t.found.readable)} table(s) read"


def _header_only(answer: Answer, request: str) -> None:
    extra = len(answer.files) + (answer.end_stream is not None)
    expect(not extra, f"exactly two lines (protocol, metaData) from {request}", f"{extra} more line(s)")


@SERVER.check("metadata-delta", "Delta Format Responses (metadata)")
def metadata_delta(t: Target) -> None:
    table = t.need("readable")
    request = "GET .../metadata with responseformat=delta"
    answer = read_answer(
        t.wire.get(table.ref.path + "/metadata", headers={CAPABILITIES: "responseformat=delta"}), request
    )
    _header_only(answer, request)
    expect(
        answer.fmt == DELTA, f"protocol.deltaProtocol and metaData.deltaMetadata from {request}", "parquet-format lines"
    )
    named = format_named(answer.capabilities)
    expect(named == DELTA, f"delta-sharing-capabilities naming delta on {request}", answer.capabilities or "no header")
    expect(
        answer.metadata["id"] == table.metadata["id"], "the table id the parquet format gives", answer.metadata["id"]
    )


@SERVER.check("capabilities-header", "Response Format Selection")
def capabilities_header(t: Target) -> None:
    table = t.need("files")
    for asked in ("responseformat=parquet", "responseformat=delta", "responseformat=delta,parquet"):
        for method, endpoint in (("GET", "metadata"), ("POST", "query")):
            request = f"{method} .../{endpoint} with {asked}"
            body: dict | None = {} if method == "POST" else None
            resp = t.wire.request(method, f"{table.ref.path}/{endpoint}", body=body, headers={CAPABILITIES: asked})
            answer = read_answer(resp, request)
            offered = asked.split("=", 1)[1].split(",")
            named = format_named(answer.capabilities)
            expect(
                named in offered,
                f"delta-sharing-capabilities naming one of {offered} on {request}",
                answer.capabilities or "no header",
            )
            expect(
                answer.fmt == named,
                f"lines in the format the header names ({named}) on {request}",
                f"{answer.fmt} lines",
            )


# --- every error --------------------------------------------------------------------------------


def _client_mistakes(t: Target) -> list[tuple[str, str, dict[str, Any]]]:
    mistakes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/shares", {"params": {"pageToken": "not-a-page-token"}})
    ]
    if t.found.readable:
        path = t.found.readable[0].ref.path
        mistakes.append(
            ("POST", path + "/query", {"content": b"{not json", "headers": {"Content-Type": "application/json"}})
        )
        mistakes.append(("GET", path + "/metadata", {"params": {"version": "not-a-version"}}))
    return mistakes


@LAST.check("error-shape", "REST APIs (every error is JSON with errorCode and message)")
def error_shape(t: Target) -> str:
    for method, path, kwargs in _client_mistakes(t):
        resp = t.wire.request(method, path, **kwargs)
        expect(400 <= resp.status_code < 500, f"a 4xx for a client mistake: {method} {path} {kwargs}", resp.status_code)
    problems = [f"{e.method} {e.path}: {p}" for e in t.wire.errors_seen if (p := error_problem(e.status, e.body))]
    if problems:
        raise Failed('every error answer to be JSON {"errorCode", "message"}', f"{len(problems)} not: {problems[0]}")
    return f"{len(t.wire.errors_seen)} error answer(s), all JSON"


#: Every check, in the order they run and print.
CHECKS = Checks([*SERVER, *QUERY, *FEED, *DIRECTORY, *LAST])
