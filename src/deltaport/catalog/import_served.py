"""A server config's shares and recipients, loaded into a catalog database.

What a config file declares maps onto the catalog as follows: each share's tables become tables of
a catalog named after the share (dots in the share's name become '_'), in schemas named as in the
config, at the same locations, keeping their ids; the share holds each table under the name
recipients knew ("schema.table"), with its history (and so its change data feed), start
version, access modes and auxiliary locations; the share keeps its id, comment, display name and
properties. Each recipient keeps its tokens (the catalog stores the digests the config holds, so the
tokens in recipients' profiles go on working), its expiry, its IP access list and its grants. The
config's single ``authorization.bearerToken`` becomes a recipient named ``bearer`` granted every
share. A recipient whose expiry has passed is left out (and named in the result).

Nothing is imported when anything in it is refused: the import is rehearsed in a scratch database
first, so a refused name or location leaves the target as it was.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from deltaport.catalog.model import ObjectType, SharedObject
from deltaport.catalog.served import RecipientConfig, ShareConfig
from deltaport.catalog.store import CatalogDB
from deltaport.catalog.store_catalog import location_key
from deltaport.catalog.store_types import ObjectUpdate, PermissionChange
from deltaport.errors import InvalidParameter

#: The recipient a config's ``authorization.bearerToken`` is imported as.
BEARER_RECIPIENT = "bearer"


@dataclass(frozen=True)
class Imported:
    shares: int
    tables: int
    recipients: int
    expired: list[str] = field(default_factory=list)  # recipients left out


def _catalog_name(share: str) -> str:
    return share.replace(".", "_")


def check_importable(shares: Sequence[ShareConfig], db: CatalogDB) -> None:
    """Refuse (InvalidParameter) what cannot be imported as it is, before anything is written."""
    for share in shares:
        for schema in share.schemas:
            for table in schema.tables:
                if table.storage_options:
                    raise InvalidParameter(
                        f"table '{share.name}.{schema.name}.{table.name}' has its own storageOptions, which a "
                        "catalog does not keep per table: move them to the config's top-level storageOptions"
                    )
    taken = {c.name.lower() for c in db.list_catalogs()} | {s.name.lower() for s in db.list_shares()}
    for share in shares:
        for name in {share.name, _catalog_name(share.name)}:
            if name.lower() in taken:
                raise InvalidParameter(
                    f"the catalog database has a share or catalog named '{name}' already: import into a new "
                    "database, or delete it first"
                )


def import_served(
    db: CatalogDB,
    shares: Sequence[ShareConfig],
    recipients: Sequence[RecipientConfig],
    bearer_token_hash: bytes | None = None,
) -> Imported:
    """Load ``shares`` and ``recipients`` (as a server config declares them) into ``db``."""
    check_importable(shares, db)
    with tempfile.TemporaryDirectory(prefix="deltaport-import-") as scratch_dir:
        scratch = CatalogDB(f"sqlite:///{scratch_dir}/rehearsal.db")
        try:
            _import(scratch, shares, recipients, bearer_token_hash)  # refusals happen here
        finally:
            scratch.close()
    return _import(db, shares, recipients, bearer_token_hash)


def _import(
    db: CatalogDB, shares: Sequence[ShareConfig], recipients: Sequence[RecipientConfig], bearer: bytes | None
) -> Imported:
    now_ms = int(time.time() * 1000)
    tables = 0
    known: dict[str, str] = {}  # a location's key -> the catalog table made for it
    for share in shares:
        tables += _import_share(db, share, known)
    expired = [r.name for r in recipients if (_expiry(r) or now_ms + 1) <= now_ms]
    for recipient in recipients:
        if recipient.name in expired:
            continue
        db.import_recipient(
            recipient.name,
            [t.digest for t in recipient.tokens],
            expiration_time=_expiry(recipient),
            allowed_ip_addresses=recipient.allowed_ip_addresses,
        )
        _grant(db, recipient.name, recipient.shares)
    if bearer is not None:
        db.import_recipient(BEARER_RECIPIENT, [bearer])
        _grant(db, BEARER_RECIPIENT, [s.name for s in shares])
    return Imported(len(shares), tables, len(recipients) - len(expired) + (bearer is not None), expired)


def _import_share(db: CatalogDB, share: ShareConfig, known: dict[str, str]) -> int:
    """The share, and the catalog of its tables (a location another share has already is that
    share's table, shared here under this share's name)."""
    catalog = _catalog_name(share.name)
    db.create_catalog(catalog, comment=f"imported with share '{share.name}'")
    db.create_share(
        share.name,
        comment=share.comment,
        share_id=share.id or None,
        display_name=share.display_name,
        properties=share.properties,
    )
    updates = []
    for schema in share.schemas:
        db.create_schema(catalog, schema.name)
        for table in schema.tables:
            key = location_key(table.location, f"location of table '{share.name}.{schema.name}.{table.name}'")
            if key not in known:
                db.create_table(catalog, schema.name, table.name, table.location, table_id=table.id or None)
                known[key] = f"{catalog}.{schema.name}.{table.name}"
            shared = SharedObject(
                name=known[key],
                data_object_type=ObjectType.TABLE,
                shared_as=f"{schema.name}.{table.name}",
                history_shared=table.history_shared,
                cdf_enabled=table.history_shared,
                start_version=table.start_version,
                comment=table.comment,
                partitions=table.partitions,
                access_modes=table.access_modes,
                auxiliary_locations=table.auxiliary_locations,
            )
            updates.append(ObjectUpdate("ADD", shared))
    if updates:
        db.update_share(share.name, updates=updates)
    return len(updates)


def _expiry(recipient: RecipientConfig) -> int | None:
    """The recipient's expiry: its tokens' (a config gives all of a recipient's tokens one)."""
    expiries = {t.expiration_ms for t in recipient.tokens}
    return expiries.pop() if len(expiries) == 1 else None


def _grant(db: CatalogDB, recipient: str, shares: Sequence[str]) -> None:
    for share in shares:
        db.update_permissions(share, [PermissionChange(recipient, add=("SELECT",))])
