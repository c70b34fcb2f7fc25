"""The provider's tables by three-part name: ``/catalogs``, ``/schemas``, ``/tables`` of Unity
Catalog's REST API."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter

from deltaport.errors import InvalidParameter
from deltaport.server.admin.bodies import CreateCatalog, CreateSchema, CreateTable, UpdateCatalog, UpdateSchema
from deltaport.server.admin.parts import AdminParts, with_token
from deltaport.server.admin.wire import catalog_json, columns_json, schema_json, table_json


def add_catalog_routes(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    _add_catalogs(router, parts, admin)
    _add_schemas(router, parts, admin)
    _add_tables(router, parts, admin)


def _add_catalogs(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    @router.post("/catalogs", dependencies=[admin])
    def create_catalog(body: CreateCatalog) -> dict:
        parts.check_writable(body.name)
        made = db.create_catalog(body.name, comment=body.comment, storage_root=body.storage_root)
        parts.reload()
        return catalog_json(made)

    @router.get("/catalogs", dependencies=[admin])
    def list_catalogs(max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        page, token = parts.page("catalogs", db.list_catalogs(), lambda c: c.name.lower(), max_results, page_token)
        return with_token({"catalogs": [catalog_json(c) for c in page]}, token)

    @router.get("/catalogs/{name}", dependencies=[admin])
    def get_catalog(name: str) -> dict:
        return catalog_json(db.get_catalog(name))

    @router.patch("/catalogs/{name}", dependencies=[admin])
    def update_catalog(name: str, body: UpdateCatalog) -> dict:
        parts.check_writable()
        changed = db.update_catalog(name, new_name=body.new_name, comment=body.comment)
        parts.reload()
        return catalog_json(changed)

    @router.delete("/catalogs/{name}", dependencies=[admin])
    def delete_catalog(name: str, force: bool = False) -> dict:
        parts.check_writable()
        db.delete_catalog(name, force=force)
        parts.reload()
        return {}


def _add_schemas(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    @router.post("/schemas", dependencies=[admin])
    def create_schema(body: CreateSchema) -> dict:
        parts.check_writable(f"{body.catalog_name}.{body.name}")
        made = db.create_schema(body.catalog_name, body.name, comment=body.comment)
        parts.reload()
        return schema_json(made)

    @router.get("/schemas", dependencies=[admin])
    def list_schemas(catalog_name: str, max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        schemas = db.list_schemas(catalog_name)
        page, token = parts.page(
            f"schemas:{catalog_name.lower()}", schemas, lambda s: s.name.lower(), max_results, page_token
        )
        return with_token({"schemas": [schema_json(s) for s in page]}, token)

    @router.get("/schemas/{full_name}", dependencies=[admin])
    def get_schema(full_name: str) -> dict:
        return schema_json(db.get_schema(full_name))

    @router.patch("/schemas/{full_name}", dependencies=[admin])
    def update_schema(full_name: str, body: UpdateSchema) -> dict:
        parts.check_writable()
        changed = db.update_schema(full_name, new_name=body.new_name, comment=body.comment)
        parts.reload()
        return schema_json(changed)

    @router.delete("/schemas/{full_name}", dependencies=[admin])
    def delete_schema(full_name: str, force: bool = False) -> dict:
        parts.check_writable()
        db.delete_schema(full_name, force=force)
        parts.reload()
        return {}


def _add_tables(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    def columns(location: str) -> list[dict[str, Any]]:
        schema, partition_columns = parts.describe_table(location)
        return columns_json(schema, partition_columns)

    @router.post("/tables", dependencies=[admin])
    def create_table(body: CreateTable) -> dict:
        parts.check_writable(f"{body.catalog_name}.{body.schema_name}.{body.name}")
        if body.table_type != "EXTERNAL" or body.data_source_format != "DELTA":
            raise InvalidParameter(
                f"a table of type {body.table_type} in format {body.data_source_format} cannot be shared here: "
                "create it with table_type EXTERNAL and data_source_format DELTA"
            )
        # the names and the location's rules first (nothing outside the storage root is ever read),
        # then whether a Delta table is there, then the table made (its checks run again, atomically)
        db.check_new_table(body.catalog_name, body.schema_name, body.name, body.storage_location)
        described = columns(body.storage_location)
        made = db.create_table(
            body.catalog_name, body.schema_name, body.name, body.storage_location, comment=body.comment
        )
        parts.reload()
        return table_json(made, described)

    @router.get("/tables", dependencies=[admin])
    def list_tables(
        catalog_name: str, schema_name: str, max_results: Optional[int] = None, page_token: Optional[str] = None
    ) -> dict:
        tables = db.list_tables(catalog_name, schema_name)
        kind = f"tables:{catalog_name.lower()}.{schema_name.lower()}"
        page, token = parts.page(kind, tables, lambda t: t.name.lower(), max_results, page_token)
        return with_token({"tables": [table_json(t) for t in page]}, token)

    @router.get("/tables/{full_name}/exists", dependencies=[admin])
    def table_exists(full_name: str) -> dict:
        return {"table_exists": db.table_exists(full_name)}

    @router.get("/tables/{full_name}", dependencies=[admin])
    def get_table(full_name: str) -> dict:
        table = db.get_table(full_name)
        return table_json(table, columns(table.storage_location))

    @router.delete("/tables/{full_name}", dependencies=[admin])
    def delete_table(full_name: str) -> dict:
        parts.check_writable()
        db.delete_table(full_name)
        parts.reload()
        return {}
