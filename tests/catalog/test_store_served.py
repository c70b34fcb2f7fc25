"""What the sharing server serves from the catalog: shares expanded to tables, recipients with
activated tokens and grants, read consistently and fast."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid

import pytest
import sqlalchemy as sa

from deltaport.catalog import db as tables
from deltaport.catalog.model import ObjectType, PartitionValue, SharedObject
from deltaport.catalog.served import SchemaConfig, SharedTableConfig, TokenHash
from deltaport.catalog.store import CatalogDB, ObjectUpdate, PermissionChange


@pytest.fixture
def lake(store):
    store.create_catalog("main")
    store.create_schema("main", "sales")
    store.create_schema("main", "hr")
    orders = store.create_table("main", "sales", "orders", "/data/orders", comment="all orders")
    store.create_table("main", "sales", "Items", "/data/items")
    store.create_table("main", "hr", "people", "/data/people")
    store.create_share("Sales")
    return store, orders


def add(*objects):
    return [ObjectUpdate("ADD", obj) for obj in objects]


def test_a_table_object_is_served_with_its_settings(lake):
    store, orders = lake
    partitions = ((PartitionValue("region", value="EU"),),)
    obj = SharedObject("main.sales.orders", shared_as="Pub.o", cdf_enabled=True, start_version=4, partitions=partitions)
    store.update_share("sales", updates=add(obj))
    served = store.served(storage_options={"region": "eu-west-1"})
    (share,) = served.shares
    assert (share.name, share.id, share.comment) == ("Sales", store.get_share("sales").id, None)
    assert share.schemas == (
        SchemaConfig(
            "Pub",
            (
                SharedTableConfig(
                    name="o",
                    location="/data/orders",
                    id=orders.table_id,
                    history_shared=True,  # cdf_enabled implies history
                    start_version=4,
                    storage_options={"region": "eu-west-1"},
                    partitions=partitions,
                    comment="all orders",  # the table's, as the object has none
                ),
            ),
        ),
    )
    assert served.revision == store.revision()
    with pytest.raises(TypeError):
        share.schemas[0].tables[0].storage_options["region"] = "x"  # type: ignore[index]


def test_a_schema_object_serves_every_table_of_the_schema_now_and_later(lake):
    store, _ = lake
    store.update_share(
        "sales", updates=add(SharedObject("main.sales", ObjectType.SCHEMA, shared_as="s", history_shared=True))
    )
    (schema,) = store.served().shares[0].schemas
    assert (schema.name, [t.name for t in schema.tables]) == ("s", ["Items", "orders"])
    assert all(t.history_shared for t in schema.tables)
    store.create_table("main", "sales", "returns", "/data/returns")
    store.create_table("main", "hr", "salaries", "/data/salaries")  # another schema: not shared
    (schema,) = store.served().shares[0].schemas
    assert [t.name for t in schema.tables] == ["Items", "orders", "returns"]
    store.delete_table("main.sales.orders")
    assert [t.name for t in store.served().shares[0].schemas[0].tables] == ["Items", "returns"]


def test_a_table_object_wins_over_a_schema_expansion_of_the_same_name(lake):
    store, _orders = lake
    store.update_share(
        "sales",
        updates=add(
            SharedObject("main.sales", ObjectType.SCHEMA),
            SharedObject("main.hr.people", shared_as="SALES.Orders", comment="people as orders"),
        ),
    )
    (schema,) = store.served().shares[0].schemas
    assert schema.name == "sales"
    assert [(t.name, t.location, t.comment) for t in schema.tables] == [
        ("Items", "/data/items", None),
        ("Orders", "/data/people", "people as orders"),
    ]


def test_shares_without_objects_are_served_and_everything_is_sorted(lake):
    store, _ = lake
    store.create_share("archive", comment="empty")
    store.update_share(
        "sales",
        updates=add(
            SharedObject("main.sales.orders", shared_as="b.z"),
            SharedObject("main.sales.items", shared_as="B.a"),
            SharedObject("main.hr.people", shared_as="a.p"),
        ),
    )
    archive, sales = store.served().shares
    assert (archive.name, archive.schemas, archive.comment) == ("archive", (), "empty")
    assert [(s.name, [t.name for t in s.tables]) for s in sales.schemas] == [("a", ["p"]), ("b", ["a", "z"])]


def test_recipients_are_served_with_activated_tokens_and_granted_shares(lake, clock, secrets_used):
    store, _ = lake
    store.create_share("Other")
    store.create_share("not-granted")
    _, link = store.create_recipient("alice", allowed_ip_addresses=["10.0.0.0/8"], properties={"team": "eu"})
    _, bearer, _ = store.activate(link)
    _, pending = store.rotate_token("alice", 60)
    secrets_used.add(link, pending, bearer, label="a catalog test token")
    store.create_recipient("bob")
    store.update_permissions("sales", [PermissionChange("alice", add=("SELECT",))])
    store.update_permissions("other", [PermissionChange("alice", add=("SELECT",))])
    alice, bob = store.served().recipients
    assert alice.name == "alice"
    assert alice.tokens == (TokenHash(hashlib.sha256(bearer.encode()).digest(), clock.ms + 60_000),)
    assert (alice.shares, alice.allowed_ip_addresses, dict(alice.properties)) == (
        ("other", "sales"),
        ("10.0.0.0/8",),
        {"team": "eu"},
    )
    assert (bob.name, bob.tokens, bob.shares) == ("bob", (), ())


def test_served_is_one_consistent_read(lake):
    """A writer creates a share, grants it and deletes it, over and over; no snapshot may show a
    recipient holding a share that the same snapshot does not serve."""
    store, _ = lake
    store.create_recipient("alice")
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn():
        try:
            while not stop.is_set():
                store.create_share("x")
                store.update_permissions("x", [PermissionChange("alice", add=("SELECT",))])
                store.delete_share("x")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    writer = threading.Thread(target=churn)
    writer.start()
    seen_granted = 0
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            served = store.served()
            names = {s.name.lower() for s in served.shares}
            (alice,) = served.recipients
            assert set(alice.shares) <= names
            seen_granted += "x" in alice.shares
    finally:
        stop.set()
        writer.join()
    assert not errors
    assert seen_granted > 0  # the race was really run


def _bulk_catalog(url: str, shares: int, tables_per_share: int, recipients: int) -> None:
    """``shares`` shares of ``tables_per_share`` tables each and ``recipients`` recipients (one
    activated token, three grants each), written straight into the tables in one transaction."""
    engine = sa.create_engine(url)
    now = 1_700_000_000_000
    with engine.begin() as conn:
        conn.execute(
            sa.insert(tables.catalogs), [dict(id=1, name="main", name_lc="main", created_at=now, updated_at=now)]
        )
        schema_rows = [
            dict(id=i + 1, catalog_id=1, name=f"s{i}", name_lc=f"s{i}", created_at=now, updated_at=now)
            for i in range(shares)
        ]
        conn.execute(sa.insert(tables.catalog_schemas), schema_rows)
        table_rows, object_rows = [], []
        for i in range(shares):
            for j in range(tables_per_share):
                n = i * tables_per_share + j + 1
                loc = f"s3://bucket/s{i}/t{j}"
                table_rows.append(
                    dict(
                        id=n,
                        schema_id=i + 1,
                        name=f"t{j}",
                        name_lc=f"t{j}",
                        table_id=str(uuid.uuid4()),
                        storage_location=loc,
                    )
                    | dict(
                        location_key=loc,
                        table_type="EXTERNAL",
                        data_source_format="DELTA",
                        created_at=now,
                        updated_at=now,
                    )
                )
                object_rows.append(
                    dict(
                        share_ref=i + 1,
                        object_type="TABLE",
                        table_ref=n,
                        shared_as=f"s{i}.t{j}",
                        shared_as_lc=f"s{i}.t{j}",
                    )
                    | dict(history_shared=True, cdf_enabled=False, start_version=0, partitions=[], added_at=now)
                )
        conn.execute(sa.insert(tables.catalog_tables), table_rows)
        share_rows = [
            dict(
                id=i + 1,
                share_id=str(uuid.uuid4()),
                name=f"share{i}",
                name_lc=f"share{i}",
                created_at=now,
                updated_at=now,
            )
            for i in range(shares)
        ]
        conn.execute(sa.insert(tables.shares), share_rows)
        conn.execute(sa.insert(tables.share_objects), object_rows)
        conn.execute(
            sa.insert(tables.recipients),
            [
                dict(
                    id=r + 1, recipient_id=str(uuid.uuid4()), name=f"r{r}", name_lc=f"r{r}", authentication_type="TOKEN"
                )
                | dict(allowed_ip_addresses=[], properties={"k": "v"}, created_at=now, updated_at=now)
                for r in range(recipients)
            ],
        )
        conn.execute(
            sa.insert(tables.recipient_tokens),
            [
                dict(
                    recipient_ref=r + 1,
                    token_id=str(uuid.uuid4()),
                    created_at=now,
                    token_hash=hashlib.sha256(b"%d" % r).digest(),
                    activated_at=now,
                )
                for r in range(recipients)
            ],
        )
        grant_rows = [
            dict(share_ref=(r * 7 + k * 13) % shares + 1, recipient_ref=r + 1, privilege="SELECT")
            for r in range(recipients)
            for k in range(3)
        ]
        conn.execute(sa.insert(tables.grants), grant_rows)
    engine.dispose()


def test_served_is_fast_for_a_large_catalog(tmp_path):
    url = f"sqlite:///{tmp_path / 'big.db'}"
    CatalogDB(url).close()  # the schema
    _bulk_catalog(url, shares=1000, tables_per_share=10, recipients=10_000)
    store = CatalogDB(url)
    try:
        started = time.perf_counter()
        served = store.served(storage_options={"k": "v"})
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    print(f"\nserved() for 1,000 shares x 10 tables and 10,000 recipients on SQLite: {elapsed:.3f} s")
    assert len(served.shares) == 1000 and len(served.recipients) == 10_000
    assert sum(len(s.tables) for share in served.shares for s in share.schemas) == 10_000
    assert all(len(r.tokens) == 1 and len(r.shares) == 3 for r in served.recipients)
    assert elapsed < 5.0
