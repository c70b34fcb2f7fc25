"""The two calls clients poll, answered without the framework's routing and parameter machinery.

``GET …/tables/{table}/version`` and ``GET …/tables/{table}/metadata`` are what readers ask most
often (streaming readers poll the version), and on a cached table the framework's route matching
and dependency solving cost more than the answer. This middleware matches those two paths itself
and calls the same handlers the routes call. It only takes requests it reads exactly as the routes
would: GET, no root path, known query parameters each given once with a value, single-valued
headers. Anything else, including every malformed request, goes on to the routes, whose answers
(and errors) are the reference; tests compare the two paths. A request it answers gets the scope's
``route`` (the route it stands in for, when given) and ``path_params`` just as routing would set
them, for the middleware outside it (metrics, audit).

Fast form of: the ``GET …/version`` and ``GET …/metadata`` routes. Held equal by:
tests/server/fast/test_hot_paths.py.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from deltaport.errors import DeltaportError
from deltaport.server import errors

#: A handler gets share, schema, table, the query parameters and the headers it names.
Handler = Callable[[str, str, str, dict[str, str], dict[str, str]], Awaitable[Response]]
#: The scope key of a call :meth:`HotTableCalls.take` has read already (the app's front, app.py).
TAKEN = "deltaport.hot_call"
#: Per call (the last path segment): its handler, the query parameters its route declares, and the
#: (lower-case) headers it reads.
Call = tuple[Handler, tuple[str, ...], tuple[str, ...]]


class HotTableCalls:
    """Pure ASGI middleware answering GET /version and /metadata of a table directly."""

    def __init__(self, app, *, prefix: str, calls: dict[str, Call], routes: Mapping[str, object] | None = None) -> None:
        self.app = app
        self.calls = calls
        self.routes = dict(routes or {})  # call name -> the route it stands in for
        self.pattern = re.compile(
            re.escape(prefix)
            + r"/shares/([^/]+)/schemas/([^/]+)/tables/([^/]+)/("
            + "|".join(map(re.escape, calls))
            + r")"
        )

    def take(self, scope) -> tuple[str, Handler, dict[str, str], dict[str, str]] | None:
        """The call (its name, handler, query parameters and headers) when this middleware answers
        ``scope``, else None: the routes answer it."""
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            match = self.pattern.fullmatch(scope["path"])
            if match is not None:
                name = match.group(4)
                handler, accepted, wanted = self.calls[name]
                call = _read(scope, accepted, wanted)
                if call is not None:
                    scope["path_params"] = {"share": match.group(1), "schema": match.group(2), "table": match.group(3)}
                    return name, handler, call[0], call[1]
        return None

    async def __call__(self, scope, receive, send):
        taken = scope.pop(TAKEN, None) or self.take(scope)
        if taken is None:
            return await self.app(scope, receive, send)
        name, handler, query, headers = taken
        if name in self.routes:
            scope["route"] = self.routes[name]
        params = scope["path_params"]
        try:
            response = await handler(params["share"], params["schema"], params["table"], query, headers)
        except DeltaportError as exc:
            response = await errors.deltaport_error(Request(scope), exc)
        await response(scope, receive, send)


def _read(scope, accepted: tuple[str, ...], wanted: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]] | None:
    """The call's query parameters and headers, or None when the routes should read them."""
    query: dict[str, str] = {}
    raw = scope.get("query_string") or b""
    if raw:
        for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
            if key not in accepted or key in query or not value:
                return None
            query[key] = value
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        name = key.decode("latin-1").lower()
        if name in wanted:
            if name in headers:
                return None
            headers[name] = value.decode("latin-1")
    return query, headers
