"""What the ``deltaport admin`` commands share: calls of the admin API over plain HTTP (the
standard library's urllib: no optional extra needed), one-line errors, readable output and the
parsing of times and KEY=VALUE options.

The admin token goes to the ``--host`` it was given for only (no redirect is followed) and is never
printed. Any failure ends in :func:`fail`: ``error: <message>`` on stderr and exit code 1.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import typer

from deltaport import __version__
from deltaport.isotime import iso_to_epoch_ms

API = "/api/2.1/unity-catalog"
DEFAULT_HOST = "http://localhost:8080"
HOST_ENV = "DELTAPORT_HOST"
TOKEN_ENV = "DELTAPORT_ADMIN_TOKEN"

#: The ``--json`` option every command takes (the group takes it too).
JSON_OPTION = typer.Option(False, "--json", help="Print the server's JSON instead of lines.")


def fail(message: str) -> NoReturn:
    """Print ``error: <message>`` (one line) on stderr and exit 1."""
    typer.echo("error: " + " ".join(str(message).split()), err=True)
    raise typer.Exit(code=1)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are answered as errors: the admin token goes to the host it was given for only."""

    def redirect_request(self, req, _fp, code, _msg, headers, _newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


@dataclass(frozen=True)
class AdminClient:
    """Calls of the admin API at ``host`` (a base URL) with an admin ``token``; every failure ends
    in :func:`fail` with the server's message, or with what kept the call from reaching it."""

    host: str
    token: str = field(repr=False)
    timeout: float = 120.0

    def call(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None) -> Any:
        """The JSON answer of ``method`` on ``API + path`` (``path``'s names already quoted)."""
        url = self.host + API + path
        given = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if given:
            url += "?" + urllib.parse.urlencode(given)
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
            "User-Agent": f"deltaport-admin/{__version__}",  # what the audit log names as the client
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            fail(self._refusal(exc))
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
            reason = getattr(exc, "reason", None) or exc
            fail(f"cannot reach the server at {self.host} ({reason}): check --host (or {HOST_ENV}) and that it runs")
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            fail(f"the server at {self.host} did not answer with JSON: is --host a deltaport server?")

    def _refusal(self, exc: urllib.error.HTTPError) -> str:
        """The server's own message for a refused call, or what the status says."""
        if 300 <= exc.code < 400:
            where = exc.headers.get("Location", "elsewhere")
            return f"the server at {self.host} redirects to {where}: give that address as --host"
        try:
            answer = json.loads(exc.read())
            message = answer.get("message") if isinstance(answer, dict) else None
        except (ValueError, OSError):
            message = None
        if message and exc.code == 404 and str(message).startswith("no such endpoint"):
            return (
                f"{self.host} serves no admin API: give --host the base URL of a server with a catalog "
                "database (its adminPort listener, if it has one)"
            )
        if message:
            return str(message)
        if exc.code >= 500:
            return f"the server at {self.host} failed (HTTP {exc.code}): its log says why"
        return f"the server at {self.host} answered HTTP {exc.code} {exc.reason}: is --host a deltaport server?"

    def pages(self, path: str, key: str, query: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a listing, following ``next_page_token``."""
        items: list[Any] = []
        token = None
        while True:
            answer = self.call("GET", path, query={**(query or {}), "page_token": token})
            items += answer.get(key) or []
            token = answer.get("next_page_token")
            if not token:
                return items


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def quoted(*names: str) -> str:
    """``/name/name...``, each name quoted for a URL path."""
    return "".join("/" + urllib.parse.quote(n, safe="") for n in names)


@dataclass(frozen=True)
class Settings:
    """The group's options, as every command sees them (``ctx.obj``)."""

    host: str
    token: str | None = field(repr=False)
    as_json: bool = False

    @classmethod
    def checked(cls, host: str, token: str | None, as_json: bool) -> Settings:
        host = host.strip().rstrip("/")
        parsed = urllib.parse.urlsplit(host)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query or parsed.fragment:
            fail(f"--host must be a base URL such as {DEFAULT_HOST}, not '{host}'")
        token = token.strip() if token else None
        if token is not None and any(ord(c) < 33 or ord(c) == 127 for c in token):
            fail(f"the admin token holds spaces or control characters: check {TOKEN_ENV} or --token")
        return cls(host, token, as_json)


def client(ctx: typer.Context) -> AdminClient:
    """The admin API of the group's ``--host``, with its token (which must be given)."""
    settings = ctx.obj
    if not isinstance(settings, Settings):  # a command run without the group (never from the CLI)
        settings = Settings.checked(DEFAULT_HOST, None, False)
    if not settings.token:
        fail(f"no admin token: set {TOKEN_ENV} (or pass --token) to one of the server's adminTokens")
    return AdminClient(settings.host, settings.token)


def wants_json(ctx: typer.Context, flag: bool) -> bool:
    return flag or bool(getattr(ctx.obj, "as_json", False))


# --- output ---------------------------------------------------------------------------------------


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def when(ms: Any) -> str:
    """Epoch ms as ISO-8601 in UTC; ``-`` for none."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds").replace("+00:00", "Z")


def cell(value: Any) -> str:
    """A value as one short piece of a line."""
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return " ".join(str(value).split())


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    """``rows`` as aligned columns under upper-case headers."""
    cells = [[h.upper() for h, _ in columns]] + [[cell(get(row)) for _, get in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """``label: value`` lines, the values aligned."""
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        typer.echo(f"{label + ':':{width + 1}} {cell(value)}")


def listing(
    ctx: typer.Context, flag: bool, path: str, key: str, columns: Sequence[Column], query: dict[str, Any] | None = None
) -> None:
    """Every item of a listing: as a table, or as ``{key: [...]}`` with ``--json``."""
    items = client(ctx).pages(path, key, query)
    if wants_json(ctx, flag):
        print_json({key: items})
    elif not items:
        typer.echo(f"no {key.replace('_', ' ')}")
    else:
        table(items, columns)


def done(ctx: typer.Context, flag: bool, answer: Any, line: str) -> None:
    """After a write: the server's JSON with ``--json``, else one line saying what was done."""
    if wants_json(ctx, flag):
        print_json(answer)
    else:
        typer.echo(line)


# --- input ----------------------------------------------------------------------------------------


def names(text: str, count: int, what: str) -> list[str]:
    """``text`` split into exactly ``count`` non-empty names at '.'."""
    parts = text.split(".")
    if len(parts) != count or not all(p.strip() for p in parts):
        fail(f"'{text}' is not {what}: give {count} names joined by '.'")
    return parts


def time_ms(text: str, option: str) -> int:
    """Epoch ms from digits (taken as epoch ms) or an ISO-8601 date or time (UTC unless it has a zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return iso_to_epoch_ms(text)
    except ValueError:
        fail(f"{option} '{text}' is not a time: give ISO-8601 (2024-05-01T12:00:00Z, 2024-05-01) or epoch ms")


def pairs(items: Sequence[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` options as a dict (a repeated KEY: the last wins)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{option} '{item}' is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
