"""The MAC of the server's own file URLs: keyed BLAKE2b-256 in a SigV4-shaped presigned query.

Only this server verifies the URLs of the files it serves, so they need no AWS algorithm; but the
official client's Delta path (delta-kernel-rs) fetches a URL over HTTP only when its query looks
presigned (it contains ``X-Amz-Signature``). The URLs therefore keep SigV4's query shape, with
their own algorithm name::

    X-Amz-Algorithm=DELTAPORT-BLAKE2B&X-Amz-Credential=<key>/<date>/<region>/s3/aws4_request
    &X-Amz-Date=<YYYYMMDDTHHMMSSZ>&X-Amz-Expires=<s>&X-Amz-SignedHeaders=host&X-Amz-Signature=<64 hex>

The signature is BLAKE2b-256 keyed with the day's key (HMAC-SHA256 chain over the algorithm name
and the secret, then the date, region and service, as SigV4 derives its signing key) over
``GET\\n<host>\\n<canonical query>\\n<canonical URI>``: host, query (every parameter but the
signature, encoded and sorted) and URI canonical as SigV4 makes them (``sigv4.read_presigned``).
The URI comes last, so URLs signed at one instant share every byte before it: a batch absorbs
those once into a keyed state, and each URL costs a state copy, one update and a digest, about
half of SigV4's two SHA-256 passes and HMAC.

:func:`verify_file_url` accepts this algorithm and, until they expire, SigV4 URLs
(``AWS4-HMAC-SHA256``: issued before the change, or by a replica that still signs that way).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

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
    presign_endpoint,
    read_presigned,
    scoped_key,
    sigv4_signature,
)

__all__ = ["MAC_ALGORITHM", "MacBatch", "MacPresigner", "derive_mac_key", "mac_signature", "verify_file_url"]

MAC_ALGORITHM = "DELTAPORT-BLAKE2B"

_blake2b = hashlib.blake2b


def _derive(secret: bytes, datestamp: str, region: str, service: str) -> bytes:
    return scoped_key(secret, datestamp, region, service, head=MAC_ALGORITHM.encode(), end=b"deltaport_request")


def derive_mac_key(secret: str | bytes, datestamp: str, region: str, service: str) -> bytes:
    """The MAC key for one day (``YYYYMMDD``), region and service: what a keying worker is given."""
    return _derive(_secret_bytes(secret), datestamp, region, service)


def _message_head(host: str, canonical_query: str) -> bytes:
    """What the MAC absorbs before the canonical URI (the one rule for signer and verifier)."""
    return f"GET\n{host}\n{canonical_query}\n".encode()


def mac_signature(request: PresignedRequest, secret: str | bytes) -> str:
    """The signature (hex) of a received request under :data:`MAC_ALGORITHM`."""
    key = derive_mac_key(secret, request.datestamp, request.region, request.service)
    message = _message_head(request.host, request.canonical_query) + request.canonical_uri.encode()
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
        """The keyed BLAKE2b-256 state that absorbed ``head``: copy it, add a URI, digest."""
        return _blake2b(self.head, key=self.key, digest_size=32)

    def sign(self, canonical_uris: Iterable[bytes]) -> list[str]:
        """One hex signature per URI, the key and ``head`` absorbed once."""
        copy = self.keyed().copy
        signatures: list[str] = []
        append = signatures.append
        for u in canonical_uris:
            state = copy()
            state.update(u)
            append(state.hexdigest())
        return signatures


class MacPresigner:
    """Signs GET URLs against one endpoint (``scheme://host[:port]``) with :data:`MAC_ALGORITHM`.

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
        self._credential_tail = _uri_encode(f"/{region}/{service}/aws4_request")
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
        datestamp = amz_date[:8]
        query = (  # the parameters in sorted order: the query is its own canonical form
            f"X-Amz-Algorithm={MAC_ALGORITHM}"
            f"&X-Amz-Credential={_uri_encode(self.access_key)}%2F{datestamp}{self._credential_tail}"
            f"&X-Amz-Date={amz_date}&X-Amz-Expires={expires_in}&X-Amz-SignedHeaders=host"
        )
        key = _derive(self._secret, datestamp, self.region, self.service)
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
        signature = state.hexdigest()
        return f"{self.endpoint}{canonical_uri}?{query}&X-Amz-Signature={signature}", (seconds + expires_in) * 1000


def verify_file_url(
    host: str,
    path: str | bytes,
    query_string: str | bytes,
    secret_lookup: Callable[[str], str | bytes | None],
    *,
    now: float | None = None,
    region: str | None = None,
    service: str | None = "s3",
    max_skew: int = DEFAULT_MAX_SKEW,
) -> str:
    """Check a GET (or HEAD) request for one of the server's file URLs; return its access key id.

    Arguments as for ``sigv4.verify_presigned``. The signature is recomputed by the URL's
    algorithm: :data:`MAC_ALGORITHM`, or SigV4's for URLs signed that way; any other algorithm is
    refused, as is everything ``sigv4.read_presigned`` refuses, an unknown key, a signature that
    does not match and a URL dated in the future or expired (PermissionDenied naming the problem).
    """
    request = read_presigned(host, path, query_string, region=region, service=service)
    if request.algorithm not in (MAC_ALGORITHM, ALGORITHM):
        raise PermissionDenied(
            f"unsupported X-Amz-Algorithm {request.algorithm!r}: this server's file URLs are signed "
            f"with {MAC_ALGORITHM} (or {ALGORITHM}); query the table again for a current URL"
        )
    if request.algorithm == MAC_ALGORITHM:
        return check_presigned(request, secret_lookup, lambda secret: mac_signature(request, secret), now, max_skew)
    return check_presigned(
        request, secret_lookup, lambda secret: sigv4_signature(request, "GET", secret), now, max_skew
    )
