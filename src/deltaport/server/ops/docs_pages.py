"""The API document's pages, ``/docs`` (Swagger UI) and ``/redoc``, with their scripts and styles
served by this server from an installed package (fastapi-offline's copies), so they render on a
network that reaches no CDN."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

#: Where the pages' assets are served.
ASSETS = "/docs/assets"


def _assets_folder() -> Path:
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError('the API document pages need fastapi-offline: pip install "deltaport[server]"')
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def add_docs_pages(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` for ``app`` (made with ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=_assets_folder()), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - API",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
