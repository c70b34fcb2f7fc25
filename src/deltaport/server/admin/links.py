"""Activation links as the admin API shows them: built on the address recipients reach, and kept
(encrypted) so that ``recipients.get`` and ``recipients.list`` show a token's ``activation_url``
until the link is used or expires, as Unity Catalog does.

The catalog keeps a pending link's activation token only sealed: AES-GCM under a key derived from
the server's ``tokenSecret`` (HMAC-SHA256 of ``"deltaport activation links"``), with the token's
id as associated data, so a sealed value moved to another token does not open. Without a
``tokenSecret`` the key is random per process: links made before a restart are no longer shown
(they still work). A value that does not open (another key) is not shown, never an error.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastapi import Request

from deltaport.catalog.model import RecipientInfo
from deltaport.server.admin.activation import activation_url
from deltaport.server.sources.config import ServerConfig

log = logging.getLogger("deltaport.server")

_NONCE = 12


class ActivationLinks:
    """Seals pending links' activation tokens for the catalog and opens them again as URLs.

    ``secret``: the server's ``tokenSecret`` (None: a random key for this process); ``base``: the
    base URL of the listener that serves activation pages, for an admin request; ``clock``: seconds.
    """

    def __init__(
        self,
        secret: bytes | None,
        base: Callable[[Request], str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        key = hmac.new(secret, b"deltaport activation links", hashlib.sha256).digest() if secret else None
        self._aead = AESGCM(key or secrets.token_bytes(32))
        self._base = base
        self._clock = clock

    def seal(self, token_id: str, activation_token: str) -> bytes:
        """The activation token encrypted and bound to its token id (nonce, then ciphertext)."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, activation_token.encode(), token_id.encode())

    def _open(self, token_id: str, sealed: bytes) -> str | None:
        try:
            return self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], token_id.encode()).decode()
        except (InvalidTag, ValueError):
            return None

    def shown(self, request: Request, recipient: RecipientInfo) -> Mapping[str, str]:
        """Token id -> activation URL, for each of the recipient's links not yet used nor expired."""
        now_ms = int(self._clock() * 1000)
        links = {}
        for token in recipient.tokens:
            if token.activation_sealed is None or not token.link_pending(now_ms):
                continue
            activation = self._open(token.id, token.activation_sealed)
            if activation is not None:
                links[token.id] = activation_url(self._base(request), activation)
        return links


def recipients_base(config: ServerConfig, listener: tuple[str, int] | None = None) -> Callable[[Request], str]:
    """The base URL activation links start with, for an admin request: ``publicUrl`` when set; else
    the request's own when the admin API shares the recipients' listener; else (``adminPort``) the
    recipients' listener as the server knows it (``listener``, the host and port ``deltaport serve``
    binds, by default the config's ``host`` and ``port``), with the admin request's host name when
    the host is every address."""
    if config.public_url:
        public = config.public_url.rstrip("/")
        return lambda request: public
    if config.admin_port is None:
        return lambda request: str(request.base_url).rstrip("/")
    scheme = "https" if config.ssl is not None else "http"
    listen_host, listen_port = listener or (config.host, config.port)

    def base(request: Request) -> str:
        host = listen_host
        if host in ("", "0.0.0.0", "::"):  # noqa: S104  # which address the listener binds; binds nothing
            host = request.url.hostname or "localhost"
        try:
            if ipaddress.ip_address(host).version == 6:
                host = f"[{host}]"
        except ValueError:
            pass  # a name
        return f"{scheme}://{host}:{listen_port}"

    return base
