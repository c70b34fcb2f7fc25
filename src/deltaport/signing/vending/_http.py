"""The token services the vendors ask (Azure AD, the blob service's user delegation key, Google's
OAuth and STS), over httpx, with their failures as the errors the server answers."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from deltaport.errors import StorageCredentialsRefused, StorageUnavailable

__all__ = ["post", "refused"]


def refused(detail: str, location: str) -> StorageCredentialsRefused:
    """The cloud will not make credentials with the server's own: the provider must act. ``detail``
    (for the operator's log) says what was refused, never a secret."""
    return StorageCredentialsRefused(
        "the data provider's storage credentials cannot make temporary credentials for this table: "
        "the provider must fix the server's storage credentials for this table's storage",
        detail=detail,
        location=location,
    )


def post(http: httpx.Client, url: str, location: str, **kwargs: Any) -> httpx.Response:
    """POST; unreachable, throttled or 5xx → StorageUnavailable; any other refusal →
    StorageCredentialsRefused naming the service, the status and its error code (never its body)."""
    where = urlsplit(url).netloc
    try:
        answer = http.post(url, **kwargs)
    except httpx.HTTPError as exc:
        raise StorageUnavailable(
            "the storage's credential service could not be reached; retry later",
            detail=f"{where}: {type(exc).__name__}",
        ) from exc
    if answer.status_code >= 500 or answer.status_code == 429:
        raise StorageUnavailable(
            "the storage's credential service did not answer; retry later", detail=f"{where}: {answer.status_code}"
        )
    if answer.status_code >= 400:
        raise refused(f"{where} answered {answer.status_code} {_error_code(answer)}".rstrip(), location)
    return answer


def _error_code(answer: httpx.Response) -> str:
    """The error code of an OAuth-style JSON error (``error``) or of Azure storage's header."""
    try:
        body = answer.json()
    except ValueError:
        return answer.headers.get("x-ms-error-code", "")
    error = body.get("error", "") if isinstance(body, dict) else ""
    if isinstance(error, dict):  # Google's {"error": {"code", "status", "message"}}
        return str(error.get("status", ""))
    return str(error)
