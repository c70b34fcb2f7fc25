"""The MAC of the server's own file URLs: a keyed BLAKE2b in a short presigned query.

Only this server verifies the URLs of the files it serves, so they need no AWS algorithm; but the
official client's Delta path (delta-kernel-rs) fetches a URL over HTTP only when its query looks
presigned (it contains ``X-Amz-Signature``). The URLs therefore keep SigV4's parameter names, but
only the ones the server needs::

    X-Amz-Credential=<key>&X-Amz-Date=<YYYYMMDDTHHMMSSZ>&X-Amz-Expires=<s>&X-Amz-Signature=<24 chars>

about 125 bytes where SigV4's whole query takes 267: a file line is 16 % shorter, and so is every
large answer the server writes and its recipient reads. The signature is an 18-byte keyed BLAKE2b
in base64url (18 is a multiple of 3, so a batch's signatures are one encoding of their joined
digests), keyed with the day's key (an HMAC chain over :data:`SHORT_MAC` and the secret, then the
date, region and service, as SigV4 derives its signing key) over
``GET\n<host>\n<query without the signature>\n<canonical URI>``, host and URI canonical as SigV4
makes them. The URI comes last, so URLs signed at one instant share every byte before it: a batch
absorbs those once into a keyed state, and each URL costs a state copy, one update and a digest.

:func:`verify_file_url` accepts these and, until they expire, URLs in SigV4's whole query shape:
``X-Amz-Algorithm=DELTAPORT-BLAKE2B`` (this server's earlier form, a 32-byte MAC in hex) or
``AWS4-HMAC-SHA256``, issued before the change or by a replica that still signs that way.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from deltaport.errors import PermissionDenied
from deltaport.signing.base import check_expires_in
from deltaport.signing.sigv4 import (
    ALGORITHM,
    DEFAULT_MAX_SKEW,
    PresignedRequest,
    _secret_bytes,
    _uri_encode,
    canonical_host,
    check_presigned,
    parse_amz_date,
    presign_endpoint,
    presigned_expires,
    presigned_uri,
    read_presigned,
    scoped_key,
    sigv4_signature,
)

__all__ = [
    "MAC_ALGORITHM",
    "SHORT_MAC",
    "SIGNATURE_CHARS",
    "MacBatch",
    "MacPresigner",
    "derive_mac_key",
    "verify_file_url",
]

#: The URLs' MAC: it names the key derivation, and a short URL's ``PresignedRequest.algorithm``.
SHORT_MAC = "DELTAPORT-B2S"
#: The earlier form's, in SigV4's whole query (verified until the last such URL expires).
MAC_ALGORITHM = "DELTAPORT-BLAKE2B"
#: A signature's length: 18 bytes in base64url, no padding.
SIGNATURE_CHARS = 24
_DIGEST_BYTES = 18
_SHORT_FIELDS = ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-Signature")

_blake2b = hashlib.blake2b


def derive_mac_key(secret: str | bytes, datestamp: str, region: str, service: str, *, scheme: str = SHORT_MAC) -> bytes:
    """The MAC key for one day (``YYYYMMDD``), region and service: what a keying worker is given."""
    head = scheme.encode()
    return scoped_key(_secret_bytes(secret), datestamp, region, service, head=head, end=b"deltaport_request")


def _message_head(host: str, query: str) -> bytes:
    """What the MAC absorbs before the canonical URI (the one rule for signer and verifier)."""
    return f"GET\n{host}\n{query}\n".encode()


def _short_query(encoded_key: str, amz_date: str, expires: int) -> str:
    """A short URL's query without its signature: what is signed, in the order it is sent."""
    return f"X-Amz-Credential={encoded_key}&X-Amz-Date={amz_date}&X-Amz-Expires={expires}"


def _encoded(digests: bytes) -> str:
    return base64.urlsafe_b64encode(digests).decode("ascii")


def _mac(request: PresignedRequest, secret: str | bytes) -> str:
    """The signature of a received request, by its algorithm: a short URL's, or the earlier form's."""
    scheme = request.algorithm
    key = derive_mac_key(secret, request.datestamp, request.region, request.service, scheme=scheme)
    message = _message_head(request.host, request.canonical_query) + request.canonical_uri.encode()
    if scheme == SHORT_MAC:
        return _encoded(_blake2b(message, key=key, digest_size=_DIGEST_BYTES).digest())
    return _blake2b(message, key=key, digest_size=32).hexdigest()


@dataclass(frozen=True)
class MacBatch:
    """Everything signing many URIs at one instant needs: plain bytes, so another process can sign.

    ``key`` is the day's derived key (see :func:`derive_mac_key`), never the secret; ``head`` is
    every byte the MAC absorbs before a URI (the URIs' common prefix included).
    """

    key: bytes
    head: bytes

    def keyed(self):  # -> hashlib's blake2b (its type is not public)
        """The keyed BLAKE2b state that absorbed ``head``: copy it, add a URI, digest."""
        return _blake2b(self.head, key=self.key, digest_size=_DIGEST_BYTES)

    def sign(self, canonical_uris: Iterable[bytes]) -> str:
        """The URIs' signatures joined (:data:`SIGNATURE_CHARS` each), the key and ``head`` absorbed once."""
        copy = self.keyed().copy
        digests: list[bytes] = []
        append = digests.append
        for u in canonical_uris:
            state = copy()
            state.update(u)
            append(state.digest())
        return _encoded(b"".join(digests))

    def sign_packed(self, loops: ModuleType, data: bytes, offsets: bytes, *, encode_eq: bool) -> str:
        """:meth:`sign` by the compiled loops (``deltaport.native.loops``), on URIs packed as one
        buffer and their int64 offsets from 0, each with '=' read as ``%3D`` when ``encode_eq``
        (an ordinary log path's canonical URI). Without the loops, :meth:`sign` is the way."""
        return _encoded(loops.mac_each(data, offsets, self.key, self.head, _DIGEST_BYTES, encode_eq))


class MacPresigner:
    """Signs GET URLs against one endpoint (``scheme://host[:port]``) with :data:`SHORT_MAC`.

    The secret never appears in ``repr``.
    """

    def __init__(self, endpoint_url: str, access_key: str, secret: str | bytes, *, region: str, service: str) -> None:
        self.endpoint, _ = presign_endpoint(endpoint_url, access_key, region, service)
        # signed as the verifier will see it: a Host header, whose scheme is unknown there (TLS may
        # end at a proxy), so both :80 and :443 count as default ports
        self.host = canonical_host(urlsplit(endpoint_url).netloc)
        self.access_key = access_key
        self.region = region
        self.service = service
        self._secret = _secret_bytes(secret)
        self._key = _uri_encode(access_key)
        self._last: tuple[int, int, str, Any] | None = None  # the latest instant's query and keyed state

    def __repr__(self) -> str:
        return f"MacPresigner({self.endpoint!r}, access_key={self.access_key!r}, region={self.region!r})"

    def batch_signing(
        self, *, expires_in: int, now: float | None = None, prefix: bytes = b""
    ) -> tuple[str, MacBatch, int]:
        """The query string every URL signed at ``now`` shares (without ``X-Amz-Signature``), a
        :class:`MacBatch` for encoded canonical URIs under ``prefix``, and the expiry in ms.

        The URL of URI ``u`` is ``endpoint + prefix + u + "?" + query + "&X-Amz-Signature=" +
        signature``, the same as :meth:`presign_encoded` gives at the same instant.
        """
        expires_in = check_expires_in(expires_in)
        seconds = int(time.time() if now is None else now)
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))
        query = _short_query(self._key, amz_date, expires_in)
        key = derive_mac_key(self._secret, amz_date[:8], self.region, self.service)
        batch = MacBatch(key=key, head=_message_head(self.host, query) + prefix)
        return query, batch, (seconds + expires_in) * 1000

    def presign_encoded(self, canonical_uri: str, *, expires_in: int, now: float | None = None) -> tuple[str, int]:
        """Sign an already encoded canonical URI; returns the URL and its expiry in ms."""
        expires_in = check_expires_in(expires_in)
        if not canonical_uri.startswith("/"):
            raise ValueError(f"canonical URI must start with '/', got {canonical_uri!r}")
        seconds = int(time.time() if now is None else now)
        last = self._last
        if last is None or last[0] != seconds or last[1] != expires_in:
            query, batch, _ = self.batch_signing(expires_in=expires_in, now=seconds)
            last = self._last = (seconds, expires_in, query, batch.keyed())
        _, _, query, keyed = last
        state = keyed.copy()
        state.update(canonical_uri.encode())
        signature = _encoded(state.digest())
        return f"{self.endpoint}{canonical_uri}?{query}&X-Amz-Signature={signature}", (seconds + expires_in) * 1000


def read_short(
    host: str, path: str | bytes, query_string: str | bytes, *, region: str, service: str
) -> PresignedRequest:
    """Parse and check a short URL's request (``host``, ``path`` and query as received); the region
    and service are the verifier's own. PermissionDenied names a missing, repeated, unexpected or
    malformed parameter."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    if isinstance(path, bytes):
        path = path.decode("latin-1")
    fields: dict[str, str] = {}
    for pair in query_string.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        name = unquote(name)
        if name in fields:
            raise PermissionDenied(f"duplicate query parameter {name}")
        if name not in _SHORT_FIELDS:
            raise PermissionDenied(
                f"unexpected query parameter {name!r}: a file URL carries only {', '.join(_SHORT_FIELDS)}"
            )
        fields[name] = unquote(value)
    for name in ("X-Amz-Signature", *_SHORT_FIELDS[:-1]):  # an unsigned URL is named as such first
        if not fields.get(name):
            raise PermissionDenied(f"missing {name}: the URL is not a complete file URL; query the table again")
    expires, amz_date = presigned_expires(fields["X-Amz-Expires"]), fields["X-Amz-Date"]
    signed_at = parse_amz_date(amz_date)
    return PresignedRequest(
        algorithm=SHORT_MAC,
        access_key=fields["X-Amz-Credential"],
        amz_date=amz_date,
        datestamp=amz_date[:8],
        region=region,
        service=service,
        host=canonical_host(host),
        canonical_uri=presigned_uri(path),
        canonical_query=_short_query(_uri_encode(fields["X-Amz-Credential"]), amz_date, expires),
        signature=fields["X-Amz-Signature"],
        signed_at=signed_at,
        expires=expires,
    )


def _whole_query(query_string: str | bytes) -> bool:
    """Whether a query is in SigV4's whole shape (it names its algorithm) rather than the short one."""
    text = query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string
    return any(unquote(pair.partition("=")[0]) == "X-Amz-Algorithm" for pair in text.split("&"))


def verify_file_url(
    host: str,
    path: str | bytes,
    query_string: str | bytes,
    secret_lookup: Callable[[str], str | bytes | None],
    *,
    region: str,
    now: float | None = None,
    service: str = "s3",
    max_skew: int = DEFAULT_MAX_SKEW,
) -> str:
    """Check a GET (or HEAD) request for one of the server's file URLs; return its access key id.

    Arguments as for ``sigv4.verify_presigned``; ``region`` and ``service`` are the server's. A short
    URL is read by :func:`read_short`; one in SigV4's whole shape by ``sigv4.read_presigned``, and
    its signature recomputed by its algorithm, :data:`MAC_ALGORITHM` or SigV4's (any other is
    refused). Also refused: an unknown key, a signature that does not match and a URL dated in the
    future or expired (PermissionDenied naming the problem).
    """
    if not _whole_query(query_string):
        request = read_short(host, path, query_string, region=region, service=service)
    else:
        request = read_presigned(host, path, query_string, region=region, service=service)
        if request.algorithm not in (MAC_ALGORITHM, ALGORITHM):
            raise PermissionDenied(
                f"unsupported X-Amz-Algorithm {request.algorithm!r}: this server's file URLs are signed "
                f"with {SHORT_MAC} (or, issued before, {MAC_ALGORITHM} or {ALGORITHM}); "
                "query the table again for a current URL"
            )

    def signature(secret: str | bytes) -> str:
        if request.algorithm == ALGORITHM:
            return sigv4_signature(request, "GET", secret)
        return _mac(request, secret)

    return check_presigned(request, secret_lookup, signature, now, max_skew)
