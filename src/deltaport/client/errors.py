"""Errors the recipient-side client raises, on top of :mod:`deltaport.errors`.

Every one is a :class:`~deltaport.errors.DeltaportError` whose ``str`` is one line: what went
wrong, the server's ``errorCode`` and message when there is one, and what to do about it.
Errors about bad input (a malformed profile, a table URL without ``#``) are also
:class:`ValueError`, so code written for the official connector keeps catching them.
"""

from __future__ import annotations

from deltaport.errors import DeltaportError, PermissionDenied, Unauthenticated

__all__ = [
    "AccessModeError",
    "ConnectionFailed",
    "FileDownloadError",
    "IncompleteResponse",
    "InvalidTableUrl",
    "ProfileError",
    "SharingServerError",
    "SpillFailed",
    "TokenExpired",
    "UrlExpired",
]

_HINTS = {
    400: "fix the request parameters named in the message",
    401: "check the credentials in the profile file (bearerToken or OAuth client); they may have expired",
    403: "the recipient may not read this; ask the data provider to grant it",
    404: "check the share, schema and table names (SharingClient(profile).list_all_tables() lists them)",
    429: "the server is rate limiting; retry later or lower max_workers",
}


def _hint(status: int) -> str:
    if status in _HINTS:
        return _HINTS[status]
    if status >= 500:
        return "the sharing server failed; retry later or ask the data provider to check its logs"
    return "see the server's message"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class SharingServerError(DeltaportError):
    """The sharing server answered with an error (or broke the protocol).

    ``http_status``, ``error_code`` and ``message`` are the server's; ``str()`` adds the HTTP
    method and path (never the query string) and a hint naming the fix.
    """

    def __init__(
        self, http_status: int, error_code: str, message: str, *, request: str | None = None, hint: str | None = None
    ) -> None:
        self.http_status = http_status
        self.error_code = error_code or "UNKNOWN"
        self.request = request
        self.hint = hint if hint is not None else _hint(http_status)
        super().__init__(_one_line(message))

    def __str__(self) -> str:
        where = f" on {self.request}" if self.request else ""
        text = f"{self.error_code} (HTTP {self.http_status}{where}): {self.message or '(no message)'}"
        return f"{text} -- {self.hint}" if self.hint else text


class IncompleteResponse(SharingServerError):
    """A response ended early or carried an ``endStreamAction.errorMessage``: never a partial result."""

    def __init__(
        self,
        message: str,
        *,
        error_code: str = "INCOMPLETE_RESPONSE",
        request: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(
            200,
            error_code,
            message,
            request=request,
            hint=hint or "the result would be partial, so nothing is returned; retry the read",
        )


class ProfileError(DeltaportError, ValueError):
    """The profile file cannot be used (missing fields, bad JSON, unsupported type or version)."""

    http_status = 400
    error_code = "INVALID_PROFILE"

    def __str__(self) -> str:
        return _one_line(self.message)


class InvalidTableUrl(DeltaportError, ValueError):
    """A table URL that is not ``<profile>#<share>.<schema>.<table>``."""

    http_status = 400
    error_code = "INVALID_PARAMETER_VALUE"

    def __str__(self) -> str:
        return _one_line(self.message)


class TokenExpired(Unauthenticated):
    """The profile's bearer token is past its ``expirationTime``."""

    def __str__(self) -> str:
        return _one_line(self.message)


class FileDownloadError(DeltaportError):
    """A data or deletion-vector file could not be downloaded from its (presigned) URL."""

    error_code = "FILE_DOWNLOAD_FAILED"

    def __init__(self, message: str, *, http_status: int = 500, file_id: str | None = None) -> None:
        self.http_status = http_status
        self.file_id = file_id
        super().__init__(_one_line(message))


class UrlExpired(FileDownloadError, PermissionDenied):
    """A presigned URL was refused (expired or revoked): the file list must be refreshed."""

    error_code = "URL_EXPIRED"


class ConnectionFailed(DeltaportError):
    """The server (or a file URL) could not be reached, even after retries."""

    http_status = 503
    error_code = "CONNECTION_FAILED"

    def __str__(self) -> str:
        return _one_line(self.message)


class AccessModeError(DeltaportError, ValueError):
    """The table cannot be read the way asked (``access_mode``): the message names what it offers."""

    http_status = 400
    error_code = "UNSUPPORTED_ACCESS_MODE"

    def __str__(self) -> str:
        return _one_line(self.message)


class SpillFailed(DeltaportError):
    """A file listing beyond its memory budget could not be written to its temporary file (a full
    disk, most often): the listing is not returned, and the message names the folder and the fix."""

    http_status = 507
    error_code = "LISTING_SPILL_FAILED"

    def __str__(self) -> str:
        return _one_line(self.message)
