"""A share's display name and properties and a shared object's access modes and auxiliary
locations in the catalog (SQLite and PostgreSQL): kept, checked by the same rules as the YAML
config, served, migrated and imported."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from alembic import command

from deltaport.catalog import db
from deltaport.catalog.import_served import import_served
from deltaport.catalog.model import ObjectType, PartitionValue, SharedObject
from deltaport.catalog.served import SchemaConfig, ShareConfig, SharedTableConfig
from deltaport.catalog.store import CatalogDB, ObjectUpdate
from deltaport.errors import InvalidParameter

#: objects sharing their history, which directory access needs (a directory holds every version)
TABLE = SharedObject("main.sales.orders", history_shared=True)
SCHEMA = SharedObject("main.sales", ObjectType.SCHEMA, history_shared=True)


@pytest.fixture
def lake(store):
    store.create_catalog("main")
    store.create_schema("main", "sales")
    store.create_schema("main", "web")
    store.create_table("main", "sales", "orders", "s3://bucket/orders")
    store.create_table("main", "sales", "items", "/data/items")
    store.create_table("main", "web", "pages", "https://host/pages")
    store.create_share("s")
    return store


def _served_tables(store) -> dict[str, SharedTableConfig]:
    (share,) = store.served().shares
    return {f"{schema.name}.{t.name}": t for schema in share.schemas for t in schema.tables}


def test_a_shares_display_name_and_properties_are_kept_changed_and_cleared(store):
    made = store.create_share("s", comment="about", display_name="Sales", properties={"owner": "sales-team"})
    assert (made.comment, made.display_name, made.properties) == ("about", "Sales", {"owner": "sales-team"})
    assert store.create_share("plain").properties == {} and store.get_share("plain").display_name is None
    changed = store.update_share("s", display_name="Sales EU", properties={"region": "eu"})
    assert (changed.comment, changed.display_name, changed.properties) == ("about", "Sales EU", {"region": "eu"})
    kept = store.update_share("s", comment="new")
    assert (kept.display_name, kept.properties) == ("Sales EU", {"region": "eu"})  # None: unchanged
    cleared = store.update_share("s", display_name="", properties={})
    assert (cleared.display_name, cleared.properties) == (None, {})
    store.update_share("s", display_name="Sales", properties={"a": "1"})
    (listed,) = [s for s in store.list_shares() if s.name == "s"]
    assert (listed.display_name, listed.properties) == ("Sales", {"a": "1"})
    served = {s.name: s for s in store.served().shares}
    assert (served["s"].display_name, served["s"].comment, served["s"].properties) == ("Sales", "new", {"a": "1"})
    assert (served["plain"].display_name, served["plain"].properties) == (None, {})


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"display_name": "D" * 256}, "display_name of share 's' is 256 characters, more than the 255"),
        ({"comment": "c" * 65_537}, "comment of share 's' is 65537 characters, more than the 65536"),
        ({"properties": {f"k{i}": "v" for i in range(51)}}, "properties of share 's' has 51 pairs"),
        ({"properties": {"k" * 256: "v"}}, "a key of 256 characters"),
        ({"properties": {"k": "v" * 1001}}, "properties 'k' of share 's' is 1001 characters"),
    ],
)
def test_share_metadata_beyond_the_protocols_limits_is_refused(store, fields, needle):
    with pytest.raises(InvalidParameter, match="shorten it|remove some") as info:
        store.create_share("s", **fields)
    assert needle in info.value.message
    store.create_share("s")
    with pytest.raises(InvalidParameter) as info:
        store.update_share("s", **fields)
    assert needle in info.value.message
    assert (store.get_share("s").display_name, store.get_share("s").properties) == (None, {})


def test_access_modes_and_auxiliary_locations_are_kept_and_served(lake):
    obj = dataclasses.replace(TABLE, access_modes=("dir", "url"), auxiliary_locations=("s3://other/root",))
    share = lake.update_share(
        "s", updates=[ObjectUpdate("ADD", obj), ObjectUpdate("ADD", SharedObject("main.web", ObjectType.SCHEMA))]
    )
    table, schema = share.objects
    assert (table.access_modes, table.auxiliary_locations) == (("url", "dir"), ("s3://other/root",))
    assert (schema.access_modes, schema.auxiliary_locations) == (("url",), ())
    served = _served_tables(lake)
    assert (served["sales.orders"].access_modes, served["sales.orders"].auxiliary_locations) == (
        ("url", "dir"),
        ("s3://other/root",),
    )
    assert served["web.pages"].access_modes == ("url",)
    updated = dataclasses.replace(table, access_modes=("dir",), auxiliary_locations=())
    lake.update_share("s", updates=[ObjectUpdate("UPDATE", updated)])
    assert (
        _served_tables(lake)["sales.orders"].access_modes,
        _served_tables(lake)["sales.orders"].auxiliary_locations,
    ) == (
        ("dir",),
        (),
    )


def test_a_shared_schemas_access_modes_reach_its_tables_and_a_later_table_dir_cannot_serve_is_read_by_url(lake):
    lake.update_share("s", updates=[ObjectUpdate("ADD", dataclasses.replace(SCHEMA, access_modes=("dir",)))])
    assert {n: t.access_modes for n, t in _served_tables(lake).items()} == {
        "sales.items": ("dir",),
        "sales.orders": ("dir",),
    }
    lake.create_table("main", "sales", "feed", "https://host/feed")
    assert _served_tables(lake)["sales.feed"].access_modes == ("url",)
    assert _served_tables(lake)["sales.orders"].access_modes == ("dir",)


BAD = [
    (dataclasses.replace(TABLE, access_modes=()), "access_modes of table 'main.sales.orders' in share 's' must be"),
    (dataclasses.replace(TABLE, access_modes=("url", "url")), "names an access mode twice"),
    (dataclasses.replace(TABLE, access_modes=("ftp",)), "unknown access mode(s) ['ftp']"),
    (dataclasses.replace(TABLE, auxiliary_locations=("s3://bucket/orders/x",)), "inside the table's own location"),
    (dataclasses.replace(TABLE, auxiliary_locations=("nowhere",)), "is not a storage URL"),
    (dataclasses.replace(SCHEMA, auxiliary_locations=("s3://o/r",)), "auxiliary_locations apply to tables only"),
    (
        dataclasses.replace(TABLE, access_modes=("url", "dir"), partitions=((PartitionValue("region", value="EU"),),)),
        "has 'dir', but it is shared with partitions",
    ),
    (
        dataclasses.replace(TABLE, access_modes=("dir",), auxiliary_locations=("https://host/aux",)),
        "has 'dir', but its location 'https://host/aux' is on 'https' storage",
    ),
    (
        SharedObject("main.web.pages", access_modes=("dir",), history_shared=True),
        "has 'dir', but its location 'https://host/pages'",
    ),
    (
        SharedObject("main.web", ObjectType.SCHEMA, access_modes=("dir",), history_shared=True),
        "cannot vend credentials",
    ),
    (SharedObject("main.sales.orders", access_modes=("dir",)), "has 'dir', but a directory holds every version"),
]


@pytest.mark.parametrize(("obj", "needle"), BAD)
def test_bad_access_is_refused_on_add(lake, obj, needle):
    with pytest.raises(InvalidParameter) as info:
        lake.update_share("s", updates=[ObjectUpdate("ADD", obj)])
    assert needle in info.value.message
    assert lake.get_share("s", include_objects=True).objects == ()


def test_bad_access_is_refused_on_update(lake):
    lake.update_share(
        "s", updates=[ObjectUpdate("ADD", TABLE), ObjectUpdate("ADD", SharedObject("main.web", ObjectType.SCHEMA))]
    )
    current, schema = lake.get_share("s", include_objects=True).objects
    sliced = dataclasses.replace(current, access_modes=("dir",), partitions=((PartitionValue("r", value="1"),),))
    with pytest.raises(InvalidParameter, match="shared with partitions"):
        lake.update_share("s", updates=[ObjectUpdate("UPDATE", sliced)])
    with pytest.raises(InvalidParameter, match="'https://host/pages' is on 'https' storage"):
        lake.update_share(
            "s",
            updates=[ObjectUpdate("UPDATE", dataclasses.replace(schema, access_modes=("dir",), history_shared=True))],
        )
    assert [o.access_modes for o in lake.get_share("s", include_objects=True).objects] == [("url",), ("url",)]


def test_shares_and_objects_made_before_the_migration_get_the_defaults(catalog_url):
    store = CatalogDB(catalog_url)
    store.create_catalog("main")
    store.create_schema("main", "sales")
    store.create_table("main", "sales", "orders", "/data/orders")
    store.create_share("s")
    store.update_share("s", updates=[ObjectUpdate("ADD", TABLE)])
    store.close()
    engine = db.engine_for(catalog_url)
    with engine.connect() as conn:
        with conn.begin():
            command.downgrade(db._alembic_config(conn), "0003")
        assert "display_name" not in {c["name"] for c in sa.inspect(conn).get_columns("shares")}
    engine.dispose()
    store = CatalogDB(catalog_url)  # migrates to the head
    try:
        share = store.get_share("s", include_objects=True)
        assert (share.display_name, share.properties) == (None, {})
        assert (share.objects[0].access_modes, share.objects[0].auxiliary_locations) == (("url",), ())
    finally:
        store.close()


def test_an_imported_config_keeps_share_metadata_and_table_access(store):
    table = SharedTableConfig(
        "t",
        "s3://bucket/t",
        id="id-t",
        history_shared=True,
        access_modes=("url", "dir"),
        auxiliary_locations=("s3://aux/t",),
    )
    share = ShareConfig(
        "s", (SchemaConfig("d", (table,)),), id="id-s", comment="c", display_name="S", properties={"k": "v"}
    )
    import_served(store, [share], [])
    (served,) = store.served().shares
    assert (served.id, served.comment, served.display_name, served.properties) == ("id-s", "c", "S", {"k": "v"})
    (got,) = served.schemas[0].tables
    assert (got.id, got.access_modes, got.auxiliary_locations) == ("id-t", ("url", "dir"), ("s3://aux/t",))
