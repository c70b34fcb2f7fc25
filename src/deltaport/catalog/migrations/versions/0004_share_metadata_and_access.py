"""A share's display name and properties (``shares.display_name``, ``shares.properties``), and a
shared object's access modes and auxiliary locations (``share_objects.access_modes``,
``share_objects.auxiliary_locations``), all JSON but the name. Shares made before this revision
have no display name and no properties; their objects are read by URL only (``["url"]``) with no
auxiliary locations.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"  # noqa: V107  (these names and downgrade() are read by Alembic)
branch_labels = None  # noqa: V107
depends_on = None  # noqa: V107


def upgrade() -> None:
    op.add_column("shares", sa.Column("display_name", sa.String(255)))
    op.add_column("shares", sa.Column("properties", sa.JSON, nullable=False, server_default="{}"))
    op.add_column("share_objects", sa.Column("access_modes", sa.JSON, nullable=False, server_default='["url"]'))
    op.add_column("share_objects", sa.Column("auxiliary_locations", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:  # noqa: V103
    # Plain DROP COLUMN (SQLite 3.35+ too), never a batch copy of the table: SQLite would drop the
    # old ``shares`` table, and with it (ON DELETE CASCADE) every share object and grant.
    for table, column in (
        ("share_objects", "auxiliary_locations"),
        ("share_objects", "access_modes"),
        ("shares", "properties"),
        ("shares", "display_name"),
    ):
        op.drop_column(table, column)
