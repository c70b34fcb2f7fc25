"""AWS Signature Version 4, query-string ("presigned URL") form, in pure Python.

Signing produces the same URL, byte for byte, as botocore's
``generate_presigned_url('get_object', ...)`` with path-style addressing: GET, ``UNSIGNED-PAYLOAD``,
``X-Amz-SignedHeaders=host`` and the query parameters in botocore's order (Algorithm, Credential,
Date, Expires, SignedHeaders[, Security-Token], Signature). The derived signing key is cached per
(date, region, service), so a URL costs two SHA-256 passes and one HMAC.

Verification (:func:`verify_presigned`) recomputes the signature from the request as received and
compares it in constant time; every refusal is a PermissionDenied that says what was wrong. Its
reading of a presigned query (:func:`read_presigned`: parameters, lifetime, date, credential
scope, canonical URI, query and host) is shared with the verifier of the server's own file URLs
(``signing.local_mac``), which signs the same query shape with another algorithm.

References: "Authenticating Requests: Using Query Parameters (AWS Signature Version 4)" in the
Amazon S3 API reference; canonical URIs follow the S3 rule: every path segment URI-encoded once,
``/`` kept, unreserved characters ``A-Z a-z 0-9 - _ . ~`` left as they are.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote, urlsplit

from deltaport.errors import PermissionDenied
from deltaport.signing.base import MAX_EXPIRES_IN, check_expires_in

__all__ = [
    "ALGORITHM",
    "MAX_EXPIRES_IN",
    "UNSIGNED_PAYLOAD",
    "PresignedRequest",
    "SigV4Presigner",
    "canonical_host",
    "check_scope_parts",
    "derive_signing_key",
    "read_presigned",
    "scoped_key",
    "sigv4_signature",
    "uri_encode_path",
    "verify_presigned",
]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
#: How far in the future an X-Amz-Date may be (clock skew between signer and verifier).
DEFAULT_MAX_SKEW = 300

_sha256 = hashlib.sha256
_hmac_digest = hmac.digest


_PATH_UNSAFE = re.compile(r"[^A-Za-z0-9\-_.~/]")


def _escape(match: re.Match[str]) -> str:
    return f"%{ord(match.group()):02X}"


def uri_encode_path(path: str) -> str:
    """S3 canonical URI encoding of an unencoded path: each segment encoded, ``/`` kept.

    Same result as ``urllib.parse.quote(path, safe="/~")``, several times faster for ASCII.
    """
    if path.isascii():
        return _PATH_UNSAFE.sub(_escape, path)
    return quote(path, safe="/~")


def _uri_encode(value: str) -> str:
    """URI-encode a query key or value (only unreserved characters left as they are)."""
    return quote(value, safe="-_.~")


def _secret_bytes(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


@lru_cache(maxsize=256)
def scoped_key(
    secret: bytes, datestamp: str, region: str, service: str, *, head: bytes = b"AWS4", end: bytes = b"aws4_request"
) -> bytes:
    """A key for one day, region and service: HMAC-SHA256 of the date under ``head + secret``, then
    of the region, the service and ``end`` under each result (SigV4's signing key by default)."""
    k_date = _hmac_digest(head + secret, datestamp.encode("utf-8"), "sha256")
    k_region = _hmac_digest(k_date, region.encode("utf-8"), "sha256")
    k_service = _hmac_digest(k_region, service.encode("utf-8"), "sha256")
    return _hmac_digest(k_service, end, "sha256")


def derive_signing_key(secret: str | bytes, datestamp: str, region: str, service: str) -> bytes:
    """The SigV4 signing key for one day (``YYYYMMDD``), region and service."""
    return scoped_key(_secret_bytes(secret), datestamp, region, service)


def canonical_host(netloc: str, scheme: str | None = None) -> str:
    """The ``host`` header value as SigV4 signs it: lower case, no user info, no default port.

    Without ``scheme`` (a Host header as received) both ``:80`` and ``:443`` count as default.
    """
    host = netloc.rsplit("@", 1)[-1].strip().lower()
    defaults = {"http": (":80",), "https": (":443",)}.get((scheme or "").lower(), (":80", ":443"))
    for suffix in defaults:
        if host.endswith(suffix):
            return host[: -len(suffix)]
    return host


def check_scope_parts(access_key: str, region: str, service: str) -> None:
    """ValueError unless the parts of a credential scope are non-empty and free of ``/``."""
    if not access_key or "/" in access_key:
        raise ValueError("access key must be non-empty and must not contain '/'")
    if not region or "/" in region or not service or "/" in service:
        raise ValueError("region and service must be non-empty and must not contain '/'")


def presign_endpoint(endpoint_url: str, access_key: str, region: str, service: str) -> tuple[str, str]:
    """``scheme://host[:port]`` of a presigner's endpoint and its canonical host; ValueError when the
    endpoint is not an http(s) URL or a credential scope part is not allowed."""
    parts = urlsplit(endpoint_url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"endpoint must be an http(s) URL, got {endpoint_url!r}")
    check_scope_parts(access_key, region, service)
    return f"{parts.scheme}://{parts.netloc}", canonical_host(parts.netloc, parts.scheme)


class SigV4Presigner:
    """Presigns GET URLs against one endpoint (``scheme://host[:port]``) with SigV4.

    ``presign("/bucket/key")`` gives the path-style URL botocore would give for the same clock.
    The secret never appears in ``repr``.
    """

    def __init__(
        self,
        endpoint_url: str,
        access_key: str,
        secret: str | bytes,
        *,
        region: str = "us-east-1",
        service: str = "s3",
        session_token: str | None = None,
    ) -> None:
        self.endpoint, self.host = presign_endpoint(endpoint_url, access_key, region, service)
        self.access_key = access_key
        self.region = region
        self.service = service
        self._secret = _secret_bytes(secret)
        self._scope_tail = f"/{region}/{service}/aws4_request"
        self._credential_head = _uri_encode(access_key) + "%2F"
        self._credential_tail = _uri_encode(self._scope_tail)
        self._token_param = f"&X-Amz-Security-Token={_uri_encode(session_token)}" if session_token else ""
        self._canonical_headers = f"host:{self.host}\n\nhost\n{UNSIGNED_PAYLOAD}"
        self._key_date = ""
        self._key = b""
        self._last_second = -1
        self._last_amz_date = ""

    def __repr__(self) -> str:
        return f"SigV4Presigner({self.endpoint!r}, access_key={self.access_key!r}, region={self.region!r})"

    def signing_key(self, datestamp: str) -> bytes:
        if datestamp != self._key_date:
            self._key = scoped_key(self._secret, datestamp, self.region, self.service)
            self._key_date = datestamp
        return self._key

    def presign(self, path: str, *, expires_in: int, now: float | None = None, method: str = "GET") -> str:
        """Presigned URL for ``path`` (absolute, unencoded, e.g. ``/bucket/dir/file name.parquet``)."""
        return self.presign_encoded(uri_encode_path(path), expires_in=expires_in, now=now, method=method)[0]

    def presign_encoded(
        self, canonical_uri: str, *, expires_in: int, now: float | None = None, method: str = "GET"
    ) -> tuple[str, int]:
        """Presign an already encoded canonical URI; returns the URL and its expiry in ms."""
        expires_in = check_expires_in(expires_in)
        if not canonical_uri.startswith("/"):
            raise ValueError(f"canonical URI must start with '/', got {canonical_uri!r}")
        seconds = int(time.time() if now is None else now)
        if seconds != self._last_second:
            self._last_second = seconds
            self._last_amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))
        amz_date = self._last_amz_date
        datestamp = amz_date[:8]
        params = (
            f"X-Amz-Algorithm={ALGORITHM}"
            f"&X-Amz-Credential={self._credential_head}{datestamp}{self._credential_tail}"
            f"&X-Amz-Date={amz_date}&X-Amz-Expires={expires_in}"
        )
        if self._token_param:  # canonical order sorts Security-Token before SignedHeaders
            canonical_query = f"{params}{self._token_param}&X-Amz-SignedHeaders=host"
            query = f"{params}&X-Amz-SignedHeaders=host{self._token_param}"
        else:
            canonical_query = query = f"{params}&X-Amz-SignedHeaders=host"
        canonical_request = f"{method}\n{canonical_uri}\n{canonical_query}\n{self._canonical_headers}"
        string_to_sign = (
            f"{ALGORITHM}\n{amz_date}\n{datestamp}{self._scope_tail}\n"
            f"{_sha256(canonical_request.encode('utf-8')).hexdigest()}"
        )
        signature = _hmac_digest(self.signing_key(datestamp), string_to_sign.encode("utf-8"), "sha256").hex()
        url = f"{self.endpoint}{canonical_uri}?{query}&X-Amz-Signature={signature}"
        return url, (seconds + expires_in) * 1000


# --- verification ---------------------------------------------------------------------------

_REQUIRED = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders")


def parse_amz_date(value: str) -> int:
    if len(value) != 16 or value[8] != "T" or value[15] != "Z" or not (value[:8] + value[9:15]).isdigit():
        raise PermissionDenied(f"malformed X-Amz-Date {value!r}: expected YYYYMMDDTHHMMSSZ")
    try:
        return calendar.timegm(time.strptime(value, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise PermissionDenied(f"malformed X-Amz-Date {value!r}: not a valid date") from None


def _iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _presigned_query(query_string: str) -> tuple[list[tuple[str, str]], dict[str, str], str]:
    """The canonical (encoded) query parameters without the signature, the ``X-Amz-*`` ones by
    name, and the signature; a duplicate or missing signature parameter is refused."""
    params: list[tuple[str, str]] = []
    amz: dict[str, str] = {}
    signature = None
    for pair in query_string.split("&"):
        if not pair:
            continue
        raw_key, _, raw_value = pair.partition("=")
        key, value = unquote(raw_key), unquote(raw_value)
        if key.startswith("X-Amz-"):
            if key in amz or (key == "X-Amz-Signature" and signature is not None):
                raise PermissionDenied(f"duplicate query parameter {key}")
            if key == "X-Amz-Signature":
                signature = value
                continue
            amz[key] = value
        params.append((_uri_encode(key), _uri_encode(value)))
    if signature is None:
        raise PermissionDenied("missing X-Amz-Signature: the URL is not presigned")
    for name in _REQUIRED:
        if name not in amz:
            raise PermissionDenied(f"missing {name}: the URL is not a complete presigned URL")
    return params, amz, signature


def _check_presigned_fields(amz: dict[str, str]) -> tuple[int, int]:
    """The URL's lifetime and signing time, once its signed headers are the ones this server signs
    with (the algorithm is the caller's to check: it picks how the signature is recomputed)."""
    if amz["X-Amz-SignedHeaders"] != "host":
        raise PermissionDenied(
            f"unsupported X-Amz-SignedHeaders {amz['X-Amz-SignedHeaders']!r}: only 'host' is accepted"
        )
    return presigned_expires(amz["X-Amz-Expires"]), parse_amz_date(amz["X-Amz-Date"])


def presigned_expires(text: str) -> int:
    """A presigned URL's ``X-Amz-Expires`` (seconds, 1 to 7 days); PermissionDenied if it is not."""
    if not text.isdigit() or len(text) > 7:
        raise PermissionDenied(f"malformed X-Amz-Expires {text!r}")
    expires = int(text)
    if not 1 <= expires <= MAX_EXPIRES_IN:
        raise PermissionDenied(f"X-Amz-Expires {expires} is out of range: at most {MAX_EXPIRES_IN} seconds (7 days)")
    return expires


def presigned_uri(path: str) -> str:
    """The canonical URI of a presigned request's path as received (percent-encoded)."""
    return uri_encode_path(unquote(path)) if path else "/"


def _credential_scope(amz: dict[str, str], region: str | None, service: str | None) -> tuple[str, str, str, str]:
    """(access key, date, region, service) of the credential, checked against the date signed
    and, when given, the region and service expected."""
    scope = amz["X-Amz-Credential"].split("/")
    if len(scope) != 5 or not scope[0] or scope[4] != "aws4_request":
        raise PermissionDenied("malformed X-Amz-Credential: expected key/date/region/service/aws4_request")
    access_key, datestamp, cred_region, cred_service, _ = scope
    amz_date = amz["X-Amz-Date"]
    if datestamp != amz_date[:8]:
        raise PermissionDenied(f"credential scope date {datestamp} does not match X-Amz-Date {amz_date}")
    if region is not None and cred_region != region:
        raise PermissionDenied(f"credential scope region {cred_region!r} is not {region!r}")
    if service is not None and cred_service != service:
        raise PermissionDenied(f"credential scope service {cred_service!r} is not {service!r}")
    return access_key, datestamp, cred_region, cred_service


@dataclass(frozen=True)
class PresignedRequest:
    """A presigned request as received, its fields checked and its canonical parts worked out:
    everything a verifier needs to recompute the signature of its algorithm."""

    algorithm: str
    access_key: str
    amz_date: str
    datestamp: str
    region: str
    service: str
    host: str  #: canonical (see :func:`canonical_host`)
    canonical_uri: str
    canonical_query: str  #: every parameter but the signature, encoded and sorted
    signature: str
    signed_at: int
    expires: int

    def check_signature(self, expected: str) -> None:
        """Refuse the request unless its signature is ``expected`` (compared in constant time)."""
        if not hmac.compare_digest(expected.encode("ascii"), self.signature.encode("utf-8")):
            raise PermissionDenied("signature does not match: the URL was altered or signed with another key")

    def check_lifetime(self, now: float | None = None, max_skew: int = DEFAULT_MAX_SKEW) -> None:
        """Refuse a request dated in the future (beyond ``max_skew`` seconds) or expired."""
        current = time.time() if now is None else now
        if self.signed_at > current + max_skew:
            raise PermissionDenied(f"URL is dated in the future ({_iso(self.signed_at)}): check the signer's clock")
        if current > self.signed_at + self.expires:
            raise PermissionDenied(f"URL expired at {_iso(self.signed_at + self.expires)}")


def read_presigned(
    host: str, path: str | bytes, query_string: str | bytes, *, region: str | None, service: str | None
) -> PresignedRequest:
    """Parse and check a presigned request's query (whatever its algorithm) and canonicalise it.

    ``host`` is the Host header as received, ``path`` the request path as received (still
    percent-encoded: ``scope["raw_path"]`` in ASGI), ``query_string`` the raw query. When
    ``region`` or ``service`` are given the credential scope must name them. Raises
    PermissionDenied naming the problem: missing, duplicate or malformed parameters, or a scope
    that does not match.
    """
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    if isinstance(path, bytes):
        path = path.decode("latin-1")
    params, amz, signature = _presigned_query(query_string)
    expires, signed_at = _check_presigned_fields(amz)
    access_key, datestamp, cred_region, cred_service = _credential_scope(amz, region, service)
    params.sort()
    return PresignedRequest(
        algorithm=amz["X-Amz-Algorithm"],
        access_key=access_key,
        amz_date=amz["X-Amz-Date"],
        datestamp=datestamp,
        region=cred_region,
        service=cred_service,
        host=canonical_host(host),
        canonical_uri=presigned_uri(path),
        canonical_query="&".join(f"{k}={v}" for k, v in params),
        signature=signature,
        signed_at=signed_at,
        expires=expires,
    )


def sigv4_signature(request: PresignedRequest, method: str, secret: str | bytes) -> str:
    """The SigV4 signature (hex) of ``request`` for ``method`` and ``secret``."""
    canonical_request = (
        f"{method.upper()}\n{request.canonical_uri}\n{request.canonical_query}\n"
        f"host:{request.host}\n\nhost\n{UNSIGNED_PAYLOAD}"
    )
    string_to_sign = (
        f"{ALGORITHM}\n{request.amz_date}\n{request.datestamp}/{request.region}/{request.service}/aws4_request\n"
        f"{_sha256(canonical_request.encode('utf-8')).hexdigest()}"
    )
    signing_key = derive_signing_key(secret, request.datestamp, request.region, request.service)
    return _hmac_digest(signing_key, string_to_sign.encode("utf-8"), "sha256").hex()


def verify_presigned(
    method: str,
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
    """Check a SigV4 presigned request and return its access key id.

    ``host``, ``path``, ``query_string``, ``region`` and ``service`` as for :func:`read_presigned`.
    ``secret_lookup(access_key)`` returns the secret or None for an unknown key. Raises
    PermissionDenied naming the problem: what :func:`read_presigned` refuses, another algorithm,
    an unknown key, a signature that does not match, a URL dated in the future (beyond
    ``max_skew`` seconds) or expired.
    """
    request = read_presigned(host, path, query_string, region=region, service=service)
    if request.algorithm != ALGORITHM:
        raise PermissionDenied(f"unsupported X-Amz-Algorithm {request.algorithm!r}: expected {ALGORITHM}")
    return check_presigned(
        request, secret_lookup, lambda secret: sigv4_signature(request, method, secret), now, max_skew
    )


def check_presigned(
    request: PresignedRequest,
    secret_lookup: Callable[[str], str | bytes | None],
    signature: Callable[[str | bytes], str],
    now: float | None,
    max_skew: int,
) -> str:
    """The checks every presigned request ends with, whatever its algorithm: its key is known, its
    signature is ``signature(secret)`` (constant time), and it is neither future-dated nor expired.
    Returns its access key id; PermissionDenied naming the problem."""
    secret = secret_lookup(request.access_key)
    if secret is None:
        raise PermissionDenied(f"unknown access key {request.access_key!r}")
    request.check_signature(signature(secret))
    request.check_lifetime(now, max_skew)
    return request.access_key
