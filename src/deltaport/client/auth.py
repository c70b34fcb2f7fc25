"""Credentials for requests to the sharing server: bearer tokens, OAuth client credentials, basic.

Each provider answers :meth:`headers` (the ``Authorization`` header for the next request) and
:meth:`invalidate` (forget a cached token after a 401). Providers are thread-safe: the reader
downloads in threads and may refresh URLs from any of them. :func:`auth_for_profile` shares one
OAuth provider per client credential across the process, so a token is fetched once, not per client.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import httpx
import orjson

from deltaport.client.errors import SharingServerError, TokenExpired
from deltaport.client.profile import BASIC, BEARER, OAUTH, DeltaSharingProfile
from deltaport.client.retry import RetryPolicy, call_with_retries, unreachable
from deltaport.errors import Unauthenticated

__all__ = [
    "AuthProvider",
    "BasicAuth",
    "BearerTokenAuth",
    "OAuthClientCredentials",
    "auth_for_profile",
    "clear_oauth_cache",
]

#: refresh an OAuth token when less than this much of its life is left (capped at half its life)
REFRESH_BEFORE_SECONDS = 600
#: how many OAuth providers (one per client credential) a process keeps
OAUTH_CACHE_SIZE = 64


class AuthProvider(Protocol):
    def headers(self) -> dict[str, str]: ...

    def invalidate(self) -> bool:
        """Drop a cached credential; True if a new one may fix a 401."""
        ...


class BearerTokenAuth:
    """A fixed bearer token, refused locally once the profile's ``expirationTime`` has passed."""

    def __init__(
        self,
        token: str,
        expiration_ms: int | None = None,
        *,
        expiration_text: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self._expiration_ms = expiration_ms
        self._expiration_text = expiration_text
        self._clock = clock

    def check(self) -> None:
        if self._expiration_ms is not None and self._clock() * 1000 >= self._expiration_ms:
            when = self._expiration_text or self._expiration_ms
            raise TokenExpired(
                f"the bearer token in the profile expired at {when}"
                " (the profile's expirationTime); ask the data provider for a new profile file"
            )

    def headers(self) -> dict[str, str]:
        self.check()
        return {"Authorization": f"Bearer {self._token}"}

    def invalidate(self) -> bool:
        return False


class BasicAuth:
    def __init__(self, username: str, password: str) -> None:
        raw = f"{username}:{password}".encode()
        self._value = "Basic " + base64.b64encode(raw).decode("ascii")

    def headers(self) -> dict[str, str]:
        return {"Authorization": self._value}

    def invalidate(self) -> bool:
        return False


class OAuthClientCredentials:
    """OAuth 2.0 client-credentials grant: the token is fetched on first use and refreshed before expiry.

    The token request is ``POST tokenEndpoint`` with ``Authorization: Basic base64(id:secret)`` and
    the form body ``grant_type=client_credentials[&scope=...]``; the answer must carry
    ``access_token`` and ``expires_in`` (seconds, a number or a numeric string).
    """

    def __init__(
        self,
        token_endpoint: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
        refresh_before: float = REFRESH_BEFORE_SECONDS,
        timeout: float = 30.0,
    ) -> None:
        self.token_endpoint = token_endpoint
        self._client_id = client_id
        self._client_secret = client_secret
        self.scope = scope
        self._transport = transport
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._refresh_before = refresh_before
        self._timeout = timeout
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at = 0.0
        self.fetches = 0  # how many tokens were fetched (for tests and diagnostics)

    def headers(self) -> dict[str, str]:
        with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self._fetch()
            return {"Authorization": f"Bearer {self._token}"}

    def invalidate(self) -> bool:
        with self._lock:
            self._token = None
        return True

    def _unreachable(self, exc: httpx.TransportError) -> Exception | None:
        """The first token request fails at once when no connection can be opened (a wrong
        tokenEndpoint); once a token was fetched, the endpoint is waited for like the server."""
        if self.fetches:
            return None
        return unreachable(self.token_endpoint, exc, what="the OAuth token endpoint", field="tokenEndpoint")

    def _fetch(self) -> None:
        basic = base64.b64encode(f"{self._client_id}:{self._client_secret}".encode()).decode("ascii")
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        request = f"POST {httpx.URL(self.token_endpoint).path or '/'} (OAuth token endpoint)"

        def once() -> httpx.Response:
            with httpx.Client(transport=self._transport, timeout=self._timeout) as http:
                response = http.post(
                    self.token_endpoint,
                    data=form,
                    headers={"Authorization": f"Basic {basic}", "Accept": "application/json"},
                )
                response.read()
                return response

        response = call_with_retries(once, self._retry, what=request, unreachable=self._unreachable)
        if response.status_code != 200:
            detail = " ".join(response.text.split())[:300]
            raise Unauthenticated(
                f"the OAuth token endpoint {self.token_endpoint} refused the client credentials: "
                f"HTTP {response.status_code} {detail}; check clientId, clientSecret and scope in "
                "the profile"
            )
        try:
            body = orjson.loads(response.content)
            token = body["access_token"]
            expires_in = float(body["expires_in"])
            if not isinstance(token, str) or not token:
                raise ValueError("empty access_token")
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SharingServerError(
                response.status_code,
                "INVALID_TOKEN_RESPONSE",
                f"the OAuth token endpoint {self.token_endpoint} answered without a usable "
                f"access_token/expires_in ({exc})",
                request=request,
                hint="ask the data provider to check the token endpoint in the profile",
            ) from None
        now = self._clock()
        margin = min(self._refresh_before, expires_in / 2)
        self._token = token
        self._refresh_at = now + expires_in - margin
        self.fetches += 1


_oauth_cache: OrderedDict[tuple, OAuthClientCredentials] = OrderedDict()
_oauth_cache_lock = threading.Lock()


def _shared_oauth(
    profile: DeltaSharingProfile,
    transport: httpx.BaseTransport | None,
    retry: RetryPolicy | None,
    clock: Callable[[], float],
) -> OAuthClientCredentials:
    """One provider per client credential in this process, so its token is fetched once and refreshed
    before expiry however many clients, reads and Spark sessions use the profile.

    Keyed by token endpoint, client id, a digest of the secret and scope, plus the transport and
    clock (a token fetched through one transport is not reused through another).
    """
    secret = profile.client_secret or ""
    key = (
        profile.token_endpoint or "",
        profile.client_id or "",
        hashlib.sha256(secret.encode()).hexdigest(),
        profile.scope,
        transport,
        clock,
    )
    with _oauth_cache_lock:
        provider = _oauth_cache.get(key)
        if provider is None:
            provider = OAuthClientCredentials(
                key[0], key[1], secret, profile.scope, transport=transport, retry=retry, clock=clock
            )
            _oauth_cache[key] = provider
            while len(_oauth_cache) > OAUTH_CACHE_SIZE:
                _oauth_cache.popitem(last=False)
        else:
            _oauth_cache.move_to_end(key)
        return provider


def clear_oauth_cache() -> None:
    """Forget every cached OAuth provider (and its token)."""
    with _oauth_cache_lock:
        _oauth_cache.clear()


def auth_for_profile(
    profile: DeltaSharingProfile,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: RetryPolicy | None = None,
    clock: Callable[[], float] = time.time,
) -> AuthProvider:
    """The credentials of ``profile``; OAuth providers are shared per client credential (see :func:`_shared_oauth`)."""
    kind = profile.auth_type
    if kind == BEARER:
        return BearerTokenAuth(
            profile.bearer_token or "", profile.expiration_ms(), expiration_text=profile.expiration_time, clock=clock
        )
    if kind == OAUTH:
        return _shared_oauth(profile, transport, retry, clock)
    if kind == BASIC:
        return BasicAuth(profile.username or "", profile.password or "")
    raise ValueError(f"unsupported profile type {kind!r}")  # pragma: no cover - the profile parser refuses it
