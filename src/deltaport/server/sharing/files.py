"""The server's own file URLs (tables on local disk): the one module that decides whether a URL
reads a file, and serves it.

A URL is served only when, in this order: its signature is this server's (constant time; a keyed
BLAKE2b, or SigV4 for URLs issued before, see ``signing.local_mac``) and it has not expired; its
key names a table this server shares and the recipient it was issued to
(``<table key>~<recipient key>[~<slice digest>]``, under the signature); that recipient may still
read the table's share, and its partition slice is still the one the URL was issued for; its IP
access list admits the client; and the path, symlinks resolved, stays inside the table's root.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fastapi import Request
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response

from deltaport.delta import SnapshotCache
from deltaport.errors import PermissionDenied, ResourceNotFound
from deltaport.server import errors
from deltaport.server.ops import api_doc
from deltaport.server.ops.request_info import current_request
from deltaport.server.routing import RouteTable
from deltaport.server.sharing.registry import Principal, SharedTable, recipient_key
from deltaport.server.sharing.service import SharingService
from deltaport.signing import LocalFileSigner

router = RouteTable()
#: The path of the file routes under the sharing prefix.
FILE_ROUTE = "/files/{key}/{path:path}"


def url_key(shared: SharedTable, who: Principal) -> str:
    """What the server's own file URLs name, under their signature: the table, the recipient they
    were issued to, and that recipient's partition slice of it when it has one."""
    part = shared.slice(who)
    key = f"{shared.key}~{recipient_key(who.name)}"
    return key if part is None else f"{key}~{part.digest}"


def file_url_keys(token_secret: bytes | None, file_secret: bytes | None) -> tuple[bytes, str]:
    """The secret and access key of the server's own file URLs: derived from ``tokenSecret`` when
    the config has one (so every replica sharing it honours the URLs any of them issued), else
    random per process."""
    if token_secret is None:
        return file_secret or secrets.token_bytes(32), "DELTAPORT" + secrets.token_hex(6).upper()
    derived = hmac.new(token_secret, b"deltaport file URLs", hashlib.sha256).digest()
    key_id = hmac.new(token_secret, b"deltaport file URL access key", hashlib.sha256).hexdigest()[:12]
    return file_secret or derived, "DELTAPORT" + key_id.upper()


class FileAccess:
    """Decides which file a request for one of this server's file URLs reads (see the module)."""

    def __init__(self, service: SharingService, verifier: LocalFileSigner, cache: SnapshotCache) -> None:
        self.service, self.verifier, self.cache = service, verifier, cache

    def file_for(self, scope: Mapping[str, Any]) -> tuple[Path, os.stat_result]:
        """The file the request of ASGI ``scope`` reads, once every check of the module passed."""
        service = self.service
        raw_path = scope.get("raw_path", b"").decode("latin-1") or scope.get("root_path", "") + scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        host = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"host"), "")
        key, rel = self.verifier.verify(scope["method"], host, raw_path, query, now=service.clock())
        table_key, _, recipient = key.partition("~")
        shared = service.registry.by_key(table_key)
        who = service.registry.principal_for_key(recipient.partition("~")[0])
        if shared is None or who is None or not who.may_see(shared.share.name):
            raise PermissionDenied("this URL names no table this server shares with the recipient it was issued to")
        if url_key(shared, who) != key:
            raise PermissionDenied(
                "this URL was issued for partitions of the table the recipient may no longer read: "
                "query the table again for current URLs"
            )
        note_download(shared)
        service.admit(who)  # the recipient's IP access list
        return inside_file(shared, self.cache, rel)


#: How long a table root's resolved path is reused: an operator re-pointing a symlink above a
#: table's folder is seen within this many seconds.
ROOT_TTL = 5.0
_roots: dict[str, tuple[float, Path]] = {}


def _local_path(shared: SharedTable, cache: SnapshotCache) -> Callable[[str], Path]:
    """The table's ``local_path`` (a relative path to its file-system path); ResourceNotFound for a
    table on an object store."""
    local = getattr(shared.delta(cache).store, "local_path", None)
    if local is None:
        raise ResourceNotFound("this table's files are served by its object store, not by this server")
    return local


def _real_root(root: Path) -> Path:
    """``root`` with its symlinks resolved (remembered for :data:`ROOT_TTL` seconds)."""
    now, key = time.monotonic(), os.fspath(root)
    hit = _roots.get(key)
    if hit is None or now - hit[0] > ROOT_TTL:
        hit = _roots[key] = (now, root.resolve())
    return hit[1]


def table_path(shared: SharedTable, cache: SnapshotCache, rel: str) -> Path:
    """What ``rel`` names inside the shared table's root, symlinks resolved: the one rule for
    "inside" of the files this server serves (here and in the S3-compatible face)."""
    local = _local_path(shared, cache)
    full = local(rel).resolve()
    if not full.is_relative_to(_real_root(local(""))):  # a symlink must not lead outside the shared table
        raise PermissionDenied("this URL names a file outside the shared table")
    return full


def _plain(root: Path, rel: str) -> tuple[Path, os.stat_result] | None:
    """``root``/``rel`` and its status when no part of ``rel`` is a symlink (then it is inside ``root``
    as written: one ``lstat`` a part, not :func:`table_path`'s walk from ``/``), else None."""
    path, info = os.fspath(root), None
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            return None
        path = f"{path}/{part}"
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            return None
    return (Path(path), info) if info is not None else None


def inside_file(shared: SharedTable, cache: SnapshotCache, rel: str) -> tuple[Path, os.stat_result]:
    """The regular file ``rel`` names inside the shared table's root (:func:`table_path`)."""
    try:
        found = _plain(_real_root(_local_path(shared, cache)("")), rel)
        if found is None:  # a symlink on the way: resolved, and it must stay inside
            full = table_path(shared, cache, rel)
            found = full, full.stat()
    except OSError:
        found = None
    if found is None or not stat.S_ISREG(found[1].st_mode):
        raise ResourceNotFound(f"file not found: {rel}")
    return found


def note_download(shared: SharedTable) -> None:
    """The table a download of a file this server serves reads, for its metrics and audit event."""
    seen = current_request()
    if seen is not None:
        seen.download = True
        seen.share, seen.schema, seen.table = shared.share.name, shared.schema.name, shared.config.name


def _serve(request: Request) -> Response:
    full, info = request.app.state.file_access.file_for(request.scope)
    return LargeChunkFileResponse(os.fspath(full), media_type="application/octet-stream", stat_result=info)


@router.get(
    FILE_ROUTE,
    tags=["files"],
    summary="Read a data or deletion-vector file through a presigned URL this server issued",
    openapi_extra={"parameters": api_doc.file_url_parameters()},
)
def read_file(key: str, path: str, request: Request) -> Response:
    return _serve(request)


@router.head(
    FILE_ROUTE,
    tags=["files"],
    summary="Size of a data or deletion-vector file, through a presigned URL this server issued",
    openapi_extra={"parameters": api_doc.file_url_parameters()},
)
def head_file(key: str, path: str, request: Request) -> Response:
    return _serve(request)


class LargeChunkFileResponse(FileResponse):
    """Files go out in 1 MiB pieces (the default 64 KiB costs the server ~2x the CPU per GB).

    A ``Range`` header that cannot be served is answered with the protocol's JSON error (416 with
    ``Content-Range: bytes */<size>`` when no byte of the file is asked for, 400 when the header
    cannot be parsed) rather than the base class's empty text/plain response. The base class
    decides (Range read only on a 200 GET or HEAD, and not when If-Range no longer matches) and
    serves valid ranges (206); its refusal is only replaced at the ASGI level, through ``send``,
    so nothing here leans on its private helpers.
    """

    chunk_size = 1024 * 1024

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "range" not in Headers(scope=scope):
            return await super().__call__(scope, receive, send)
        replaced = False

        async def refusal_as_json(message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] in (400, 416):
                replaced = True
                return await self._range_error(scope, message["status"])(scope, receive, send)
            if not replaced:
                await send(message)

        return await super().__call__(scope, receive, refusal_as_json)

    def _range_error(self, scope, status: int) -> Response:
        size = self.stat_result.st_size if self.stat_result is not None else 0
        return range_error(scope, status, size)


def range_error(scope, status: int, size: int) -> Response:
    """The protocol's JSON error for the ``Range`` header of ``scope`` on a file of ``size`` bytes:
    416 (no byte of the file asked for) or 400 (not a byte range)."""
    http_range = Headers(scope=scope)["range"]
    head = scope["method"].upper() == "HEAD"
    if status == 416:
        last = f"; ask for bytes 0 to {size - 1}" if size else ""
        response = errors.json_error(
            416,
            "INVALID_PARAMETER_VALUE",
            f"Range {http_range!r} is not satisfiable: the file is {size} bytes{last}",
            head=head,
        )
        response.headers["Content-Range"] = f"bytes */{size}"
        return response
    return errors.json_error(
        400,
        "INVALID_PARAMETER_VALUE",
        f"invalid Range header {http_range!r}: use bytes=START-END, bytes=START- or bytes=-SUFFIX, with START <= END",
        head=head,
    )
