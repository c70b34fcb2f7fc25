"""What the provider's catalog holds: catalogs, schemas and tables (by three-part name), shares and
what they share, recipients with their tokens and grants, and audit events.

Values only (frozen, no I/O). Names are kept as the provider spelt them and matched without regard
to case. Times are epoch milliseconds. Secrets never appear here in clear: tokens are SHA-256
digests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class ObjectType(str, Enum):
    TABLE = "TABLE"
    SCHEMA = "SCHEMA"


class PartitionOp(str, Enum):
    EQUAL = "EQUAL"
    LIKE = "LIKE"


@dataclass(frozen=True)
class CatalogInfo:
    name: str
    comment: str | None = None
    storage_root: str | None = None
    created_at: int = 0
    updated_at: int = 0


@dataclass(frozen=True)
class SchemaInfo:
    catalog_name: str
    name: str
    comment: str | None = None
    created_at: int = 0
    updated_at: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.catalog_name}.{self.name}"


@dataclass(frozen=True)
class TableInfo:
    catalog_name: str
    schema_name: str
    name: str
    storage_location: str
    table_id: str = ""  # a UUID, fixed at creation: the protocol's table id
    comment: str | None = None
    table_type: str = "EXTERNAL"
    data_source_format: str = "DELTA"
    created_at: int = 0
    updated_at: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.catalog_name}.{self.schema_name}.{self.name}"


@dataclass(frozen=True)
class PartitionValue:
    """One condition of a partition filter: column ``name`` ``op`` either a static ``value`` or the
    value of the recipient's property ``recipient_property_key`` (exactly one of the two)."""

    name: str
    op: PartitionOp = PartitionOp.EQUAL
    value: str | None = None
    recipient_property_key: str | None = None


@dataclass(frozen=True)
class SharedObject:
    """One data object of a share: a TABLE (``name`` = "catalog.schema.table", ``shared_as`` =
    "schema.table" as recipients see it) or a whole SCHEMA (``name`` = "catalog.schema",
    ``shared_as`` = "schema"; its tables, present and future, are shared under their own names).

    ``partitions``: the rows recipients may read, as OR over partitions of AND over values; empty
    means the whole table."""

    name: str
    data_object_type: ObjectType = ObjectType.TABLE
    shared_as: str = ""
    history_shared: bool = False
    cdf_enabled: bool = False
    start_version: int = 0
    comment: str | None = None
    partitions: tuple[tuple[PartitionValue, ...], ...] = ()
    added_at: int = 0
    #: "url" and/or "dir" (see :func:`deltaport.catalog.served.check_access_modes`)
    access_modes: tuple[str, ...] = ("url",)
    #: storage URLs of other roots a TABLE's log names files under
    auxiliary_locations: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShareInfo:
    name: str
    comment: str | None = None
    objects: tuple[SharedObject, ...] = ()  # filled only when asked for
    id: str = ""  # a UUID, fixed at creation: the protocol's share id
    created_at: int = 0
    updated_at: int = 0
    display_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecipientToken:
    """One bearer token of a recipient. Until activated it exists only as its activation link:
    ``token_hash`` is None and ``activation_hash`` names the link; activation makes the bearer
    token (shown once) and stores its hash."""

    id: str
    created_at: int
    expiration_time: int | None = None  # ms; None: never expires
    token_hash: bytes | None = field(default=None, repr=False)  # digests never reach a log line
    activation_hash: bytes | None = field(default=None, repr=False)
    activation_expires_at: int | None = None
    activated_at: int | None = None
    activation_sealed: bytes | None = field(default=None, repr=False)  # the pending link, encrypted

    def link_pending(self, now_ms: int) -> bool:
        """Whether the token's activation link may still be used at ``now_ms``."""
        return (
            self.activated_at is None
            and (self.activation_expires_at is None or self.activation_expires_at > now_ms)
            and (self.expiration_time is None or self.expiration_time > now_ms)
        )


@dataclass(frozen=True)
class RecipientInfo:
    name: str
    comment: str | None = None
    authentication_type: str = "TOKEN"
    expiration_time: int | None = None
    allowed_ip_addresses: tuple[str, ...] = ()  # IPs and CIDRs, v4 and v6; empty: from anywhere
    properties: Mapping[str, str] = field(default_factory=dict)
    tokens: tuple[RecipientToken, ...] = ()
    id: str = ""
    created_at: int = 0
    updated_at: int = 0

    @property
    def activated(self) -> bool:
        return any(t.activated_at is not None or t.activation_hash is None for t in self.tokens)


@dataclass(frozen=True)
class Grant:
    share: str
    recipient: str
    privileges: tuple[str, ...] = ("SELECT",)


@dataclass
class AuditEvent:
    """One audited action. Never a token, a presigned URL or a storage credential.

    Not frozen: one is made per request, and a frozen dataclass takes twice as long to make."""

    time: int
    request_id: str
    principal: str  # recipient name, "admin", "anonymous" or "unauthenticated"
    action: str  # e.g. "queryTable", "createShare", "activate", "downloadFile"
    status: int
    client_ip: str | None = None
    user_agent: str | None = None
    share: str | None = None
    schema: str | None = None
    table: str | None = None
    version: int | None = None
    files: int | None = None
    bytes: int | None = None
    duration_ms: float | None = None
    detail: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class AsyncQuery:
    """The state of one asynchronous query (``asyncquery=true``): who asked, about which table
    (``table`` = "share.schema.table" lower-cased, ``table_id`` its config id), a digest of its
    parameters, the request it is answered with (JSON), the client's idempotency key, its status
    ("pending", "succeeded", "failed"), the version planning pinned or the error it raised, and
    when it expires (epoch ms)."""

    query_id: str
    recipient: str
    table: str
    table_id: str
    params_digest: str
    request: str
    expires_at: int
    idempotency_key: str | None = None
    status: str = "pending"
    version: int | None = None
    error_code: str | None = None
    error_message: str | None = None
