"""Alembic's environment script, executed by Alembic (never imported by deltaport itself).

It runs online only, on the connection :func:`deltaport.catalog.db.upgrade_to_head` passes in
``config.attributes["connection"]``, inside the transaction (and lock) that function holds: every
migration of one upgrade commits together or not at all, DDL included (SQLite and PostgreSQL both
have transactional DDL)."""

from __future__ import annotations

from alembic import context

from deltaport.catalog.db import metadata


def run_migrations() -> None:
    connection = context.config.attributes["connection"]
    context.configure(connection=connection, target_metadata=metadata, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
