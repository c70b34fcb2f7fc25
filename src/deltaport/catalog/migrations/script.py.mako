"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}  # noqa: V107  (read by Alembic, as is downgrade())
branch_labels = ${repr(branch_labels)}  # noqa: V107
depends_on = ${repr(depends_on)}  # noqa: V107


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:  # noqa: V103
    ${downgrades if downgrades else "pass"}
