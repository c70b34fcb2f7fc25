"""The only place exceptions become HTTP responses: the protocol's JSON error body
``{"errorCode","message"}``, or under the admin API's prefix Unity Catalog's
``{"error_code","message"}`` (what the Databricks SDK reads)."""

from __future__ import annotations

import logging

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from deltaport.errors import CatalogUnavailable, DeltaportError, StorageUnavailable, Unauthenticated, public_message
from deltaport.protocol.lines import error_body

log = logging.getLogger("deltaport.server")

_CODES = {
    400: "MALFORMED_REQUEST",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "RESOURCE_DOES_NOT_EXIST",
    405: "MALFORMED_REQUEST",
    413: "MALFORMED_REQUEST",
    415: "MALFORMED_REQUEST",
    422: "MALFORMED_REQUEST",
}


#: Paths under this prefix are the admin API: its errors take Unity Catalog's shape.
ADMIN_PREFIX = "/api/2.1/unity-catalog"
#: The public route a recipient's activation link calls (the SDK's ``recipient_activation``).
ACTIVATION_API = ADMIN_PREFIX + "/public/data_sharing_activation"


def json_error(
    status: int,
    code: str,
    message: str,
    *,
    head: bool = False,
    headers: dict[str, str] | None = None,
    unity: bool = False,
) -> Response:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="delta-sharing"'}
    message = message.encode("utf-8", "replace").decode("utf-8")  # an echoed unpaired surrogate: '?'
    if head:
        body = b""
    elif unity:
        body = orjson.dumps({"error_code": code, "message": message})
    else:
        body = error_body(code, message)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _error(request: Request, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """The error response for ``request``, in the shape its route speaks."""
    unity = _path(request).startswith(ADMIN_PREFIX)
    return json_error(status, code, message, head=request.method == "HEAD", headers=headers, unity=unity)


async def deltaport_error(request: Request, exc: DeltaportError) -> Response:
    """The error as the protocol's JSON. Where the table is stored goes to the server log only."""
    status = exc.http_status
    if isinstance(exc, Unauthenticated):
        status = 401
    if isinstance(exc, (StorageUnavailable, CatalogUnavailable)):  # may pass: the client is told when to retry
        log.warning("unavailable on %s %s: %s", request.method, request.url.path, exc.operator_message)
        retry = {"Retry-After": str(exc.retry_after_seconds)}
        return _error(request, 503, exc.error_code, public_message(exc), retry)
    if status >= 500:
        log.error("internal error on %s %s: %s", request.method, request.url.path, exc.operator_message)
        return _error(request, 500, "INTERNAL_ERROR", "")
    if exc.location or exc.detail:  # an error about a table's storage: the operator needs where and why
        log.warning("%s on %s %s: %s", exc.error_code, request.method, request.url.path, exc.operator_message)
    return _error(request, status, exc.error_code, exc.message if _for_admin(request) else public_message(exc))


def _for_admin(request: Request) -> bool:
    """Whether ``request`` is the admin API's, other than the public activation route: the provider's
    own, whose messages may name the storage locations the provider gave."""
    path = _path(request)
    return path.startswith(ADMIN_PREFIX) and not path.startswith(ACTIVATION_API)


def _path(request: Request) -> str:
    """The request's whole path, its root path included."""
    return request.scope.get("root_path", "") + request.scope.get("path", "")


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    code = _CODES.get(exc.status_code, "MALFORMED_REQUEST" if exc.status_code < 500 else "INTERNAL_ERROR")
    message = exc.detail if isinstance(exc.detail, str) else "bad request"
    if exc.status_code == 404:
        message = f"no such endpoint: {request.method} {request.url.path}; see /docs for the API"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}; see /docs for the API"
    return _error(request, exc.status_code, code, message)


async def validation_error(request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {str(e.get('msg')).removeprefix('Value error, ')}"
        for e in exc.errors()
    )
    return _error(request, 400, "INVALID_PARAMETER_VALUE", f"invalid request: {problems}")


async def unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return _error(request, 500, "INTERNAL_ERROR", "")
