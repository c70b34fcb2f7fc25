"""The state of asynchronous queries (``async_queries``): one row per query a recipient submitted
with ``asyncquery=true``, deleted once expired. Not part of the catalog: its writes leave the
catalog's revision as it is.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"  # noqa: V107  (these names and downgrade() are read by Alembic)
branch_labels = None  # noqa: V107
depends_on = None  # noqa: V107

KEY = ("recipient", "table_name", "table_id", "idempotency_key")


def upgrade() -> None:
    op.create_table(
        "async_queries",
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
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("query_id", name="pk_async_queries"),
        sa.UniqueConstraint(*KEY, name=f"uq_async_queries_{'_'.join(KEY)}"),
    )
    op.create_index("ix_async_queries_expires_at", "async_queries", ["expires_at"])


def downgrade() -> None:  # noqa: V103
    op.drop_index("ix_async_queries_expires_at", table_name="async_queries")
    op.drop_table("async_queries")
