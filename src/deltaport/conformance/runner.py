"""Running the kit: read the profile, find what the server shares, run every check, report.

Exit statuses (the CLI's): 0 when every check passed or was skipped, 1 when one failed, 2 when the
kit could not start (an unreadable profile, a server it cannot reach, a token the server refuses).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from deltaport.conformance.checks import CHECKS
from deltaport.conformance.discovery import Target, discover
from deltaport.conformance.registry import Check
from deltaport.conformance.wire import Failed, Skipped, Wire, redact

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


class KitError(Exception):
    """The kit cannot run at all; the message names the fix."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    section: str
    status: str  # PASS, FAIL or SKIP
    detail: str  # on failure what was expected and what came back; on a skip why; on a pass a note
    seconds: float

    def line(self) -> str:
        return f"{self.status}  {self.name:<24} [{self.section}]" + (f" {self.detail}" if self.detail else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "section": self.section,
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


def load_profile(path: str) -> tuple[str, str]:
    """The endpoint and bearer token of a profile file (a bearer-token profile, version 1 or 2)."""
    from deltaport.client.errors import ProfileError
    from deltaport.client.profile import BEARER, read_profile

    try:
        profile = read_profile(Path(path))
        expires = profile.expiration_ms()
    except ProfileError as exc:
        raise KitError(str(exc)) from None
    if profile.auth_type != BEARER or not profile.bearer_token:
        raise KitError(f"the profile is of type {profile.auth_type!r}: the kit needs a bearer-token profile")
    if expires is not None and expires < time.time() * 1000:
        raise KitError(f"the profile's token expired at {profile.expiration_time}: ask the provider for a new profile")
    return profile.endpoint, profile.bearer_token


def run_check(check: Check, target: Target) -> CheckResult:
    """One check, its outcome whatever happens (the kit never stops on a server's answer)."""
    start = time.perf_counter()
    try:
        status, detail = PASS, check.run(target) or ""
    except Failed as exc:
        status, detail = FAIL, str(exc)
    except Skipped as exc:
        status, detail = SKIP, str(exc)
    except httpx.HTTPError as exc:
        status, detail = FAIL, f"the request failed: {type(exc).__name__}: {redact(str(exc))}"
    except Exception as exc:  # an answer so far from the protocol that reading it broke: a failure
        status, detail = FAIL, f"an answer the kit could not read ({type(exc).__name__}: {redact(str(exc))})"
    return CheckResult(check.name, check.section, status, detail, time.perf_counter() - start)


def _start(wire: Wire, share: str | None) -> None:
    """Refuse to run when the server cannot be reached or refuses the profile's token, or when
    ``share`` is not one the profile reads: nothing could be checked."""
    path = "/shares" if share is None else f"/shares/{quote(share, safe='')}"
    try:
        resp = wire.get(path)
    except httpx.TransportError as exc:
        raise KitError(f"cannot reach the sharing server at {wire.endpoint}: {exc}") from None
    if resp.status_code in (401, 403):
        raise KitError(f"the server refused the profile's bearer token (HTTP {resp.status_code}): check the profile")
    if share is not None and resp.status_code == 404:
        raise KitError(f"share {share!r} is not shared with this profile (GET {path} answered 404)")


def run(
    profile: str,
    share: str | None = None,
    *,
    emit: Callable[[CheckResult], None] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[CheckResult]:
    """Every check against the server ``profile`` reaches (only ``share`` if given), each result
    handed to ``emit`` as soon as it is known."""
    endpoint, token = load_profile(profile)
    wire = Wire(endpoint, token, transport=transport)
    try:
        _start(wire, share)
        target = Target(wire, discover(wire, share))
        results = []
        for check in CHECKS:
            result = run_check(check, target)
            results.append(result)
            if emit is not None:
                emit(result)
        return results
    finally:
        wire.close()


def summary(results: list[CheckResult]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in (PASS, FAIL, SKIP)}
    seconds = sum(r.seconds for r in results)
    return (
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped ({len(results)} checks, {seconds:.1f} s)"
    )
