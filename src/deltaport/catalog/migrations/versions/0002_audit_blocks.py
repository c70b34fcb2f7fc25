"""Audit events stored in blocks (``audit_blocks``: one row per batch written, its events one JSON
array) instead of one row each (``audit_events``). The events already stored move into blocks,
in their order; a downgrade moves them back.

Self-contained like 0001: the event's JSON form is spelt here, not imported.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"  # noqa: V107  (these names and downgrade() are read by Alembic)
branch_labels = None  # noqa: V107
depends_on = None  # noqa: V107

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BLOCK = 1000  # events per block moved
#: (column of audit_events, key of the event in a block)
FIELDS = (
    ("time", "time"),
    ("request_id", "request_id"),
    ("principal", "principal"),
    ("action", "action"),
    ("status", "status"),
    ("client_ip", "client_ip"),
    ("user_agent", "user_agent"),
    ("share", "share"),
    ("schema_name", "schema"),
    ("table_name", "table"),
    ("version", "version"),
    ("files", "files"),
    ("bytes", "bytes"),
    ("duration_ms", "duration_ms"),
    ("detail", "detail"),
)


def _events_table() -> sa.Table:
    return op.create_table(
        "audit_events",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
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
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )


def _blocks_table() -> sa.Table:
    return op.create_table(
        "audit_blocks",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("first_time", sa.BigInteger, nullable=False),
        sa.Column("last_time", sa.BigInteger, nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_blocks"),
    )


def upgrade() -> None:
    blocks = _blocks_table()
    op.create_index("ix_audit_blocks_last_time", "audit_blocks", ["last_time"])
    conn = op.get_bind()
    events = sa.Table("audit_events", sa.MetaData(), autoload_with=conn)
    rows = conn.execute(sa.select(events).order_by(events.c.id)).mappings()
    while chunk := rows.fetchmany(BLOCK):
        moved = [_event(row) for row in chunk]
        times = [int(row["time"]) for row in chunk]
        conn.execute(blocks.insert().values(first_time=min(times), last_time=max(times), events=json.dumps(moved)))
    op.drop_table("audit_events")


def _event(row: sa.RowMapping) -> dict[str, Any]:
    event = {key: row[column] for column, key in FIELDS}
    detail = event["detail"]
    event["detail"] = json.loads(detail) if isinstance(detail, str) else (detail or {})
    return event


def downgrade() -> None:  # noqa: V103
    events = _events_table()
    op.create_index("ix_audit_events_time", "audit_events", ["time"])
    op.create_index("ix_audit_events_principal", "audit_events", ["principal"])
    conn = op.get_bind()
    blocks = sa.Table("audit_blocks", sa.MetaData(), autoload_with=conn)
    for (text,) in conn.execute(sa.select(blocks.c.events).order_by(blocks.c.id)).all():
        rows = [{column: event.get(key) for column, key in FIELDS} for event in json.loads(text)]
        for row in rows:
            row["share_lc"] = row["share"].lower() if row["share"] is not None else None
            row["detail"] = row["detail"] or {}
        if rows:
            conn.execute(events.insert(), rows)
    op.drop_table("audit_blocks")
