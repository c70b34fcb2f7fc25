"""The API document (``/openapi.json``, ``/docs``): every route's inputs as the server really reads them.

The routes take their query parameters as plain strings, so that a bad value is answered with the
protocol's own message rather than the framework's; the document says what each one is (an integer
in a range, a boolean, a timestamp). Recipients authenticate with a bearer token (a security scheme,
not a header parameter), the server's own file URLs carry a presigned query string, and every client
error is the protocol's JSON ``{"errorCode", "message"}`` (never the framework's 422).
"""

from __future__ import annotations

import copy
from typing import Any

from deltaport.protocol.requests import INT32_MAX, INT64_MAX, QUERY_BODY_SCHEMA

_VERSION = {"type": "integer", "format": "int64", "minimum": 0, "maximum": INT64_MAX}
_TIMESTAMP = {
    "type": "string",
    "format": "date-time",
    "description": "An ISO-8601 timestamp with a zone, e.g. 2024-05-01T00:00:00Z",
}
_FLAG = {"type": "boolean", "description": "true or false (anything but 'true' reads as false)"}

#: Query parameters and headers by name: what the server accepts.
PARAMETER_SCHEMAS: dict[str, dict[str, Any]] = {
    "maxResults": {"type": "integer", "minimum": 0, "maximum": 500, "default": 500},
    "pageToken": {"type": "string", "description": "The nextPageToken of the previous page"},
    "version": _VERSION,
    "startingVersion": _VERSION,
    "endingVersion": _VERSION,
    "timestamp": _TIMESTAMP,
    "startingTimestamp": _TIMESTAMP,
    "endingTimestamp": _TIMESTAMP,
    "includeHistoricalMetadata": _FLAG,
    "includeHistoricalProtocol": _FLAG,
    "maxFiles": {"type": "integer", "format": "int32", "minimum": 1, "maximum": INT32_MAX},
    "delta-sharing-capabilities": {
        "type": "string",
        "description": "';'-separated key=value pairs, e.g. responseformat=delta;readerfeatures=deletionvectors",
    },
    "fileidhash": {"type": "string", "enum": ["parquet", "delta"]},
}


def query_body() -> dict[str, Any]:
    """The body of ``POST .../query`` (a fresh copy: the framework merges it into its document)."""
    return {"required": True, "content": {"application/json": {"schema": copy.deepcopy(QUERY_BODY_SCHEMA)}}}


def credentials_body() -> dict[str, Any]:
    """The body of ``POST .../temporary-table-credentials``: optional, and its ``location`` too."""
    schema = {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "the table's location, an auxiliary location, or a directory under one of them",
            }
        },
    }
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def _query_param(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": True, "schema": schema}


#: What a file URL this server issued carries besides its path: a short presigned query string in
#: S3's parameter names (signed with the server's own key, a keyed BLAKE2b) and, optionally, a byte
#: range. URLs issued before in SigV4's whole shape (``X-Amz-Algorithm`` ``DELTAPORT-BLAKE2B`` or
#: ``AWS4-HMAC-SHA256``, with ``X-Amz-SignedHeaders``) are accepted until they expire.
_FILE_URL_PARAMETERS = [
    _query_param("X-Amz-Credential", {"type": "string", "description": "the server's signing key id"}),
    _query_param("X-Amz-Date", {"type": "string", "pattern": "^[0-9]{8}T[0-9]{6}Z$"}),
    _query_param("X-Amz-Expires", {"type": "integer", "minimum": 1, "maximum": 604800}),
    _query_param("X-Amz-Signature", {"type": "string", "pattern": "^[A-Za-z0-9_-]{24}$"}),
    {
        "name": "Range",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": "^bytes=([0-9]*-[0-9]*)(, *[0-9]*-[0-9]*)*$"},
    },
]


def file_url_parameters() -> list[dict[str, Any]]:
    """The parameters of a file URL (a fresh copy)."""
    return copy.deepcopy(_FILE_URL_PARAMETERS)


_ERROR_SCHEMA = {
    "type": "object",
    "title": "Error",
    "required": ["errorCode", "message"],
    "additionalProperties": False,
    "properties": {
        "errorCode": {"type": "string", "example": "INVALID_PARAMETER_VALUE"},
        "message": {"type": "string", "description": "What was wrong, and how to fix it"},
    },
}
_ERROR = {
    "description": "The protocol's error: a client mistake (4xx, the message names the fix)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "The bearerToken of the recipient's profile file",
}


def describe(doc: dict[str, Any], prefix: str, *, auth: bool) -> dict[str, Any]:
    """``doc`` (the framework's document, changed in place) with the inputs described as above;
    ``auth``: the server asks recipients for a bearer token."""
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas["Error"] = copy.deepcopy(_ERROR_SCHEMA)
    if auth:
        components.setdefault("securitySchemes", {})["bearer"] = dict(_BEARER)
    for path, operations in doc.get("paths", {}).items():
        for operation in operations.values():
            parameters = [p for p in operation.get("parameters", ()) if p.get("name", "").lower() != "authorization"]
            for parameter in parameters:
                if parameter.get("in") in ("query", "header") and parameter["name"] in PARAMETER_SCHEMAS:
                    parameter["schema"] = copy.deepcopy(PARAMETER_SCHEMAS[parameter["name"]])
            operation["parameters"] = parameters
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            responses["4XX"] = copy.deepcopy(_ERROR)
            if auth and path.startswith(prefix + "/shares"):
                operation["security"] = [{"bearer": []}]
    return doc
