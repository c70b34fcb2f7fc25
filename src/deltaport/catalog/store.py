"""The provider's catalog in a database: :class:`CatalogDB`.

SQLite (``sqlite:///path/catalog.db``) by default; PostgreSQL (``postgresql://...``) when several
server replicas share one catalog. Opening migrates the database to the newest schema.

Invariants every method keeps:

- each public call is one database transaction: it happens entirely or not at all;
- every write of the catalog (all but audit events) increments :meth:`CatalogDB.revision`
  first, so writers queue behind one another and a reader can tell cheaply whether to reload;
- names are kept as given and are unique without regard to case at their level (catalogs; a
  catalog's schemas; a schema's tables; shares; recipients); a race between two creates of one
  name ends with one object and an AlreadyExists, never half of each;
- secrets (bearer and activation tokens) are returned once and stored only as SHA-256 digests;
  no message or log line holds a token, a digest or the database password;
- a database that cannot be reached, or that fails mid-call, is CatalogUnavailable (503), whose
  message never says which database (that is for the operator's log); the next call tries again
  on fresh connections, so nothing needs reopening once it is back;
- a value the database cannot store is InvalidParameter (400), never an unexpected error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import (
    DatabaseError,
    DataError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    NotSupportedError,
    ProgrammingError,
)

from deltaport.catalog import (
    db,
    store_audit,
    store_catalog,
    store_queries,
    store_recipients,
    store_served,
    store_shares,
)
from deltaport.catalog.model import (
    AsyncQuery,
    AuditEvent,
    CatalogInfo,
    Grant,
    RecipientInfo,
    SchemaInfo,
    ShareInfo,
    TableInfo,
)
from deltaport.catalog.store_recipients import Seal
from deltaport.catalog.store_types import ObjectUpdate, PermissionChange, ServedCatalog, Tx
from deltaport.errors import CatalogUnavailable, InvalidParameter

__all__ = ["CatalogDB", "ObjectUpdate", "PermissionChange", "ServedCatalog"]

DEFAULT_ACTIVATION_TTL_S = 7 * 24 * 3600


def _driver_text(exc: BaseException) -> str:
    """The first line of the driver's own message, for operators: never the statement or its
    parameters (which may hold a token digest)."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return (lines[0] if lines else type(cause).__name__)[:300]


class CatalogDB:
    """The catalog in the database at ``url``; thread-safe (one connection pool, one transaction
    per call). ``clock`` gives epoch seconds (every time stored is epoch ms from it);
    ``activation_ttl_s`` is how long an activation link stays usable."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        activation_ttl_s: int = DEFAULT_ACTIVATION_TTL_S,
    ) -> None:
        if not isinstance(activation_ttl_s, int) or activation_ttl_s <= 0:
            raise InvalidParameter(f"activation_ttl_s must be a positive number of seconds, not {activation_ttl_s!r}")
        self.url_for_display = db.display_url(url)
        self._clock = clock
        self._activation_ttl_ms = activation_ttl_s * 1000
        self._engine = db.engine_for(url)
        try:
            with self._unavailable_as_503():
                db.upgrade_to_head(self._engine, self.url_for_display)
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"CatalogDB({self.url_for_display!r})"

    def close(self) -> None:
        """Close every pooled connection. Calls after this open new ones."""
        self._engine.dispose()

    # --- transactions ---------------------------------------------------------------------------

    @contextmanager
    def _unavailable_as_503(self) -> Iterator[None]:
        """A database that cannot be used (unreachable, gone, or not a database any more) is
        CatalogUnavailable; which database it is goes to the operator only (``detail``), never to a
        client. A value the database refuses to store (a number beyond 64 bits, text it cannot
        hold, a string too long) is the caller's mistake: a 400, whatever the checks before it
        missed. A violated constraint or a bad statement is this code's bug, and left as it is."""
        try:
            yield
        except (DataError, OverflowError, UnicodeEncodeError) as exc:
            raise InvalidParameter(
                "the catalog database cannot store a value of this call (a number beyond 64 bits, a NUL "
                "character or unpaired surrogate in text, or a string too long): correct it and retry",
                detail=_driver_text(exc),
            ) from None
        except (DatabaseError, InterfaceError, DisconnectionError) as exc:
            if isinstance(exc, (IntegrityError, ProgrammingError, NotSupportedError)):
                raise
            raise CatalogUnavailable(
                "the catalog database cannot be used right now: check that it is running and reachable; "
                "calls succeed again once it is",
                detail=f"{self.url_for_display}: {_driver_text(exc)}",
            ) from None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        """One read-only transaction that sees one snapshot (PostgreSQL: REPEATABLE READ; SQLite: a
        deferred BEGIN)."""
        with self._unavailable_as_503(), self._engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            with conn.begin():
                yield Tx(conn, self._now_ms())

    @contextmanager
    def _write(self, *, catalog: bool = True) -> Iterator[Tx]:
        """One write transaction. A catalog write bumps the revision first: on PostgreSQL that row
        lock queues concurrent writers; on SQLite BEGIN IMMEDIATE does."""
        with self._unavailable_as_503(), self._engine.connect() as conn:
            conn.execution_options(**{db.WRITE: True})
            with conn.begin():
                if catalog:
                    state = db.catalog_state
                    conn.execute(sa.update(state).where(state.c.id == 1).values(revision=state.c.revision + 1))
                yield Tx(conn, self._now_ms())

    def revision(self) -> int:
        """The catalog's revision: it grows with every committed catalog write."""
        with self._read() as tx:
            return store_served.revision(tx)

    # --- catalogs, schemas, tables ----------------------------------------------------------------

    def create_catalog(self, name: str, *, comment: str | None = None, storage_root: str | None = None) -> CatalogInfo:
        """A new catalog; with ``storage_root``, its tables must lie at or under it."""
        with self._write() as tx:
            return store_catalog.create_catalog(tx, name, comment, storage_root)

    def get_catalog(self, name: str) -> CatalogInfo:
        with self._read() as tx:
            return store_catalog.get_catalog(tx, name)

    def list_catalogs(self) -> list[CatalogInfo]:
        """Every catalog, sorted by lower-cased name."""
        with self._read() as tx:
            return store_catalog.list_catalogs(tx)

    def update_catalog(self, name: str, *, new_name: str | None = None, comment: str | None = None) -> CatalogInfo:
        """None leaves a field unchanged."""
        with self._write() as tx:
            return store_catalog.update_catalog(tx, name, new_name, comment)

    def delete_catalog(self, name: str, *, force: bool = False) -> None:
        """Refuses a catalog with schemas unless ``force``; then its schemas, tables and the share
        objects naming them go too."""
        with self._write() as tx:
            store_catalog.delete_catalog(tx, name, force)

    def create_schema(self, catalog_name: str, name: str, *, comment: str | None = None) -> SchemaInfo:
        with self._write() as tx:
            return store_catalog.create_schema(tx, catalog_name, name, comment)

    def get_schema(self, full_name: str) -> SchemaInfo:
        """``full_name``: "catalog.schema"."""
        with self._read() as tx:
            return store_catalog.get_schema(tx, full_name)

    def list_schemas(self, catalog_name: str) -> list[SchemaInfo]:
        with self._read() as tx:
            return store_catalog.list_schemas(tx, catalog_name)

    def update_schema(self, full_name: str, *, new_name: str | None = None, comment: str | None = None) -> SchemaInfo:
        with self._write() as tx:
            return store_catalog.update_schema(tx, full_name, new_name, comment)

    def delete_schema(self, full_name: str, *, force: bool = False) -> None:
        """Refuses a schema with tables unless ``force``; share objects naming it or its tables go."""
        with self._write() as tx:
            store_catalog.delete_schema(tx, full_name, force)

    def create_table(
        self,
        catalog_name: str,
        schema_name: str,
        name: str,
        storage_location: str,
        *,
        comment: str | None = None,
        table_type: str = "EXTERNAL",
        data_source_format: str = "DELTA",
        table_id: str | None = None,
    ) -> TableInfo:
        """A new EXTERNAL Delta table (``table_id`` as given, else a new uuid4). Its location must be an absolute
        path or URL without '..', under the catalog's storage root if it has one, and no other
        table's. Whether a Delta table is there is the caller's to check."""
        with self._write() as tx:
            return store_catalog.create_table(
                tx,
                catalog_name,
                schema_name,
                name,
                storage_location,
                comment=comment,
                table_type=table_type,
                data_source_format=data_source_format,
                table_id=table_id,
            )

    def check_new_table(
        self,
        catalog_name: str,
        schema_name: str,
        name: str,
        storage_location: str,
        *,
        table_type: str = "EXTERNAL",
        data_source_format: str = "DELTA",
    ) -> None:
        """Refuses (as :meth:`create_table` would) a table that cannot be created as given, without
        creating it: for a caller that must read the location only once it is known to be allowed."""
        with self._read() as tx:
            store_catalog.check_new_table(
                tx, catalog_name, schema_name, name, storage_location, table_type, data_source_format
            )

    def get_table(self, full_name: str) -> TableInfo:
        """``full_name``: "catalog.schema.table"."""
        with self._read() as tx:
            return store_catalog.get_table(tx, full_name)

    def list_tables(self, catalog_name: str, schema_name: str) -> list[TableInfo]:
        with self._read() as tx:
            return store_catalog.list_tables(tx, catalog_name, schema_name)

    def table_exists(self, full_name: str) -> bool:
        with self._read() as tx:
            return store_catalog.table_exists(tx, full_name)

    def delete_table(self, full_name: str) -> None:
        """The table goes, and every share object naming it."""
        with self._write() as tx:
            store_catalog.delete_table(tx, full_name)

    # --- shares -----------------------------------------------------------------------------------

    def create_share(
        self,
        name: str,
        *,
        comment: str | None = None,
        share_id: str | None = None,
        display_name: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> ShareInfo:
        """A new share; ``share_id`` keeps the id it had elsewhere (default: a new uuid4). The
        comment, display name and properties are held to the protocol's limits."""
        with self._write() as tx:
            return store_shares.create_share(tx, name, comment, share_id, display_name, properties)

    def get_share(self, name: str, *, include_objects: bool = False) -> ShareInfo:
        with self._read() as tx:
            return store_shares.get_share(tx, name, include_objects=include_objects)

    def list_shares(self, *, include_objects: bool = False) -> list[ShareInfo]:
        with self._read() as tx:
            return store_shares.list_shares(tx, include_objects=include_objects)

    def update_share(
        self,
        name: str,
        *,
        new_name: str | None = None,
        comment: str | None = None,
        updates: Sequence[ObjectUpdate] = (),
        display_name: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> ShareInfo:
        """Rename, comment, display name, properties (None: unchanged) and ADD/REMOVE/UPDATE data
        objects, all or nothing; returns the share with its objects. See :class:`ObjectUpdate` and
        :mod:`deltaport.catalog.store_shares`."""
        with self._write() as tx:
            return store_shares.update_share(
                tx,
                name,
                new_name=new_name,
                comment=comment,
                updates=updates,
                display_name=display_name,
                properties=properties,
            )

    def delete_share(self, name: str) -> None:
        """The share goes with its objects and grants."""
        with self._write() as tx:
            store_shares.delete_share(tx, name)

    # --- recipients -------------------------------------------------------------------------------

    def create_recipient(
        self,
        name: str,
        *,
        comment: str | None = None,
        authentication_type: str = "TOKEN",
        expiration_time: int | None = None,
        allowed_ip_addresses: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        seal: Seal | None = None,
    ) -> tuple[RecipientInfo, str]:
        """A new recipient (TOKEN authentication only) and the activation token of its first token.
        ``seal(token id, activation token)`` gives the bytes kept to show the link again (encrypted
        by the caller; see :data:`~deltaport.catalog.store_recipients.Seal`)."""
        with self._write() as tx:
            made, activation = store_recipients.create_recipient(
                tx,
                name,
                comment=comment,
                authentication_type=authentication_type,
                expiration_time=expiration_time,
                allowed_ip_addresses=allowed_ip_addresses,
                properties=properties,
                activation_ttl_ms=self._activation_ttl_ms,
                seal=seal,
            )
        assert activation is not None  # a new recipient's first token waits for its link
        return made, activation

    def import_recipient(
        self,
        name: str,
        token_digests: Sequence[bytes],
        *,
        expiration_time: int | None = None,
        allowed_ip_addresses: Iterable[str] = (),
    ) -> RecipientInfo:
        """A recipient whose bearer tokens exist already, known by their SHA-256 digests (as a
        server config holds them): they work as they are, with no activation link."""
        with self._write() as tx:
            made, _ = store_recipients.create_recipient(
                tx,
                name,
                comment=None,
                authentication_type="TOKEN",
                expiration_time=expiration_time,
                allowed_ip_addresses=allowed_ip_addresses,
                properties=None,
                activation_ttl_ms=self._activation_ttl_ms,
                token_digests=token_digests,
            )
        return made

    def get_recipient(self, name: str) -> RecipientInfo:
        with self._read() as tx:
            return store_recipients.get_recipient(tx, name)

    def list_recipients(self) -> list[RecipientInfo]:
        with self._read() as tx:
            return store_recipients.list_recipients(tx)

    def update_recipient(
        self,
        name: str,
        *,
        new_name: str | None = None,
        comment: str | None = None,
        expiration_time: int | None = None,
        allowed_ip_addresses: Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> RecipientInfo:
        """None leaves a field unchanged. A new ``expiration_time`` moves the live tokens that
        expired with the recipient to it, and brings any later token expiry forward to it; a token a
        rotation cut short is never extended."""
        with self._write() as tx:
            return store_recipients.update_recipient(
                tx,
                name,
                new_name=new_name,
                comment=comment,
                expiration_time=expiration_time,
                allowed_ip_addresses=allowed_ip_addresses,
                properties=properties,
            )

    def delete_recipient(self, name: str) -> None:
        """The recipient goes with its tokens and grants."""
        with self._write() as tx:
            store_recipients.delete_recipient(tx, name)

    def rotate_token(
        self, name: str, existing_token_expire_in_seconds: int, *, seal: Seal | None = None
    ) -> tuple[RecipientInfo, str]:
        """Existing tokens and pending links expire at the latest ``existing_token_expire_in_seconds``
        from now (0: now; never later than before); a new pending token is added (its link kept
        with ``seal``, as for :meth:`create_recipient`). Returns the new activation token."""
        with self._write() as tx:
            return store_recipients.rotate_token(
                tx, name, existing_token_expire_in_seconds, self._activation_ttl_ms, seal=seal
            )

    def activate(self, activation_token: str) -> tuple[RecipientInfo, str, int | None]:
        """(recipient, a new bearer token, its expiry in epoch ms or None). Once per link: an
        unknown link is ResourceNotFound, a used or expired one PermissionDenied. A bad link is
        refused in a read, so guessing links never takes the write lock."""
        with self._read() as tx:
            store_recipients.pending_token(tx, activation_token)
        with self._write() as tx:
            return store_recipients.activate(tx, activation_token)

    # --- grants -----------------------------------------------------------------------------------

    def update_permissions(self, share_name: str, changes: Sequence[PermissionChange]) -> list[Grant]:
        """Grant and revoke SELECT on a share, all or nothing; returns the share's grants."""
        with self._write() as tx:
            return store_shares.update_permissions(tx, share_name, changes)

    def share_permissions(self, share_name: str) -> list[Grant]:
        with self._read() as tx:
            return store_shares.share_permissions(tx, share_name)

    def recipient_permissions(self, recipient_name: str) -> list[Grant]:
        with self._read() as tx:
            return store_shares.recipient_permissions(tx, recipient_name)

    # --- serving and audit ------------------------------------------------------------------------

    def served(self, *, storage_options: Mapping[str, Any] | None = None) -> ServedCatalog:
        """Every share and recipient as the sharing server serves them, read in one consistent
        transaction with a fixed number of queries."""
        with self._read() as tx:
            return store_served.served(tx, storage_options)

    def add_audit_block(self, block: store_audit.AuditBlock) -> None:
        """Append a block of events (the audit log's sink). Not a catalog write: the revision
        stays."""
        with self._write(catalog=False) as tx:
            store_audit.add_audit_block(tx, block)

    def add_audit_events(self, events: Sequence[AuditEvent]) -> None:
        """Append events in one transaction, in blocks (see :mod:`store_audit`)."""
        with self._write(catalog=False) as tx:
            store_audit.add_audit_events(tx, events)

    def audit_events(
        self,
        *,
        since_ms: int | None = None,
        until_ms: int | None = None,
        principal: str | None = None,
        action: str | None = None,
        share: str | None = None,
        after_id: int | None = None,
        limit: int = 1000,
    ) -> list[tuple[int, AuditEvent]]:
        """(id, event) pairs, oldest first; page with ``after_id`` = the last id seen."""
        with self._read() as tx:
            return store_audit.audit_events(
                tx,
                since_ms=since_ms,
                until_ms=until_ms,
                principal=principal,
                action=action,
                share=share,
                after_id=after_id,
                limit=limit,
            )

    # --- asynchronous queries (not catalog writes: the revision stays) ---------------------------

    def add_async_query(self, query: AsyncQuery) -> AsyncQuery:
        """Store a new query (expired ones go first); when one with its idempotency key exists for
        its recipient and table, that one instead."""
        with self._write(catalog=False) as tx:
            return store_queries.add(tx, query)

    def async_query(self, query_id: str) -> AsyncQuery | None:
        """The query ``query_id``; None when it is unknown or has expired."""
        with self._read() as tx:
            return store_queries.get(tx, query_id)

    def finish_async_query(
        self,
        query_id: str,
        *,
        version: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Record a pending query's pinned version, or its error (the first outcome stays)."""
        with self._write(catalog=False) as tx:
            store_queries.finish(tx, query_id, version, error_code, error_message)

    def keyed_async_query(self, recipient: str, table: str, table_id: str, key: str) -> AsyncQuery | None:
        """The unexpired query with idempotency ``key`` of this recipient on this table, if any."""
        with self._read() as tx:
            return store_queries.keyed(tx, recipient, table, table_id, key)
