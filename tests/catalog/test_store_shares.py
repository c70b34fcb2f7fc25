"""Shares, their data objects and grants (on SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses

import pytest

from deltaport.catalog.model import Grant, ObjectType, PartitionOp, PartitionValue, SharedObject
from deltaport.catalog.store import ObjectUpdate, PermissionChange
from deltaport.errors import AlreadyExists, InvalidParameter, ResourceNotFound

TABLE = SharedObject("main.sales.orders")
SCHEMA = SharedObject("main.sales", ObjectType.SCHEMA)


@pytest.fixture
def lake(store):
    """A catalog 'main' with schemas sales (orders, items) and hr (people), and an empty share."""
    store.create_catalog("main")
    store.create_schema("main", "sales")
    store.create_schema("main", "hr")
    store.create_table("main", "sales", "orders", "/data/orders")
    store.create_table("main", "sales", "items", "/data/items")
    store.create_table("main", "hr", "people", "/data/people")
    store.create_share("s")
    return store


def add(*objects):
    return [ObjectUpdate("ADD", obj) for obj in objects]


def test_shares_are_created_listed_renamed_and_deleted(store, clock):
    a = store.create_share("Sales.EU", comment="c")
    assert (a.name, a.comment, a.objects, a.created_at) == ("Sales.EU", "c", (), clock.ms)
    assert len(a.id) == 36
    b = store.create_share("archive")
    assert b.id != a.id
    assert [s.name for s in store.list_shares()] == ["archive", "Sales.EU"]
    with pytest.raises(AlreadyExists, match="share 'SALES.eu' already exists: choose another name or update it"):
        store.create_share("SALES.eu")
    with pytest.raises(AlreadyExists, match="share 'Archive' already exists"):
        store.update_share("sales.eu", new_name="Archive")
    renamed = store.update_share("sales.eu", new_name="sales", comment="d")
    assert (renamed.name, renamed.comment, renamed.id) == ("sales", "d", a.id)
    store.delete_share("SALES")
    assert [s.name for s in store.list_shares()] == ["archive"]
    with pytest.raises(ResourceNotFound, match="share 'sales' does not exist: create it first"):
        store.get_share("sales")
    with pytest.raises(InvalidParameter, match="share name 'a b' is invalid"):
        store.create_share("a b")


def test_adding_objects_fills_in_shared_as_and_added_at(lake, clock):
    clock.advance(60)
    share = lake.update_share("s", updates=add(TABLE, SharedObject("main.hr", ObjectType.SCHEMA)))
    table, schema = share.objects
    assert (table.name, table.data_object_type, table.shared_as, table.added_at) == (
        "main.sales.orders",
        ObjectType.TABLE,
        "sales.orders",
        clock.ms,
    )
    assert (schema.name, schema.data_object_type, schema.shared_as) == ("main.hr", ObjectType.SCHEMA, "hr")
    assert lake.get_share("s").objects == ()  # only when asked for
    assert lake.get_share("s", include_objects=True).objects == share.objects
    assert [s.objects for s in lake.list_shares(include_objects=True)] == [share.objects]


def test_objects_keep_their_settings(lake):
    partitions = (
        (PartitionValue("region", PartitionOp.EQUAL, value="EU"),),
        (PartitionValue("owner", PartitionOp.LIKE, recipient_property_key="team"), PartitionValue("y", value="1")),
    )
    wanted = SharedObject(
        "MAIN.SALES.ORDERS",
        shared_as="Public.Orders",
        history_shared=True,
        cdf_enabled=True,
        start_version=3,
        comment="c",
        partitions=partitions,
    )
    (obj,) = lake.update_share("s", updates=add(wanted)).objects
    assert obj == dataclasses.replace(wanted, name="main.sales.orders", added_at=obj.added_at)


def test_the_same_object_or_name_twice_is_refused(lake):
    lake.update_share("s", updates=add(TABLE, SCHEMA))
    with pytest.raises(AlreadyExists, match="table 'main.sales.orders' is already in share 's'"):
        lake.update_share("s", updates=add(dataclasses.replace(TABLE, name="main.SALES.orders", shared_as="x.y")))
    with pytest.raises(AlreadyExists, match="schema 'main.sales' is already in share 's'"):
        lake.update_share("s", updates=add(dataclasses.replace(SCHEMA, shared_as="other")))
    with pytest.raises(AlreadyExists, match="already has a data object shared as 'SALES.Orders'"):
        lake.update_share("s", updates=add(SharedObject("main.sales.items", shared_as="SALES.Orders")))
    with pytest.raises(AlreadyExists, match="already has a data object shared as 'Sales'"):
        lake.update_share("s", updates=add(SharedObject("main.hr", ObjectType.SCHEMA, shared_as="Sales")))
    lake.create_share("t")
    lake.update_share("t", updates=add(TABLE, SCHEMA))  # another share may hold the same objects


def test_adding_needs_the_catalog_object(lake):
    with pytest.raises(ResourceNotFound, match="table 'main.sales.nope' does not exist"):
        lake.update_share("s", updates=add(SharedObject("main.sales.nope")))
    with pytest.raises(ResourceNotFound, match="schema 'main.nope' does not exist"):
        lake.update_share("s", updates=add(SharedObject("main.nope", ObjectType.SCHEMA)))
    with pytest.raises(InvalidParameter, match="write it as 'catalog.schema.table'"):
        lake.update_share("s", updates=add(SharedObject("main.sales")))
    with pytest.raises(ResourceNotFound, match="share 'nope' does not exist"):
        lake.update_share("nope", updates=add(TABLE))


BAD_OBJECTS = [
    (dataclasses.replace(TABLE, shared_as="orders"), "write it as 'schema.table'"),
    (dataclasses.replace(TABLE, shared_as="a.b.c"), "write it as 'schema.table'"),
    (
        dataclasses.replace(TABLE, shared_as="a.b c"),
        "shared_as 'a.b c' of table 'main.sales.orders' in share 's' is invalid",
    ),
    (
        dataclasses.replace(SCHEMA, shared_as="a.b"),
        "of schema 'main.sales' in share 's' is invalid: write it as one name",
    ),
    (dataclasses.replace(TABLE, start_version=-1), "start_version of table 'main.sales.orders'"),
    (dataclasses.replace(TABLE, partitions=((),)), "has no values"),
    (dataclasses.replace(TABLE, partitions=((PartitionValue("p"),),)), "exactly one of value and recipient"),
    (
        dataclasses.replace(TABLE, partitions=((PartitionValue("p", value="1", recipient_property_key="k"),),)),
        "exactly one of value and recipient",
    ),
    (dataclasses.replace(TABLE, partitions=((PartitionValue("", value="1"),),)), "needs a column name"),
    (dataclasses.replace(TABLE, partitions=((PartitionValue("p", "GREATER", "1"),),)), "use EQUAL or LIKE"),
    (dataclasses.replace(SCHEMA, partitions=((PartitionValue("p", value="1"),),)), "partitions apply to tables"),
    (dataclasses.replace(TABLE, data_object_type="VIEW"), "use TABLE or SCHEMA"),
]


def test_bad_objects_are_refused(lake):
    for obj, needle in BAD_OBJECTS:
        with pytest.raises(InvalidParameter) as info:
            lake.update_share("s", updates=add(obj))
        assert needle in info.value.message, obj
    assert lake.get_share("s", include_objects=True).objects == ()


def test_an_update_is_all_or_nothing(lake):
    before = lake.revision()
    bad = SharedObject("main.sales.nope")
    with pytest.raises(ResourceNotFound):
        lake.update_share("s", new_name="renamed", comment="x", updates=add(TABLE, SCHEMA, bad))
    share = lake.get_share("s", include_objects=True)
    assert (share.name, share.comment, share.objects) == ("s", None, ())
    assert lake.revision() == before


def test_objects_are_removed_and_updated_by_name(lake):
    lake.update_share("s", updates=add(TABLE, SCHEMA))
    updated = SharedObject(
        "MAIN.sales.Orders",
        history_shared=True,
        start_version=2,
        comment="now with history",
        partitions=((PartitionValue("region", value="EU"),),),
    )
    share = lake.update_share(
        "s",
        updates=[
            ObjectUpdate("UPDATE", updated),
            ObjectUpdate("REMOVE", SharedObject("main.SALES", ObjectType.SCHEMA)),
        ],
    )
    (obj,) = share.objects
    assert (obj.name, obj.shared_as, obj.history_shared, obj.start_version, obj.comment) == (
        "main.sales.orders",
        "sales.orders",
        True,
        2,
        "now with history",
    )
    assert obj.partitions == updated.partitions
    share = lake.update_share(
        "s", updates=[ObjectUpdate("UPDATE", SharedObject("main.sales.orders", shared_as="pub.o"))]
    )
    assert share.objects[0].shared_as == "pub.o"
    assert share.objects[0].history_shared is False  # an UPDATE sets every setting it carries
    with pytest.raises(ResourceNotFound, match="share 's' has no data object 'main.sales.items'"):
        lake.update_share("s", updates=[ObjectUpdate("REMOVE", SharedObject("main.sales.items"))])
    with pytest.raises(ResourceNotFound, match="has no data object 'main.hr'"):
        lake.update_share("s", updates=[ObjectUpdate("UPDATE", SharedObject("main.hr", ObjectType.SCHEMA))])
    with pytest.raises(InvalidParameter, match="use ADD, REMOVE or UPDATE"):
        lake.update_share("s", updates=[ObjectUpdate("RENAME", TABLE)])  # type: ignore[arg-type]


def test_an_update_may_not_take_another_objects_shared_as(lake):
    lake.update_share("s", updates=add(TABLE, SharedObject("main.sales.items")))
    with pytest.raises(AlreadyExists, match="already has a data object shared as 'Sales.Items'"):
        lake.update_share("s", updates=[ObjectUpdate("UPDATE", dataclasses.replace(TABLE, shared_as="Sales.Items"))])
    lake.update_share("s", updates=[ObjectUpdate("UPDATE", dataclasses.replace(TABLE, shared_as="SALES.ORDERS"))])
    assert lake.get_share("s", include_objects=True).objects[0].shared_as == "SALES.ORDERS"


def test_deleting_a_table_removes_it_from_shares(lake):
    lake.update_share("s", updates=add(TABLE, SharedObject("main.sales.items")))
    lake.delete_table("main.sales.orders")
    assert [o.name for o in lake.get_share("s", include_objects=True).objects] == ["main.sales.items"]


def test_objects_follow_catalog_renames_and_keep_their_shared_as(lake):
    lake.update_share("s", updates=add(TABLE))
    lake.update_schema("main.sales", new_name="revenue")
    (obj,) = lake.get_share("s", include_objects=True).objects
    assert (obj.name, obj.shared_as) == ("main.revenue.orders", "sales.orders")
    lake.update_share("s", updates=[ObjectUpdate("REMOVE", SharedObject("main.revenue.orders"))])
    assert lake.get_share("s", include_objects=True).objects == ()


# --- grants -------------------------------------------------------------------------------------


def test_grants_are_added_and_removed(lake):
    lake.create_share("other")
    lake.create_recipient("Bob")
    lake.create_recipient("alice")
    grants = lake.update_permissions(
        "S", [PermissionChange("bob", add=("select",)), PermissionChange("alice", add=("SELECT",))]
    )
    assert grants == [Grant("s", "alice"), Grant("s", "Bob")]
    lake.update_permissions("other", [PermissionChange("alice", add=("SELECT",))])
    assert lake.update_permissions("s", [PermissionChange("alice", add=("SELECT",))]) == grants  # idempotent
    assert lake.recipient_permissions("ALICE") == [Grant("other", "alice"), Grant("s", "alice")]
    assert lake.update_permissions("s", [PermissionChange("bob", remove=("SELECT",))]) == [Grant("s", "alice")]
    assert lake.share_permissions("s") == [Grant("s", "alice")]
    lake.update_permissions("s", [PermissionChange("bob", remove=("SELECT",))])  # revoking nothing is fine
    lake.delete_share("other")
    assert lake.recipient_permissions("alice") == [Grant("s", "alice")]
    lake.delete_recipient("alice")
    assert lake.share_permissions("s") == []


def test_grant_errors_change_nothing(lake):
    lake.create_recipient("alice")
    for changes, error, needle in [
        ([PermissionChange("alice", add=("MODIFY",))], InvalidParameter, "SELECT is the only privilege"),
        (
            [PermissionChange("alice", add=("SELECT",), remove=("SELECT",))],
            InvalidParameter,
            "both granted and revoked",
        ),
        (
            [PermissionChange("alice", add=("SELECT",)), PermissionChange("nobody", add=("SELECT",))],
            ResourceNotFound,
            "recipient 'nobody' does not exist",
        ),
    ]:
        with pytest.raises(error) as info:
            lake.update_permissions("s", changes)
        assert needle in info.value.message
    assert lake.share_permissions("s") == []
    with pytest.raises(ResourceNotFound, match="share 'nope' does not exist"):
        lake.update_permissions("nope", [])
    with pytest.raises(ResourceNotFound, match="recipient 'nope' does not exist"):
        lake.recipient_permissions("nope")
