"""The UrlSigner seam: short-lived URLs for data files and deletion-vector files.

A signer is bound to one table root. ``sign(path, ...)`` takes a path relative to that root,
``/``-separated and *not* percent-encoded (the caller decodes the Delta log's encoded paths), and
returns a URL a recipient can GET without other credentials until ``expiration_ms``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from deltaport.errors import PermissionDenied

#: Longest lifetime of a presigned URL: 7 days, the limit of S3 and GCS V4 signatures.
MAX_EXPIRES_IN = 7 * 24 * 3600

_DRIVE = re.compile(r"^[A-Za-z]:")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BAD_CHAR = re.compile(r"[\x00-\x1f\x7f\\]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class SignedUrl:
    """A URL and the time (ms since the epoch) after which it stops working."""

    url: str
    expiration_ms: int

    def __repr__(self) -> str:  # never print the signature
        return f"SignedUrl(url='{self.url.split('?', 1)[0]}?...', expiration_ms={self.expiration_ms})"


@runtime_checkable
class UrlSigner(Protocol):
    """Presigns GET URLs for files below one table root."""

    def sign(self, path: str, *, expires_in: int, now: float | None = None) -> SignedUrl:
        """A URL for ``path`` (relative to the table root, not percent-encoded).

        ``expires_in`` is the lifetime in seconds (1 to 7 days); ``now`` overrides the clock
        (seconds since the epoch) where the implementation can honour it.
        """
        ...


def check_expires_in(expires_in: int) -> int:
    """``expires_in`` as an int, or ValueError when it is not 1 s to 7 days."""
    if isinstance(expires_in, bool) or not isinstance(expires_in, int):
        raise ValueError(f"expires_in must be a whole number of seconds, got {expires_in!r}")
    if not 1 <= expires_in <= MAX_EXPIRES_IN:
        raise ValueError(f"expires_in must be between 1 and {MAX_EXPIRES_IN} seconds (7 days), got {expires_in}")
    return expires_in


def check_relative_path(path: str, *, allow_backslash: bool = False) -> str:
    """Refuse any path that is not a plain relative path below the table root.

    Refused: empty paths, absolute paths (``/x``, ``C:/x``, URIs), ``..`` and ``.`` segments,
    empty segments (``a//b``), control characters (NUL included) and, unless allowed, backslashes
    (a path separator on Windows). Raises PermissionDenied naming the problem.
    """
    if not isinstance(path, str) or not path:
        raise PermissionDenied("file path is empty")
    # Fast path: nothing that could be refused below (details are worked out only on a hit).
    if (
        path[0] not in "/."
        and path[-1] != "/"
        and path[1:2] != ":"
        and "/." not in path
        and "//" not in path
        and _BAD_CHAR.search(path) is None
    ):
        return path
    if _CONTROL.search(path):
        raise PermissionDenied(f"file path {path!r} contains a control character")
    if not allow_backslash and "\\" in path:
        raise PermissionDenied(f"file path {path!r} contains a backslash")
    if path.startswith("/") or _DRIVE.match(path) or _URI.match(path):
        raise PermissionDenied(f"file path {path!r} must be relative to the table root")
    for segment in path.split("/"):
        if segment == "..":
            raise PermissionDenied(f"file path {path!r} must not leave the table root")
        if segment in ("", "."):
            raise PermissionDenied(f"file path {path!r} has an empty or '.' segment")
    return path
