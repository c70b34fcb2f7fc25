"""A share's comment, display name and properties and a data object's access modes and auxiliary
locations through the admin API: the comment by the real Databricks SDK, the extension fields by
raw HTTP; each reaches the protocol's List/Get Share and the served catalog."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.service.catalog import DataSourceFormat, TableType
from databricks.sdk.service.sharing import AuthenticationType, PermissionsChange
from secret_scan import secrets_used

from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, parse_config

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
ADMIN = "test-admin-token-share-metadata"
secrets_used.add(ADMIN)
API = "/api/2.1/unity-catalog"


@pytest.fixture(autouse=True)
def _sdk_debug_log_off():
    """The SDK's debug log prints the activation's credential: the client's log, kept out of the scan."""
    quiet = {"databricks.sdk": logging.INFO, "urllib3.connectionpool": logging.INFO, "httpx": logging.WARNING}
    loggers = [logging.getLogger(name) for name in quiet]
    levels = [logger.level for logger in loggers]
    for logger, level in zip(loggers, quiet.values()):
        logger.setLevel(level)
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


@pytest.fixture
def lake(tmp_path):
    """A running server over a catalog with main.sales.orders (a local table) and share 'vaccine'
    made by the SDK with a comment: (server, SDK client, admin HTTP client, catalog URL)."""
    from servers import RunningServer

    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = parse_config({"version": 1, "catalog": url, "adminTokens": [ADMIN], "catalogPollSeconds": 0.2})
    server = RunningServer(create_app(config))
    w = WorkspaceClient(host=server.url, token=ADMIN, auth_type="pat")
    w.catalogs.create("main", storage_root=str(TABLES))
    w.schemas.create("sales", "main")
    w.tables.create(
        name="orders",
        catalog_name="main",
        schema_name="sales",
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=str(TABLES / "basic_partitioned"),
    )
    w.shares.create("vaccine", comment="vaccine datasets")
    with httpx.Client(base_url=server.url + API, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as admin:
        yield server, w, admin, url
    server.stop()


def _recipient_client(server, w: WorkspaceClient, share: str) -> httpx.Client:
    made = w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN)
    w.shares.update_permissions(share, changes=[PermissionsChange(principal="acme", add=["SELECT"])])
    link = made.tokens[0].activation_url
    secrets_used.add(link.rsplit("/", 1)[1])
    token = w.recipient_activation.retrieve_token(link.rsplit("/", 1)[1]).bearer_token
    secrets_used.add(token)
    return httpx.Client(base_url=server.url + "/delta-sharing", headers={"Authorization": f"Bearer {token}"})


def _served(url: str):
    db = CatalogDB(url)
    try:
        return {share.name: share for share in db.served().shares}
    finally:
        db.close()


def test_share_metadata_reaches_list_and_get_share(lake):
    server, w, admin, url = lake
    assert w.shares.get("vaccine").comment == "vaccine datasets"
    props = {"owner": "vaccine-team", "region": "us-west-2"}
    changed = admin.patch("/shares/vaccine", json={"display_name": "Vaccine Share", "properties": props})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["display_name"], changed.json()["properties"]) == ("Vaccine Share", props)
    w.shares.update("vaccine", comment="A sample share")  # the SDK's field, beside the extensions
    got = admin.get("/shares/vaccine").json()
    assert (got["comment"], got["display_name"], got["properties"]) == ("A sample share", "Vaccine Share", props)
    assert w.shares.get("vaccine").comment == "A sample share"
    listed = admin.get("/shares").json()["shares"]
    assert [(s["name"], s.get("display_name")) for s in listed] == [("vaccine", "Vaccine Share")]
    share_id = _served(url)["vaccine"].id
    expected = {
        "name": "vaccine",
        "id": share_id,
        "displayName": "Vaccine Share",
        "comment": "A sample share",
        "properties": props,
    }
    with _recipient_client(server, w, "vaccine") as sharing:
        assert sharing.get("/shares/vaccine").json() == {"share": expected}
        assert sharing.get("/shares").json()["items"] == [expected]
    served = _served(url)["vaccine"]
    assert (served.display_name, served.comment, dict(served.properties)) == ("Vaccine Share", "A sample share", props)


def test_a_share_created_with_metadata_by_http_and_cleared(lake):
    _, w, admin, url = lake
    made = admin.post("/shares", json={"name": "sales", "display_name": "Sales", "properties": {"k": "v"}})
    assert made.status_code == 200, made.text
    assert (made.json()["display_name"], made.json()["properties"]) == ("Sales", {"k": "v"})
    assert w.shares.get("sales").name == "sales"  # the SDK reads a share with extension fields
    cleared = admin.patch("/shares/sales", json={"display_name": "", "properties": {}}).json()
    assert "display_name" not in cleared and "properties" not in cleared
    assert (_served(url)["sales"].display_name, dict(_served(url)["sales"].properties)) == (None, {})


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"display_name": "D" * 256}, "display_name of share 'vaccine' is 256 characters, more than the 255"),
        ({"comment": "c" * 65_537}, "comment of share 'vaccine' is 65537 characters"),
        ({"properties": {f"k{i}": "v" for i in range(51)}}, "has 51 pairs, more than the 50"),
        ({"properties": {"k": "v" * 1001}}, "is 1001 characters, more than the 1000"),
        ({"properties": {"k": 1}}, "properties"),
    ],
)
def test_share_metadata_beyond_the_limits_is_a_400_naming_the_fix(lake, body, needle):
    _, _, admin, _ = lake
    answer = admin.patch("/shares/vaccine", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert needle in answer.json()["message"]


#: A data object's history shared: what directory access needs (a directory holds every version).
HISTORY = {"history_data_sharing_status": "ENABLED"}


def _add(admin: httpx.Client, action: str, **fields) -> httpx.Response:
    obj = {"name": "main.sales.orders", "data_object_type": "TABLE", **fields}
    return admin.patch("/shares/vaccine", json={"updates": [{"action": action, "data_object": obj}]})


def test_access_modes_and_auxiliary_locations_are_added_updated_returned_and_served(lake):
    _, w, admin, url = lake
    added = _add(admin, "ADD", access_modes=["url"], auxiliary_locations=["s3://aux/orders"])
    assert added.status_code == 200, added.text
    (obj,) = added.json()["objects"]
    assert (obj["access_modes"], obj["auxiliary_locations"]) == (["url"], ["s3://aux/orders"])
    (table,) = _served(url)["vaccine"].schemas[0].tables
    assert (table.access_modes, table.auxiliary_locations) == (("url",), ("s3://aux/orders",))
    assert w.shares.get("vaccine", include_shared_data=True).objects[0].name == "main.sales.orders"
    updated = _add(admin, "UPDATE", comment="c")  # auxiliary_locations not given: kept
    (obj,) = updated.json()["objects"]
    assert (obj["access_modes"], obj["auxiliary_locations"]) == (["url"], ["s3://aux/orders"])
    updated = _add(admin, "UPDATE", access_modes=["dir"], auxiliary_locations=[], **HISTORY)
    assert updated.status_code == 200, updated.text
    (obj,) = updated.json()["objects"]
    assert obj["access_modes"] == ["dir"] and not obj.get("auxiliary_locations")
    (table,) = _served(url)["vaccine"].schemas[0].tables
    assert (table.access_modes, table.auxiliary_locations) == (("dir",), ())


def test_a_data_object_without_access_fields_is_read_by_url(lake):
    _, _, admin, _ = lake
    (obj,) = _add(admin, "ADD").json()["objects"]
    assert obj["access_modes"] == ["url"] and "auxiliary_locations" not in obj


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"access_modes": []}, "access_modes of table 'main.sales.orders' in share 'vaccine' must be"),
        ({"access_modes": ["url", "url"]}, "names an access mode twice"),
        ({"access_modes": ["files"]}, "unknown access mode(s) ['files']"),
        ({"auxiliary_locations": [str(TABLES)]}, "is not a storage URL"),
        (
            {"access_modes": ["dir"], "partitions": [{"values": [{"name": "letter", "value": "a"}]}], **HISTORY},
            "has 'dir', but it is shared with partitions",
        ),
        (
            {"access_modes": ["dir"], "auxiliary_locations": ["https://host/aux"], **HISTORY},
            "has 'dir', but its location 'https://host/aux' is on 'https' storage",
        ),
        ({"access_modes": ["dir"]}, "has 'dir', but a directory holds every version of the table"),
    ],
)
def test_bad_access_is_a_400_naming_the_fix(lake, fields, needle):
    _, _, admin, _ = lake
    answer = _add(admin, "ADD", **fields)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert needle in answer.json()["message"]
