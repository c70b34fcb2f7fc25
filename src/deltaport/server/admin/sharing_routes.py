"""What is shared with whom: ``/shares`` (and their permissions) and ``/recipients`` of Unity
Catalog's REST API."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from fastapi import APIRouter, Request

from deltaport.catalog.model import ObjectType, RecipientInfo, SharedObject
from deltaport.catalog.store import ObjectUpdate
from deltaport.errors import InvalidParameter, ResourceNotFound
from deltaport.server.admin.bodies import (
    CreateRecipient,
    CreateShare,
    ObjectUpdateBody,
    RotateToken,
    UpdatePermissions,
    UpdateRecipient,
    UpdateShare,
)
from deltaport.server.admin.parts import AdminParts, with_token
from deltaport.server.admin.wire import (
    recipient_grants_json,
    recipient_json,
    share_grants_json,
    share_json,
)

#: Fields of a shared object an UPDATE may change (the others name it).
_UPDATABLE = (
    "shared_as",
    "history_shared",
    "cdf_enabled",
    "start_version",
    "comment",
    "partitions",
    "access_modes",
    "auxiliary_locations",
)


def add_sharing_routes(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    _add_shares(router, parts, admin)
    _add_permissions(router, parts, admin)
    _add_recipients(router, parts, admin)
    _add_tokens(router, parts, admin)


def _object_update(current: dict[str, SharedObject], body: ObjectUpdateBody) -> ObjectUpdate:
    """The update to send to the catalog: an UPDATE carries the object as it is, with only the
    fields the body gives changed."""
    update = body.to_update()
    if update.action != "UPDATE":
        return update
    existing = current.get(update.data_object.name.lower())
    if existing is None:
        raise ResourceNotFound(f"'{update.data_object.name}' is not in the share: ADD it first")
    given = body.data_object.given()
    changes = {f: getattr(update.data_object, f) for f in _UPDATABLE if f in given}
    return ObjectUpdate("UPDATE", dataclasses.replace(existing, **changes))


def _check_partition_columns(parts: AdminParts, update: ObjectUpdate) -> None:
    """A table's partitions may name only its partition columns (as its Delta log has them now)."""
    obj = update.data_object
    if update.action == "REMOVE" or obj.data_object_type is not ObjectType.TABLE or not obj.partitions:
        return
    _, columns = parts.describe_table(parts.catalog.get_table(obj.name).storage_location)
    known = {c.lower() for c in columns}
    for partition in obj.partitions:
        for value in partition:
            if value.name.lower() not in known:
                raise InvalidParameter(
                    f"'{value.name}' is not a partition column of table '{obj.name}': partitions may name "
                    f"only its partition columns ({', '.join(columns) or 'it has none'})"
                )


def _add_shares(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    @router.post("/shares", dependencies=[admin])
    def create_share(body: CreateShare) -> dict:
        parts.check_writable(body.name)
        made = db.create_share(
            body.name, comment=body.comment, display_name=body.display_name, properties=body.properties
        )
        parts.reload()
        return share_json(made)

    @router.get("/shares", dependencies=[admin])
    def list_shares(max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        page, token = parts.page("shares", db.list_shares(), lambda s: s.name.lower(), max_results, page_token)
        return with_token({"shares": [share_json(s) for s in page]}, token)

    @router.get("/shares/{name}", dependencies=[admin])
    def get_share(name: str, include_shared_data: bool = False) -> dict:
        return share_json(db.get_share(name, include_objects=include_shared_data), with_objects=include_shared_data)

    @router.patch("/shares/{name}", dependencies=[admin])
    def update_share(name: str, body: UpdateShare) -> dict:
        parts.check_writable()
        current = {o.name.lower(): o for o in db.get_share(name, include_objects=True).objects}
        updates = [_object_update(current, u) for u in body.updates]
        for update in updates:
            _check_partition_columns(parts, update)
        changed = db.update_share(
            name,
            new_name=body.new_name,
            comment=body.comment,
            updates=updates,
            display_name=body.display_name,
            properties=body.properties,
        )
        parts.reload()
        return share_json(changed, with_objects=True)

    @router.delete("/shares/{name}", dependencies=[admin])
    def delete_share(name: str) -> dict:
        parts.check_writable()
        db.delete_share(name)
        parts.reload()
        return {}


def _add_permissions(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    @router.get("/shares/{name}/permissions", dependencies=[admin])
    def share_permissions(name: str, max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        grants = db.share_permissions(name)
        page, token = parts.page(
            f"grants:{name.lower()}", grants, lambda g: g.recipient.lower(), max_results, page_token
        )
        return with_token(share_grants_json(page), token)

    @router.patch("/shares/{name}/permissions", dependencies=[admin])
    def update_permissions(name: str, body: UpdatePermissions) -> dict:
        parts.check_writable()
        grants = db.update_permissions(name, [c.to_change() for c in body.changes])
        parts.reload()
        return {} if body.omit_permissions_list else share_grants_json(grants)

    @router.get("/recipients/{name}/share-permissions", dependencies=[admin])
    def recipient_permissions(name: str, max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        grants = db.recipient_permissions(name)
        kind = f"recipient-grants:{name.lower()}"
        page, token = parts.page(kind, grants, lambda g: g.share.lower(), max_results, page_token)
        return with_token(recipient_grants_json(page), token)


def _shown(request: Request, parts: AdminParts, recipient: RecipientInfo) -> dict:
    """The recipient with the activation links of its tokens that are not used nor expired."""
    return recipient_json(recipient, links=parts.links.shown(request, recipient))


def _add_recipients(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    db = parts.catalog

    @router.post("/recipients", dependencies=[admin])
    def create_recipient(request: Request, body: CreateRecipient) -> dict:
        parts.check_writable(body.name)
        made, _ = db.create_recipient(
            body.name,
            comment=body.comment,
            expiration_time=body.expiration_time,
            allowed_ip_addresses=tuple(body.ip_access_list.allowed_ip_addresses) if body.ip_access_list else (),
            properties=body.properties_kvpairs.properties if body.properties_kvpairs else None,
            seal=parts.links.seal,
        )
        parts.reload()
        return _shown(request, parts, made)

    @router.get("/recipients", dependencies=[admin])
    def list_recipients(request: Request, max_results: Optional[int] = None, page_token: Optional[str] = None) -> dict:
        recipients = db.list_recipients()
        page, token = parts.page("recipients", recipients, lambda r: r.name.lower(), max_results, page_token)
        return with_token({"recipients": [_shown(request, parts, r) for r in page]}, token)

    @router.get("/recipients/{name}", dependencies=[admin])
    def get_recipient(request: Request, name: str) -> dict:
        return _shown(request, parts, db.get_recipient(name))

    @router.patch("/recipients/{name}", dependencies=[admin])
    def update_recipient(request: Request, name: str, body: UpdateRecipient) -> dict:
        parts.check_writable()
        changed = db.update_recipient(
            name,
            new_name=body.new_name,
            comment=body.comment,
            expiration_time=body.expiration_time,
            allowed_ip_addresses=tuple(body.ip_access_list.allowed_ip_addresses) if body.ip_access_list else None,
            properties=body.properties_kvpairs.properties if body.properties_kvpairs else None,
        )
        parts.reload()
        return _shown(request, parts, changed)

    @router.delete("/recipients/{name}", dependencies=[admin])
    def delete_recipient(name: str) -> dict:
        parts.check_writable()
        db.delete_recipient(name)
        parts.reload()
        return {}


def _add_tokens(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    @router.post("/recipients/{name}/rotate-token", dependencies=[admin])
    def rotate_token(request: Request, name: str, body: RotateToken) -> dict:
        parts.check_writable()
        rotated, _ = parts.catalog.rotate_token(name, body.existing_token_expire_in_seconds, seal=parts.links.seal)
        parts.reload()
        return _shown(request, parts, rotated)
