"""URLs for files the sharing server serves itself (tables on a local file system).

The official client's Delta path (delta-kernel-rs) fetches a URL over HTTP only when its query
looks presigned, so these URLs have a short query in SigV4's parameter names whose signature is a
keyed BLAKE2b under the server's own key (see :mod:`deltaport.signing.local_mac`), and the
server's file endpoint checks them with :meth:`LocalFileSigner.verify`, which also accepts the
earlier forms in SigV4's whole query (``DELTAPORT-BLAKE2B`` and ``AWS4-HMAC-SHA256``) until they
expire.

URL shape: ``{base_url}/files/{table_key}/{path}``, every segment URI-encoded once (S3 rules).
The signature covers the table key and the path, so any signer sharing the base URL and key can
verify a URL for any table; ``verify`` returns the table key found in the URL.
"""

from __future__ import annotations

import copy
import hmac
from urllib.parse import quote, unquote, urlsplit

from deltaport.errors import PermissionDenied
from deltaport.signing.base import SignedUrl, check_relative_path
from deltaport.signing.local_mac import MacBatch, MacPresigner, verify_file_url
from deltaport.signing.sigv4 import uri_encode_path

__all__ = ["LocalFileSigner"]


def _table_key_problem(table_key: object) -> str | None:
    if not isinstance(table_key, str) or not table_key:
        return "table key is empty"
    if (
        table_key in (".", "..")
        or any(c in table_key for c in "/\\")
        or any(ord(c) < 32 or ord(c) == 127 for c in table_key)
    ):
        return f"table key {table_key!r} must be one path segment without '/', '\\' or control characters"
    return None


class LocalFileSigner:
    """Signs and verifies the server's own file URLs for one table.

    ``base_url`` is the server's public URL (``https://host[:port][/prefix]``), ``table_key`` names
    the table in file URLs (one path segment), ``access_key`` and ``secret`` are the server's
    signing credentials (never the recipients' tokens).
    """

    def __init__(
        self, base_url: str, table_key: str, access_key: str, secret: bytes | str, region: str = "us-east-1"
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"base_url must not have a query or fragment, got {base_url!r}")
        problem = _table_key_problem(table_key)
        if problem:
            raise ValueError(problem)
        if not secret:
            raise ValueError("the signing secret is empty")
        self.region = region
        self.access_key = access_key
        self._secret = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        self._presigner = MacPresigner(
            f"{parts.scheme}://{parts.netloc}", access_key, self._secret, region=region, service="s3"
        )
        base_path = uri_encode_path(unquote(parts.path).rstrip("/"))
        self.base_url = f"{parts.scheme}://{parts.netloc}{base_path}"
        self._files_prefix = f"{base_path}/files/"
        self._set_table(table_key)

    def _set_table(self, table_key: str) -> None:
        self.table_key = table_key
        self._table_prefix = f"{self._files_prefix}{quote(table_key, safe='~')}/"

    def __repr__(self) -> str:
        return f"LocalFileSigner({self.base_url!r}, table_key={self.table_key!r}, access_key={self.access_key!r})"

    def for_table(self, table_key: str) -> LocalFileSigner:
        """A signer for another table with the same base URL and key (shares the key cache)."""
        problem = _table_key_problem(table_key)
        if problem:
            raise ValueError(problem)
        other = copy.copy(self)
        other._set_table(table_key)
        return other

    def sign(self, path: str, *, expires_in: int, now: float | None = None) -> SignedUrl:
        """A presigned URL for ``path`` (relative to the table root, not percent-encoded)."""
        check_relative_path(path)
        url, expiration_ms = self._presigner.presign_encoded(
            self._table_prefix + uri_encode_path(path), expires_in=expires_in, now=now
        )
        return SignedUrl(url, expiration_ms)

    @property
    def endpoint(self) -> str:
        """``scheme://host[:port]`` of the URLs this signer makes."""
        return self._presigner.endpoint

    @property
    def table_uri_prefix(self) -> str:
        """The encoded URL path every file URL of this table starts with (``/…/files/<key>/``)."""
        return self._table_prefix

    def batch_signing(self, *, expires_in: int, now: float | None = None) -> tuple[str, MacBatch, int]:
        """The shared query string, a picklable MacBatch for this table's relative URIs, and the expiry
        (see MacPresigner.batch_signing).

        The URIs must already have passed :func:`check_relative_path` or be refused at verification
        (which checks every path again after the signature).
        """
        return self._presigner.batch_signing(expires_in=expires_in, now=now, prefix=self._table_prefix.encode())

    def _lookup(self, access_key: str) -> bytes | None:
        if hmac.compare_digest(access_key.encode("utf-8"), self.access_key.encode("utf-8")):
            return self._secret
        return None

    def verify(
        self,
        method: str,
        host: str | None,
        raw_path: str | bytes,
        query_string: str | bytes,
        now: float | None = None,
    ) -> tuple[str, str]:
        """Check a request for a file URL; return ``(table_key, relative_path)``.

        ``host`` is the Host header as received; pass None to check against the base URL's host
        (behind a proxy that rewrites Host). ``raw_path`` is the path as received, still
        percent-encoded; a proxy may have stripped the base URL's path prefix. HEAD is accepted
        on a URL signed for GET (HTTP readers probe sizes with HEAD). The path is decoded and
        checked only after the signature: ``..``, absolute paths, empty or ``.`` segments, NUL
        and backslashes are refused even in a validly signed URL. Raises PermissionDenied.
        """
        if method.upper() not in ("GET", "HEAD"):
            raise PermissionDenied(f"method {method} is not allowed on file URLs")
        if isinstance(raw_path, bytes):
            raw_path = raw_path.decode("latin-1")
        raw_path = raw_path.split("?", 1)[0]
        if raw_path.startswith(self._files_prefix):
            rest = raw_path[len(self._files_prefix) :]
        elif raw_path.startswith("/files/"):
            rest = raw_path[len("/files/") :]
        else:
            raise PermissionDenied("not a file URL: the path must start with /files/")
        verify_file_url(
            self._presigner.host if host is None else host,
            self._files_prefix + rest,
            query_string,
            self._lookup,
            now=now,
            region=self.region,
        )
        try:
            decoded = unquote(rest, errors="strict")
        except UnicodeDecodeError:
            raise PermissionDenied("file path is not valid UTF-8") from None
        table_key, sep, relative = decoded.partition("/")
        if not sep:
            raise PermissionDenied("file URL names a table but no file")
        problem = _table_key_problem(table_key)
        if problem:
            raise PermissionDenied(problem)
        check_relative_path(relative)
        return table_key, relative
