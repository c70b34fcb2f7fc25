"""Values passed to and returned by :class:`deltaport.catalog.store.CatalogDB` beyond the model's,
and :class:`Tx`, the one transaction a store call runs in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy.engine import Connection

from deltaport.catalog.model import SharedObject
from deltaport.catalog.served import RecipientConfig, ShareConfig

__all__ = ["ObjectUpdate", "PermissionChange", "ServedCatalog", "Tx"]


@dataclass(frozen=True)
class ObjectUpdate:
    """One change to a share's data objects. ADD and REMOVE name the object by ``data_object.name``
    ("catalog.schema.table" or "catalog.schema"); UPDATE sets the object's history_shared,
    cdf_enabled, start_version, comment and partitions to ``data_object``'s values, and its
    shared_as when that is not empty."""

    action: Literal["ADD", "REMOVE", "UPDATE"]
    data_object: SharedObject


@dataclass(frozen=True)
class PermissionChange:
    """Privileges to grant (``add``) and revoke (``remove``) on a share for recipient ``principal``.
    "SELECT" is the only privilege."""

    principal: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServedCatalog:
    """What the sharing server serves, read in one transaction: every share (with its schema
    objects expanded to their tables at the time of reading) and every recipient, as of catalog
    ``revision``."""

    shares: tuple[ShareConfig, ...]
    recipients: tuple[RecipientConfig, ...]
    revision: int


@dataclass(frozen=True)
class Tx:
    """The one transaction a store call runs in, and the time the call is taken to happen at (epoch
    ms, read once from the store's clock)."""

    conn: Connection
    now_ms: int
