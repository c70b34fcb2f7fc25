"""GCS: an OAuth token cut down by a Credential Access Boundary to a table's directory.

The server's own token (from the service account key in the storage options: ``service_account_key``
as JSON, or ``service_account`` / ``application_credentials`` as a file) is exchanged at Google's STS
for a token that keeps only ``roles/storage.objectViewer`` on the bucket, and only where the object's
name starts with ``prefix/`` or, for listing, the listed prefix does. A downscoped token lives as
long as the token it came from (an hour): ``expirationTime`` is what STS says, whatever lifetime was
asked. The source token is taken with a service-account JWT signed here (RS256, ``cryptography``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from deltaport.signing.vending import CredentialScope, TemporaryCredentials, option
from deltaport.signing.vending._http import post, refused
from deltaport.storage.locations import Location

__all__ = ["GcsBoundaryVendor", "access_boundary"]

STS_ENDPOINT = "https://sts.googleapis.com/v1/token"
DEFAULT_TOKEN_URI = "https://oauth2.googleapis.com/token"
SOURCE_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


def _cel(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def access_boundary(bucket: str, prefix: str) -> dict[str, Any]:
    """Read (get + list) ``prefix`` of ``bucket`` and nothing else (all of it where ``prefix`` is "")."""
    rule: dict[str, Any] = {
        "availablePermissions": ["inRole:roles/storage.objectViewer"],
        "availableResource": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
    }
    if prefix:
        objects = _cel(f"projects/_/buckets/{bucket}/objects/{prefix}/")
        listed = _cel(f"{prefix}/")
        rule["availabilityCondition"] = {
            "title": "one table's directory",
            "expression": f"resource.name.startsWith({objects}) || "
            f"api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith({listed})",
        }
    return {"accessBoundary": {"accessBoundaryRules": [rule]}}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def service_account_jwt(key: Mapping[str, Any], token_uri: str, now: float) -> str:
    """The signed assertion that asks ``token_uri`` for the service account's token (one hour)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    header = {"alg": "RS256", "typ": "JWT", "kid": key.get("private_key_id", "")}
    issued = int(now)
    claims = {"iss": key["client_email"], "scope": SOURCE_SCOPE, "aud": token_uri, "iat": issued, "exp": issued + 3600}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    private = serialization.load_pem_private_key(str(key["private_key"]).encode(), password=None)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise ValueError("the service account key is not an RSA key")
    signature = private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def _service_account(options: Mapping[str, Any], location: str) -> dict[str, Any]:
    text = option(options, "google_service_account_key", "service_account_key")
    path = option(
        options,
        "google_service_account",
        "service_account",
        "google_service_account_path",
        "service_account_path",
        "google_application_credentials",
        "application_credentials",
    )
    try:
        if text is None and path is not None:
            text = Path(str(path)).read_text()
        key = json.loads(str(text)) if text is not None else None
    except (OSError, ValueError) as exc:
        raise refused(f"the service account key cannot be read ({type(exc).__name__})", location) from exc
    if not isinstance(key, dict) or key.get("type") != "service_account" or "private_key" not in key:
        raise refused(
            "no service account key in the storage options (service_account_key, or service_account naming "
            "the key file): a downscoped token is made from a service account's",
            location,
        )
    return key


@dataclass(frozen=True)
class GcsBoundaryVendor:
    """Vends for ``gs://`` locations. ``sts_endpoint`` is Google's STS unless given (a stand-in in
    tests); ``transport`` (httpx) is injected in tests."""

    sts_endpoint: str | None = None
    transport: httpx.BaseTransport | None = None
    timeout: float = 10

    def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials:
        where = Location.parse(scope.location)
        key = _service_account(scope.storage_options, scope.location)
        token_uri = str(key.get("token_uri") or DEFAULT_TOKEN_URI)
        try:
            assertion = service_account_jwt(key, token_uri, now)
        except (ValueError, TypeError, KeyError) as exc:
            raise refused(f"the service account key cannot sign ({type(exc).__name__})", scope.location) from exc
        with httpx.Client(transport=self.transport, timeout=self.timeout) as http:
            source = post(http, token_uri, scope.location, data={"grant_type": JWT_BEARER, "assertion": assertion})
            exchanged = post(
                http,
                self.sts_endpoint or STS_ENDPOINT,
                scope.location,
                data={
                    "grant_type": TOKEN_EXCHANGE,
                    "subject_token_type": ACCESS_TOKEN,
                    "requested_token_type": ACCESS_TOKEN,
                    "subject_token": source.json()["access_token"],
                    "options": json.dumps(access_boundary(where.authority, where.path), separators=(",", ":")),
                },
            ).json()
        lifetime = exchanged.get("expires_in") or source.json().get("expires_in") or 3600
        expires = now + int(lifetime)
        return TemporaryCredentials(
            scope.location, "gcp", {"oauthToken": exchanged["access_token"]}, int(expires * 1000)
        )
