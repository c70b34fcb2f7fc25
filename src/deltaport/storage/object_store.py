"""S3, Azure and GCS (and anything else obstore speaks) behind the ObjectStore seam."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from deltaport.errors import ObjectNotFound, StorageError, StorageUnavailable
from deltaport.storage.base import FileInfo

_CLIENT_KEYS = ("allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "proxy_url")

#: Retries of a failed storage request unless the config sets ``retry_config``. The library's own
#: default (10 retries for up to 3 minutes) held a request, and its server thread, for 3 minutes
#: against a store that stopped answering; with this, a request gets its 503 (and the client its
#: Retry-After) once one request ``timeout`` (30 s by default) or 10 s of retries have passed.
DEFAULT_RETRY = {"max_retries": 2, "retry_timeout": dt.timedelta(seconds=10)}


#: The options each kind of store takes (obstore's S3Config, AzureConfig, GCSConfig), for naming the
#: valid ones when a key is refused; whether a key is taken is obstore's own answer (``check_options``).
STORE_KEYS = {
    "s3": [
        "access_key_id",
        "aws_endpoint_url_s3",
        "bucket",
        "checksum_algorithm",
        "conditional_put",
        "container_credentials_relative_uri",
        "container_credentials_full_uri",
        "container_authorization_token_file",
        "copy_if_not_exists",
        "default_region",
        "disable_tagging",
        "disable_bulk_delete",
        "endpoint",
        "imdsv1_fallback",
        "metadata_endpoint",
        "region",
        "request_payer",
        "role_arn",
        "role_session_name",
        "s3_express",
        "secret_access_key",
        "server_side_encryption",
        "session_token",
        "skip_signature",
        "sse_bucket_key_enabled",
        "sse_customer_key_base64",
        "sse_kms_key_id",
        "sts_endpoint",
        "unsigned_payload",
        "virtual_hosted_style_request",
        "web_identity_token_file",
    ],
    "azure": [
        "account_name",
        "account_key",
        "client_id",
        "client_secret",
        "credential_type",
        "tenant_id",
        "authority_host",
        "sas_key",
        "token",
        "use_emulator",
        "use_fabric_endpoint",
        "encryption_key",
        "endpoint",
        "msi_endpoint",
        "object_id",
        "msi_resource_id",
        "federated_token_file",
        "use_azure_cli",
        "skip_signature",
        "container_name",
        "disable_tagging",
        "fabric_token_service_url",
        "fabric_workload_host",
        "fabric_session_token",
        "fabric_cluster_identifier",
    ],
    "gcs": [
        "service_account",
        "service_account_key",
        "base_url",
        "bearer_token",
        "bucket",
        "application_credentials",
        "skip_signature",
    ],
}


def _open(root_uri: str, options: Mapping[str, Any]) -> Any:
    """The obstore store for ``root_uri``; any failure, a native panic included, is a StorageError
    (obstore panics on some unknown keys, and a panic is no ``Exception``)."""
    import obstore.store

    options = dict(options)
    client_options: Any = dict(options.pop("client_options", None) or {})
    for key in _CLIENT_KEYS:  # accepted beside the store keys for convenience
        if key in options:
            client_options[key] = options.pop(key)
    options.setdefault("retry_config", DEFAULT_RETRY)
    try:
        return obstore.store.from_url(root_uri, client_options=client_options or None, **options)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # obstore raises config errors of several kinds, and panics
        raise StorageError(
            "the table's object store cannot be opened: check its storage options in the server config",
            detail=str(exc),
            location=root_uri,
        ) from exc


def check_options(root_uri: str, options: Mapping[str, Any]) -> None:
    """Refuse, naming the key and the valid ones, storage options that obstore does not take for the
    store at ``root_uri`` (opening a store does no I/O)."""
    try:
        _open(root_uri, options)
    except StorageError:
        for key in options:
            try:
                _open(root_uri, {key: options[key]})
            except StorageError as exc:
                raise _unknown_option(root_uri, key) from exc
        raise


def _unknown_option(root_uri: str, key: str) -> StorageError:
    import difflib

    scheme = root_uri.split("://", 1)[0]
    kind = {"s3": "s3", "az": "azure", "abfs": "azure", "gs": "gcs"}.get(scheme, "")
    valid = sorted({*STORE_KEYS.get(kind, ()), *_CLIENT_KEYS})
    near = difflib.get_close_matches(key.lower().removeprefix("aws_"), valid, n=1)
    hint = f"did you mean '{near[0]}'? " if near else ""
    return StorageError(
        f"storage option '{key}' is not an option of {scheme}:// stores: {hint}valid options are {', '.join(valid)}",
        location=root_uri,
    )


def _ms(meta: Mapping[str, Any]) -> int:
    return int(meta["last_modified"].timestamp() * 1000)


def _unavailable(what: str, exc: BaseException, root_uri: str) -> StorageUnavailable:
    return StorageUnavailable(
        f"the table's storage did not answer {what}; retry later", detail=str(exc), location=root_uri
    )


class ObstoreStore:
    """An ObjectStore over an obstore store rooted at ``root_uri``.

    ``options`` are obstore's configuration keys (``endpoint``, ``region``,
    ``virtual_hosted_style_request``, ``allow_http``, ``account_name``, ...).
    """

    def __init__(self, root_uri: str, options: Mapping[str, Any] | None = None, *, _store: Any = None) -> None:
        self.root_uri = root_uri.rstrip("/")
        self.given_options = dict(options or {})
        self._store = _store or _open(self.root_uri, self.given_options)

    def __repr__(self) -> str:
        return f"ObstoreStore({self.root_uri!r})"

    @property
    def raw(self) -> Any:
        """The underlying obstore store (for signing URLs)."""
        return self._store

    def _call(self, what: str, fn, *args, **kwargs):
        import obstore.exceptions as oe

        try:
            return fn(*args, **kwargs)
        except FileNotFoundError as exc:
            raise ObjectNotFound(f"file not found: {what}", location=self.root_uri) from exc
        except oe.NotFoundError as exc:
            raise ObjectNotFound(f"file not found: {what}", location=self.root_uri) from exc
        except (oe.PermissionDeniedError, oe.UnauthenticatedError) as exc:
            raise StorageError(f"permission denied: {what}", detail=str(exc), location=self.root_uri) from exc
        except (oe.InvalidPathError, oe.NotSupportedError, oe.UnknownConfigurationKeyError) as exc:
            raise StorageError(
                f"the object store refused the request for {what}", detail=str(exc), location=self.root_uri
            ) from exc
        except oe.BaseError as exc:  # timeouts, 5xx, throttling, connections: they may pass
            raise _unavailable(what, exc, self.root_uri) from exc

    def list_dir(self, directory: str, start_after: str | None = None) -> list[FileInfo]:
        import obstore

        prefix = directory.rstrip("/") + "/" if directory else ""
        offset = prefix + start_after if start_after is not None else None
        out: list[FileInfo] = []
        stream = self._call(directory, obstore.list, self._store, prefix or None, offset=offset, chunk_size=1000)
        try:
            for chunk in stream:
                for meta in chunk:
                    path = meta["path"]
                    if "/" in path[len(prefix) :]:
                        continue  # deeper than one level (e.g. _delta_log/_sidecars/)
                    out.append(FileInfo(path, int(meta["size"]), _ms(meta)))
        except Exception as exc:  # the listing broke off midway
            raise _unavailable(f"the listing of {directory or 'the table root'}", exc, self.root_uri) from exc
        out.sort(key=lambda f: f.path)
        return out

    def read(self, path: str) -> bytes:
        import obstore

        result = self._call(path, obstore.get, self._store, path)
        return bytes(self._call(path, result.bytes))

    def read_range(self, path: str, start: int, length: int) -> bytes:
        import obstore

        if length <= 0:
            return b""
        size = self.head(path).size
        end = min(start + length, size)
        if start >= end:
            return b""
        return bytes(self._call(path, obstore.get_range, self._store, path, start=start, end=end))

    def head(self, path: str) -> FileInfo:
        import obstore

        meta = self._call(path, obstore.head, self._store, path)
        return FileInfo(path, int(meta["size"]), _ms(meta))

    def child(self, subpath: str) -> ObstoreStore:
        return ObstoreStore(f"{self.root_uri}/{subpath.strip('/')}", self.given_options)
