"""The protocol over real HTTP: grants, errors, pagination, tokens, end-stream actions, file URLs."""

from __future__ import annotations

import httpx
import orjson
import pytest
from conftest import OTHER_TOKEN

from deltaport.server.sharing.tokens import LIST_TOKEN_ERROR

T = "/delta-sharing/shares/corpus/schemas/default/tables"
DELTA_CAPS = "responseformat=delta;readerfeatures=deletionvectors,columnmapping,timestampntz"


def lines(resp) -> list[dict]:
    return [orjson.loads(x) for x in resp.content.splitlines() if x.strip()]


def error(resp, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["errorCode"] == code, body
    assert body["message"]
    return body["message"]


# --- auth and grants ----------------------------------------------------------------------


def test_missing_or_wrong_token_is_401_json(server):
    r = httpx.get(server.url + "/delta-sharing/shares")
    assert "Authorization: Bearer" in error(r, 401, "UNAUTHENTICATED")
    r = httpx.get(server.url + "/delta-sharing/shares", headers={"Authorization": "Bearer nope"})
    error(r, 401, "UNAUTHENTICATED")


def test_a_recipient_sees_only_its_shares(server):
    bob = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    r = httpx.get(server.url + "/delta-sharing/shares", headers=bob)
    assert [s["name"] for s in r.json()["items"]] == ["other"]
    # another recipient's share does not exist for bob: same 404 as a share that does not exist
    r1 = httpx.get(server.url + "/delta-sharing/shares/corpus", headers=bob)
    r2 = httpx.get(server.url + "/delta-sharing/shares/nosuch", headers=bob)
    assert error(r1, 404, "RESOURCE_DOES_NOT_EXIST") == "share 'corpus' not found"
    assert error(r2, 404, "RESOURCE_DOES_NOT_EXIST") == "share 'nosuch' not found"
    r = httpx.post(server.url + T + "/dv/query", headers=bob, json={})
    assert "does not exist" in error(r, 404, "RESOURCE_DOES_NOT_EXIST")


def test_names_are_case_insensitive(http):
    r = http.get("/delta-sharing/shares/CORPUS/schemas/Default/tables/Partitioned/metadata")
    assert r.status_code == 200, r.text
    assert r.headers["delta-table-version"] == "1"


# --- listing ------------------------------------------------------------------------------


def test_list_pagination_walks_everything(http):
    names, token = [], None
    while True:
        params = {"maxResults": 3, **({"pageToken": token} if token else {})}
        body = http.get("/delta-sharing/shares/corpus/all-tables", params=params).json()
        names += [t["name"] for t in body["items"]]
        token = body.get("nextPageToken")
        if not token:
            break
    assert len(names) == len(set(names)) == 12
    item = http.get("/delta-sharing/shares/corpus/schemas/default/tables").json()["items"][0]
    assert set(item) == {"name", "schema", "share", "id", "accessModes"}
    assert item["accessModes"] == ["url"]  # and no location: credentials are not offered


def test_list_errors(http):
    assert "0 to 500" in error(
        http.get("/delta-sharing/shares", params={"maxResults": 501}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "expected a number" in error(
        http.get("/delta-sharing/shares", params={"maxResults": "x"}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert (
        error(http.get("/delta-sharing/shares", params={"pageToken": "forged"}), 400, "INVALID_PARAMETER_VALUE")
        == LIST_TOKEN_ERROR
    )
    token = http.get("/delta-sharing/shares/corpus/all-tables", params={"maxResults": 1}).json()["nextPageToken"]
    # a token of one listing is refused by another, with the same text as a forged one
    r = http.get("/delta-sharing/shares/corpus/schemas", params={"pageToken": token})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == LIST_TOKEN_ERROR


# --- version, metadata ----------------------------------------------------------------------


def test_version_get_and_head(http):
    r = http.get(T + "/partitioned/version")
    assert r.status_code == 200 and r.headers["delta-table-version"] == "1"
    r = http.head(T + "/partitioned")
    assert r.status_code == 200 and r.headers["delta-table-version"] == "1"
    r = http.get(T + "/partitioned/version", params={"startingTimestamp": "2000-01-01T00:00:00Z"})
    assert r.headers["delta-table-version"] == "0"
    assert "Invalid startingTimestamp" in error(
        http.get(T + "/partitioned/version", params={"startingTimestamp": "yesterday"}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "history sharing is not enabled" in error(
        http.get(T + "/nohistory/version", params={"startingTimestamp": "2000-01-01T00:00:00Z"}),
        400,
        "INVALID_PARAMETER_VALUE",
    )
    assert http.head(T + "/nosuch").status_code == 404


def test_metadata_formats(http):
    for caps, fmt in [
        (None, "parquet"),
        ("responseformat=parquet", "parquet"),
        ("responseformat=delta", "delta"),
        ("responseformat=delta,parquet", "parquet"),
        ("responseformat=parquet,delta", "parquet"),
    ]:
        r = http.get(T + "/partitioned/metadata", headers={"delta-sharing-capabilities": caps} if caps else {})
        assert r.status_code == 200, r.text
        assert r.headers["delta-sharing-capabilities"] == f"responseformat={fmt}"
        protocol, metadata = lines(r)
        if fmt == "delta":
            assert protocol["protocol"]["deltaProtocol"]["minWriterVersion"] == 2
            assert metadata["metaData"]["deltaMetadata"]["id"]
        else:
            assert protocol == {"protocol": {"minReaderVersion": 1}}
            assert metadata["metaData"]["numFiles"] == 6 and metadata["metaData"]["size"] > 0
    r = http.get(T + "/dv/metadata", headers={"delta-sharing-capabilities": "responseformat=delta,parquet"})
    assert "deletionvectors" in error(r, 400, "UNSUPPORTED_OPERATION")
    assert (
        error(http.get(T + "/partitioned/metadata", params={"version": 9}), 400, "MALFORMED_REQUEST")
        == "Cannot load table version 9 as it does not exist. The latest available version is 1."
    )
    assert (
        error(http.get(T + "/partitioned/metadata", params={"version": -1}), 400, "INVALID_PARAMETER_VALUE")
        == "version cannot be negative"
    )
    assert "only provide one of" in error(
        http.get(T + "/partitioned/metadata", params={"version": 0, "timestamp": "2020-01-01T00:00:00Z"}),
        400,
        "INVALID_PARAMETER_VALUE",
    )


# --- query --------------------------------------------------------------------------------


def test_query_parquet_lines_and_file_urls(http):
    r = http.post(T + "/partitioned/query", json={})
    assert r.headers["content-type"].startswith("application/x-ndjson")
    out = lines(r)
    assert list(out[0]) == ["protocol"] and list(out[1]) == ["metaData"]
    files = [x["file"] for x in out[2:]]
    assert len(files) == 6 and all(len(f["id"]) == 32 for f in files)  # md5 ids in parquet format
    assert not any("endStreamAction" in x for x in out)  # only when asked for
    f = files[0]
    got = httpx.get(f["url"])
    assert got.status_code == 200 and len(got.content) == f["size"]
    head = httpx.head(f["url"])
    assert head.status_code == 200 and int(head.headers["content-length"]) == f["size"]
    part = httpx.get(f["url"], headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.content == got.content[:10]
    assert part.headers["content-range"].startswith("bytes 0-9/")
    tampered = f["url"].replace("X-Amz-Expires=900", "X-Amz-Expires=901")
    assert httpx.get(tampered).status_code == 403
    other = f["url"].replace(f["url"].split("/files/")[1].split("/")[1].split("?")[0], "part-other.parquet")
    assert httpx.get(other).status_code == 403
    escape = f["url"].split("?")[0].rsplit("/", 1)[0] + "/..%2F..%2Fserver.yaml?" + f["url"].split("?")[1]
    assert httpx.get(escape).status_code == 403


def test_query_delta_format_with_dv(http):
    r = http.post(T + "/dv/query", json={}, headers={"delta-sharing-capabilities": DELTA_CAPS})
    assert r.headers["delta-sharing-capabilities"] == "responseformat=delta"
    out = lines(r)
    add = out[2]["file"]["deltaSingleAction"]["add"]
    assert len(out[2]["file"]["id"]) == 64
    dv = add["deletionVector"]
    assert dv["storageType"] == "p" and "X-Amz-Signature" in dv["pathOrInlineDv"]
    assert (dv["offset"], dv["sizeInBytes"], dv["cardinality"]) == (1, 36, 2)
    blob = httpx.get(dv["pathOrInlineDv"])
    assert blob.status_code == 200


def test_end_stream_action_and_min_expiration(http):
    r = http.post(
        T + "/dv/query", json={}, headers={"delta-sharing-capabilities": DELTA_CAPS + ";includeendstreamaction=true"}
    )
    out = lines(r)
    assert r.headers["delta-sharing-capabilities"] == "responseformat=delta;includeendstreamaction=true"
    end = out[-1]["endStreamAction"]
    assert end["minUrlExpirationTimestamp"] == out[2]["file"]["expirationTimestamp"]


def test_pagination_max_files(http):
    seen, token, pages = [], None, 0
    first_head = None
    while True:
        body = {"maxFiles": 2, **({"pageToken": token} if token else {})}
        out = lines(http.post(T + "/partitioned/query", json=body))
        pages += 1
        head = out[:2]
        first_head = first_head or head
        assert head == first_head  # protocol and metadata identical across pages
        seen += [x["file"]["id"] for x in out[2:-1]]
        token = out[-1]["endStreamAction"].get("nextPageToken")
        if not token:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 6
    token = lines(http.post(T + "/partitioned/query", json={"maxFiles": 2}))[-1]["endStreamAction"]["nextPageToken"]
    r = http.post(T + "/partitioned/query", json={"maxFiles": 2, "pageToken": token, "limitHint": 1})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == (
        "Query parameter mismatch detected for the next page query. The query parameter cannot change when "
        "querying the next page results."
    )
    r = http.post(T + "/cdf/query", json={"maxFiles": 2, "pageToken": token})
    assert (
        error(r, 400, "INVALID_PARAMETER_VALUE")
        == "The table specified in the page token does not match the table being queried."
    )
    forged = token[:-3] + "abc"
    r = http.post(T + "/partitioned/query", json={"maxFiles": 2, "pageToken": forged})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == f"Error decoding the page token: {forged}."
    r = http.get(T + "/cdf/changes", params={"startingVersion": 0, "maxFiles": 1, "pageToken": "x"})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == "Error decoding the page token: x."


def test_refresh_token_keeps_its_version(http):
    out = lines(http.post(T + "/partitioned/query", json={"includeRefreshToken": True}))
    refresh = out[-1]["endStreamAction"]["refreshToken"]
    ids = sorted(x["file"]["id"] for x in out[2:-1])
    again = lines(http.post(T + "/partitioned/query", json={"includeRefreshToken": True, "refreshToken": refresh}))
    assert sorted(x["file"]["id"] for x in again[2:-1]) == ids
    r = http.post(T + "/cdf/query", json={"includeRefreshToken": True, "refreshToken": refresh})
    assert (
        error(r, 400, "INVALID_PARAMETER_VALUE")
        == "The table specified in the refresh token does not match the table being queried."
    )
    r = http.post(T + "/partitioned/query", json={"includeRefreshToken": True, "refreshToken": "nope"})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == "Error decoding refresh token: nope."


def test_fileidhash(http):
    md5 = lines(http.post(T + "/partitioned/query", json={}, headers={"fileidhash": "parquet"}))
    sha = lines(http.post(T + "/partitioned/query", json={}, headers={"fileidhash": "delta"}))
    assert all(len(x["file"]["id"]) == 32 for x in md5[2:]) and all(len(x["file"]["id"]) == 64 for x in sha[2:])
    for bad in ("sha512", "md5", ""):
        r = http.post(T + "/partitioned/query", json={}, headers={"fileidhash": bad})
        assert "Unsupported fileidhash" in error(r, 400, "INVALID_PARAMETER_VALUE")


def test_limit_hint_with_predicates(http):
    out = lines(http.post(T + "/partitioned/query", json={"limitHint": 1}))
    assert len(out) == 3
    hint = orjson.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "letter", "valueType": "string"},
                {"op": "literal", "value": "a", "valueType": "string"},
            ],
        }
    ).decode()
    out = lines(http.post(T + "/partitioned/query", json={"jsonPredicateHints": hint, "limitHint": 1}))
    assert [x["file"]["partitionValues"]["letter"] for x in out[2:]] == ["a"]
    out = lines(http.post(T + "/partitioned/query", json={"predicateHints": ["letter = 'a'"]}))
    assert sorted(x["file"]["partitionValues"]["letter"] for x in out[2:]) == ["a", "a"]


def test_time_travel_lines_carry_version(http):
    out = lines(http.post(T + "/partitioned/query", json={"version": 0}))
    assert out[1]["metaData"]["version"] == 0
    assert all(x["file"]["version"] == 0 for x in out[2:]) and len(out) == 5
    assert "history sharing is not enabled on table: corpus.default.nohistory" in error(
        http.post(T + "/nohistory/query", json={"version": 0}), 400, "INVALID_PARAMETER_VALUE"
    )


def test_streaming_query_from_starting_version(http):
    out = lines(http.post(T + "/cdf/query", json={"startingVersion": 1, "endingVersion": 3}))
    kinds = [next(iter(x)) for x in out[2:]]
    assert set(kinds) <= {"add", "remove", "metaData"} and "add" in kinds
    assert all(x[k]["version"] >= 1 and x[k]["timestamp"] for x in out[2:] for k in x if k != "metaData")
    r = http.post(T + "/cdf/query", json={"startingVersion": 1, "endingVersion": 99})
    assert "End version cannot be greater" in error(r, 400, "INVALID_PARAMETER_VALUE")


def test_changes_errors(http):
    c = T + "/cdf/changes"
    assert "No startingVersion" in error(http.get(c), 400, "INVALID_PARAMETER_VALUE")
    assert "Multiple starting" in error(
        http.get(c, params={"startingVersion": 0, "startingTimestamp": "x"}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "not a valid number" in error(http.get(c, params={"startingVersion": "x"}), 400, "INVALID_PARAMETER_VALUE")
    assert "cannot be greater than the latest" in error(
        http.get(c, params={"startingVersion": 99}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "End cannot be before start" in error(
        http.get(c, params={"startingVersion": 2, "endingVersion": 1}), 400, "INVALID_PARAMETER_VALUE"
    )
    assert "cdf is not enabled" in error(
        http.get(T + "/nohistory/changes", params={"startingVersion": 0}), 400, "INVALID_PARAMETER_VALUE"
    )
    r = http.get(T + "/partitioned/changes", params={"startingVersion": 0})
    assert "change data was not recorded" in error(r, 400, "INVALID_PARAMETER_VALUE")


def _history(name: str):
    from conftest import CORPUS, TABLES

    from deltaport.delta import DeltaTable, SnapshotCache
    from deltaport.delta.history import format_sql_timestamp

    h = DeltaTable(str(TABLES / CORPUS[name]), cache=SnapshotCache()).history()
    return format_sql_timestamp(h.timestamps[0]), format_sql_timestamp(h.timestamps[-1])


def test_timestamp_errors_are_the_reference_texts(http):
    first, last = _history("partitioned")
    before = (
        "The provided timestamp (2000-01-01 00:00:00.0) is before the earliest version available to this "
        f"table ({first}). Please use a timestamp greater than or equal to {first}."
    )
    after = (
        "The provided timestamp (2999-01-01 00:00:00.0) is after the latest version available to this "
        f"table ({last}). Please use a timestamp less than or equal to {last}."
    )
    old, future = "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
    assert error(http.get(T + "/partitioned/metadata", params={"timestamp": old}), 400, "MALFORMED_REQUEST") == before
    assert error(http.post(T + "/partitioned/query", json={"timestamp": future}), 400, "MALFORMED_REQUEST") == after
    assert (
        error(http.get(T + "/partitioned/version", params={"startingTimestamp": future}), 400, "MALFORMED_REQUEST")
        == after
    )
    # the timestamp the message suggests is accepted back
    r = http.get(T + "/partitioned/metadata", params={"timestamp": first})
    assert r.status_code == 200 and r.headers["delta-table-version"] == "0"
    first, last = _history("cdf")
    r = http.get(T + "/cdf/changes", params={"startingTimestamp": future})
    assert error(r, 400, "INVALID_PARAMETER_VALUE") == (
        "The provided timestamp (2999-01-01 00:00:00.0) is after the latest version available to this "
        f"table ({last}). Please use a timestamp less than or equal to {last}."
    )


def test_changes_pagination(http):
    full = lines(http.get(T + "/cdf/changes", params={"startingVersion": 0, "endingVersion": 3}))
    files = [x for x in full[2:]]
    got, token = [], None
    while True:
        params = {"startingVersion": 0, "endingVersion": 3, "maxFiles": 3, **({"pageToken": token} if token else {})}
        out = lines(http.get(T + "/cdf/changes", params=params))
        got += out[2:-1]
        token = out[-1]["endStreamAction"].get("nextPageToken")
        if not token:
            break

    def strip(xs):
        return [{k: {f: v for f, v in x[k].items() if f not in ("url", "expirationTimestamp")}} for x in xs for k in x]

    assert strip(got) == strip(files)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[1]",
        b'{"version":"x3"}',
        b'{"maxFiles":0}',
        b'{"maxFiles":3e9}',
        b'{"version":-1}',
        b'{"nope":1}',
        b'{"predicateHints":1}',
        b'{"jsonPredicateHints":{"op":"and"}}',
        b'{"timestamp":"tomorrow"}',
        b'{"version":100}',
        b'{"limitHint":"x"}',
        b"\xff\xfe",
    ],
)
def test_bad_bodies_are_4xx_json(http, body):
    r = http.post(T + "/partitioned/query", content=body, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
    assert set(r.json()) == {"errorCode", "message"}


def test_broken_table_gives_its_own_error_and_others_still_serve(http):
    # 'broken' points at a _delta_log that holds no commit: its own 4xx error, naming the problem
    for r in (http.post(T + "/broken/query", json={}), http.get(T + "/broken/metadata")):
        msg = error(r, 400, "MALFORMED_REQUEST")
        assert msg.startswith("not a Delta table") and "_delta_log" in msg, msg
        assert "crc-malformed" not in msg  # where the table is stored is for the operator only
    assert http.post(T + "/partitioned/query", json={}).status_code == 200
    assert http.get(T + "/cdf/metadata").status_code == 200
    names = [t["name"] for t in http.get("/delta-sharing/shares/corpus/all-tables").json()["items"]]
    assert {"broken", "partitioned", "cdf"} <= set(names)


def test_unknown_routes_and_methods_are_json(http):
    error(http.get("/delta-sharing/nope"), 404, "RESOURCE_DOES_NOT_EXIST")
    r = http.delete(T + "/partitioned/query")
    assert r.status_code == 405 and r.json()["errorCode"]


def test_health_and_openapi(server):
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "/delta-sharing/shares/{share}/schemas/{schema}/tables/{table}/query" in doc["paths"]
    assert httpx.get(server.url + "/docs").status_code == 200
