"""The API document describes the inputs the server really reads (schemathesis generates from it:
before, it had no /query body, took the bearer token for a plain header, and promised a 422 the
server never sends)."""

from __future__ import annotations

import httpx
from servers import RunningServer

from deltaport.protocol.requests import _QUERY_FIELDS
from deltaport.server import create_app, parse_config

P = "/delta-sharing"
T = P + "/shares/{share}/schemas/{schema}/tables/{table}"


def _doc(server_url: str) -> dict:
    r = httpx.get(server_url + "/openapi.json")
    assert r.status_code == 200
    return r.json()


def _params(operation: dict) -> dict[str, dict]:
    return {p["name"]: p for p in operation.get("parameters", [])}


def test_the_query_body_is_a_json_object_of_the_protocol_fields(server):
    doc = _doc(server.url)
    body = doc["paths"][T + "/query"]["post"]["requestBody"]
    assert body["required"] is True
    schema = body["content"]["application/json"]["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    fields = schema["properties"]
    assert set(fields) <= _QUERY_FIELDS  # the document names nothing the server would refuse
    assert {"predicateHints", "jsonPredicateHints", "limitHint", "version", "timestamp", "startingVersion"} <= set(
        fields
    )
    assert {"endingVersion", "maxFiles", "pageToken", "includeRefreshToken", "refreshToken"} <= set(fields)
    assert fields["maxFiles"]["minimum"] == 1 and fields["version"]["minimum"] == 0
    assert fields["predicateHints"] == {"type": "array", "items": {"type": "string"}}


def test_parameters_say_what_they_are(server):
    paths = _doc(server.url)["paths"]
    changes = _params(paths[T + "/changes"]["get"])
    assert changes["startingVersion"]["schema"]["type"] == "integer"
    assert changes["includeHistoricalMetadata"]["schema"]["type"] == "boolean"
    assert changes["startingTimestamp"]["schema"]["format"] == "date-time"
    assert changes["fileidhash"]["schema"]["enum"] == ["parquet", "delta"]
    listing = _params(paths[P + "/shares"]["get"])
    assert listing["maxResults"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 500, "default": 500}
    files = _params(paths[P + "/files/{key}/{path}"]["get"])
    assert {"X-Amz-Signature", "X-Amz-Date", "X-Amz-Expires", "X-Amz-Credential", "Range"} <= set(files)
    assert all(files[n]["required"] for n in files if n.startswith("X-Amz-"))


def test_recipients_authenticate_with_a_bearer_scheme_and_errors_are_the_protocols(server):
    doc = _doc(server.url)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "The bearerToken of the recipient's profile file",
    }
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert set(doc["components"]["schemas"]["Error"]["required"]) == {"errorCode", "message"}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            assert "authorization" not in {n.lower() for n in _params(op)}, (method, path)
            assert "422" not in op["responses"] and "4XX" in op["responses"], (method, path)
            protected = path.startswith(P + "/shares")
            assert (op.get("security") == [{"bearer": []}]) == protected, (method, path)


def test_a_server_without_recipients_declares_no_security():
    cfg = parse_config({"version": 1, "shares": []})
    server = RunningServer(create_app(cfg))
    try:
        doc = _doc(server.url)
        assert "securitySchemes" not in doc["components"]
        assert not any("security" in op for ops in doc["paths"].values() for op in ops.values())
    finally:
        server.stop()


def test_the_docs_pages_load_every_asset_from_this_server(server):
    import re

    for page in ("/docs", "/redoc"):
        html = httpx.get(server.url + page)
        assert html.status_code == 200 and "text/html" in html.headers["content-type"]
        refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
        refs += re.findall(r"""url: ?["']([^"']+)["']""", html.text)
        assert refs, "the page names its assets"
        for ref in refs:
            assert ref.startswith("/"), f"{page} loads {ref} from another host"
            assert httpx.get(server.url + ref).status_code == 200, ref
        assert "/openapi.json" in html.text
