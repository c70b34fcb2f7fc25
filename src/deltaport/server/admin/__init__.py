"""The admin API: Unity Catalog's sharing REST API under ``/api/2.1/unity-catalog``, so that the
Databricks SDK (``WorkspaceClient(host=..., token=<admin token>)``) administers the server
unchanged. Errors take Unity Catalog's shape ``{"error_code","message"}`` (see server/errors.py).

Admin tokens are not recipient tokens: no recipient token opens an admin route, and an admin
token reads no share unless it is also a recipient's.
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, FastAPI, Header
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from deltaport.errors import DeltaportError
from deltaport.server import errors
from deltaport.server.admin.activation import add_activation_routes
from deltaport.server.admin.audit_routes import add_audit_routes
from deltaport.server.admin.catalog_routes import add_catalog_routes
from deltaport.server.admin.parts import AdminParts
from deltaport.server.admin.sharing_routes import add_sharing_routes
from deltaport.server.ops.docs_pages import add_docs_pages

__all__ = ["AdminParts", "add_activation_routes", "admin_router", "create_admin_app"]


def admin_router(parts: AdminParts) -> APIRouter:
    """The admin routes, to be included under ``/api/2.1/unity-catalog``."""

    def require_admin(authorization: Optional[str] = Header(None)) -> str:
        return parts.check_admin(authorization)

    admin = Depends(require_admin)
    router = APIRouter(prefix=errors.ADMIN_PREFIX, tags=["admin"])
    add_catalog_routes(router, parts, admin)
    add_sharing_routes(router, parts, admin)
    add_audit_routes(router, parts, admin)
    return router


def create_admin_app(parts: AdminParts) -> FastAPI:
    """The admin API alone, for a listener of its own (``adminPort``, e.g. on loopback only)."""
    app = FastAPI(
        title="deltaport admin",
        version="0.1.0",
        description="Unity Catalog's sharing API.",
        docs_url=None,
        redoc_url=None,
    )
    add_docs_pages(app)
    app.add_exception_handler(DeltaportError, errors.deltaport_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(StarletteHTTPException, errors.http_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(RequestValidationError, errors.validation_error)  # type: ignore[arg-type]  # typed for Exception
    app.add_exception_handler(Exception, errors.unexpected_error)
    app.include_router(admin_router(parts))
    return app
