"""Presigned URLs from the cloud stores themselves, through obstore.

S3 (AWS or any endpoint, path- or virtual-hosted style) gives SigV4 query URLs, Azure Blob a
service SAS (``sp=r``), GCS a V4 signed URL (``X-Goog-Credential``): all three are URLs the
official client's kernel fetches over HTTP.

Paths go to ``obstore.sign`` as object keys relative to the store's prefix (the table root), not
percent-encoded: obstore encodes them. One exception is handled here: for some backends (GCS in
obstore 0.12) obstore leaves ``%`` unescaped in the URL, so a key that contains a literal ``%``
(Delta's escaped partition values, ``ts=2024-01-01 10%3A00``) would address another object. The
signer probes this once per store and escapes ``%`` itself where needed.

Azure: obstore 0.12 signs a service SAS over the *percent-encoded* blob name, while the SAS
specification (and Azure Storage, and Azurite) use the URL-decoded name, so a URL for a blob whose
name needs encoding (a space, ``%``, non-ASCII) is refused with 403. When the store has an account
key, the signer recomputes ``sig`` over the decoded name from the URL's own fields.
"""

from __future__ import annotations

import base64
import hmac
import time
from datetime import timedelta
from functools import lru_cache
from urllib.parse import unquote, urlsplit

from deltaport.errors import StorageError
from deltaport.signing.base import SignedUrl, check_expires_in, check_relative_path
from deltaport.storage.object_store import ObstoreStore

__all__ = ["ObstoreSigner"]

_PROBE = "deltaport-probe/p%q"
#: SAS fields (times, version) repeat from URL to URL: decode each distinct value once.
_unquote = lru_cache(maxsize=256)(unquote)


class ObstoreSigner:
    """Presigns GET URLs for files below an :class:`ObstoreStore`'s root (S3, Azure, GCS).

    ``now`` in :meth:`sign` cannot be honoured: obstore signs with the system clock, and
    ``expiration_ms`` is taken from the system clock just before signing (never later than the
    expiry encoded in the URL).
    """

    def __init__(self, store: ObstoreStore) -> None:
        import obstore.store

        raw = store.raw
        if not isinstance(raw, (obstore.store.S3Store, obstore.store.AzureStore, obstore.store.GCSStore)):
            raise StorageError(
                "cannot presign URLs for this table's store: only S3, Azure Blob and GCS stores can sign "
                f"(this store is {type(raw).__name__})",
                location=store.root_uri,
            )
        self.store = store
        self._raw = raw
        self._escape_percent: bool | None = None
        self._azure_key: bytes | None = None
        self._azure_blob_prefix = ""
        if isinstance(raw, obstore.store.AzureStore):
            config = raw.config
            if config.get("account_key"):
                try:
                    self._azure_key = base64.b64decode(config["account_key"], validate=True)
                except ValueError as exc:
                    raise StorageError(
                        "the Azure account key of this table's store is not base64: check "
                        "account_key in the server config",
                        location=store.root_uri,
                    ) from exc
            container = config.get("container_name", "")
            prefix = (raw.prefix or "").strip("/")
            self._azure_blob_prefix = f"/blob/{config.get('account_name', '')}/{container}/" + (
                f"{prefix}/" if prefix else ""
            )

    def __repr__(self) -> str:
        return f"ObstoreSigner({self.store.root_uri!r})"

    def _sign_raw(self, keys: str | list[str], expires_in: int, what: str):
        import obstore

        try:
            return obstore.sign(self._raw, "GET", keys, timedelta(seconds=expires_in))
        except Exception as exc:  # obstore raises its own errors, TypeError for bad paths
            detail = (str(exc).strip().splitlines() or [""])[0]  # obstore appends a debug dump
            raise StorageError(
                f"cannot sign a URL for {what}: the object store refused ({type(exc).__name__}); ask the data "
                "provider to check the server's storage credentials",
                detail=detail,
                location=self.store.root_uri,
            ) from exc

    def _needs_percent_escape(self) -> bool:
        if self._escape_percent is None:
            path = urlsplit(self._sign_raw(_PROBE, 60, "a probe path")).path
            self._escape_percent = "p%q" in path and "p%25q" not in path
        return self._escape_percent

    def _key(self, path: str) -> str:
        check_relative_path(path, allow_backslash=True)
        if "%" in path and self._needs_percent_escape():
            return path.replace("%", "%25")
        return path

    def _fix_azure_sas(self, url: str, path: str) -> str:
        """Re-sign an account-key service SAS over the decoded blob name (see the module doc)."""
        head, _, query = url.partition("?")
        if "%" not in head:
            return url  # nothing was encoded: obstore's signature is already right
        pairs = [pair.partition("=") for pair in query.split("&")]
        fields = {k: _unquote(v) if "%" in v and k != "sig" else v for k, _, v in pairs}
        if "sig" not in fields or "skoid" in fields or fields.get("sr") != "b":
            return url  # a user delegation SAS or an unexpected shape: leave it to obstore
        get = fields.get
        string_to_sign = "\n".join(
            [
                get("sp", ""),
                get("st", ""),
                get("se", ""),
                self._azure_blob_prefix + path,
                get("si", ""),
                get("sip", ""),
                get("spr", ""),
                get("sv", ""),
                get("sr", ""),
                get("snapshot", ""),
                get("ses", ""),
                get("rscc", ""),
                get("rscd", ""),
                get("rsce", ""),
                get("rscl", ""),
                get("rsct", ""),
            ]
        )
        assert self._azure_key is not None  # an Azure store has its account key (checked at start)
        signature = base64.b64encode(hmac.digest(self._azure_key, string_to_sign.encode("utf-8"), "sha256"))
        new_sig = signature.decode("ascii").replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
        query = "&".join(f"{k}={new_sig}" if k == "sig" else f"{k}{sep}{v}" for k, sep, v in pairs)
        return f"{head}?{query}"

    def sign(self, path: str, *, expires_in: int, now: float | None = None) -> SignedUrl:
        """A presigned GET URL for ``path`` (relative to the store root, not percent-encoded)."""
        expires_in = check_expires_in(expires_in)
        key = self._key(path)
        expiration_ms = (int(time.time()) + expires_in) * 1000
        url = self._sign_raw(key, expires_in, path)
        if self._azure_key is not None:
            url = self._fix_azure_sas(url, path)
        return SignedUrl(url, expiration_ms)

    def sign_many(self, paths: list[str], *, expires_in: int, now: float | None = None) -> list[SignedUrl]:
        """Presign several paths in one call into obstore."""
        expires_in = check_expires_in(expires_in)
        keys = [self._key(p) for p in paths]
        if not keys:
            return []
        expiration_ms = (int(time.time()) + expires_in) * 1000
        urls = list(self._sign_raw(keys, expires_in, f"{len(keys)} paths"))
        if self._azure_key is not None:
            urls = [self._fix_azure_sas(url, path) for url, path in zip(urls, paths)]
        return [SignedUrl(url, expiration_ms) for url in urls]
