"""Routes declared at module level, as data: each module of endpoints keeps a :class:`RouteTable`
that its functions are added to by decorator, and the app installs it under its prefix. Installed
with ``add_api_route``, each becomes one of the app's own routes (what the hot paths, the route
labels of the metrics and the query-parameter check read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

Endpoint = Callable[..., Any]


class RouteTable:
    def __init__(self) -> None:
        self.routes: list[tuple[str, str, Endpoint, dict[str, Any]]] = []

    def route(self, method: str, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        def add(endpoint: Endpoint) -> Endpoint:
            self.routes.append((method, path, endpoint, options))
            return endpoint

        return add

    def get(self, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        return self.route("GET", path, **options)

    def head(self, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        return self.route("HEAD", path, **options)

    def post(self, path: str, **options: Any) -> Callable[[Endpoint], Endpoint]:
        return self.route("POST", path, **options)

    def install(self, app: FastAPI, prefix: str = "") -> None:
        for method, path, endpoint, options in self.routes:
            app.add_api_route(prefix + path, endpoint, methods=[method], **options)
