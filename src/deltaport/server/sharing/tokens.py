"""Signed page and refresh tokens.

A token is ``base64url(json payload) "." base64url(HMAC-SHA256(secret, payload))``. The payload
binds the token to its kind, the recipient, the table (name and id), a checksum of the query
parameters, and an expiry. Nothing a client sends back is trusted before the signature checks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any

import orjson

from deltaport.errors import InvalidParameter


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """Decode unpadded base64url, refusing any text that is not the one encoding of its bytes.

    Without the round trip, the unused low bits of the last character could be changed and the
    token would still verify: a token would have several spellings.
    """
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not canonical base64url")
    return data


def params_checksum(params: dict[str, Any]) -> str:
    """Stable digest of the query parameters a later page must repeat."""
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


@dataclass(frozen=True)
class TokenBinding:
    """What a token is bound to: recipient and table (name plus config id)."""

    recipient: str
    table: str  # "share.schema.table", lower-cased
    table_id: str = ""


_WORDS = {
    "page": ("the page token", "Please restart the query."),
    "refresh": ("the refresh token", "Please restart the query."),
}
# the reference server's texts, word for word
_UNREADABLE = {"page": "Error decoding the page token: {token}.", "refresh": "Error decoding refresh token: {token}."}
LIST_TOKEN_ERROR = "invalid 'nextPageToken'. Restart the listing without a pageToken."  # noqa: S105  # a message


class TokenCodec:
    def __init__(self, secret: bytes, *, clock=time.time) -> None:
        self._secret = secret
        self._clock = clock

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` under the token secret: for ids the server hands out and must
        recognise again (async_queries.py)."""
        return hmac.new(self._secret, message, hashlib.sha256).digest()

    def encode(self, kind: str, binding: TokenBinding, data: dict[str, Any], *, ttl_ms: int, params: str = "") -> str:
        payload = orjson.dumps(
            {
                "k": kind,
                "r": binding.recipient,
                "t": binding.table,
                "i": binding.table_id,
                "q": params,
                "e": self.now_ms() + ttl_ms,
                "d": data,
            }
        )
        mac = hmac.new(self._secret, payload, hashlib.sha256).digest()
        return f"{_b64(payload)}.{_b64(mac)}"

    def decode(self, kind: str, token: str, binding: TokenBinding, *, params: str | None = None) -> dict[str, Any]:
        """The token's data, after checking signature, kind, binding, expiry and parameters.

        A list token ("list") that fails any check is just ``invalid 'nextPageToken'``, as in the
        reference server: a listing has nothing to restart but its first page.
        """
        if kind == "list":
            try:
                return self._decode(kind, token, binding, params=params)
            except InvalidParameter:
                raise InvalidParameter(LIST_TOKEN_ERROR) from None
        return self._decode(kind, token, binding, params=params)

    def _decode(self, kind: str, token: str, binding: TokenBinding, *, params: str | None) -> dict[str, Any]:
        what, restart = _WORDS.get(kind, ("the token", "Please restart the query."))
        bad = InvalidParameter(_UNREADABLE.get(kind, "Error decoding the token: {token}.").format(token=token))
        try:
            body, mac = token.split(".", 1)
            payload = _unb64(body)
            given = _unb64(mac)
        except (ValueError, AttributeError):
            raise bad from None
        expected = hmac.new(self._secret, payload, hashlib.sha256).digest()
        if not hmac.compare_digest(given, expected):
            raise bad
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise bad from None
        if obj.get("k") != kind:
            raise bad
        if obj.get("t") != binding.table or obj.get("i") != binding.table_id:
            raise InvalidParameter(f"The table specified in {what} does not match the table being queried.")
        if obj.get("r") != binding.recipient:
            raise bad
        if obj.get("e", 0) <= self.now_ms():
            raise InvalidParameter(f"{what[0].upper()}{what[1:]} has expired. {restart}")
        if params is not None and obj.get("q") != params:
            raise InvalidParameter(
                "Query parameter mismatch detected for the next page query. The query parameter cannot "
                "change when querying the next page results."
            )
        return obj.get("d") or {}
