"""Pending activation links kept encrypted (``recipient_tokens.activation_sealed``), so that the
admin API shows a token's ``activation_url`` until the link is used, as Unity Catalog does. Links
made before this revision have none and stay unshown.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"  # noqa: V107  (these names and downgrade() are read by Alembic)
branch_labels = None  # noqa: V107
depends_on = None  # noqa: V107


def upgrade() -> None:
    op.add_column("recipient_tokens", sa.Column("activation_sealed", sa.LargeBinary))


def downgrade() -> None:  # noqa: V103
    with op.batch_alter_table("recipient_tokens") as batch:
        batch.drop_column("activation_sealed")
