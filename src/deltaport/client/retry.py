"""Retries with exponential backoff: HTTP 429, 5xx and connection errors; never other 4xx."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from deltaport.client.errors import ConnectionFailed

__all__ = ["NO_RETRY", "RetryPolicy", "call_with_retries", "is_retryable_status"]

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


def call_with_retries(
    fn: Callable[[], httpx.Response],
    policy: RetryPolicy,
    *,
    what: str,
    on_retry: Callable[[int, str], None] | None = None,
) -> httpx.Response:
    """Call ``fn`` until it returns a response whose status is not retryable, or retries run out.

    ``fn`` must read (or close) the body of any response it returns. Connection errors (any
    :class:`httpx.TransportError`, including a body cut short) are retried too; when retries run
    out they raise :class:`ConnectionFailed`, and a retryable status is returned to the caller,
    which turns it into the server's error.
    """
    attempt = 0
    while True:
        try:
            response = fn()
        except httpx.TransportError as exc:
            if attempt >= policy.max_retries:
                raise ConnectionFailed(
                    f"could not complete {what} after {attempt + 1} attempt(s): "
                    f"{type(exc).__name__}: {exc or 'connection error'}; check the endpoint "
                    "and the network"
                ) from exc
            if on_retry is not None:
                on_retry(attempt, type(exc).__name__)
            policy.sleep(policy.delay(attempt))
            attempt += 1
            continue
        if not is_retryable_status(response.status_code) or attempt >= policy.max_retries:
            return response
        if on_retry is not None:
            on_retry(attempt, f"HTTP {response.status_code}")
        policy.sleep(policy.delay(attempt, response))
        attempt += 1
