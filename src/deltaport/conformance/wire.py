"""The wire as a recipient sees it: HTTP requests to a sharing server and the raw answers.

Nothing here trusts the server: every answer is read as bytes and judged by the checks. The
recipient's bearer token goes only to the sharing server, never to a file URL, and presigned URLs
never appear in a check's output (:func:`redact`).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson

#: Passed as ``token=`` to send a request without an Authorization header.
NO_TOKEN = ""

_URL_QUERY = re.compile(r"""(https?://[^\s"'?<>]+)\?[^\s"'<>]*""")


class Failed(Exception):
    """A check saw the protocol broken: what the protocol asks for, and what came back."""

    def __init__(self, expected: str, got: str) -> None:
        super().__init__(f"expected {expected}; got {got}")
        self.expected = expected
        self.got = redact(got)


class Skipped(Exception):
    """A check cannot run against this server; the message says why."""


def expect(condition: Any, expected: str, got: Any) -> None:
    """Fail with ``expected``/``got`` unless ``condition`` holds (``got`` is only rendered then)."""
    if not condition:
        raise Failed(expected, got() if callable(got) else str(got))


def redact(text: str) -> str:
    """``text`` with the query string of every URL in it cut (presigned URLs carry credentials)."""
    return _URL_QUERY.sub(r"\1?<query>", text)


def snippet(body: bytes, limit: int = 160) -> str:
    """The start of a body as readable text, redacted, for a failure message."""
    text = body[:limit].decode("utf-8", errors="replace").replace("\n", "\\n")
    return redact(text) + ("..." if len(body) > limit else "") if text else "an empty body"


def unique_name(prefix: str = "conformance_missing") -> str:
    """A name no server shares (random), for the not-found checks."""
    return f"{prefix}_{secrets.token_hex(4)}"


class _RedactUrls(logging.Filter):
    """Cuts query strings out of httpx's request log lines (a presigned URL's is a credential)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(str(a)) if isinstance(a, (str, httpx.URL)) else a for a in record.args)
        return True


@dataclass(frozen=True)
class ErrorSeen:
    """An error answer of the sharing server (never of a file URL), kept for the error-shape check."""

    method: str
    path: str
    status: int
    body: bytes


class Wire:
    """HTTP to one sharing server as one recipient: ``endpoint`` is the profile's URL prefix."""

    def __init__(
        self,
        endpoint: str,
        token: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token
        self.errors_seen: list[ErrorSeen] = []
        common: dict[str, Any] = {"timeout": timeout, "headers": {"User-Agent": "deltaport-conformance"}}
        if transport is not None:
            common["transport"] = transport
        self._api = httpx.Client(follow_redirects=False, **common)
        self._files = httpx.Client(follow_redirects=True, **common)  # no Authorization, ever
        self._log_filter = _RedactUrls()
        logging.getLogger("httpx").addFilter(self._log_filter)

    def close(self) -> None:
        self._api.close()
        self._files.close()
        logging.getLogger("httpx").removeFilter(self._log_filter)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
    ) -> httpx.Response:
        """``method`` on ``endpoint + path`` with the profile's token (or ``token``; :data:`NO_TOKEN`
        for none). ``body`` is sent as JSON. 429 and 503 are retried twice, after Retry-After (at
        most 5 s). Error answers are kept in :attr:`errors_seen`."""
        sent = dict(headers or {})
        bearer = self._token if token is None else token
        if bearer:
            sent["Authorization"] = f"Bearer {bearer}"
        if body is not None:
            content = orjson.dumps(body)
            sent.setdefault("Content-Type", "application/json; charset=utf-8")
        for attempt in range(3):
            resp = self._api.request(method, self.endpoint + path, params=params, content=content, headers=sent)
            if resp.status_code not in (429, 503) or attempt == 2:
                break
            time.sleep(_retry_after(resp))
        if resp.status_code >= 400 and method != "HEAD":
            self.errors_seen.append(ErrorSeen(method, path, resp.status_code, resp.content))
        return resp

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def fetch(self, url: str, headers: Mapping[str, str] | None = None) -> httpx.Response:
        """GET a file URL the server handed out, as any HTTP client would: no bearer token."""
        return self._files.get(url, headers=dict(headers or {}))


def _retry_after(resp: httpx.Response) -> float:
    try:
        return min(max(float(resp.headers.get("Retry-After", "1")), 0.0), 5.0)
    except ValueError:
        return 1.0


def table_path(share: str, schema: str, table: str) -> str:
    """The URL path of a table under the endpoint, each name percent-encoded."""
    return f"/shares/{quote(share, safe='')}/schemas/{quote(schema, safe='')}/tables/{quote(table, safe='')}"


def what(resp: httpx.Response) -> str:
    """An answer in a few words for a failure message: status and the start of the body."""
    return f"HTTP {resp.status_code} with {snippet(resp.content)}"


def expect_status(resp: httpx.Response, status: int, request: str) -> None:
    expect(resp.status_code == status, f"HTTP {status} for {request}", lambda: what(resp))


def json_object(resp: httpx.Response, request: str) -> dict[str, Any]:
    """The JSON object a JSON endpoint answered (status 200, ``application/json``)."""
    expect_status(resp, 200, request)
    media = resp.headers.get("content-type", "")
    expect(media.startswith("application/json"), f"Content-Type application/json for {request}", media or "none")
    try:
        body = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        raise Failed(f"a JSON object for {request}", snippet(resp.content)) from None
    expect(isinstance(body, dict), f"a JSON object for {request}", lambda: snippet(resp.content))
    return body


def version_header(resp: httpx.Response, request: str) -> int:
    """The ``Delta-Table-Version`` header: present, once, a whole number."""
    values = resp.headers.get_list("Delta-Table-Version")
    expect(values, f"a Delta-Table-Version header on {request}", "no such header")
    expect(len(values) == 1, f"one Delta-Table-Version header on {request}", lambda: f"{len(values)} of them")
    expect(values[0].strip().isdigit(), f"Delta-Table-Version to be a version number on {request}", values[0])
    return int(values[0])


def ndjson(resp: httpx.Response, request: str) -> list[dict[str, Any]]:
    """The lines of an NDJSON answer (status 200, ``application/x-ndjson``): one JSON object each."""
    expect_status(resp, 200, request)
    media = resp.headers.get("content-type", "")
    expect(media.startswith("application/x-ndjson"), f"Content-Type application/x-ndjson for {request}", media)
    raw = resp.content.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    lines = []
    for number, text in enumerate(raw, 1):
        try:
            line = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise Failed(f"one JSON object per line from {request}", f"line {number}: {snippet(text)}") from None
        expect(isinstance(line, dict), f"one JSON object per line from {request}", f"line {number}: {snippet(text)}")
        lines.append(line)
    return lines


def error_problem(status: int, body: bytes) -> str | None:
    """Why an error answer is not the protocol's ``{"errorCode", "message"}`` JSON; None if it is."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"HTTP {status} with a body that is not JSON: {snippet(body)}"
    if not isinstance(parsed, dict):
        return f"HTTP {status} with JSON that is not an object: {snippet(body)}"
    missing = [key for key in ("errorCode", "message") if not isinstance(parsed.get(key), str)]
    if missing:
        return f"HTTP {status} without string {' and '.join(missing)}: {snippet(body)}"
    if not parsed["errorCode"]:
        return f"HTTP {status} with an empty errorCode: {snippet(body)}"
    return None


def expect_error(resp: httpx.Response, status: int, request: str) -> None:
    """The answer is the protocol's JSON error with ``status``."""
    expect_status(resp, status, request)
    problem = error_problem(resp.status_code, resp.content)
    expect(problem is None, f'a JSON {{"errorCode", "message"}} body for {request}', problem)
