"""CatalogDB: opening, the revision, and catalogs, schemas and tables (on SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from deltaport.catalog.model import ObjectType, SharedObject
from deltaport.catalog.store import CatalogDB, ObjectUpdate
from deltaport.catalog.store_catalog import location_key
from deltaport.errors import AlreadyExists, InvalidParameter, ResourceNotFound


def _catalog_with_table(store, root=None):
    store.create_catalog("main", storage_root=root)
    store.create_schema("main", "sales")
    return store.create_table("main", "sales", "orders", "/data/sales/orders")


# --- opening ------------------------------------------------------------------------------------


def test_a_new_database_opens_at_revision_one_and_reopens(catalog_url, clock):
    first = CatalogDB(catalog_url, clock=clock)
    assert first.revision() == 1
    first.create_catalog("main")
    first.close()
    again = CatalogDB(catalog_url, clock=clock)
    try:
        assert [c.name for c in again.list_catalogs()] == ["main"]
        assert again.revision() == 2
    finally:
        again.close()


def test_the_displayed_url_has_no_password(tmp_path, postgres_server):
    db = CatalogDB(postgres_server.create_database().replace("postgres@", "postgres:s3cr3t-pw@"))
    try:
        assert "s3cr3t-pw" not in db.url_for_display
        assert db.url_for_display.startswith("postgresql://postgres:***@127.0.0.1:")
        assert "s3cr3t-pw" not in repr(db)
    finally:
        db.close()
    sqlite = CatalogDB(f"sqlite:///{tmp_path / 'c.db'}")
    assert sqlite.url_for_display == f"sqlite:///{tmp_path / 'c.db'}"
    sqlite.close()


@pytest.mark.parametrize("url", ["mysql://u@h/db", "/just/a/path.db", "sqlite+aiosqlite:///x.db", "not a url"])
def test_unsupported_urls_say_what_is_supported(url):
    with pytest.raises(InvalidParameter, match="sqlite:///path/to/catalog.db"):
        CatalogDB(url)


def test_activation_ttl_must_be_positive(tmp_path):
    with pytest.raises(InvalidParameter, match="activation_ttl_s"):
        CatalogDB(f"sqlite:///{tmp_path / 'c.db'}", activation_ttl_s=0)


def test_every_write_bumps_the_revision_and_reads_do_not(store):
    seen = [store.revision()]
    store.create_catalog("main")
    seen.append(store.revision())
    store.list_catalogs()
    store.get_catalog("main")
    seen.append(store.revision())
    store.update_catalog("main", comment="c")
    seen.append(store.revision())
    with pytest.raises(AlreadyExists):
        store.create_catalog("MAIN")  # a failed write commits nothing, the revision included
    seen.append(store.revision())
    assert seen == [1, 2, 2, 3, 3]


# --- catalogs -----------------------------------------------------------------------------------


def test_catalogs_are_created_listed_updated_and_deleted(store, clock):
    made = store.create_catalog("Main", comment="first", storage_root="s3://bucket/root")
    assert (made.name, made.comment, made.storage_root, made.created_at) == (
        "Main",
        "first",
        "s3://bucket/root",
        clock.ms,
    )
    store.create_catalog("archive")
    assert [c.name for c in store.list_catalogs()] == ["archive", "Main"]
    assert store.get_catalog("MAIN") == made
    clock.advance(5)
    renamed = store.update_catalog("main", new_name="prod", comment="second")
    assert (renamed.name, renamed.comment, renamed.updated_at, renamed.created_at) == (
        "prod",
        "second",
        clock.ms,
        made.created_at,
    )
    with pytest.raises(ResourceNotFound, match="catalog 'main' does not exist"):
        store.get_catalog("main")
    store.delete_catalog("prod")
    assert [c.name for c in store.list_catalogs()] == ["archive"]


def test_catalog_names_are_unique_without_regard_to_case(store):
    store.create_catalog("main")
    store.create_catalog("other")
    with pytest.raises(AlreadyExists, match="catalog 'MAIN' already exists: choose another name"):
        store.create_catalog("MAIN")
    with pytest.raises(AlreadyExists, match="catalog 'Main' already exists"):
        store.update_catalog("other", new_name="Main")
    assert store.update_catalog("main", new_name="MAIN").name == "MAIN"  # its own name in another case


def test_catalog_arguments_are_checked(store):
    with pytest.raises(InvalidParameter, match="catalog name 'a.b' is invalid"):
        store.create_catalog("a.b")
    with pytest.raises(InvalidParameter, match="storage root of catalog 'main'"):
        store.create_catalog("main", storage_root="relative/path")
    with pytest.raises(ResourceNotFound, match="catalog 'nope' does not exist: create it first"):
        store.update_catalog("nope", comment="x")
    with pytest.raises(ResourceNotFound):
        store.delete_catalog("nope")


def test_a_catalog_with_schemas_goes_only_with_force_and_takes_its_shared_objects(store):
    _catalog_with_table(store)
    store.create_share("s")
    store.update_share("s", updates=[ObjectUpdate("ADD", SharedObject("main.sales.orders"))])
    with pytest.raises(InvalidParameter, match=r"catalog 'main' is not empty \(1 schema\(s\)\)"):
        store.delete_catalog("main")
    assert store.table_exists("main.sales.orders")
    store.delete_catalog("main", force=True)
    assert store.list_catalogs() == []
    assert store.get_share("s", include_objects=True).objects == ()
    store.create_catalog("main")  # the name is free again, and so is the location
    store.create_schema("main", "sales")
    store.create_table("main", "sales", "orders", "/data/sales/orders")


# --- schemas ------------------------------------------------------------------------------------


def test_schemas_live_in_their_catalog(store):
    store.create_catalog("main")
    store.create_catalog("other")
    made = store.create_schema("MAIN", "Sales", comment="c")
    assert (made.catalog_name, made.name, made.full_name, made.comment) == ("main", "Sales", "main.Sales", "c")
    store.create_schema("main", "hr")
    store.create_schema("other", "sales")  # the same name in another catalog
    assert [s.name for s in store.list_schemas("main")] == ["hr", "Sales"]
    assert store.get_schema("main.sales") == made
    with pytest.raises(AlreadyExists, match="schema 'main.SALES' already exists"):
        store.create_schema("main", "SALES")
    with pytest.raises(ResourceNotFound, match="catalog 'nope' does not exist"):
        store.create_schema("nope", "x")
    with pytest.raises(ResourceNotFound, match="schema 'main.nope' does not exist"):
        store.get_schema("main.nope")
    with pytest.raises(InvalidParameter, match="write it as 'catalog.schema'"):
        store.get_schema("sales")


def test_schemas_are_renamed_and_deleted(store):
    _catalog_with_table(store)
    store.create_schema("main", "hr")
    with pytest.raises(AlreadyExists, match="schema 'main.HR' already exists"):
        store.update_schema("main.sales", new_name="HR")
    renamed = store.update_schema("main.sales", new_name="revenue", comment="renamed")
    assert (renamed.full_name, renamed.comment) == ("main.revenue", "renamed")
    assert store.get_table("main.revenue.orders").name == "orders"
    with pytest.raises(InvalidParameter, match=r"schema 'main.revenue' is not empty \(1 table\(s\)\)"):
        store.delete_schema("main.revenue")
    store.delete_schema("main.hr")
    store.delete_schema("main.revenue", force=True)
    assert store.list_schemas("main") == []
    assert not store.table_exists("main.revenue.orders")


# --- tables -------------------------------------------------------------------------------------


def test_tables_are_registered_with_a_fresh_id(store, clock):
    store.create_catalog("main")
    store.create_schema("main", "sales")
    a = store.create_table("main", "sales", "Orders", "s3://bucket/orders", comment="c", table_type="external")
    b = store.create_table("main", "sales", "items", "s3://bucket/items")
    assert (a.full_name, a.storage_location, a.comment, a.table_type, a.data_source_format) == (
        "main.sales.Orders",
        "s3://bucket/orders",
        "c",
        "EXTERNAL",
        "DELTA",
    )
    assert len(a.table_id) == 36 and a.table_id != b.table_id
    assert a.created_at == clock.ms
    assert [t.name for t in store.list_tables("main", "sales")] == ["items", "Orders"]
    assert store.get_table("MAIN.Sales.orders") == a
    assert store.table_exists("main.sales.ORDERS") and not store.table_exists("main.sales.nope")
    assert not store.table_exists("nope.sales.orders")
    store.delete_table("main.sales.orders")
    assert [t.name for t in store.list_tables("main", "sales")] == ["items"]
    with pytest.raises(ResourceNotFound, match="table 'main.sales.orders' does not exist"):
        store.delete_table("main.sales.orders")


def test_only_external_delta_tables(store):
    store.create_catalog("main")
    store.create_schema("main", "sales")
    with pytest.raises(InvalidParameter, match="only EXTERNAL tables"):
        store.create_table("main", "sales", "t", "/data/t", table_type="MANAGED")
    with pytest.raises(InvalidParameter, match="only DELTA is accepted"):
        store.create_table("main", "sales", "t", "/data/t", data_source_format="PARQUET")
    assert store.list_tables("main", "sales") == []


def test_table_names_and_locations_are_unique(store):
    _catalog_with_table(store)
    with pytest.raises(AlreadyExists, match="table 'main.sales.ORDERS' already exists"):
        store.create_table("main", "sales", "ORDERS", "/data/elsewhere")
    for same_place in (
        "/data/sales/orders/",
        "file:///data/sales/orders",
        "/data//sales/./orders",
        "file:/data/sales/orders",
    ):
        with pytest.raises(AlreadyExists, match="table 'main.sales.orders' has that storage location already"):
            store.create_table("main", "sales", "copy", same_place)
    store.create_table("main", "sales", "nested", "/data/sales/orders2")


def test_locations_must_lie_under_the_catalogs_storage_root(store):
    store.create_catalog("lake", storage_root="s3://bucket/lake")
    store.create_schema("lake", "s")
    store.create_table("lake", "s", "a", "s3://bucket/lake/a")
    store.create_table("lake", "s", "b", "S3://bucket/lake/deep/b/")
    for outside in ("s3://bucket/lakehouse/c", "s3://other/lake/c", "gs://bucket/lake/c", "/lake/c"):
        with pytest.raises(InvalidParameter, match="outside the storage root of catalog 'lake'"):
            store.create_table("lake", "s", "c", outside)
    with pytest.raises(InvalidParameter, match="'..' segment"):
        store.create_table("lake", "s", "c", "s3://bucket/lake/../secrets/c")
    store.create_catalog("local", storage_root="/srv/tables")
    store.create_schema("local", "s")
    store.create_table("local", "s", "t", "file:///srv/tables/t")
    with pytest.raises(InvalidParameter, match="outside the storage root"):
        store.create_table("local", "s", "u", "/srv/tablesX/u")


@pytest.mark.parametrize(
    ("location", "key"),
    [
        ("/data/t", "file:///data/t"),
        ("/data//t/./", "file:///data/t"),
        ("file:///data/t", "file:///data/t"),
        ("file:/data/t", "file:///data/t"),
        ("file://localhost/data/my%20t", "file:///data/my t"),
        ("S3://Bucket/a//b/", "s3://Bucket/a/b"),
        ("abfss://c@acct.dfs.core.windows.net/t", "abfss://c@acct.dfs.core.windows.net/t"),
        ("s3://bucket", "s3://bucket/"),
        ("/", "file:///"),
    ],
)
def test_location_keys_normalise_without_resolving(location, key):
    assert location_key(location) == key


@pytest.mark.parametrize(
    ("location", "needle"),
    [
        ("relative/t", "absolute path or a URL"),
        ("", "absolute path or a URL"),
        ("C:\\data\\t", "absolute path or a URL"),
        ("/data/../etc", "'..' segment"),
        ("file:///data/%2e%2e/etc", "'..' segment"),
        ("s3://bucket/a/..", "'..' segment"),
        ("s3:///path", "needs an authority"),
        ("file://otherhost/data", "local file URL"),
        ("s3://bucket/t?versionId=1", "query"),
    ],
)
def test_bad_locations_are_refused(location, needle):
    with pytest.raises(InvalidParameter) as info:
        location_key(location)
    assert needle in info.value.message


def test_a_shared_schema_follows_its_catalog_rename(store):
    _catalog_with_table(store)
    store.create_share("s")
    store.update_share("s", updates=[ObjectUpdate("ADD", SharedObject("main.sales", ObjectType.SCHEMA))])
    store.update_catalog("main", new_name="prod")
    (obj,) = store.get_share("s", include_objects=True).objects
    assert (obj.name, obj.shared_as) == ("prod.sales", "sales")


def test_an_in_memory_database_serves_one_process(tmp_path):
    store = CatalogDB("sqlite://")
    store.create_catalog("main")
    assert [c.name for c in store.list_catalogs()] == ["main"]
    store.close()


def test_database_errors_never_quote_statement_parameters(store):
    """A digest bound to a failing statement stays out of the error text (and so out of logs)."""
    secret = "f" * 64
    with store._engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as info:
        conn.execute(sa.text("SELECT * FROM no_such_table WHERE x = :x"), {"x": secret})
    assert "no_such_table" in str(info.value) and secret not in str(info.value)
