"""The first catalog schema: catalogs, schemas, tables, shares and their objects, recipients with
their tokens, grants, audit events, and the revision counter (one row, starting at 1).

Self-contained on purpose: it spells every type and constraint name itself instead of importing
the current table definitions, so it creates the same schema whatever later revisions change.

Revision ID: 0001
Revises:
Create Date: 2025-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None  # noqa: V107  (these names and downgrade() are read by Alembic)
branch_labels = None  # noqa: V107
depends_on = None  # noqa: V107

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _pk(table: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint("id", name=f"pk_{table}")


def _id() -> sa.Column[int]:
    return sa.Column("id", ID, primary_key=True, autoincrement=True)


def _fk(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}", ondelete="CASCADE")


def _uq(table: str, *columns: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint(*columns, name=f"uq_{table}_{'_'.join(columns)}")


def _times() -> tuple[sa.Column[int], sa.Column[int]]:
    return sa.Column("created_at", sa.BigInteger, nullable=False), sa.Column(
        "updated_at", sa.BigInteger, nullable=False
    )


def _index(table: str, column: str) -> None:
    op.create_index(f"ix_{table}_{column}", table, [column])


def _catalog_tables() -> None:
    state = op.create_table(
        "catalog_state",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_catalog_state"),
    )
    op.bulk_insert(state, [{"id": 1, "revision": 1}])
    op.create_table(
        "catalogs",
        _id(),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_lc", sa.String(255), nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("storage_root", sa.Text),
        *_times(),
        _pk("catalogs"),
        _uq("catalogs", "name_lc"),
    )
    op.create_table(
        "catalog_schemas",
        _id(),
        sa.Column("catalog_id", ID, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_lc", sa.String(255), nullable=False),
        sa.Column("comment", sa.Text),
        *_times(),
        _pk("catalog_schemas"),
        _fk("catalog_schemas", "catalog_id", "catalogs"),
        _uq("catalog_schemas", "catalog_id", "name_lc"),
    )
    op.create_table(
        "catalog_tables",
        _id(),
        sa.Column("schema_id", ID, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_lc", sa.String(255), nullable=False),
        sa.Column("table_id", sa.String(36), nullable=False),
        sa.Column("storage_location", sa.Text, nullable=False),
        sa.Column("location_key", sa.Text, nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("table_type", sa.String(32), nullable=False),
        sa.Column("data_source_format", sa.String(32), nullable=False),
        *_times(),
        _pk("catalog_tables"),
        _fk("catalog_tables", "schema_id", "catalog_schemas"),
        _uq("catalog_tables", "schema_id", "name_lc"),
        _uq("catalog_tables", "table_id"),
        _uq("catalog_tables", "location_key"),
    )


def _share_tables() -> None:
    op.create_table(
        "shares",
        _id(),
        sa.Column("share_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_lc", sa.String(255), nullable=False),
        sa.Column("comment", sa.Text),
        *_times(),
        _pk("shares"),
        _uq("shares", "share_id"),
        _uq("shares", "name_lc"),
    )
    op.create_table(
        "share_objects",
        _id(),
        sa.Column("share_ref", ID, nullable=False),
        sa.Column("object_type", sa.String(16), nullable=False),
        sa.Column("table_ref", ID),
        sa.Column("schema_ref", ID),
        sa.Column("shared_as", sa.String(511), nullable=False),
        sa.Column("shared_as_lc", sa.String(511), nullable=False),
        sa.Column("history_shared", sa.Boolean, nullable=False),
        sa.Column("cdf_enabled", sa.Boolean, nullable=False),
        sa.Column("start_version", sa.BigInteger, nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("partitions", sa.JSON, nullable=False),
        sa.Column("added_at", sa.BigInteger, nullable=False),
        _pk("share_objects"),
        _fk("share_objects", "share_ref", "shares"),
        _fk("share_objects", "table_ref", "catalog_tables"),
        _fk("share_objects", "schema_ref", "catalog_schemas"),
        _uq("share_objects", "share_ref", "shared_as_lc"),
        _uq("share_objects", "share_ref", "table_ref"),
        _uq("share_objects", "share_ref", "schema_ref"),
    )
    _index("share_objects", "table_ref")
    _index("share_objects", "schema_ref")


def _recipient_tables() -> None:
    op.create_table(
        "recipients",
        _id(),
        sa.Column("recipient_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("name_lc", sa.String(255), nullable=False),
        sa.Column("comment", sa.Text),
        sa.Column("authentication_type", sa.String(32), nullable=False),
        sa.Column("expiration_time", sa.BigInteger),
        sa.Column("allowed_ip_addresses", sa.JSON, nullable=False),
        sa.Column("properties", sa.JSON, nullable=False),
        *_times(),
        _pk("recipients"),
        _uq("recipients", "recipient_id"),
        _uq("recipients", "name_lc"),
    )
    op.create_table(
        "recipient_tokens",
        _id(),
        sa.Column("recipient_ref", ID, nullable=False),
        sa.Column("token_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expiration_time", sa.BigInteger),
        sa.Column("token_hash", sa.LargeBinary(32)),
        sa.Column("activation_hash", sa.LargeBinary(32)),
        sa.Column("activation_expires_at", sa.BigInteger),
        sa.Column("activated_at", sa.BigInteger),
        _pk("recipient_tokens"),
        _fk("recipient_tokens", "recipient_ref", "recipients"),
        _uq("recipient_tokens", "token_id"),
        _uq("recipient_tokens", "token_hash"),
        _uq("recipient_tokens", "activation_hash"),
    )
    _index("recipient_tokens", "recipient_ref")
    op.create_table(
        "grants",
        sa.Column("share_ref", ID, nullable=False),
        sa.Column("recipient_ref", ID, nullable=False),
        sa.Column("privilege", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("share_ref", "recipient_ref", "privilege", name="pk_grants"),
        _fk("grants", "share_ref", "shares"),
        _fk("grants", "recipient_ref", "recipients"),
    )
    _index("grants", "recipient_ref")


def _audit_table() -> None:
    op.create_table(
        "audit_events",
        _id(),
        sa.Column("time", sa.BigInteger, nullable=False),
        sa.Column("request_id", sa.String(255), nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("action", sa.String(255), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("client_ip", sa.String(64)),
        sa.Column("user_agent", sa.Text),
        sa.Column("share", sa.String(255)),
        sa.Column("share_lc", sa.String(255)),
        sa.Column("schema_name", sa.String(255)),
        sa.Column("table_name", sa.String(255)),
        sa.Column("version", sa.BigInteger),
        sa.Column("files", sa.BigInteger),
        sa.Column("bytes", sa.BigInteger),
        sa.Column("duration_ms", sa.Float),
        sa.Column("detail", sa.JSON, nullable=False),
        _pk("audit_events"),
    )
    _index("audit_events", "time")
    _index("audit_events", "principal")


def upgrade() -> None:
    _catalog_tables()
    _share_tables()
    _recipient_tables()
    _audit_table()


def downgrade() -> None:  # noqa: V103
    for table in (
        "audit_events",
        "grants",
        "recipient_tokens",
        "recipients",
        "share_objects",
        "shares",
        "catalog_tables",
        "catalog_schemas",
        "catalogs",
        "catalog_state",
    ):
        op.drop_table(table)
