"""Credentials for the S3-compatible face: stateless, signed, bound to a table, a recipient and the
bearer token it used.

The session token carries, under an HMAC: the table's key, the recipient's key, a short keyed
digest of the recipient's bearer token, the key prefix the credentials read
(``<share>/<schema>/<table>[/sub/path]``), the expiry and the access key id. The secret access key
is derived from the access key id and the session token, never stored: any replica sharing
``tokenSecret`` honours the credentials any of them minted (without one the keys are random per
process). Revoking the recipient, its grant or the token it used stops them at the next request
(the face checks each against the registry as served).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

import orjson

from deltaport.server.sharing.registry import Principal, SharedTable, recipient_key
from deltaport.signing.vending import TemporaryCredentials
from deltaport.storage.locations import Location

__all__ = ["FaceCredentials", "FaceGrant", "face_location"]

_VERSION = "DPF1"
_MAX_LIFETIME = 12 * 3600


def face_location(table: SharedTable, bucket: str) -> Location:
    """Where the face shows ``table``: ``s3://<bucket>/<share>/<schema>/<table>`` (names as configured)."""
    return Location("s3", bucket, f"{table.share.name}/{table.schema.name}/{table.config.name}")


@dataclass(frozen=True)
class FaceGrant:
    """What a session token says (once its HMAC is checked)."""

    table_key: str
    recipient_key: str
    token_tag: str  # "" when minted for an anonymous reader (a server without authentication)
    prefix: str
    expires_at: int  # epoch seconds
    access_key: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FaceCredentials:
    """Mints and reads the face's credentials (see the module)."""

    def __init__(self, token_secret: bytes | None) -> None:
        root = (
            hmac.new(token_secret, b"deltaport directory credentials", hashlib.sha256).digest()
            if token_secret is not None
            else secrets.token_bytes(32)
        )
        self._mac_key = hmac.new(root, b"session token", hashlib.sha256).digest()
        self._secret_key = hmac.new(root, b"secret access key", hashlib.sha256).digest()
        self._tag_key = hmac.new(root, b"bearer token tag", hashlib.sha256).digest()

    def token_tag(self, token_digest: bytes | None) -> str:
        """A short keyed digest of a bearer token's digest ("" for none): tells nothing of the token."""
        if token_digest is None:
            return ""
        return hmac.new(self._tag_key, token_digest, hashlib.sha256).hexdigest()[:24]

    def mint(
        self,
        *,
        table: SharedTable,
        who: Principal,
        location: Location,
        endpoint: str,
        lifetime_seconds: int,
        now: float,
    ) -> TemporaryCredentials:
        """Credentials that read ``location`` (``face_location(table, bucket)`` or a directory in
        it) through the face at ``endpoint`` for ``lifetime_seconds`` (1 s to 12 h)."""
        if location.scheme != "s3" or not location.within(face_location(table, location.authority)):
            raise ValueError(f"{location.url()} is not the face's location of {table.full_name} or inside it")
        if not 1 <= lifetime_seconds <= _MAX_LIFETIME:
            raise ValueError(f"lifetime_seconds must be 1 to {_MAX_LIFETIME}, not {lifetime_seconds}")
        expires_at = int(now) + lifetime_seconds
        access_key = "DPFACE" + secrets.token_hex(7).upper()
        fields = [table.key, recipient_key(who.name), self.token_tag(who.token_digest), location.path]
        payload = orjson.dumps([*fields, expires_at, access_key])
        token = f"{_VERSION}.{_b64(payload)}.{_b64(self._mac(payload))}"
        values = {
            "accessKeyId": access_key,
            "secretAccessKey": self.secret(access_key, token),
            "sessionToken": token,
            "endpoint": endpoint,
        }
        return TemporaryCredentials(location.url(), "aws", values, expires_at * 1000)

    def read(self, access_key: str, session_token: str | None) -> FaceGrant | None:
        """The grant a session token carries, when its HMAC is this server's and it names
        ``access_key``; None otherwise (forged, altered, of another key, or no token at all)."""
        if not session_token:
            return None
        version, _, rest = session_token.partition(".")
        body, _, mac = rest.partition(".")
        try:
            payload, given = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        if version != _VERSION or not hmac.compare_digest(self._mac(payload), given):
            return None
        table_key, recipient, tag, prefix, expires_at, key = orjson.loads(payload)
        if not hmac.compare_digest(key.encode(), access_key.encode("utf-8", "replace")):
            return None
        return FaceGrant(table_key, recipient, tag, prefix, expires_at, key)

    def secret(self, access_key: str, session_token: str) -> str:
        """The secret access key of a pair (derived, never stored)."""
        mac = hmac.new(self._secret_key, f"{access_key}\n{session_token}".encode(), hashlib.sha256).digest()
        return _b64(mac)[:40]

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._mac_key, payload, hashlib.sha256).digest()[:24]
