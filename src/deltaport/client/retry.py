"""Retries with exponential backoff: HTTP 429, 5xx and connection errors; never other 4xx.

A call that starts retrying says so once, at INFO on the ``deltaport.client`` logger: what it
waits for and for how long at most (``what`` names the request without query string, so no
token or presigned URL reaches the log). A caller may refuse to retry a connection error
(``unreachable``): the REST client does so for an endpoint that has never answered, since a
wrong endpoint does not become right by waiting.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from deltaport.client.errors import ConnectionFailed

__all__ = [
    "NO_RETRY",
    "RetryPolicy",
    "announce_retries",
    "call_with_retries",
    "is_retryable_status",
    "unreachable",
    "unreachable_reason",
]

log = logging.getLogger("deltaport.client")

T = TypeVar("T")


def is_retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` more attempts after the first, sleeping ``initial_backoff`` seconds and
    doubling up to ``max_backoff``. A ``Retry-After`` header (seconds) is honoured up to
    ``max_backoff``. ``sleep`` is injectable for tests."""

    max_retries: int = 10
    initial_backoff: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        wait = min(self.max_backoff, self.initial_backoff * self.multiplier**attempt)
        if response is not None:
            after = response.headers.get("Retry-After")
            if after and after.strip().isdigit():
                wait = min(self.max_backoff, max(wait, float(after)))
        return wait


NO_RETRY = RetryPolicy(max_retries=0)


def unreachable_reason(exc: httpx.TransportError) -> str | None:
    """Why a connection could not even be opened (the host name does not resolve, the connection
    was refused, connecting timed out), or None for an error on an open connection."""
    if not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return None
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(cause, ConnectionRefusedError):
            return "the connection was refused"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.ConnectTimeout):
        return "connecting timed out"
    return f"{type(exc).__name__}: {exc or 'cannot connect'}"


def unreachable(
    endpoint: str, exc: httpx.TransportError, *, what: str = "the sharing server", field: str = "endpoint"
) -> ConnectionFailed | None:
    """``exc`` as the error of an endpoint that cannot be reached, when no connection could be
    opened (None otherwise): one line naming the endpoint, the profile's ``field`` that holds it
    and the fix."""
    reason = unreachable_reason(exc)
    if reason is None:
        return None
    shown = httpx.URL(endpoint).copy_with(username=None, password=None, query=None, fragment=None)
    return ConnectionFailed(
        f"cannot reach {what} at {shown}: {reason}; check the profile's {field} and that the server is up"
    )


def announce_retries(policy: RetryPolicy, what: str, reason: str, first_delay: float) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    budget = first_delay + sum(policy.delay(i) for i in range(1, policy.max_retries))
    log.info(
        "%s: %s; waiting for the server to recover: up to %d more attempt(s) over at most %.3g s",
        what,
        reason,
        policy.max_retries,
        budget,
    )


def call_with_retries(
    fn: Callable[[], httpx.Response],
    policy: RetryPolicy,
    *,
    what: str,
    on_retry: Callable[[int, str], None] | None = None,
    unreachable: Callable[[httpx.TransportError], Exception | None] | None = None,
) -> httpx.Response:
    """Call ``fn`` until it returns a response whose status is not retryable, or retries run out.

    ``fn`` must read (or close) the body of any response it returns. Connection errors (any
    :class:`httpx.TransportError`, including a body cut short) are retried too; when retries run
    out they raise :class:`ConnectionFailed`, and a retryable status is returned to the caller,
    which turns it into the server's error. ``unreachable`` may turn a connection error into an
    exception raised at once, without retrying.
    """
    attempt = 0
    while True:
        try:
            response = fn()
        except httpx.TransportError as exc:
            refused = unreachable(exc) if unreachable is not None else None
            if refused is not None:
                raise refused from exc
            if attempt >= policy.max_retries:
                raise ConnectionFailed(
                    f"could not complete {what} after {attempt + 1} attempt(s): "
                    f"{type(exc).__name__}: {exc or 'connection error'}; check the endpoint "
                    "and the network"
                ) from exc
            if on_retry is not None:
                on_retry(attempt, type(exc).__name__)
            wait = policy.delay(attempt)
            if attempt == 0:
                announce_retries(policy, what, f"{type(exc).__name__}: {exc or 'connection error'}", wait)
            policy.sleep(wait)
            attempt += 1
            continue
        if not is_retryable_status(response.status_code) or attempt >= policy.max_retries:
            return response
        if on_retry is not None:
            on_retry(attempt, f"HTTP {response.status_code}")
        wait = policy.delay(attempt, response)
        if attempt == 0:
            announce_retries(policy, what, f"the server answered HTTP {response.status_code}", wait)
        policy.sleep(wait)
        attempt += 1
