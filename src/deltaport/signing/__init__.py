"""Signing: the UrlSigner seam and its implementations.

- :class:`LocalFileSigner`: the server's own file URLs (local tables), signed with the server's
  key in a SigV4-shaped query (:mod:`deltaport.signing.local_mac`: a keyed BLAKE2b) and verified
  by the server's file endpoint.
- :class:`ObstoreSigner`: presigned URLs from S3, Azure Blob (SAS) and GCS (V4) through obstore.
- :mod:`deltaport.signing.sigv4`: pure-Python SigV4 query presigning and verification.

``signer_for(store, ...)`` picks the implementation for an ObjectStore.
"""

from __future__ import annotations

from deltaport.signing.base import MAX_EXPIRES_IN, SignedUrl, UrlSigner, check_relative_path
from deltaport.signing.local import LocalFileSigner
from deltaport.signing.object_store import ObstoreSigner
from deltaport.signing.sigv4 import SigV4Presigner, verify_presigned
from deltaport.storage.base import ObjectStore
from deltaport.storage.local import LocalStore
from deltaport.storage.object_store import ObstoreStore

__all__ = [
    "MAX_EXPIRES_IN",
    "LocalFileSigner",
    "ObstoreSigner",
    "SigV4Presigner",
    "SignedUrl",
    "UrlSigner",
    "check_relative_path",
    "signer_for",
    "verify_presigned",
]


def signer_for(
    store: ObjectStore,
    *,
    base_url: str | None = None,
    table_key: str | None = None,
    access_key: str | None = None,
    secret: bytes | str | None = None,
) -> UrlSigner:
    """The UrlSigner for files of ``store``.

    A LocalStore is served by the sharing server itself, so it needs ``base_url``, ``table_key``,
    ``access_key`` and ``secret`` (a :class:`LocalFileSigner`); an obstore-backed store signs
    with its own credentials (an :class:`ObstoreSigner`).
    """
    if isinstance(store, LocalStore):
        missing = [
            name
            for name, value in (
                ("base_url", base_url),
                ("table_key", table_key),
                ("access_key", access_key),
                ("secret", secret),
            )
            if not value
        ]
        if missing:
            raise ValueError(f"a local table's files are served by the server: signer_for needs {', '.join(missing)}")
        return LocalFileSigner(base_url, table_key, access_key, secret)  # type: ignore[arg-type]
    if isinstance(store, ObstoreStore):
        return ObstoreSigner(store)
    raise TypeError(f"no URL signer for {type(store).__name__}: expected a LocalStore or an ObstoreStore")
