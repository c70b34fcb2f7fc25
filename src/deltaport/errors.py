"""One exception tree for the whole package.

Every error carries the HTTP status and the Delta Sharing ``errorCode`` it maps to, so the server
turns any of them into the protocol's JSON ``{"errorCode", "message"}`` without guessing, and the
client raises them with the server's code and message intact.

Errors about a table's *state* (a corrupt or truncated log, a missing file, an unsupported reader
feature) are 4xx on purpose: they are not transient, and the official client retries every 5xx
for about 100 seconds before giving up.
"""

from __future__ import annotations


class DeltaportError(Exception):
    """Base of every error deltaport raises on purpose."""

    http_status: int = 500
    error_code: str = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line: code and message
        return self.message


# --- request-level errors -------------------------------------------------------------------


class InvalidParameter(DeltaportError):
    http_status = 400
    error_code = "INVALID_PARAMETER_VALUE"


class MalformedRequest(DeltaportError):
    http_status = 400
    error_code = "MALFORMED_REQUEST"


class UnsupportedOperation(DeltaportError):
    http_status = 400
    error_code = "UNSUPPORTED_OPERATION"


class ResourceNotFound(DeltaportError):
    http_status = 404
    error_code = "RESOURCE_DOES_NOT_EXIST"


class Unauthenticated(DeltaportError):
    http_status = 401
    error_code = "UNAUTHENTICATED"


class PermissionDenied(DeltaportError):
    http_status = 403
    error_code = "PERMISSION_DENIED"


# --- storage --------------------------------------------------------------------------------


class StorageError(DeltaportError):
    """An object store failed in a way that is not 'object missing'."""

    http_status = 400
    error_code = "RESOURCE_DOES_NOT_EXIST"


class ObjectNotFound(StorageError):
    """A file the log names (or the log itself) is not in the store."""


# --- Delta log engine -----------------------------------------------------------------------


class DeltaError(DeltaportError):
    """An error about one Delta table. ``table`` names it (its root URI)."""

    http_status = 400
    error_code = "INVALID_STATE"

    def __init__(self, message: str, *, table: str | None = None) -> None:
        self.table = table
        if table and table not in message:
            message = f"{message} (table: {table})"
        super().__init__(message)


class NotADeltaTable(DeltaError):
    """The location has no ``_delta_log`` or the log has no commits."""

    error_code = "RESOURCE_DOES_NOT_EXIST"


class CorruptLog(DeltaError):
    """A commit, checkpoint or ``_last_checkpoint`` cannot be read as the protocol says."""


class VersionNotFound(DeltaError):
    """A version that does not exist, or cannot be reconstructed from the log that is left."""

    error_code = "MALFORMED_REQUEST"


class TimestampOutOfRange(DeltaError):
    """A timestamp before the first or after the last commit of a table."""

    error_code = "MALFORMED_REQUEST"


class UnsupportedTableFeature(DeltaError):
    """The table needs a reader feature (or reader version) this engine does not support."""

    error_code = "UNSUPPORTED_OPERATION"

    def __init__(self, message: str, *, features: list[str] | None = None, table: str | None = None) -> None:
        self.features = list(features or [])
        super().__init__(message, table=table)


class ChangeDataNotRecorded(DeltaError):
    """Change data feed was not enabled for part of a requested version range."""

    error_code = "INVALID_PARAMETER_VALUE"
