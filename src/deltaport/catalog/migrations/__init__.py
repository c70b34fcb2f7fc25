"""Alembic migrations of the catalog database, run by :func:`deltaport.catalog.db.upgrade_to_head`
(no alembic.ini: the configuration is built in code). ``versions/`` holds one file per schema
revision, each self-contained (it never imports the current table definitions)."""
