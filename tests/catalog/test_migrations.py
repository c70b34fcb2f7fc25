"""Schema migrations: they build exactly the tables the code defines, run once however many
processes open a fresh database together, and refuse a database newer than the code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from deltaport.catalog import db
from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store import CatalogDB
from deltaport.errors import CatalogUnavailable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "src" / "deltaport" / "catalog" / "migrations"
HEAD = "0005"


def _engine(url):
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))


def test_the_migrated_schema_is_the_one_the_code_defines(catalog_url):
    CatalogDB(catalog_url).close()
    engine = _engine(catalog_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, db.metadata) == []
        assert context.get_current_heads() == (HEAD,)
        assert conn.execute(sa.select(db.catalog_state)).all() == [(1, 1)]
    engine.dispose()


def test_the_comparison_sees_a_difference(catalog_url):
    """The check above can fail: a column the migrations did not make is reported."""
    CatalogDB(catalog_url).close()
    changed = sa.MetaData()
    for table in db.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["shares"].append_column(sa.Column("extra", sa.Integer))
    engine = _engine(catalog_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), changed)
    engine.dispose()
    assert [(d[0], d[3].name) for d in diff] == [("add_column", "extra")]


def test_downgrade_to_nothing_and_up_again(catalog_url):
    CatalogDB(catalog_url).close()
    engine = db.engine_for(catalog_url)
    with engine.connect() as conn:
        config = db._alembic_config(conn)
        with conn.begin():
            command.downgrade(config, "base")
        assert set(sa.inspect(conn).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    store = CatalogDB(catalog_url)
    assert store.revision() == 1
    store.close()


def _at_0001_with_events(catalog_url, events):
    """A database at revision 0001 holding ``events`` (column values) in its audit_events table."""
    CatalogDB(catalog_url).close()
    engine = db.engine_for(catalog_url)
    with engine.connect() as conn:
        with conn.begin():
            command.downgrade(db._alembic_config(conn), "0001")
        with conn.begin():
            table = sa.Table("audit_events", sa.MetaData(), autoload_with=conn)
            conn.execute(table.insert(), events)
    engine.dispose()


def test_audit_events_stored_one_per_row_move_into_blocks_in_order(catalog_url):
    rows = [
        dict(
            time=1000 + i,
            request_id=f"r{i}",
            principal="alice" if i % 2 else "bob",
            action="queryTable",
            status=200,
            share="Sales",
            share_lc="sales",
            detail={"n": i} if i == 3 else {},
        )
        for i in range(2500)
    ]
    _at_0001_with_events(catalog_url, rows)
    store = CatalogDB(catalog_url)  # migrates to the head
    try:
        stored = [e for _, e in store.audit_events(limit=10_000)]
        assert [(e.request_id, e.principal, e.time, e.share) for e in stored] == [
            (r["request_id"], r["principal"], r["time"], r["share"]) for r in rows
        ]
        assert stored[3].detail == {"n": 3} and stored[4].detail == {}
        assert [e.request_id for _, e in store.audit_events(principal="bob", share="SALES", limit=3)] == [
            "r0",
            "r2",
            "r4",
        ]
    finally:
        store.close()


def test_a_downgrade_moves_the_blocks_back_into_rows(catalog_url):
    store = CatalogDB(catalog_url)
    store.add_audit_events(
        [AuditEvent(time=7 + i, request_id=f"r{i}", principal="p", action="a", status=200) for i in range(5)]
    )
    store.close()
    engine = db.engine_for(catalog_url)
    with engine.connect() as conn:
        with conn.begin():
            command.downgrade(db._alembic_config(conn), "0001")
        table = sa.Table("audit_events", sa.MetaData(), autoload_with=conn)
        assert [tuple(r) for r in conn.execute(sa.select(table.c.time, table.c.request_id).order_by(table.c.id))] == [
            (7 + i, f"r{i}") for i in range(5)
        ]
    engine.dispose()


def test_a_database_from_a_newer_deltaport_is_refused(catalog_url):
    CatalogDB(catalog_url).close()
    engine = _engine(catalog_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(CatalogUnavailable, match="schema revision 0099, newer than this deltaport knows") as info:
        CatalogDB(catalog_url)
    assert "upgrade deltaport" in info.value.message


_OPEN_ON_GO = textwrap.dedent(
    """
    import os, sys, time
    from deltaport.catalog.store import CatalogDB
    url, go, share = sys.argv[1:4]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    store = CatalogDB(url)
    store.create_share(share)
    store.close()
    """
)


def test_processes_opening_a_fresh_database_at_once_migrate_it_once(catalog_url, tmp_path):
    """Four processes open the same empty database at the same moment: all succeed, and the
    schema is made once (one revision row, every process's write counted)."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_ON_GO, catalog_url, str(go), f"share{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    assert [p.stdout.readline().strip() for p in procs if p.stdout] == ["ready"] * 4
    go.touch()
    outputs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outputs]
    store = CatalogDB(catalog_url)
    try:
        assert [s.name for s in store.list_shares()] == ["share0", "share1", "share2", "share3"]
        assert store.revision() == 5
    finally:
        store.close()
    engine = _engine(catalog_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [(HEAD,)]
        assert conn.execute(sa.select(sa.func.count()).select_from(db.catalog_state)).scalar_one() == 1
    engine.dispose()


def test_the_migrations_ship_in_the_wheel():
    """Alembic needs env.py and the version files at run time (they are modules of packages, so
    they ship) and script.py.mako to write new revisions (package data)."""
    assert (MIGRATIONS / "__init__.py").is_file() and (MIGRATIONS / "versions" / "__init__.py").is_file()
    assert (MIGRATIONS / "env.py").is_file() and (MIGRATIONS / "script.py.mako").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.mako" in config["tool"]["setuptools"]["package-data"]["deltaport.catalog.migrations"]
    extras = config["project"]["optional-dependencies"]
    for extra in ("catalog", "server", "dev"):
        assert {"sqlalchemy>=2", "alembic>=1.13"} <= set(extras[extra])
    for extra in ("postgres", "dev"):  # the PostgreSQL driver only where a PostgreSQL catalog is asked for
        assert "psycopg[binary]>=3.1" in extras[extra]
    assert not any(d.startswith("psycopg") for d in extras["server"] + extras["catalog"])
