"""Query parameters as the routes declare them: a request naming one its route does not declare is
refused (a misspelt ``versoin`` would otherwise be ignored), and the hot paths read exactly what the
routes declare."""

from __future__ import annotations

import difflib
from typing import Any

from fastapi import Depends, Request

from deltaport.errors import InvalidParameter


def declared_params(route: Any, kind: str) -> tuple[str, ...]:
    """The parameters of one kind (``query_params``, ``header_params``) a route declares, its own and
    its dependencies', by alias in signature order."""
    names: list[str] = []
    stack = [route.dependant]
    while stack:
        dependant = stack.pop(0)
        names.extend(f.alias for f in getattr(dependant, kind))
        stack.extend(dependant.dependencies)
    return tuple(dict.fromkeys(names))


def declared_query_params(route: Any) -> tuple[str, ...]:
    """The query parameters a route declares; worked out once and kept on the route (routes are
    unhashable, and ids are reused once an app is gone)."""
    known = getattr(route, "_deltaport_query_params", None)
    if known is None:
        known = route._deltaport_query_params = declared_params(route, "query_params")
    return known


async def known_query_params(request: Request) -> None:
    """A dependency that refuses query parameters the route does not declare (a misspelt
    ``versoin`` would otherwise be ignored and the request answered as if it were not there).

    The route is named by the last segment of its path (``GET .../metadata``). Async, so it runs
    on the event loop: a sync dependency would cost every request a trip to the thread pool."""
    route = request.scope.get("route")
    if route is None or not request.scope.get("query_string"):
        return
    accepted = declared_query_params(route)
    unknown = [k for k in request.query_params if k not in accepted]
    if not unknown:
        return
    hints = []
    for k in unknown:
        close = [a for a in accepted if a.lower() == k.lower()] or difflib.get_close_matches(k, accepted, n=1)
        if close:
            hints.append(f"'{close[0]}' for '{k}'")
    where = route.path.rsplit("/", 1)[-1]  # one segment: a longer path would read as a location to redact
    raise InvalidParameter(
        f"Unknown query parameter{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)} for "
        f"{request.method} .../{where}; accepted: {', '.join(accepted) or 'none'}"
        + (f" (did you mean {', '.join(hints)}?)" if hints else "")
    )


QUERY_CHECK = [Depends(known_query_params)]
