"""Request bodies of the admin API, as the Databricks SDK sends them.

Beyond the SDK's fields, a share takes ``display_name`` and ``properties`` and a data object
``access_modes`` and ``auxiliary_locations`` (the protocol's share metadata and table access,
which Unity Catalog's API has no field for). Fields the SDK may send that mean nothing here
(``owner``, ``properties`` of a catalog, ...) are declared and ignored; any other key is refused by
name (a misspelt field never silently does nothing). Each body turns itself into catalog values with ``to_*`` methods.

What no catalog database can store is refused here, naming the field: text with a NUL character or
an unpaired surrogate anywhere in a body, and numbers (times in epoch ms, versions) beyond 64 bits.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deltaport.catalog.model import ObjectType, PartitionOp, PartitionValue, SharedObject
from deltaport.catalog.store import ObjectUpdate, PermissionChange
from deltaport.catalog.store_sql import BIGINT_MAX

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def _unstorable_text(value: Any, where: str) -> str | None:
    """Where in ``value`` (a JSON value) a string holds what no database stores, or None."""
    if isinstance(value, str):
        return (where or "the body") if _UNSTORABLE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _UNSTORABLE.search(key):
            return f"a key of {where or 'the body'}"  # not the key itself: it cannot be shown
        found = _unstorable_text(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        where = _unstorable_text(data, "")
        if where is not None:
            raise ValueError(
                f"{where} holds a NUL character or an unpaired surrogate, which the catalog cannot store: remove it"
            )
        return data


class CreateCatalog(_Body):
    name: str
    comment: Optional[str] = None
    storage_root: Optional[str] = None
    properties: Optional[dict[str, str]] = None
    options: Optional[dict[str, str]] = None
    owner: Optional[str] = None


class UpdateCatalog(_Body):
    new_name: Optional[str] = None
    comment: Optional[str] = None
    owner: Optional[str] = None
    properties: Optional[dict[str, str]] = None


class CreateSchema(_Body):
    name: str
    catalog_name: str
    comment: Optional[str] = None
    properties: Optional[dict[str, str]] = None
    storage_root: Optional[str] = None
    owner: Optional[str] = None


class UpdateSchema(_Body):
    new_name: Optional[str] = None
    comment: Optional[str] = None
    owner: Optional[str] = None
    properties: Optional[dict[str, str]] = None


class CreateTable(_Body):
    name: str
    catalog_name: str
    schema_name: str
    table_type: str = "EXTERNAL"
    data_source_format: str = "DELTA"
    storage_location: str
    columns: Optional[list[dict]] = None  # the Delta log says what the columns are
    comment: Optional[str] = None
    properties: Optional[dict[str, str]] = None
    owner: Optional[str] = None


class CreateShare(_Body):
    name: str
    comment: Optional[str] = None
    display_name: Optional[str] = None  # extensions: the protocol's share displayName and properties
    properties: Optional[dict[str, str]] = None
    storage_root: Optional[str] = None
    owner: Optional[str] = None


class PartitionValueBody(_Body):
    name: str
    op: Literal["EQUAL", "LIKE"] = "EQUAL"
    value: Optional[str] = None
    recipient_property_key: Optional[str] = None

    def to_value(self) -> PartitionValue:
        return PartitionValue(self.name, PartitionOp(self.op), self.value, self.recipient_property_key)


class PartitionBody(_Body):
    values: list[PartitionValueBody] = Field(default_factory=list)


class DataObjectBody(_Body):
    name: str
    data_object_type: Literal["TABLE", "SCHEMA"] = "TABLE"
    shared_as: Optional[str] = None
    string_shared_as: Optional[str] = None
    history_data_sharing_status: Optional[Literal["ENABLED", "DISABLED"]] = None
    cdf_enabled: Optional[bool] = None
    start_version: Optional[int] = Field(default=None, ge=0, le=BIGINT_MAX)
    comment: Optional[str] = None
    partitions: Optional[list[PartitionBody]] = None
    added_at: Optional[int] = None
    added_by: Optional[str] = None
    status: Optional[str] = None
    content: Optional[str] = None
    access_modes: Optional[list[str]] = None  # extensions: the protocol's accessModes, auxiliaryLocations
    auxiliary_locations: Optional[list[str]] = None

    def to_object(self) -> SharedObject:
        return SharedObject(
            name=self.name,
            data_object_type=ObjectType(self.data_object_type),
            shared_as=self.shared_as or self.string_shared_as or "",
            history_shared=self.history_data_sharing_status == "ENABLED",
            cdf_enabled=bool(self.cdf_enabled),
            start_version=self.start_version or 0,
            comment=self.comment,
            partitions=tuple(tuple(v.to_value() for v in p.values) for p in self.partitions or ()),
            access_modes=("url",) if self.access_modes is None else tuple(self.access_modes),
            auxiliary_locations=tuple(self.auxiliary_locations or ()),
        )

    def given(self) -> frozenset[str]:
        """The fields this body sets (an UPDATE changes only these)."""
        fields = set(self.model_fields_set)
        if "history_data_sharing_status" in fields:
            fields.add("history_shared")
        if "string_shared_as" in fields:
            fields.add("shared_as")
        return frozenset(fields)


class ObjectUpdateBody(_Body):
    action: Literal["ADD", "REMOVE", "UPDATE"]
    data_object: DataObjectBody

    def to_update(self) -> ObjectUpdate:
        return ObjectUpdate(self.action, self.data_object.to_object())


class UpdateShare(_Body):
    new_name: Optional[str] = None
    comment: Optional[str] = None
    display_name: Optional[str] = None  # extensions, as in CreateShare; "" / {} clear them
    properties: Optional[dict[str, str]] = None
    owner: Optional[str] = None
    storage_root: Optional[str] = None
    updates: list[ObjectUpdateBody] = Field(default_factory=list)


class PermissionChangeBody(_Body):
    principal: str
    add: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)

    def to_change(self) -> PermissionChange:
        return PermissionChange(self.principal, tuple(self.add), tuple(self.remove))


class UpdatePermissions(_Body):
    changes: list[PermissionChangeBody] = Field(default_factory=list)
    omit_permissions_list: Optional[bool] = None


class IpAccessListBody(_Body):
    allowed_ip_addresses: list[str] = Field(default_factory=list)


class PropertiesBody(_Body):
    properties: dict[str, str] = Field(default_factory=dict)


class CreateRecipient(_Body):
    name: str
    authentication_type: Literal["TOKEN"] = "TOKEN"
    comment: Optional[str] = None
    expiration_time: Optional[int] = Field(default=None, ge=0, le=BIGINT_MAX)
    ip_access_list: Optional[IpAccessListBody] = None
    properties_kvpairs: Optional[PropertiesBody] = None
    owner: Optional[str] = None


class UpdateRecipient(_Body):
    new_name: Optional[str] = None
    comment: Optional[str] = None
    expiration_time: Optional[int] = Field(default=None, ge=0, le=BIGINT_MAX)
    ip_access_list: Optional[IpAccessListBody] = None
    properties_kvpairs: Optional[PropertiesBody] = None
    owner: Optional[str] = None


class RotateToken(_Body):
    existing_token_expire_in_seconds: int = Field(ge=0, le=BIGINT_MAX // 1000)
