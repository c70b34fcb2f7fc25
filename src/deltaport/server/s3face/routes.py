"""A read-only S3-compatible face for tables on local disk (directory access), path-style under
``/<directoryBucket>`` on the recipients' listener.

Every request, in this order: its SigV4 signature (header or query form) under a secret derived
from the face's credentials (credentials.py), which must be this server's and unexpired; the
credentials' table still shared with their recipient, through the token they were minted against
(revoking the recipient, the grant or the token through a config reload stops them); the
recipient's IP access list; the key inside the credentials' prefix (no ``..``, no encoded
separator) and, symlinks resolved, inside the table's root (files.py's rule). Only GET and HEAD:
ListObjectsV2 (and V1), GetObject with ``Range``, HeadObject, HeadBucket, GetBucketLocation.
Errors are S3's XML (errors.py), never a 500 for a client's mistake.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from base64 import urlsafe_b64decode, urlsafe_b64encode
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import quote
from xml.sax.saxutils import escape

from fastapi import Request
from starlette.responses import Response

from deltaport.catalog.served import DIR
from deltaport.delta import SnapshotCache
from deltaport.errors import DeltaportError, PermissionDenied, ResourceNotFound
from deltaport.server.ops.request_info import current_request
from deltaport.server.routing import RouteTable
from deltaport.server.s3face.credentials import FaceCredentials, FaceGrant
from deltaport.server.s3face.errors import S3Error
from deltaport.server.s3face.listing import ListingCache, page_of
from deltaport.server.sharing.files import LargeChunkFileResponse, inside_file, note_download, table_path
from deltaport.server.sharing.registry import SharedTable
from deltaport.server.sharing.service import SharingService
from deltaport.signing.sigv4_request import (
    MalformedSignature,
    SignatureExpired,
    SignatureFromFuture,
    SignatureMismatch,
    UnknownAccessKey,
    verify_request,
)

router = RouteTable()

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c)", re.IGNORECASE)
_REFUSAL = {
    UnknownAccessKey: "InvalidAccessKeyId",
    SignatureMismatch: "SignatureDoesNotMatch",
    SignatureExpired: "AccessDenied",
    SignatureFromFuture: "RequestTimeTooSkewed",
}


@dataclass(frozen=True)
class Reader:
    """A request whose credentials hold: what it may read."""

    grant: FaceGrant
    table: SharedTable
    table_prefix: str  # <share>/<schema>/<table> as served now


class Face:
    """Checks the face's requests (see the module) and reads the tables' directories."""

    def __init__(self, service: SharingService, cache: SnapshotCache, credentials: FaceCredentials) -> None:
        self.service, self.cache, self.credentials = service, cache, credentials
        self.listings = ListingCache()

    def reader(self, request: Request) -> Reader:
        now = self.service.clock()
        grant = self._signed_grant(request, now)
        if grant.expires_at <= now:
            raise S3Error("ExpiredToken", "the credentials have expired: ask for new temporary table credentials")
        registry = self.service.registry
        shared = registry.by_key(grant.table_key)
        who = registry.principal_for_key(grant.recipient_key)
        if shared is None or who is None or not who.may_see(shared.share.name):
            raise S3Error("AccessDenied", "these credentials' table is no longer shared with their recipient")
        if DIR not in shared.config.access_modes:
            raise S3Error("AccessDenied", "this table is no longer shared for directory access: read it with /query")
        live = who.name == "anonymous" and not self.service.config.auth_enabled
        if grant.token_tag:
            tag = grant.token_tag.encode()
            live = registry.token_live(
                grant.recipient_key,
                lambda d: hmac.compare_digest(self.credentials.token_tag(d).encode(), tag),
                int(now * 1000),
            )
        if not live:
            raise S3Error("AccessDenied", "the bearer token these credentials were issued against no longer works")
        try:
            self.service.admit(who)  # the recipient's IP access list
        except PermissionDenied as exc:
            raise S3Error("AccessDenied", exc.message) from None
        prefix = f"{shared.share.name}/{shared.schema.name}/{shared.config.name}"
        if not _within(grant.prefix, prefix):
            raise S3Error("AccessDenied", "these credentials' table is no longer shared under that name")
        return Reader(grant, shared, prefix)

    def _signed_grant(self, request: Request, now: float) -> FaceGrant:
        scope = request.scope
        raw_path = scope.get("raw_path", b"").decode("latin-1") or request.url.path
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        found: list[FaceGrant] = []

        def lookup(access_key: str, token: str | None) -> str | None:
            grant = self.credentials.read(access_key, token)
            if grant is None or token is None:
                return None
            found.append(grant)
            return self.credentials.secret(access_key, token)

        try:
            verify_request(request.method, raw_path, scope["query_string"].decode("latin-1"), headers, lookup, now=now)
        except MalformedSignature as exc:
            signed = any(k.lower() == "authorization" for k, _ in headers)
            raise S3Error("AuthorizationHeaderMalformed" if signed else "AccessDenied", exc.message) from None
        except tuple(_REFUSAL) as exc:
            raise S3Error(_REFUSAL[type(exc)], exc.message) from None
        return found[-1]

    def file(self, reader: Reader, request: Request, key: str) -> tuple[str, os.stat_result]:
        raw = scope_path(request)
        if _ENCODED_SEPARATOR.search(raw) or any(s in ("", ".", "..") for s in key.split("/")) or "\\" in key:
            raise S3Error("AccessDenied", "a key may not hold '..', '.', empty segments or an encoded separator")
        if not key.startswith(reader.grant.prefix + "/"):
            raise S3Error("AccessDenied", "the key is outside the prefix these credentials read")
        rel = key[len(reader.table_prefix) + 1 :]
        try:
            full, info = inside_file(reader.table, self.cache, rel)
        except PermissionDenied:
            raise S3Error("AccessDenied", "the key leads outside the table") from None
        except ResourceNotFound:
            raise S3Error("NoSuchKey", "the specified key does not exist") from None
        return os.fspath(full), info


def scope_path(request: Request) -> str:
    return request.scope.get("raw_path", b"").decode("latin-1") or request.url.path


def _within(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + "/")


def _note(shared: SharedTable, *, download: bool) -> None:
    """The table a face request reads, for its metrics and audit event (a GET of a file is a download)."""
    if download:
        note_download(shared)
        return
    seen = current_request()
    if seen is not None:
        seen.share, seen.schema, seen.table = shared.share.name, shared.schema.name, shared.config.name


def _face(request: Request) -> Face:
    face: Face = request.app.state.s3face
    return face


# --- bucket-level: listing, location, HEAD bucket -----------------------------------------------


def _bucket(request: Request, bucket: str) -> Response:
    face = _face(request)
    reader = face.reader(request)
    _note(reader.table, download=False)
    params = request.query_params
    if request.method == "HEAD":
        return Response(status_code=200, headers={"x-amz-bucket-region": "us-east-1"})
    if "location" in params:
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<LocationConstraint xmlns="{_NS}"/>'
        return Response(body, media_type="application/xml")
    return _list(face, reader, request, bucket)


def _list(face: Face, reader: Reader, request: Request, bucket: str) -> Response:
    params = request.query_params
    v2 = params.get("list-type") == "2"
    prefix, delimiter = params.get("prefix", ""), params.get("delimiter", "")
    encoding = params.get("encoding-type")
    if encoding not in (None, "url"):
        raise S3Error("InvalidArgument", "encoding-type may only be 'url'")
    max_keys = _max_keys(params.get("max-keys"))
    grant_prefix = reader.grant.prefix
    if not _within(prefix, grant_prefix):
        raise S3Error("AccessDenied", f"list a prefix inside '{grant_prefix}/': these credentials read nothing else")
    token = params.get("continuation-token") if v2 else None
    after, after_is_prefix = _after(token, params.get("start-after" if v2 else "marker", ""))
    directory = _directory(prefix, reader.table_prefix)
    try:
        root = os.fspath(table_path(reader.table, face.cache, ""))
        folder = os.fspath(table_path(reader.table, face.cache, directory))
    except PermissionDenied:
        raise S3Error("AccessDenied", "the prefix leads outside the table") from None
    except ResourceNotFound:
        raise S3Error("AccessDenied", "this table is not on this server's disk") from None
    key_prefix = f"{reader.table_prefix}/{directory}" if directory else reader.table_prefix
    listing = face.listings.listing(folder, key_prefix, delimiter != "/")
    page = page_of(listing.paths, prefix, delimiter, after, after_is_prefix, max_keys, scope=grant_prefix + "/")
    contents = []
    for key in page.keys:
        found = _stat(face, reader, root, key, key in listing.links)
        if found is not None:
            contents.append((key, found))
    return _list_answer(bucket, params, v2, prefix, delimiter, max_keys, contents, page, encoding == "url", token)


def _directory(prefix: str, table_prefix: str) -> str:
    """The table directory a listing of ``prefix`` reads (relative to the table root, "" for it)."""
    if not prefix.startswith(table_prefix + "/"):
        return ""
    rest = prefix[len(table_prefix) + 1 :].rpartition("/")[0]
    if rest and (any(s in ("", ".", "..") for s in rest.split("/")) or "\\" in rest):
        raise S3Error("AccessDenied", "a prefix may not hold '..', '.' or empty segments")
    return rest


def _stat(face: Face, reader: Reader, root: str, key: str, link: bool) -> os.stat_result | None:
    """A listed file's size and time (None: gone, or a symlink leading outside the table)."""
    rel = key[len(reader.table_prefix) + 1 :]
    try:
        return inside_file(reader.table, face.cache, rel)[1] if link else os.stat(os.path.join(root, rel))
    except (PermissionDenied, ResourceNotFound, OSError):
        return None


def _max_keys(value: str | None) -> int:
    if value is None:
        return 1000
    if not value.isdigit():
        raise S3Error("InvalidArgument", f"max-keys must be a whole number from 0 to 1000, not {value!r}")
    return min(int(value), 1000)


def _after(token: str | None, start_after: str) -> tuple[str, bool]:
    if token is None:
        return start_after, False
    try:
        decoded = urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)).decode()
    except ValueError:
        raise S3Error("InvalidArgument", "the continuation-token is not one this server gave") from None
    kind, last = decoded[:1], decoded[1:]
    if kind not in ("k", "p"):
        raise S3Error("InvalidArgument", "the continuation-token is not one this server gave")
    return max(last, start_after), kind == "p" and last >= start_after


def _list_answer(bucket, params, v2, prefix, delimiter, max_keys, contents, page, url, token) -> Response:
    enc = (lambda s: quote(s, safe="/")) if url else (lambda s: s)
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{_NS}">']
    parts.append(f"<Name>{escape(bucket)}</Name><Prefix>{escape(enc(prefix))}</Prefix>")
    parts.append(f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(page.next_after is not None).lower()}</IsTruncated>")
    if delimiter:
        parts.append(f"<Delimiter>{escape(enc(delimiter))}</Delimiter>")
    if url:
        parts.append("<EncodingType>url</EncodingType>")
    if v2:
        parts.append(f"<KeyCount>{len(contents) + len(page.prefixes)}</KeyCount>")
        if token is not None:
            parts.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
        if params.get("start-after"):
            parts.append(f"<StartAfter>{escape(enc(params['start-after']))}</StartAfter>")
        if page.next_after is not None:
            kind = "p" if page.next_is_prefix else "k"
            next_token = urlsafe_b64encode((kind + page.next_after).encode()).rstrip(b"=").decode()
            parts.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
    else:
        parts.append(f"<Marker>{escape(enc(params.get('marker', '')))}</Marker>")
        if page.next_after is not None:
            parts.append(f"<NextMarker>{escape(enc(page.next_after))}</NextMarker>")
    for key, info in contents:
        parts.append(
            f"<Contents><Key>{escape(enc(key))}</Key><LastModified>{_iso(info.st_mtime)}</LastModified>"
            f"<ETag>&quot;{_etag(info)}&quot;</ETag><Size>{info.st_size}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
    for common in page.prefixes:
        parts.append(f"<CommonPrefixes><Prefix>{escape(enc(common))}</Prefix></CommonPrefixes>")
    parts.append("</ListBucketResult>")
    return Response("".join(parts).encode(), media_type="application/xml")


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def _etag(info: os.stat_result) -> str:
    """The ETag FileResponse gives the same file (a GET's and a listing's agree)."""
    return hashlib.md5(f"{info.st_mtime}-{info.st_size}".encode(), usedforsecurity=False).hexdigest()


# --- objects ------------------------------------------------------------------------------------


class S3FileResponse(LargeChunkFileResponse):
    """A file, its Range refusals as S3's XML (416 InvalidRange; an unreadable Range 400)."""

    def _range_error(self, scope, status: int) -> Response:
        size = self.stat_result.st_size if self.stat_result is not None else 0
        head = scope["method"].upper() == "HEAD"
        if status == 416:
            error = S3Error(
                "InvalidRange",
                f"the requested range is not satisfiable: the object is {size} bytes",
                headers={"Content-Range": f"bytes */{size}"},
            )
        else:
            error = S3Error("InvalidArgument", "invalid Range header: use bytes=START-END, bytes=START- or bytes=-N")
        return error.response(head=head)


def _object(request: Request, bucket: str, key: str) -> Response:
    face = _face(request)
    if not key:
        return _bucket(request, bucket)
    reader = face.reader(request)
    full, info = face.file(reader, request, key)
    _note(reader.table, download=request.method == "GET")
    return S3FileResponse(
        full,
        media_type="application/octet-stream",
        stat_result=info,
        headers={"Last-Modified": formatdate(info.st_mtime, usegmt=True)},
    )


def _answer(request: Request, call, *args) -> Response:
    try:
        return call(request, *args)
    except S3Error as exc:
        return exc.response(head=request.method == "HEAD", resource=request.url.path)
    except DeltaportError as exc:
        code = {403: "AccessDenied", 404: "NoSuchKey"}.get(exc.http_status)
        if code is None:
            raise
        return S3Error(code, exc.message).response(head=request.method == "HEAD", resource=request.url.path)


_DOC = {"tags": ["directory access"], "include_in_schema": False}


@router.get("", **_DOC)
@router.head("", **_DOC)
def bucket_call(request: Request) -> Response:
    return _answer(request, _bucket, _bucket_name(request))


@router.get("/{key:path}", **_DOC)
@router.head("/{key:path}", **_DOC)
def object_call(key: str, request: Request) -> Response:
    return _answer(request, _object, _bucket_name(request), key)


@router.route("PUT", "", **_DOC)
@router.route("POST", "", **_DOC)
@router.route("DELETE", "", **_DOC)
@router.route("PUT", "/{key:path}", **_DOC)
@router.route("POST", "/{key:path}", **_DOC)
@router.route("DELETE", "/{key:path}", **_DOC)
@router.route("PATCH", "/{key:path}", **_DOC)
def write_call(request: Request) -> Response:
    error = S3Error("MethodNotAllowed", "this bucket is read-only: only GET and HEAD are served")
    return error.response(
        resource=request.url.path,
    )


def _bucket_name(request: Request) -> str:
    return request.url.path.strip("/").split("/", 1)[0]
