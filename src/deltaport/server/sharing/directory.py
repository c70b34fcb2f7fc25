"""Directory access: how a shared table may be read (``accessModes``), where (``location``), and the
temporary credentials that read it (``POST …/temporary-table-credentials``).

A table offers ``dir`` only where the server can vend credentials for it (the config refuses it
elsewhere): a table on local disk is read through the server's own S3-compatible face
(``server/s3face``), whose location is ``s3://<bucket>/<share>/<schema>/<table>``; a table on S3,
Azure or GCS through credentials its cloud issues (``signing/vending``), at the location the
provider configured. Credentials are for the table's root, one of its auxiliary locations or a
directory under one of them, and for nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from deltaport.catalog.served import DIR, URL
from deltaport.errors import InvalidParameter, MalformedRequest, UnsupportedOperation
from deltaport.protocol import lines
from deltaport.server.s3face.credentials import FaceCredentials, face_location
from deltaport.server.sharing.answers import Reply
from deltaport.server.sharing.registry import Principal, SharedTable, recipient_key
from deltaport.signing.vending import CredentialScope, Vendor
from deltaport.storage import is_local
from deltaport.storage.locations import Location, LocationError

log = logging.getLogger("deltaport.server")


#: The vendor for a cloud location and the table's storage options.
CloudVendors = Callable[[Location, Mapping[str, Any]], Vendor]


def url_refusal(shared: SharedTable) -> UnsupportedOperation | None:
    """The error for reading, by file URLs (/query, /changes), a table shared for directory access
    only; None when it offers URLs."""
    if URL in shared.config.access_modes:
        return None
    return UnsupportedOperation(
        f"Table {shared.full_name} is shared for directory access only (accessModes [dir]): ask "
        "POST .../temporary-table-credentials and read the table at its location with a Delta reader, "
        "or ask the provider to add 'url' to its accessModes"
    )


class DirectoryAccess:
    def __init__(
        self, *, face: FaceCredentials, bucket: str, cloud_vendors: CloudVendors, lifetime_seconds: int
    ) -> None:
        self.face = face
        self.bucket = bucket
        self.cloud_vendors = cloud_vendors
        self.lifetime_seconds = lifetime_seconds

    def _root(self, shared: SharedTable) -> tuple[str, Location]:
        """The table's location as announced, and parsed."""
        if is_local(shared.config.location):
            root = face_location(shared, self.bucket)
            return root.url(), root
        announced = shared.config.location.rstrip("/")
        return announced, Location.parse(announced)

    def placement(self, shared: SharedTable) -> dict[str, Any]:
        """The table's ``location``, ``auxiliaryLocations`` and ``accessModes`` as listings and
        metaData lines carry them."""
        modes = shared.config.access_modes
        if DIR not in modes:
            return lines.placement(modes)
        announced, _ = self._root(shared)
        return lines.placement(modes, announced, shared.config.auxiliary_locations)

    def credentials(self, who: Principal, shared: SharedTable, body: bytes, endpoint: str, now: float) -> Reply:
        """The answer to ``POST …/temporary-table-credentials``: credentials for the table's root, or
        for the ``location`` the body asks (the root, an auxiliary location, or under one of them)."""
        if DIR not in shared.config.access_modes:
            raise UnsupportedOperation(
                f"Table {shared.full_name} is not shared for directory access (accessModes "
                f"[{', '.join(shared.config.access_modes)}]): read it with /query, or ask the provider to add "
                "'dir' to its accessModes"
            )
        asked = _asked_location(body)
        announced, root = self._root(shared)
        location = self._check_inside(shared, root, asked)
        where = announced if asked is None else asked
        if is_local(shared.config.location) and location.within(root):
            credentials = self.face.mint(
                table=shared,
                who=who,
                location=location,
                endpoint=endpoint,
                lifetime_seconds=self.lifetime_seconds,
                now=now,
            )
        else:  # a table on a cloud store, or an auxiliary location of one on local disk
            scope = CredentialScope(
                location=location.url(),
                storage_options=shared.storage_options,
                lifetime_seconds=self.lifetime_seconds,
                session_name="deltaport-" + recipient_key(who.name),
            )
            credentials = self.cloud_vendors(location, shared.storage_options).vend(scope, now=now)
        log.info("credentials for %s issued to %s until %d", shared.full_name, who.name, credentials.expiration_ms)
        answer = credentials.wire()
        answer["credentials"]["location"] = where
        return Reply(json=answer)

    def _check_inside(self, shared: SharedTable, root: Location, asked: str | None) -> Location:
        if asked is None:
            return root
        try:
            location = Location.parse(asked)
        except LocationError as exc:
            raise InvalidParameter(f"'location' {exc}") from None
        roots = [root, *(Location.parse(aux) for aux in shared.config.auxiliary_locations)]
        if not any(location.within(r) for r in roots):
            raise InvalidParameter(
                "The requested location must be the same as or under this table's configured storage location: "
                f"{root.url()}" + "".join(f" or {aux}" for aux in shared.config.auxiliary_locations)
            )
        return location


def _asked_location(body: bytes) -> str | None:
    """The body's ``location``; None when the body is empty or names none."""
    if not body.strip():
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise MalformedRequest(
            'the body must be JSON: {} or {"location": "<the table\'s location or a directory under it>"}'
        ) from None
    if not isinstance(parsed, dict):
        raise MalformedRequest('the body must be a JSON object: {"location": "..."}')
    location = parsed.get("location")
    if location is None:
        return None
    if not isinstance(location, str) or not location:
        raise InvalidParameter("'location' must be a non-empty string: the table's location or a directory under it")
    return location
