"""The catalog database: its tables (SQLAlchemy Core), the engine for a URL, and migrating it to
the newest schema.

Invariants of the schema (migration 0001 creates it, later ones add to it; ``tests/catalog/test_migrations.py`` checks
that the migrations and these definitions agree):

- every name is kept as the provider spelt it and once more lower-cased (``*_lc``, computed in
  Python by :func:`deltaport.catalog.names.name_key`); the unique constraints are on the
  lower-cased names, so two names differing only in case cannot both exist, whatever the race;
- objects refer to each other by integer id, never by name: renaming a catalog, schema, table,
  share or recipient never breaks a share object or a grant; deleting one removes what refers to
  it (``ON DELETE CASCADE``; SQLite enforces it because every connection turns foreign keys on);
- ``catalog_state`` holds one row whose ``revision`` every catalog write transaction increments
  first (so writers queue on that row and a reader can tell cheaply whether anything changed);
- secrets exist only as SHA-256 digests (``recipient_tokens.token_hash``, ``activation_hash``),
  but for a pending link's activation token, also kept encrypted under a key the catalog never
  holds (``activation_sealed``, migration 0003; emptied when the link is used);
- times are epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from deltaport.errors import CatalogUnavailable, InvalidParameter

__all__ = [
    "SQLITE_BUSY_TIMEOUT_S",
    "WRITE",
    "display_url",
    "engine_for",
    "metadata",
    "upgrade_to_head",
]

#: How long a SQLite writer waits for another writer before the call fails as unavailable.
SQLITE_BUSY_TIMEOUT_S = 15.0
#: Execution option marking a connection's transactions as writes: SQLite then starts them with
#: ``BEGIN IMMEDIATE`` (the write lock taken first, so a reader never has to upgrade and fail).
WRITE = "deltaport_write"
_MIGRATION_LOCK_KEY = 0x64656C7461706F72  # pg_advisory_xact_lock key: "deltapor" in ASCII
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

#: Integer primary keys: 64-bit in PostgreSQL, SQLite's rowid alias (it must be spelt INTEGER).
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id() -> sa.Column[int]:
    return sa.Column("id", ID, primary_key=True, autoincrement=True)


def _ref(name: str, target: str, *, nullable: bool = False, index: bool = True) -> sa.Column[int]:
    """A reference to ``target``'s row, gone with it. ``index=False`` where a unique constraint
    starting with this column serves as its index already."""
    return sa.Column(name, ID, sa.ForeignKey(f"{target}.id", ondelete="CASCADE"), nullable=nullable, index=index)


def _times() -> tuple[sa.Column[int], sa.Column[int]]:
    return sa.Column("created_at", sa.BigInteger, nullable=False), sa.Column(
        "updated_at", sa.BigInteger, nullable=False
    )


catalog_state = sa.Table(
    "catalog_state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("revision", sa.BigInteger, nullable=False),
)

catalogs = sa.Table(
    "catalogs",
    metadata,
    _id(),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_lc", sa.String(255), nullable=False, unique=True),
    sa.Column("comment", sa.Text),
    sa.Column("storage_root", sa.Text),
    *_times(),
)

catalog_schemas = sa.Table(
    "catalog_schemas",
    metadata,
    _id(),
    _ref("catalog_id", "catalogs", index=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_lc", sa.String(255), nullable=False),
    sa.Column("comment", sa.Text),
    *_times(),
    sa.UniqueConstraint("catalog_id", "name_lc"),
)

catalog_tables = sa.Table(
    "catalog_tables",
    metadata,
    _id(),
    _ref("schema_id", "catalog_schemas", index=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_lc", sa.String(255), nullable=False),
    sa.Column("table_id", sa.String(36), nullable=False, unique=True),
    sa.Column("storage_location", sa.Text, nullable=False),
    sa.Column("location_key", sa.Text, nullable=False, unique=True),
    sa.Column("comment", sa.Text),
    sa.Column("table_type", sa.String(32), nullable=False),
    sa.Column("data_source_format", sa.String(32), nullable=False),
    *_times(),
    sa.UniqueConstraint("schema_id", "name_lc"),
)

shares = sa.Table(
    "shares",
    metadata,
    _id(),
    sa.Column("share_id", sa.String(36), nullable=False, unique=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_lc", sa.String(255), nullable=False, unique=True),
    sa.Column("comment", sa.Text),
    *_times(),
    sa.Column("display_name", sa.String(255)),  # migration 0004
    sa.Column("properties", sa.JSON, nullable=False, server_default="{}"),  # migration 0004
)

#: One row per data object of a share: exactly one of ``table_ref`` (a TABLE) and ``schema_ref``
#: (a SCHEMA) is set. ``partitions`` is JSON: a list (OR) of lists (AND) of partition values.
share_objects = sa.Table(
    "share_objects",
    metadata,
    _id(),
    _ref("share_ref", "shares", index=False),
    sa.Column("object_type", sa.String(16), nullable=False),
    _ref("table_ref", "catalog_tables", nullable=True),
    _ref("schema_ref", "catalog_schemas", nullable=True),
    sa.Column("shared_as", sa.String(511), nullable=False),
    sa.Column("shared_as_lc", sa.String(511), nullable=False),
    sa.Column("history_shared", sa.Boolean, nullable=False),
    sa.Column("cdf_enabled", sa.Boolean, nullable=False),
    sa.Column("start_version", sa.BigInteger, nullable=False),
    sa.Column("comment", sa.Text),
    sa.Column("partitions", sa.JSON, nullable=False),
    sa.Column("added_at", sa.BigInteger, nullable=False),
    # migration 0004: "url" and/or "dir"; storage URLs
    sa.Column("access_modes", sa.JSON, nullable=False, server_default='["url"]'),
    sa.Column("auxiliary_locations", sa.JSON, nullable=False, server_default="[]"),
    sa.UniqueConstraint("share_ref", "shared_as_lc"),
    sa.UniqueConstraint("share_ref", "table_ref"),
    sa.UniqueConstraint("share_ref", "schema_ref"),
)

recipients = sa.Table(
    "recipients",
    metadata,
    _id(),
    sa.Column("recipient_id", sa.String(36), nullable=False, unique=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("name_lc", sa.String(255), nullable=False, unique=True),
    sa.Column("comment", sa.Text),
    sa.Column("authentication_type", sa.String(32), nullable=False),
    sa.Column("expiration_time", sa.BigInteger),
    sa.Column("allowed_ip_addresses", sa.JSON, nullable=False),
    sa.Column("properties", sa.JSON, nullable=False),
    *_times(),
)

#: A recipient's tokens. Pending (not yet activated): ``activation_hash`` set, ``token_hash`` NULL;
#: activation sets ``activated_at`` and ``token_hash`` in one conditional UPDATE.
recipient_tokens = sa.Table(
    "recipient_tokens",
    metadata,
    _id(),
    _ref("recipient_ref", "recipients"),
    sa.Column("token_id", sa.String(36), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("expiration_time", sa.BigInteger),
    sa.Column("token_hash", sa.LargeBinary(32), unique=True),
    sa.Column("activation_hash", sa.LargeBinary(32), unique=True),
    sa.Column("activation_expires_at", sa.BigInteger),
    sa.Column("activated_at", sa.BigInteger),
    sa.Column("activation_sealed", sa.LargeBinary),  # the pending link, encrypted by the admin API
)

grants = sa.Table(
    "grants",
    metadata,
    sa.Column("share_ref", ID, sa.ForeignKey("shares.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("recipient_ref", ID, sa.ForeignKey("recipients.id", ondelete="CASCADE"), primary_key=True, index=True),
    sa.Column("privilege", sa.String(32), primary_key=True),
)

#: Append-only. Audit events are stored in blocks, one row per batch a server writes: the events
#: as one JSON array (in the order given), and the least and greatest event time in it (what a
#: reader's time range selects blocks by). One row per event cost a busy server more CPU time to
#: store than answering the request it recorded (see catalog/store_audit.py).
audit_blocks = sa.Table(
    "audit_blocks",
    metadata,
    _id(),
    sa.Column("first_time", sa.BigInteger, nullable=False),
    sa.Column("last_time", sa.BigInteger, nullable=False, index=True),
    sa.Column("events", sa.Text, nullable=False),
)


#: One row per asynchronous query (server/sharing/async_queries.py), not part of the catalog's
#: revision: its state, so that it survives a restart and every replica sees it. A row is deleted
#: once ``expires_at`` (epoch ms) has passed. An idempotency key is unique per recipient and table.
async_queries = sa.Table(
    "async_queries",
    metadata,
    sa.Column("query_id", sa.String(64), primary_key=True),
    sa.Column("recipient", sa.String(255), nullable=False),
    sa.Column("table_name", sa.String(767), nullable=False),
    sa.Column("table_id", sa.String(255), nullable=False),
    sa.Column("params_digest", sa.String(64), nullable=False),
    sa.Column("request", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.String(255)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("version", sa.BigInteger),
    sa.Column("error_code", sa.String(64)),
    sa.Column("error_message", sa.Text),
    sa.Column("expires_at", sa.BigInteger, nullable=False, index=True),
    sa.UniqueConstraint("recipient", "table_name", "table_id", "idempotency_key"),
)


def display_url(url: str) -> str:
    """``url`` with any password masked: the only form of it that goes into messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


def engine_for(url: str) -> Engine:
    """An engine for a catalog URL: ``sqlite:///path`` (WAL journal, foreign keys on, a busy
    timeout; ``sqlite://`` is one in-memory database shared by all threads) or
    ``postgresql://...`` (run by psycopg 3; connections checked before use, so a restarted server
    is picked up without reopening). Anything else is InvalidParameter.

    Statement parameters never appear in the engine's errors or logs (``hide_parameters``): they
    may be token digests."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidParameter(
            f"catalog database URL {display_url(url)!r} is not a URL: write sqlite:///path/to/catalog.db "
            "or postgresql://user@host/database"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in ("", "pysqlite"):
        return _sqlite_engine(parsed)
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise InvalidParameter(
                "a PostgreSQL catalog needs the 'postgres' extra: pip install \"deltaport[postgres]\""
            ) from None
        return sa.create_engine(
            parsed.set(drivername="postgresql+psycopg"),
            hide_parameters=True,
            pool_pre_ping=True,
            connect_args={"connect_timeout": 10, "application_name": "deltaport-catalog"},
        )
    raise InvalidParameter(
        f"catalog database URL {display_url(url)!r} is not supported: use sqlite:///path/to/catalog.db or "
        "postgresql://user@host/database"
    )


def _sqlite_engine(parsed: sa.URL) -> Engine:
    """SQLite with real transactions: the driver's own BEGIN handling is off (``isolation_level``
    None) and every transaction starts with BEGIN (one consistent read across statements) or, for
    writes, BEGIN IMMEDIATE. ``timeout`` is SQLite's busy timeout."""
    memory = parsed.database in (None, "", ":memory:")
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False, "isolation_level": None}
    kwargs: dict[str, Any] = {"connect_args": connect_args, "hide_parameters": True}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = sa.create_engine(parsed, **kwargs)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        if not memory:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    def on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine


def _alembic_config(conn: Connection) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = conn
    return config


@contextmanager
def _locked(conn: Connection) -> Iterator[None]:
    """One transaction in which no other process migrates the same database: PostgreSQL takes a
    transaction-scoped advisory lock, SQLite the write lock (BEGIN IMMEDIATE)."""
    conn = conn.execution_options(**{WRITE: True})
    with conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        yield


def upgrade_to_head(engine: Engine, shown_as: str) -> None:
    """Migrate the database to the newest schema this code knows, in one transaction under a lock
    (so two processes opening the same fresh database at once do it once). A database already
    migrated by a newer deltaport is refused (CatalogUnavailable): this replica cannot serve it."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.connect() as conn, _locked(conn):
        config = _alembic_config(conn)
        known = {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}
        unknown = sorted(set(MigrationContext.configure(conn).get_current_heads()) - known)
        if unknown:
            raise CatalogUnavailable(
                f"catalog database {shown_as} has schema revision {', '.join(unknown)}, newer than this "
                f"deltaport knows ({', '.join(sorted(known))}): upgrade deltaport on this server"
            )
        command.upgrade(config, "head")
