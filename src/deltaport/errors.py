"""One exception tree for the whole package.

Every error carries the HTTP status and the Delta Sharing ``errorCode`` it maps to, so the server
turns any of them into the protocol's JSON ``{"errorCode", "message"}`` without guessing, and the
client raises them with the server's code and message intact.

Errors about a table's *state* (a corrupt or truncated log, a missing file, an unsupported reader
feature) are 4xx on purpose: they are not transient, and the official client retries every 5xx
for about 100 seconds before giving up.

``message`` is what a recipient may read. Where the table is stored (``location``) and the raw
cause (``detail``, e.g. a storage library's text, which often quotes full URLs or paths) are for
the operator only: :attr:`DeltaportError.operator_message` joins them for logs and the CLI, and
:func:`public_message` is what the server sends.
"""

from __future__ import annotations

import re
from urllib.parse import unquote


class DeltaportError(Exception):
    """Base of every error deltaport raises on purpose."""

    http_status: int = 500
    error_code: str = "INTERNAL_ERROR"

    def __init__(self, message: str, *, detail: str | None = None, location: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.location = location

    def __str__(self) -> str:  # one line: the message a recipient may read
        return self.message

    @property
    def operator_message(self) -> str:
        """The message with its cause and the storage location: for server logs and the CLI only."""
        text = self.message
        if self.detail:
            text = f"{text} ({self.detail})"
        if self.location and self.location not in text:
            text = f"{text} (table: {self.location})"
        return text


# What a storage location looks like inside a message: a URI of a storage scheme, or an absolute
# local path of two or more segments ("/data/t"; not "Share/Schema", not "/files/").
_STORAGE_URI = re.compile(
    r"\b(?:(?:file|s3[an]?|abfss?|wasbs?|az|adls?|gs|gcs|hdfs|oss|r2|dbfs)://"
    r"|https?://[^\s/'\"()<>,;]*(?:amazonaws\.com|core\.windows\.net|googleapis\.com)\b)[^\s'\"()<>,;]+",
    re.IGNORECASE,
)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/\-])/[^\s/'\"()<>,;:]+/[^\s/'\"()<>,;:]+(?:/[^\s/'\"()<>,;:]*)*")
REDACTED = "<storage location>"


def redact_locations(text: str, *locations: str | None) -> str:
    """``text`` without the given locations, storage URIs or absolute local paths."""
    for loc in locations:
        if not loc:
            continue
        variants = {loc, loc.rstrip("/")}
        if loc.startswith("file://"):
            path = loc[len("file://") :].rstrip("/")
            variants.update({path, unquote(path)})
        for v in sorted(variants, key=len, reverse=True):
            if v and v != "/":
                text = text.replace(v, REDACTED)
    text = _STORAGE_URI.sub(REDACTED, text)
    return _ABSOLUTE_PATH.sub(REDACTED, text)


def public_message(exc: DeltaportError) -> str:
    """The message a recipient may read: never where the provider stores the table."""
    return redact_locations(exc.message, exc.location, getattr(exc, "table", None))


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


class AlreadyExists(DeltaportError):
    """A catalog object with that name exists already (names match without regard to case)."""

    http_status = 409
    error_code = "RESOURCE_ALREADY_EXISTS"


class CatalogUnavailable(DeltaportError):
    """The catalog database cannot be reached or failed in a way that may pass: a 503 with
    ``Retry-After``. Recipients keep reading with the catalog last loaded."""

    http_status = 503
    error_code = "TEMPORARILY_UNAVAILABLE"
    retry_after_seconds = 5


# --- storage --------------------------------------------------------------------------------


class StorageError(DeltaportError):
    """An object store failed in a way that is not 'object missing'."""

    http_status = 400
    error_code = "RESOURCE_DOES_NOT_EXIST"


class ObjectNotFound(StorageError):
    """A file the log names (or the log itself) is not in the store."""


class StorageUnavailable(StorageError):
    """The store failed in a way that may pass (a timeout, a 5xx, throttling, a dropped
    connection): a 503 with ``Retry-After``, which clients retry. Which table, and the store's own
    words, are for the operator's log only."""

    http_status = 503
    error_code = "TEMPORARILY_UNAVAILABLE"
    retry_after_seconds = 5


class QueuedFailures:
    """Storage failures of the holders of one queue (a table's lock; its share of the server's
    threads). A caller that queued while a holder's storage failed fails the same way at once,
    instead of trying the store again: when a store hangs, each queued caller would otherwise wait
    out its own timeout in turn. Callers take a ``mark`` when they start to wait, ``check`` it once
    they hold, and report what failed while they held with ``failed``; the queue's own lock (or
    event loop) guards it."""

    __slots__ = ("_count", "_last")

    def __init__(self) -> None:
        self._count = 0
        self._last: StorageUnavailable | None = None

    def mark(self) -> int:
        return self._count

    def check(self, mark: int) -> None:
        """Raise, as a :class:`StorageUnavailable`, the failure of a holder since ``mark``."""
        last = self._last
        if self._count != mark and last is not None:
            raise StorageUnavailable(last.message, detail=last.detail, location=last.location)

    def failed(self, exc: StorageUnavailable) -> None:
        self._last = exc
        self._count += 1


class StorageCredentialsRefused(StorageUnavailable):
    """The cloud refused the server's own storage credentials (or found them missing or unfit) when
    the server asked it for something on a recipient's behalf: the provider must fix them. A 503
    with ``Retry-After``, never a 500: the recipient did nothing wrong, and a fix needs no change on
    its side. ``detail`` holds the cloud's error code for the operator, never a secret."""


# --- Delta log engine -----------------------------------------------------------------------


class DeltaError(DeltaportError):
    """An error about one Delta table. ``table`` names it (its root URI) for the operator only.

    The code is the one the reference server gives the Delta engine's own errors about a table it
    cannot read (400 MALFORMED_REQUEST). Its catch-all 500 is not copied: the table's state is
    not transient, and clients retry every 5xx for about 100 seconds.
    """

    http_status = 400
    error_code = "MALFORMED_REQUEST"

    def __init__(self, message: str, *, table: str | None = None, detail: str | None = None) -> None:
        self.table = table
        super().__init__(message, detail=detail, location=table)


class NotADeltaTable(DeltaError):
    """The location has no ``_delta_log`` or the log has no commits (the engine's "table not found")."""


class CorruptLog(DeltaError):
    """A commit, checkpoint or ``_last_checkpoint`` cannot be read as the protocol says."""


class VersionNotFound(DeltaError):
    """A version that does not exist, or cannot be reconstructed from the log that is left."""

    error_code = "MALFORMED_REQUEST"


class TableFilesMissing(VersionNotFound):
    """A file the log needs (a commit, for a range of changes) is gone from storage.

    The message is the reference server's, word for word; ``detail`` says which file, for the log.
    """

    error_code = "RESOURCE_DOES_NOT_EXIST"

    def __init__(self, detail: str, *, table: str | None = None) -> None:
        super().__init__(
            "table files missing. Ask the data provider to restore the table's missing log files.",
            table=table,
            detail=detail,
        )


class InvalidVersionRange(DeltaError):
    """A change range whose versions do not fit the table: a start after its latest version, an
    end before the start or (for a streaming read) after the latest version. The texts are the
    reference server's."""

    error_code = "INVALID_PARAMETER_VALUE"


class ChangesPositionGone(DeltaError):
    """A change feed resumed at a commit (a page token's position) that log cleanup has removed."""

    error_code = "INVALID_PARAMETER_VALUE"


class TimestampOutOfRange(DeltaError):
    """A timestamp before the first or after the last commit of a table."""

    error_code = "MALFORMED_REQUEST"


class UnsupportedTableFeature(DeltaError):
    """The table needs a reader feature (or reader version) this engine does not support."""

    error_code = "UNSUPPORTED_OPERATION"

    def __init__(
        self, message: str, *, features: list[str] | None = None, table: str | None = None, detail: str | None = None
    ) -> None:
        self.features = list(features or [])
        super().__init__(message, table=table, detail=detail)


class ChangeDataNotRecorded(DeltaError):
    """Change data feed was not enabled for part of a requested version range."""

    error_code = "INVALID_PARAMETER_VALUE"
