"""Storage: the ObjectStore seam and a URL-scheme registry.

``store_for("s3://bucket/table", options)`` picks the implementation by URL scheme; plain paths and
``file://`` URIs get the local store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

from deltaport.errors import StorageError
from deltaport.storage.base import FileInfo, ObjectStore
from deltaport.storage.local import LocalStore

__all__ = [
    "VENDING_OPTIONS",
    "FileInfo",
    "LocalStore",
    "ObjectStore",
    "check_storage_options",
    "is_local",
    "local_path_of",
    "store_for",
]

#: URL schemes served by obstore, mapped to their canonical scheme.
OBJECT_STORE_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "az": "az",
    "abfs": "abfs",
    "abfss": "abfs",
    "adl": "az",
    "azure": "az",
    "wasb": "wasb",
    "wasbs": "wasb",
    "gs": "gs",
    "gcs": "gs",
    "http": "http",
    "https": "https",
    "memory": "memory",
}


#: Storage options that only the vending of temporary credentials reads (deltaport.signing.vending),
#: with what each is for. Accepted beside the store's own options (any case) and never handed to the
#: object store: obstore would read ``aws_role_arn`` and ``aws_sts_endpoint`` as its own web-identity
#: settings.
VENDING_OPTIONS = {
    "aws_role_arn": "the IAM role that temporary credentials are taken from (STS AssumeRole)",
    "aws_external_id": "the external id the role's trust policy asks for",
    "aws_sts_endpoint": "the STS endpoint, where it is not the S3-compatible endpoint (or AWS's own)",
    "azure_sas_scope": "'directory' (default; ADLS Gen2 accounts) or 'container' (flat-namespace accounts)",
    "gcs_sts_endpoint": "Google's token exchange endpoint (default https://sts.googleapis.com/v1/token)",
}


def is_local(location: str) -> bool:
    scheme = urlparse(location).scheme.lower()
    return scheme in ("", "file") or (len(scheme) == 1 and location[1:3] in (":\\", ":/"))


def local_path_of(location: str) -> str:
    """File-system path of a plain path or ``file://`` URI."""
    if location.lower().startswith("file:"):
        parsed = urlparse(location)
        return unquote(parsed.path)
    return location


def _normalise_object_url(location: str) -> str:
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme in ("s3a", "s3n"):
        return "s3://" + location.split("://", 1)[1]
    if scheme in ("wasb", "wasbs", "abfss"):
        # wasbs://container@account.blob.core.windows.net/path -> az://container/path with account
        return (
            location.replace(parsed.scheme + "://", "abfs://" if scheme == "abfss" else "az://", 1)
            if "@" not in parsed.netloc
            else f"az://{parsed.netloc.split('@', 1)[0]}{parsed.path}"
        )
    if scheme == "gcs":
        return "gs://" + location.split("://", 1)[1]
    return location


def check_storage_options(location: str, options: Mapping[str, Any]) -> None:
    """Refuse (StorageError naming the key and the valid ones) storage options that the store for
    ``location`` would not take, before any request needs it. Local tables take none; without the
    object-store extra nothing is checked (opening the store says what to install)."""
    if is_local(location) or not options:
        return
    try:
        from deltaport.storage.object_store import check_options
    except ImportError:
        return
    url, opts = _object_store_args(location, options)
    check_options(url, opts)


def store_for(location: str, options: Mapping[str, Any] | None = None) -> ObjectStore:
    """An ObjectStore rooted at ``location`` (a path or URI)."""
    if is_local(location):
        return LocalStore(local_path_of(location))
    from deltaport.storage.object_store import ObstoreStore

    return ObstoreStore(*_object_store_args(location, options))


def _object_store_args(location: str, options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    scheme = urlparse(location).scheme.lower()
    if scheme not in OBJECT_STORE_SCHEMES:
        raise StorageError(
            f"unsupported storage scheme '{scheme}' in a table location: use a local path, file://, "
            "s3://, az://, abfss://, wasbs:// or gs://",
            location=location,
        )
    opts = {key: value for key, value in (options or {}).items() if key.lower() not in VENDING_OPTIONS}
    if scheme in ("wasb", "wasbs", "abfss", "abfs") and "@" in urlparse(location).netloc:
        account = urlparse(location).netloc.split("@", 1)[1].split(".", 1)[0]
        opts.setdefault("account_name", account)
    return _normalise_object_url(location), opts
