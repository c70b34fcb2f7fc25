"""Checks of the share fields and of directory access: ``accessModes``, ``location`` and
``auxiliaryLocations`` in listings and metaData lines, and ``POST .../temporary-table-credentials``."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from deltaport.conformance.discovery import TableRef, Target, list_items
from deltaport.conformance.registry import Checks
from deltaport.conformance.shapes import CAPABILITIES, DELTA, PARQUET
from deltaport.conformance.wire import Failed, Skipped, expect, expect_error, json_object, ndjson, what

DIRECTORY = Checks()

MODES = {"url", "dir"}
CLOUDS = ("awsTempCredentials", "azureUserDelegationSas", "gcpOauthToken")
CLOUD_FIELDS = {
    "awsTempCredentials": ("accessKeyId", "secretAccessKey", "sessionToken"),
    "azureUserDelegationSas": ("sasToken",),
    "gcpOauthToken": ("oauthToken",),
}
#: the protocol's limits on a share's optional fields
DISPLAY_NAME_MAX, COMMENT_MAX, KEY_MAX, VALUE_MAX, PAIRS_MAX = 255, 65536, 255, 1000, 50


def _object(value: Any, expected: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Failed(expected, str(value)[:160])
    return value


def _share_fields(share: dict[str, Any], where: str) -> None:
    for key, limit in (("id", None), ("displayName", DISPLAY_NAME_MAX), ("comment", COMMENT_MAX)):
        if share.get(key) is None:
            continue
        value = share[key]
        expect(isinstance(value, str), f"share {key} to be a string {where}", value)
        if limit is not None:
            expect(len(value) <= limit, f"share {key} of at most {limit} characters {where}", f"{len(value)}")
    props = share.get("properties")
    if props is None:
        return
    expect(isinstance(props, dict), f"share properties to be an object {where}", props)
    expect(len(props) <= PAIRS_MAX, f"at most {PAIRS_MAX} share properties {where}", len(props))
    for key, value in props.items():
        expect(isinstance(value, str), f"share property {key!r} to be a string {where}", value)
        expect(len(key) <= KEY_MAX, f"share property keys of at most {KEY_MAX} characters {where}", key[:40])
        expect(len(value) <= VALUE_MAX, f"share property values of at most {VALUE_MAX} characters {where}", key)


@DIRECTORY.check("share-fields", "List Shares, Get Share (displayName, comment, properties)")
def share_fields(t: Target) -> str:
    items, _ = list_items(t.wire, "/shares")
    for item in items:
        _share_fields(item, "in GET /shares")
        name = item.get("name")
        if isinstance(name, str):
            path = f"/shares/{quote(name, safe='')}"
            found = _object(json_object(t.wire.get(path), f"GET {path}").get("share"), f'{{"share": {{}}}} from {path}')
            _share_fields(found, f"in GET {path}")
    described = sum(any(i.get(k) is not None for k in ("displayName", "comment", "properties")) for i in items)
    return f"{len(items)} share(s), {described} with displayName, comment or properties"


def placement_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with an object's ``accessModes``/``location``/``auxiliaryLocations``, or None."""
    modes = obj.get("accessModes")
    if modes is not None:
        if not (isinstance(modes, list) and all(isinstance(m, str) for m in modes)):
            return f"accessModes {modes!r} is not an array of strings"
        if not set(modes) <= MODES or not modes:
            return f"accessModes {modes!r} is not a non-empty subset of ['url', 'dir']"
    offers_dir = modes is not None and "dir" in modes
    location = obj.get("location")
    if offers_dir != isinstance(location, str):
        return f"location {location!r} with accessModes {modes!r}: a string location exactly when 'dir' is offered"
    aux = obj.get("auxiliaryLocations")
    if aux is not None and not (offers_dir and isinstance(aux, list) and all(isinstance(a, str) for a in aux)):
        return f"auxiliaryLocations {aux!r}: an array of strings, only beside a location"
    return None


def _dir_tables(t: Target) -> dict[TableRef, dict[str, Any]]:
    """Each listed table's item from GET .../all-tables (per share), keyed by reference."""

    def make() -> dict[TableRef, dict[str, Any]]:
        out: dict[TableRef, dict[str, Any]] = {}
        for share in {ref.share for ref in t.found.tables}:
            items, _ = list_items(t.wire, f"/shares/{quote(share, safe='')}/all-tables")
            for item in items:
                if all(isinstance(item.get(k), str) for k in ("share", "schema", "name")):
                    out[TableRef(item["share"], item["schema"], item["name"])] = item
        return out

    return t.memo("table-items", make)


@DIRECTORY.check("access-modes", "Access Modes (List Tables, Query Table Metadata)")
def access_modes(t: Target) -> str:
    items = _dir_tables(t)
    if not items:
        raise Skipped(t.found.problem or "no table is listed")
    for ref, item in items.items():
        problem = placement_problem(item)
        expect(problem is None, f"a valid placement on {ref} in GET .../all-tables", problem)
    for ref, item in list(items.items())[:10]:
        for fmt in (PARQUET, DELTA):
            request = f"GET {ref.path}/metadata ({fmt})"
            lines = ndjson(t.wire.get(ref.path + "/metadata", headers={CAPABILITIES: f"responseformat={fmt}"}), request)
            meta = _object(next((ln["metaData"] for ln in lines if "metaData" in ln), None), f"metaData from {request}")
            problem = placement_problem(meta)
            expect(problem is None, f"a valid placement in the {fmt} metaData line of {ref}", problem)
            for key in ("accessModes", "location", "auxiliaryLocations"):
                expect(
                    meta.get(key) == item.get(key),
                    f"{key} of {ref} in its {fmt} metaData line as in its listing",
                    f"{meta.get(key)!r} vs {item.get(key)!r}",
                )
    offered = sorted({m for i in items.values() for m in i.get("accessModes") or ["url (omitted)"]})
    return f"{len(items)} table(s); modes {', '.join(offered)}"


def _offering(t: Target, want_dir: bool) -> tuple[TableRef, dict[str, Any]]:
    for ref, item in _dir_tables(t).items():
        if ("dir" in (item.get("accessModes") or [])) == want_dir:
            return ref, item
    raise Skipped("no table offers directory access" if want_dir else "every table offers directory access")


def _credentials_path(ref: TableRef) -> str:
    return ref.path + "/temporary-table-credentials"


@DIRECTORY.check("credentials", "Generate Temporary Table Credential")
def credentials(t: Target) -> str:
    ref, item = _offering(t, True)
    path = _credentials_path(ref)
    body = json_object(t.wire.post(path, body={}), f"POST {path}")
    creds = body.get("credentials")
    if not isinstance(creds, dict):
        raise Failed(f'{{"credentials": {{...}}}} from POST {path}', str(body)[:160])
    clouds = [c for c in CLOUDS if creds.get(c) is not None]
    expect(len(clouds) == 1, f"exactly one of {', '.join(CLOUDS)} from POST {path}", clouds)
    cloud, need = creds[clouds[0]], CLOUD_FIELDS[clouds[0]]
    ok = isinstance(cloud, dict) and all(isinstance(cloud.get(k), str) for k in need)
    expect(
        ok,
        f"string {', '.join(need)} in {clouds[0]} from POST {path}",
        lambda: sorted(cloud) if isinstance(cloud, dict) else cloud,
    )
    expect(isinstance(creds.get("location"), str), f"a string location from POST {path}", creds.get("location"))
    expires = creds.get("expirationTime")
    now_ms = time.time() * 1000
    if not (isinstance(expires, int) and not isinstance(expires, bool) and expires > now_ms):
        raise Failed(f"expirationTime in the future (epoch ms) from POST {path}", repr(expires))
    if isinstance(item.get("location"), str):
        expect(
            creds["location"].rstrip("/") == item["location"].rstrip("/"),
            f"credentials for the table's location {item['location']} when the body names none",
            creds["location"],
        )
    return f"{ref}: {clouds[0]}, {round((expires - now_ms) / 1000)} s left"


@DIRECTORY.check("credentials-outside", "Generate Temporary Table Credential (location)")
def credentials_outside(t: Target) -> None:
    ref, item = _offering(t, True)
    location = item.get("location")
    if not isinstance(location, str) or "://" not in location:
        raise Skipped(f"{ref} lists no location to step outside of")
    scheme, rest = location.split("://", 1)
    outside = f"{scheme}://{rest.split('/', 1)[0]}/conformance-outside-{int(time.time())}"
    path = _credentials_path(ref)
    resp = t.wire.post(path, body={"location": outside})
    expect_error(resp, 400, f"POST {path} for a location outside the table ({outside})")


@DIRECTORY.check("credentials-url-only", "Generate Temporary Table Credential (url-only table)")
def credentials_url_only(t: Target) -> str:
    ref, _ = _offering(t, False)
    path = _credentials_path(ref)
    resp = t.wire.post(path, body={})
    if not 400 <= resp.status_code < 500:
        raise Failed(f"a 4xx error for POST {path} (the table offers no directory access)", what(resp))
    expect_error(resp, resp.status_code, f"POST {path}")
    return f"{ref}: HTTP {resp.status_code}"
