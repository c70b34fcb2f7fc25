"""The admin API driven by the real Databricks SDK against a server over loopback, and the sharing
protocol checked for what the SDK changed."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import (
    InvalidParameterValue,
    NotFound,
    PermissionDenied,
    ResourceAlreadyExists,
    Unauthenticated,
)
from databricks.sdk.service.catalog import DataSourceFormat, TableType
from databricks.sdk.service.sharing import (
    AuthenticationType,
    IpAccessList,
    Partition,
    PartitionValue,
    PartitionValueOp,
    PermissionsChange,
    SecurablePropertiesKvPairs,
    SharedDataObject,
    SharedDataObjectDataObjectType,
    SharedDataObjectHistoryDataSharingStatus,
    SharedDataObjectUpdate,
    SharedDataObjectUpdateAction,
)
from secret_scan import secrets_used

from deltaport.server import create_app, parse_config

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
ADMIN = "test-admin-token-0123456789"
secrets_used.add(ADMIN)

ENDPOINT = "/delta-sharing"


@pytest.fixture(autouse=True)
def _sdk_debug_log_off():
    """The SDK's own debug log prints the bodies it receives (the activation's credential among
    them), and the HTTP libraries the URLs they call (an activation link's token): that is the
    client's log, not the server's, so it is kept out of the suite's secret scan."""
    quiet = {"databricks.sdk": logging.INFO, "urllib3.connectionpool": logging.INFO, "httpx": logging.WARNING}
    loggers = [logging.getLogger(name) for name in quiet]
    levels = [logger.level for logger in loggers]
    for logger, level in zip(loggers, quiet.values()):
        logger.setLevel(level)
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


@pytest.fixture
def running(tmp_path):
    from servers import RunningServer

    config = parse_config(
        {"version": 1, "catalog": str(tmp_path / "catalog.db"), "adminTokens": [ADMIN], "catalogPollSeconds": 0.2},
        base=tmp_path,
    )
    server = RunningServer(create_app(config))
    yield server
    server.stop()


@pytest.fixture
def w(running) -> WorkspaceClient:
    return WorkspaceClient(host=running.url, token=ADMIN, auth_type="pat")


def _create_table(w: WorkspaceClient, name: str, location: str) -> None:
    """An external Delta table main.sales.NAME at ``location``."""
    w.tables.create(
        name=name,
        catalog_name="main",
        schema_name="sales",
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=location,
    )


def _table_setup(w: WorkspaceClient, table: str = "basic_partitioned") -> str:
    w.catalogs.create("main", storage_root=str(TABLES), comment="the corpus")
    w.schemas.create("sales", "main")
    _create_table(w, "orders", str(TABLES / table))
    return "main.sales.orders"


def _add_table(w: WorkspaceClient, share: str, name: str, **fields) -> None:
    obj = SharedDataObject(name=name, data_object_type=SharedDataObjectDataObjectType.TABLE, **fields)
    w.shares.update(share, updates=[SharedDataObjectUpdate(action=SharedDataObjectUpdateAction.ADD, data_object=obj)])


def _grant(w: WorkspaceClient, share: str, recipient: str, *, revoke: bool = False) -> None:
    change = (
        PermissionsChange(principal=recipient, remove=["SELECT"])
        if revoke
        else PermissionsChange(principal=recipient, add=["SELECT"])
    )
    w.shares.update_permissions(share, changes=[change])


def _activate(w: WorkspaceClient, activation_url: str) -> str:
    token = activation_url.rsplit("/", 1)[1]
    secrets_used.add(token)  # a live link: never in the server's logs either
    credential = w.recipient_activation.retrieve_token(token)
    assert credential.share_credentials_version == 1
    assert credential.endpoint.endswith(ENDPOINT)
    secrets_used.add(credential.bearer_token)
    return credential.bearer_token


def _sharing(running, token: str) -> httpx.Client:
    return httpx.Client(base_url=running.url + ENDPOINT, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_tables_by_three_part_name_carry_their_delta_columns(w):
    full = _table_setup(w)
    table = w.tables.get(full)
    assert table.storage_location == str(TABLES / "basic_partitioned")
    names = [c.name for c in table.columns]
    assert names and "letter" in names and "number" in names
    assert [c.name for c in table.columns if c.partition_index is not None] == ["letter"]
    assert w.tables.exists(full).table_exists is True
    assert [t.name for t in w.tables.list(catalog_name="main", schema_name="sales")] == ["orders"]
    assert [c.name for c in w.catalogs.list()] == ["main"] and w.catalogs.get("main").comment == "the corpus"
    w.tables.delete(full)
    assert w.tables.exists(full).table_exists is False
    with pytest.raises(NotFound):
        w.tables.get(full)


def test_a_location_that_is_no_delta_table_or_outside_the_root_is_refused(w, tmp_path):
    _table_setup(w)
    with pytest.raises(InvalidParameterValue, match="not a readable Delta table"):
        _create_table(w, "nothing", str(TABLES / "no-such-table"))
    with pytest.raises(InvalidParameterValue):
        _create_table(w, "outside", str(tmp_path))
    with pytest.raises(ResourceAlreadyExists, match="(?i)catalog .main. already exists"):
        w.catalogs.create("MAIN")


def test_share_recipient_activation_grant_and_revoke(w, running):
    full = _table_setup(w)
    w.shares.create("partners", comment="for partners")
    _add_table(w, "partners", full, shared_as="retail.orders")
    share = w.shares.get("partners", include_shared_data=True)
    assert [(o.name, o.shared_as) for o in share.objects] == [(full, "retail.orders")]

    made = w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN, comment="Acme Corp")
    assert made.tokens and made.tokens[0].activation_url == made.activation_url
    assert "/delta_sharing/activate/" in made.activation_url
    page = httpx.get(made.activation_url, timeout=10)  # opening the page does not spend the link
    assert page.status_code == 200 and "config.share" in page.text
    bearer = _activate(w, made.activation_url)
    with pytest.raises((NotFound, PermissionDenied)):
        _activate(w, made.activation_url)  # exactly once
    assert w.recipients.get("acme").activation_url is None  # the link is shown only when made

    with _sharing(running, bearer) as recipient:
        assert recipient.get("/shares").json()["items"] == []
        _grant(w, "partners", "acme")
        assert [s["name"] for s in recipient.get("/shares").json()["items"]] == ["partners"]
        tables = recipient.get("/shares/partners/all-tables").json()["items"]
        assert [(t["schema"], t["name"]) for t in tables] == [("retail", "orders")]
        query = recipient.post("/shares/partners/schemas/retail/tables/orders/query", json={})
        assert query.status_code == 200 and query.text.count('"file"') > 0
        assert [g.share_name for g in w.recipients.share_permissions("acme").permissions_out] == ["partners"]

        _grant(w, "partners", "acme", revoke=True)  # refused at once, not after a poll
        assert recipient.get("/shares/partners").status_code == 404
        assert recipient.post("/shares/partners/schemas/retail/tables/orders/query", json={}).status_code == 404


def test_deleting_a_recipient_stops_its_token_at_once(w, running):
    _table_setup(w)
    w.shares.create("s1")
    made = w.recipients.create("gone", authentication_type=AuthenticationType.TOKEN)
    bearer = _activate(w, made.activation_url)
    _grant(w, "s1", "gone")
    with _sharing(running, bearer) as recipient:
        assert recipient.get("/shares").status_code == 200
        w.recipients.delete("gone")
        assert recipient.get("/shares").status_code == 401


def test_rotation_keeps_the_old_token_for_exactly_the_grace_and_never_extends(w, running):
    w.shares.create("s1")
    made = w.recipients.create("rot", authentication_type=AuthenticationType.TOKEN)
    first = _activate(w, made.activation_url)
    _grant(w, "s1", "rot")
    rotated = w.recipients.rotate_token("rot", existing_token_expire_in_seconds=3600)
    old = next(t for t in rotated.tokens if t.id == made.tokens[0].id)
    assert abs(old.expiration_time - (time.time() + 3600) * 1000) < 60_000
    assert rotated.activation_url and rotated.activation_url != made.activation_url
    second = _activate(w, rotated.activation_url)
    with _sharing(running, first) as a, _sharing(running, second) as b:
        assert a.get("/shares").status_code == 200 and b.get("/shares").status_code == 200
        again = w.recipients.rotate_token("rot", existing_token_expire_in_seconds=7200)  # never extends
        assert next(t for t in again.tokens if t.id == old.id).expiration_time == old.expiration_time
        assert a.get("/shares").status_code == 200
        w.recipients.rotate_token("rot", existing_token_expire_in_seconds=0)
        assert a.get("/shares").status_code == 401 and b.get("/shares").status_code == 401


def test_recipient_fields_round_trip(w):
    expires = int((time.time() + 86400) * 1000)
    w.recipients.create(
        "props",
        authentication_type=AuthenticationType.TOKEN,
        expiration_time=expires,
        ip_access_list=IpAccessList(allowed_ip_addresses=["10.0.0.0/8", "::1"]),
        properties_kvpairs=SecurablePropertiesKvPairs(properties={"region": "eu"}),
    )
    got = w.recipients.get("props")
    assert got.ip_access_list.allowed_ip_addresses == ["10.0.0.0/8", "::1"]
    assert got.properties_kvpairs.properties == {"region": "eu"}
    assert got.expiration_time == expires and got.tokens[0].expiration_time == expires
    w.recipients.update("props", comment="changed", new_name="props2")
    assert w.recipients.get("props2").comment == "changed"
    with pytest.raises(NotFound):
        w.recipients.get("props")


def test_a_shared_schema_shares_its_future_tables(w, running):
    _table_setup(w)
    w.shares.create("whole")
    obj = SharedDataObject(
        name="main.sales",
        data_object_type=SharedDataObjectDataObjectType.SCHEMA,
        history_data_sharing_status=SharedDataObjectHistoryDataSharingStatus.ENABLED,
    )
    w.shares.update("whole", updates=[SharedDataObjectUpdate(action=SharedDataObjectUpdateAction.ADD, data_object=obj)])
    made = w.recipients.create("r", authentication_type=AuthenticationType.TOKEN)
    bearer = _activate(w, made.activation_url)
    _grant(w, "whole", "r")
    _create_table(w, "later", str(TABLES / "cdf-table"))
    with _sharing(running, bearer) as recipient:
        tables = recipient.get("/shares/whole/all-tables").json()["items"]
        assert sorted(t["name"] for t in tables) == ["later", "orders"]


def test_partition_specs_round_trip(w):
    full = _table_setup(w)
    w.shares.create("sliced")
    spec = [
        Partition(values=[PartitionValue(name="letter", op=PartitionValueOp.EQUAL, recipient_property_key="letter")])
    ]
    _add_table(w, "sliced", full, partitions=spec)
    got = w.shares.get("sliced", include_shared_data=True).objects[0]
    assert got.partitions[0].values[0].recipient_property_key == "letter"


def test_listing_pages_through_everything(w):
    for i in range(5):
        w.shares.create(f"share{i}")
    assert [s.name for s in w.shares.list_shares(max_results=2)] == [f"share{i}" for i in range(5)]


def test_tokens_do_not_cross_between_admin_and_recipient(w, running):
    w.shares.create("s1")
    made = w.recipients.create("x", authentication_type=AuthenticationType.TOKEN)
    bearer = _activate(w, made.activation_url)
    _grant(w, "s1", "x")
    as_recipient = WorkspaceClient(host=running.url, token=bearer, auth_type="pat")
    with pytest.raises(Unauthenticated):
        as_recipient.shares.get("s1")
    with _sharing(running, ADMIN) as admin_as_recipient:
        assert admin_as_recipient.get("/shares").status_code == 401


def test_admin_errors_are_unity_catalog_shaped(running):
    headers = {"Authorization": f"Bearer {ADMIN}"}
    missing = httpx.get(running.url + "/api/2.1/unity-catalog/shares/nope", headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST" and "nope" in missing.json()["message"]
    bad = httpx.post(running.url + "/api/2.1/unity-catalog/shares", headers=headers, json={"nmae": "x"})
    assert bad.status_code == 400 and bad.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert "nmae" in bad.json()["message"]
    protocol = httpx.get(running.url + ENDPOINT + "/shares", headers={"Authorization": "Bearer nope"})
    assert protocol.status_code == 401 and "errorCode" in protocol.json()
