"""Unknown query parameters are refused by name; bad Range headers on file URLs are JSON errors."""

from __future__ import annotations

import httpx
import orjson
import pytest
from conftest import TABLES

P = "/delta-sharing"
T = P + "/shares/corpus/schemas/default/tables"


def error(resp, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"errorCode", "message"} and body["errorCode"] == code, body
    return body["message"]


# --- unknown query parameters -----------------------------------------------------------------


def test_misspelt_version_on_metadata_names_the_parameter_and_the_accepted_ones(http):
    msg = error(http.get(T + "/partitioned/metadata", params={"versoin": 0}), 400, "INVALID_PARAMETER_VALUE")
    assert msg == (
        "Unknown query parameter 'versoin' for GET .../metadata; accepted: version, timestamp "
        "(did you mean 'version' for 'versoin'?)"
    )


@pytest.mark.parametrize(
    ("path", "params", "unknown", "route", "accepted"),
    [
        ("/shares", {"maxResult": 1}, "'maxResult'", "shares", "maxResults, pageToken"),
        ("/shares/corpus", {"x": 1}, "'x'", "{share}", "none"),
        ("/shares/corpus/schemas", {"pagetoken": "t"}, "'pagetoken'", "schemas", "maxResults, pageToken"),
        ("/shares/corpus/schemas/default/tables", {"limit": 2}, "'limit'", "tables", "maxResults, pageToken"),
        ("/shares/corpus/all-tables", {"maxresults": 2}, "'maxresults'", "all-tables", "maxResults, pageToken"),
        (
            "/shares/corpus/schemas/default/tables/partitioned/version",
            {"timestamp": "2024-01-01T00:00:00Z"},
            "'timestamp'",
            "version",
            "startingTimestamp",
        ),
        (
            "/shares/corpus/schemas/default/tables/cdf/changes",
            {"startingVersion": 0, "endingVersoin": 1},
            "'endingVersoin'",
            "changes",
            "startingVersion, endingVersion, startingTimestamp, endingTimestamp, "
            "includeHistoricalMetadata, includeHistoricalProtocol, maxFiles, pageToken",
        ),
    ],
)
def test_every_listing_and_table_get_refuses_unknown_parameters(http, path, params, unknown, route, accepted):
    msg = error(http.get(P + path, params=params), 400, "INVALID_PARAMETER_VALUE")
    assert msg.startswith(f"Unknown query parameter {unknown} for GET .../{route}; accepted: {accepted}"), msg


def test_a_case_slip_is_pointed_at_and_several_unknowns_are_all_named(http):
    msg = error(http.get(T + "/partitioned/metadata", params={"Version": 0, "foo": 1}), 400, "INVALID_PARAMETER_VALUE")
    assert msg.startswith("Unknown query parameters 'Version', 'foo' for GET .../metadata; accepted:")
    assert "(did you mean 'version' for 'Version'?)" in msg


def test_head_table_version_refuses_unknown_parameters_without_a_body(http):
    r = http.head(T + "/partitioned", params={"startingTimestmp": "2024-01-01T00:00:00Z"})
    assert r.status_code == 400 and r.content == b""
    assert http.head(T + "/partitioned").status_code == 200


def test_known_parameters_still_work(http):
    assert http.get(P + "/shares", params={"maxResults": 1}).json()["items"] == [{"name": "corpus"}]
    r = http.get(T + "/partitioned/metadata", params={"version": 0})
    assert r.status_code == 200 and r.headers["delta-table-version"] == "0"
    r = http.get(
        T + "/cdf/changes", params={"startingVersion": 0, "endingVersion": 1, "includeHistoricalMetadata": "true"}
    )
    assert r.status_code == 200, r.text
    r = http.get(T + "/partitioned/version", params={"startingTimestamp": "2000-01-01T00:00:00Z"})
    assert r.status_code == 200, r.text
    assert http.get(P + "/shares/corpus/all-tables", params={"maxResults": 2, "pageToken": ""}).status_code == 200


def test_health_takes_no_part_in_the_check(server):
    assert httpx.get(server.url + "/health", params={"probe": 1}).json()["status"] == "ok"


# --- Range on the server's own file URLs -------------------------------------------------------


@pytest.fixture(scope="module")
def data_file(http):
    """(url, size, bytes) of one data file of the partitioned table, through a /query response."""
    out = [orjson.loads(x) for x in http.post(T + "/partitioned/query", json={}).content.splitlines()]
    f = out[2]["file"]
    url = f["url"]
    assert "X-Amz-Signature=" in url  # a presigned URL: its query string must pass untouched
    name = url.split("?")[0].split("/files/", 1)[1].split("/", 1)[1]
    from urllib.parse import unquote

    content = (TABLES / "basic_partitioned" / unquote(name)).read_bytes()
    assert len(content) == f["size"]
    return url, f["size"], content


def test_range_past_the_end_is_416_json_with_the_size(data_file):
    url, size, _ = data_file
    r = httpx.get(url, headers={"Range": "bytes=999999-"})
    msg = error(r, 416, "INVALID_PARAMETER_VALUE")
    assert r.headers["content-range"] == f"bytes */{size}"
    assert msg == f"Range 'bytes=999999-' is not satisfiable: the file is {size} bytes; ask for bytes 0 to {size - 1}"


def test_range_past_the_end_on_head_is_416_without_a_body(data_file):
    url, size, _ = data_file
    r = httpx.head(url, headers={"Range": f"bytes={size}-{size + 10}"})
    assert r.status_code == 416 and r.content == b""
    assert r.headers["content-range"] == f"bytes */{size}"
    assert r.headers["content-type"].startswith("application/json")  # as every HEAD error of this server


@pytest.mark.parametrize("header", ["items=0-1", "bytes=5-2", "bytes=abc", "bytes"])
def test_unparsable_range_is_400_json(data_file, header):
    url, _, _ = data_file
    msg = error(httpx.get(url, headers={"Range": header}), 400, "INVALID_PARAMETER_VALUE")
    assert msg.startswith(f"invalid Range header {header!r}") and "use bytes=START-END" in msg


def test_valid_ranges_still_give_206(data_file):
    url, size, content = data_file
    r = httpx.get(url, headers={"Range": "bytes=0-3"})
    assert r.status_code == 206 and r.content == content[:4] == b"PAR1"
    assert r.headers["content-range"] == f"bytes 0-3/{size}"
    r = httpx.get(url, headers={"Range": "bytes=-4"})
    assert r.status_code == 206 and r.content == content[-4:]
    assert r.headers["content-range"] == f"bytes {size - 4}-{size - 1}/{size}"
    r = httpx.get(url, headers={"Range": "bytes=10-999999"})  # an end past the file is cut to the file
    assert r.status_code == 206 and r.content == content[10:]
    r = httpx.head(url, headers={"Range": "bytes=0-3"})
    assert r.status_code == 206 and r.content == b"" and r.headers["content-range"] == f"bytes 0-3/{size}"
    r = httpx.get(url)
    assert r.status_code == 200 and r.content == content
    assert httpx.head(url).headers["content-length"] == str(size)


def test_a_stale_if_range_sends_the_whole_file_whatever_the_range(data_file):
    url, _, content = data_file
    r = httpx.get(url, headers={"Range": "bytes=999999-", "If-Range": '"not-this-etag"'})
    assert r.status_code == 200 and r.content == content
