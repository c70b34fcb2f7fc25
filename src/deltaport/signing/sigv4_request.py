"""AWS Signature Version 4 verification of whole requests: the ``Authorization`` header form (what
S3 clients send: botocore, delta-rs/object_store, the AWS C++ SDK under pyarrow, Spark's s3a) and
the query form, each with a session token.

:func:`verify_request` recomputes the signature from the request as received, with the canonical
helpers of :mod:`deltaport.signing.sigv4`, and compares it in constant time. It returns the access
key id and session token the request names; every refusal is a :class:`SignatureRefused` subclass
saying what was wrong (malformed, unknown key, mismatch, expired, dated in the future).

Rules (S3's): the canonical URI is the path as the client sent it (also tried re-encoded by the S3
rule, for proxies that re-encode); every query parameter but ``X-Amz-Signature`` is signed, sorted
by encoded name then value; signed headers' values are trimmed with inner runs of spaces collapsed
and repeated headers joined by ``,``; the payload hash is ``x-amz-content-sha256`` as sent
(``UNSIGNED-PAYLOAD`` or the body's SHA-256; the query form signs ``UNSIGNED-PAYLOAD``). A header-
form request is valid 15 minutes either side of its ``x-amz-date``; a query-form one from its
date (less ``max_skew``) to its date plus ``X-Amz-Expires``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from deltaport.errors import PermissionDenied
from deltaport.signing.base import MAX_EXPIRES_IN
from deltaport.signing.sigv4 import (
    ALGORITHM,
    DEFAULT_MAX_SKEW,
    UNSIGNED_PAYLOAD,
    _iso,
    _uri_encode,
    canonical_host,
    derive_signing_key,
    parse_amz_date,
    uri_encode_path,
)

__all__ = [
    "EMPTY_SHA256",
    "MalformedSignature",
    "SignatureExpired",
    "SignatureFromFuture",
    "SignatureMismatch",
    "SignatureRefused",
    "SignedRequest",
    "UnknownAccessKey",
    "verify_request",
]

#: The SHA-256 of an empty body (what clients send as ``x-amz-content-sha256`` for GET and HEAD).
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: How far a header-form request's x-amz-date may be from the verifier's clock (S3: 15 minutes).
HEADER_SKEW = 15 * 60


class SignatureRefused(PermissionDenied):
    """A request whose signature is not accepted; subclasses say why."""


class MalformedSignature(SignatureRefused):
    """The request's signature fields are missing or cannot be read."""


class UnknownAccessKey(SignatureRefused):
    """The access key id (with its session token) names no credentials the verifier knows."""


class SignatureMismatch(SignatureRefused):
    """The signature is not the one the credentials' secret gives for this request."""


class SignatureExpired(SignatureRefused):
    """The request was signed too long ago (or its presigned lifetime is over)."""


class SignatureFromFuture(SignatureRefused):
    """The request is dated later than the verifier's clock allows."""


@dataclass(frozen=True)
class SignedRequest:
    """Who signed a request: the access key id and the session token it carried (None: none)."""

    access_key: str
    session_token: str | None
    signed_at: int


#: ``secret_lookup(access_key, session_token)``: the secret, or None for credentials not known.
SecretLookup = Callable[[str, "str | None"], "str | bytes | None"]

_AUTH_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")
_SPACES = re.compile(r" +")


def verify_request(
    method: str,
    raw_path: str,
    query_string: str,
    headers: Iterable[tuple[str, str]],
    secret_lookup: SecretLookup,
    *,
    now: float | None = None,
    body_sha256: str = EMPTY_SHA256,
    max_skew: int = DEFAULT_MAX_SKEW,
) -> SignedRequest:
    """Check a SigV4-signed request (header or query form) and say who signed it.

    ``raw_path`` is the path as received (still percent-encoded: ``scope["raw_path"]`` in ASGI),
    ``query_string`` the raw query, ``headers`` the (name, value) pairs as received (names in any
    case, repeats kept). ``body_sha256``: the hex SHA-256 of the body received (empty by default).
    """
    header_list = [(k.lower(), v) for k, v in headers]
    authorization = next((v for k, v in header_list if k == "authorization"), None)
    pairs = _query_pairs(query_string)
    if authorization is not None and authorization.startswith("AWS4-"):
        fields = _header_fields(authorization, header_list)
        window = (HEADER_SKEW, HEADER_SKEW)
    elif any(k == "X-Amz-Signature" for k, _ in pairs):
        fields = _query_fields(pairs)
        window = (max_skew, fields.expires)
        pairs = [(k, v) for k, v in pairs if k != "X-Amz-Signature"]
    else:
        raise MalformedSignature(
            "the request is not signed: send an 'Authorization: AWS4-HMAC-SHA256 ...' header or a presigned URL"
        )
    access_key, datestamp, region, service = _scope(fields.credential, fields.amz_date)
    signed_at = _date(fields.amz_date)
    secret = secret_lookup(access_key, fields.session_token)
    if secret is None:
        raise UnknownAccessKey(f"the access key id {access_key!r} is not one this server issued, or has been revoked")
    payload = fields.payload_hash if fields.payload_hash is not None else body_sha256
    if payload not in (UNSIGNED_PAYLOAD, body_sha256):
        raise MalformedSignature("x-amz-content-sha256 is not the SHA-256 of the body received")
    canonical_headers = _canonical_headers(fields.signed_headers, header_list)
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted((_uri_encode(k), _uri_encode(v)) for k, v in pairs))
    key = derive_signing_key(secret, datestamp, region, service)
    scope_line = f"{ALGORITHM}\n{fields.amz_date}\n{datestamp}/{region}/{service}/aws4_request\n"
    tail = f"\n{canonical_query}\n{canonical_headers}\n{fields.signed_headers}\n{payload}"
    matched = False
    for uri in _canonical_uris(raw_path):
        request_hash = hashlib.sha256(f"{method.upper()}\n{uri}{tail}".encode()).hexdigest()
        expected = hmac.digest(key, (scope_line + request_hash).encode(), "sha256").hex()
        matched |= hmac.compare_digest(expected.encode(), fields.signature.encode("utf-8", "replace"))
    if not matched:
        raise SignatureMismatch(
            "the request signature does not match: check the secret access key and session token, "
            "and that nothing between client and server rewrote the request"
        )
    _check_time(signed_at, time.time() if now is None else now, *window)
    return SignedRequest(access_key, fields.session_token, signed_at)


@dataclass(frozen=True)
class _Fields:
    credential: str
    signed_headers: str
    signature: str
    amz_date: str
    session_token: str | None
    payload_hash: str | None  # None: the body's own hash
    expires: int = 0


def _header_fields(authorization: str, headers: list[tuple[str, str]]) -> _Fields:
    algorithm, _, rest = authorization.partition(" ")
    if algorithm != ALGORITHM:
        raise MalformedSignature(f"unsupported signing algorithm {algorithm!r}: expected {ALGORITHM}")
    found: dict[str, str] = {}
    for part in rest.split(","):
        match = _AUTH_FIELD.fullmatch(part)
        if match is None or match.group(1) in found:
            raise MalformedSignature("malformed Authorization header: expected Credential=, SignedHeaders=, Signature=")
        found[match.group(1)] = match.group(2)
    if set(found) != {"Credential", "SignedHeaders", "Signature"}:
        raise MalformedSignature("malformed Authorization header: Credential, SignedHeaders and Signature are needed")
    by_name = dict(headers)
    amz_date = by_name.get("x-amz-date")
    if amz_date is None:
        raise MalformedSignature("missing x-amz-date header: the signing time is needed")
    return _Fields(
        found["Credential"],
        found["SignedHeaders"],
        found["Signature"],
        amz_date.strip(),
        by_name.get("x-amz-security-token"),
        by_name.get("x-amz-content-sha256"),
    )


def _query_fields(pairs: list[tuple[str, str]]) -> _Fields:
    amz: dict[str, str] = {}
    for key, value in pairs:
        if key.startswith("X-Amz-"):
            if key in amz:
                raise MalformedSignature(f"duplicate query parameter {key}")
            amz[key] = value
    for name in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders"):
        if name not in amz:
            raise MalformedSignature(f"missing {name}: the URL is not a complete presigned URL")
    if amz["X-Amz-Algorithm"] != ALGORITHM:
        raise MalformedSignature(f"unsupported X-Amz-Algorithm {amz['X-Amz-Algorithm']!r}: expected {ALGORITHM}")
    expires = amz["X-Amz-Expires"]
    if not expires.isdigit() or not 1 <= int(expires[:8]) <= MAX_EXPIRES_IN:
        raise MalformedSignature(f"X-Amz-Expires {expires!r} must be 1 to {MAX_EXPIRES_IN} seconds")
    return _Fields(
        amz["X-Amz-Credential"],
        amz["X-Amz-SignedHeaders"],
        amz["X-Amz-Signature"],
        amz["X-Amz-Date"],
        amz.get("X-Amz-Security-Token"),
        UNSIGNED_PAYLOAD,
        int(expires),
    )


def _query_pairs(query_string: str) -> list[tuple[str, str]]:
    pairs = []
    for pair in query_string.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            pairs.append((unquote(key), unquote(value)))
    return pairs


def _scope(credential: str, amz_date: str) -> tuple[str, str, str, str]:
    parts = credential.split("/")
    if len(parts) != 5 or not parts[0] or parts[4] != "aws4_request":
        raise MalformedSignature("malformed credential: expected key/date/region/service/aws4_request")
    access_key, datestamp, region, service, _ = parts
    if datestamp != amz_date[:8]:
        raise MalformedSignature(f"credential date {datestamp} does not match the signing date {amz_date}")
    return access_key, datestamp, region, service


def _date(amz_date: str) -> int:
    try:
        return parse_amz_date(amz_date)
    except PermissionDenied as exc:
        raise MalformedSignature(exc.message) from None


def _canonical_headers(signed_headers: str, headers: list[tuple[str, str]]) -> str:
    names = signed_headers.split(";")
    if not signed_headers or names != sorted(set(names)) or "host" not in names:
        raise MalformedSignature(
            f"SignedHeaders {signed_headers!r} must be lower-case names in order, without repeats, host among them"
        )
    values: dict[str, list[str]] = {name: [] for name in names}
    for name, value in headers:
        if name in values:
            values[name].append(_SPACES.sub(" ", value.strip()))
    lines = []
    for name in names:
        if not values[name]:
            raise MalformedSignature(f"signed header {name!r} is missing from the request")
        value = canonical_host(values[name][0]) if name == "host" else ",".join(values[name])
        lines.append(f"{name}:{value}\n")
    return "".join(lines)


def _canonical_uris(raw_path: str) -> list[str]:
    """The path as sent, and (when different) re-encoded by the S3 rule, an encoded ``/`` kept."""
    sent = raw_path or "/"
    segments = [uri_encode_path(unquote(s)).replace("/", "%2F") for s in sent.split("/")]
    normal = "/".join(segments)
    return [sent] if normal == sent else [sent, normal]


def _check_time(signed_at: int, now: float, before: int, after: int) -> None:
    if signed_at > now + before:
        raise SignatureFromFuture(f"the request is dated in the future ({_iso(signed_at)}): check the client's clock")
    if now > signed_at + after:
        raise SignatureExpired(f"the request signature expired at {_iso(signed_at + after)}: sign the request again")
