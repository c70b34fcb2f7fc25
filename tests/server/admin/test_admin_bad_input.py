"""Bad admin input, concurrent admin writes and a catalog database that goes away, through the real
Databricks SDK against a server over loopback, on SQLite and on PostgreSQL.

Every client mistake is the SDK's own exception with the server's message intact (a 4xx in Unity
Catalog's shape, the message naming the fix); writes racing on the same share, recipient and table
leave whole objects and never answer 5xx; an outage of the database is a 503 with Retry-After for
admin calls while recipients keep reading the catalog last loaded, and admin calls work again once
the database is back.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.core import Config
from databricks.sdk.errors import (
    DatabricksError,
    InvalidParameterValue,
    NotFound,
    ResourceAlreadyExists,
    ResourceDoesNotExist,
    TemporarilyUnavailable,
)
from databricks.sdk.service.catalog import DataSourceFormat, TableType
from databricks.sdk.service.sharing import (
    AuthenticationType,
    PermissionsChange,
    SharedDataObject,
    SharedDataObjectDataObjectType,
    SharedDataObjectUpdate,
    SharedDataObjectUpdateAction,
)
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, parse_config
from postgres import PostgresCluster, postgres_server, require_bindir  # noqa: F401  (the session's cluster)

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
ADMIN = "bad-input-admin-token-5e0c2a91"
secrets_used.add(ADMIN, label="the bad-input tests' admin token")
U = "/api/2.1/unity-catalog"
COPIES = {"orders": "basic_partitioned", "changes": "cdf-table", "dv": "table-with-dv-small"}


@pytest.fixture(autouse=True)
def _sdk_debug_log_off():
    """The SDK's debug log prints the bodies it receives (an activation's credential among them):
    the client's log, kept out of the suite's secret scan."""
    sdk = logging.getLogger("databricks.sdk")
    level = sdk.level
    sdk.setLevel(logging.INFO)
    yield
    sdk.setLevel(level)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The storage root: copies of a few corpus tables, and a folder that holds no Delta table."""
    base = tmp_path_factory.mktemp("bad-input-root")
    for name, source in COPIES.items():
        shutil.copytree(TABLES / source, base / name)
    (base / "not-delta").mkdir()
    (base / "not-delta" / "readme.txt").write_text("no table here\n")
    return base


class Served:
    """A server over loopback serving the catalog at ``url`` (the test keeps the CatalogDB it uses)."""

    def __init__(self, url: str) -> None:
        self.db = CatalogDB(url)
        config = parse_config({"version": 1, "catalog": url, "adminTokens": [ADMIN], "catalogPollSeconds": 0.2})
        self.server = RunningServer(create_app(config, catalog=self.db))
        self.url = self.server.url

    def sdk(self, **options) -> WorkspaceClient:
        """A client; ``options`` go to the SDK's Config (e.g. ``retry_timeout_seconds``)."""
        return WorkspaceClient(config=Config(host=self.url, token=ADMIN, auth_type="pat", **options))

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url + U, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    def stop(self) -> None:
        self.server.stop()
        self.db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request, tmp_path) -> Iterator[Served]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    made = Served(url)
    yield made
    made.stop()


def _setup(w: WorkspaceClient, root: Path) -> str:
    """Catalog main (its storage root the copies), schema main.sales, table main.sales.orders, share
    s holding it, recipient r; returns r's activation link."""
    w.catalogs.create("main", storage_root=str(root))
    w.schemas.create("sales", "main")
    _create_table(w, "orders", root / "orders")
    w.shares.create("s")
    _add(w, "s", "main.sales.orders")
    return w.recipients.create("r", authentication_type=AuthenticationType.TOKEN).activation_url


def _create_table(w: WorkspaceClient, name: str, location: Path | str, *, schema: str = "sales") -> None:
    w.tables.create(
        name=name,
        catalog_name="main",
        schema_name=schema,
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=str(location),
    )


def _add(w: WorkspaceClient, share: str, name: str, action=SharedDataObjectUpdateAction.ADD, **fields) -> None:
    obj = SharedDataObject(name=name, data_object_type=SharedDataObjectDataObjectType.TABLE, **fields)
    w.shares.update(share, updates=[SharedDataObjectUpdate(action=action, data_object=obj)])


def _refused(call, kind: type[DatabricksError], message: str | None = None, *, has: str | None = None) -> str:
    """``call()`` raises the SDK's ``kind`` (exactly that class), its message the server's:
    ``message`` exactly, or holding ``has``. Returns the message."""
    with pytest.raises(DatabricksError) as info:
        call()
    assert type(info.value) is kind, (type(info.value), str(info.value))
    text = str(info.value)
    if message is not None:
        assert text == message
    if has is not None:
        assert has in text, text
    return text


# --- bad input ------------------------------------------------------------------------------------


def test_missing_and_malformed_fields(served, root):
    w = served.sdk()
    _setup(w, root)
    do = w.api_client.do
    _refused(
        lambda: do("POST", U + "/shares", body={"comment": "no name"}),
        InvalidParameterValue,
        "invalid request: body.name: Field required",
    )
    _refused(lambda: do("POST", U + "/shares", body={"nmae": "x", "name": "x"}), InvalidParameterValue, has="nmae")
    _refused(
        lambda: do("POST", U + "/recipients", body={"name": "x", "expiration_time": "soon"}),
        InvalidParameterValue,
        has="body.expiration_time: Input should be a valid integer",
    )
    _refused(
        lambda: w.recipients.rotate_token("r", existing_token_expire_in_seconds=-1),
        InvalidParameterValue,
        has="existing_token_expire_in_seconds: Input should be greater than or equal to 0",
    )
    _refused(
        lambda: w.recipients.rotate_token("r", existing_token_expire_in_seconds=2**62),
        InvalidParameterValue,
        has="existing_token_expire_in_seconds: Input should be less than or equal to",
    )
    broken = {"Content-Type": "application/json"}
    _refused(
        lambda: do("POST", U + "/shares", data="{not json", headers=broken),
        InvalidParameterValue,
        has="JSON decode error",
    )
    _refused(
        lambda: do("GET", U + "/shares", query={"max_results": -1}),
        InvalidParameterValue,
        "max_results must be 0 (the server's page size) or more",
    )
    _refused(lambda: do("GET", U + "/shares", query={"page_token": "forged"}), InvalidParameterValue, has="page")
    _refused(
        lambda: do("GET", U + "/shares", query={"max_results": "many"}),
        InvalidParameterValue,
        has="query.max_results: Input should be a valid integer",
    )
    _refused(
        lambda: do("POST", U + "/shares", body={"name": "t", "comment": "a\x00b"}),
        InvalidParameterValue,
        has="comment holds a NUL character or an unpaired surrogate",
    )
    _refused(
        lambda: do("PATCH", U + "/shares/s", data=b"\xff\xfe", headers=broken),
        InvalidParameterValue,
        has="JSON decode error",
    )
    assert [s.name for s in w.shares.list_shares()] == ["s"]  # none of it made anything


def test_unknown_names(served, root):
    w = served.sdk()
    _setup(w, root)
    _refused(
        lambda: w.shares.get("nope"),
        ResourceDoesNotExist,
        "share 'nope' does not exist: create it first or check the name",
    )
    _refused(
        lambda: w.catalogs.get("nope"),
        ResourceDoesNotExist,
        "catalog 'nope' does not exist: create it first or check the name",
    )
    _refused(
        lambda: w.schemas.get("main.nope"),
        ResourceDoesNotExist,
        "schema 'main.nope' does not exist: create it first or check the name",
    )
    _refused(
        lambda: w.tables.get("main.sales.nope"),
        ResourceDoesNotExist,
        "table 'main.sales.nope' does not exist: create it first or check the name",
    )
    _refused(
        lambda: w.recipients.get("nope"),
        ResourceDoesNotExist,
        "recipient 'nope' does not exist: create it first or check the name",
    )
    _refused(lambda: w.shares.delete("nope"), ResourceDoesNotExist, has="share 'nope' does not exist")
    _refused(lambda: w.recipients.rotate_token("nope", 0), ResourceDoesNotExist, has="recipient 'nope' does not exist")
    _refused(
        lambda: _add(w, "s", "main.sales.nope"), ResourceDoesNotExist, has="table 'main.sales.nope' does not exist"
    )
    _refused(lambda: _add(w, "nope", "main.sales.orders"), ResourceDoesNotExist, has="share 'nope' does not exist")
    _refused(
        lambda: _add(w, "s", "main.sales.changes", SharedDataObjectUpdateAction.UPDATE),
        ResourceDoesNotExist,
        "'main.sales.changes' is not in the share: ADD it first",
    )
    _refused(lambda: w.schemas.create("x", "nope"), ResourceDoesNotExist, has="catalog 'nope' does not exist")
    _refused(
        lambda: _create_table(w, "t", root / "changes", schema="nope"),
        ResourceDoesNotExist,
        has="schema 'main.nope' does not exist",
    )


def test_duplicates(served, root):
    w = served.sdk()
    _setup(w, root)
    taken = "share 's' already exists: choose another name or update it"
    _refused(lambda: w.shares.create("s"), ResourceAlreadyExists, taken)
    _refused(lambda: w.shares.create("S"), ResourceAlreadyExists, has="share 'S' already exists")  # any case
    _refused(
        lambda: w.recipients.create("R", authentication_type=AuthenticationType.TOKEN),
        ResourceAlreadyExists,
        "recipient 'R' already exists: choose another name or update it",
    )
    _refused(lambda: w.catalogs.create("Main"), ResourceAlreadyExists, has="catalog 'Main' already exists")
    _refused(lambda: w.schemas.create("SALES", "main"), ResourceAlreadyExists, has="already exists")
    _refused(
        lambda: _create_table(w, "orders", root / "changes"),
        ResourceAlreadyExists,
        "table 'main.sales.orders' already exists: choose another name, or delete it first",
    )
    _refused(
        lambda: _create_table(w, "again", root / "orders"),
        ResourceAlreadyExists,
        has="table 'main.sales.orders' has that storage location already",
    )
    _refused(
        lambda: _add(w, "s", "main.sales.orders"),
        ResourceAlreadyExists,
        "table 'main.sales.orders' is already in share 's': update it instead",
    )
    _create_table(w, "changes", root / "changes")
    _refused(
        lambda: _add(w, "s", "main.sales.changes", shared_as="sales.orders"),
        ResourceAlreadyExists,
        has="already has a data object shared as 'sales.orders'",
    )
    w.shares.create("t")
    _refused(lambda: w.shares.update("t", new_name="S"), ResourceAlreadyExists, has="share 'S' already exists")
    assert [o.name for o in w.shares.get("s", include_shared_data=True).objects] == ["main.sales.orders"]


@pytest.mark.parametrize(
    "name",
    ["bad name", "a/b", "tab\there", "x" * 256, "İ" * 255],
    ids=["space", "slash", "control", "too-long", "too-long-lower-cased"],
)
def test_names_that_break_the_naming_rules(served, root, name):
    w = served.sdk()
    rule = "no unpaired surrogates, no spaces, '/', or control characters"
    _refused(lambda: w.shares.create(name), InvalidParameterValue, has=rule)
    _refused(
        lambda: w.recipients.create(name, authentication_type=AuthenticationType.TOKEN), InvalidParameterValue, has=rule
    )
    _refused(lambda: w.catalogs.create(name), InvalidParameterValue, has=rule)
    assert list(w.shares.list_shares()) == [] and list(w.recipients.list()) == []


def test_dotted_names_where_parts_are_expected(served, root):
    w = served.sdk()
    _setup(w, root)
    _create_table(w, "changes", root / "changes")
    _refused(lambda: w.schemas.create("a.b", "main"), InvalidParameterValue, has="schema name 'a.b' is invalid")
    _refused(lambda: _create_table(w, "a.b", root / "changes"), InvalidParameterValue, has="table name 'a.b'")
    _refused(
        lambda: w.tables.get("main.sales"),
        InvalidParameterValue,
        "table full name 'main.sales' is invalid: write it as 'catalog.schema.table'",
    )
    _refused(
        lambda: _add(w, "s", "main.sales.changes", shared_as="flat"),
        InvalidParameterValue,
        has="write it as 'schema.table'",
    )


def test_storage_locations_outside_the_root_or_without_a_delta_table(served, root, tmp_path):
    w = served.sdk()
    _setup(w, root)
    outside = tmp_path / "elsewhere"
    shutil.copytree(TABLES / "basic_partitioned", outside)  # a real Delta table, outside the root
    outside_root = (
        "storage location of table 'main.sales.t' is outside the storage root of catalog 'main': give a location "
        "under the catalog's storage root"
    )
    _refused(lambda: _create_table(w, "t", outside), InvalidParameterValue, outside_root)
    start = time.monotonic()  # refused by the rule, never fetched
    _refused(lambda: _create_table(w, "t", "s3://some-bucket/tables/t"), InvalidParameterValue, outside_root)
    assert time.monotonic() - start < 5
    _refused(  # the provider's own location, named as given (no placeholder in its place)
        lambda: _create_table(w, "t", root / "not-delta"),
        InvalidParameterValue,
        has=f"'{root / 'not-delta'}' is not a readable Delta table",
    )
    _refused(
        lambda: _create_table(w, "t", root / "orders" / "_delta_log"),
        InvalidParameterValue,
        has="is not a readable Delta table",
    )
    _refused(
        lambda: _create_table(w, "t", "orders"),
        InvalidParameterValue,
        has="must be an absolute path or a URL such as s3://<bucket>/<path>",
    )
    _refused(
        lambda: _create_table(w, "t", f"{root}/../{root.name}/changes"),
        InvalidParameterValue,
        has="must not contain a '..' segment",
    )
    with pytest.raises(InvalidParameterValue, match="table_type EXTERNAL"):
        w.tables.create(
            name="t",
            catalog_name="main",
            schema_name="sales",
            table_type=TableType.MANAGED,
            data_source_format=DataSourceFormat.DELTA,
            storage_location=str(root / "changes"),
        )
    assert [t.name for t in w.tables.list(catalog_name="main", schema_name="sales")] == ["orders"]


def test_permission_changes_on_a_missing_share_or_for_a_missing_recipient(served, root):
    w = served.sdk()
    _setup(w, root)
    grant = [PermissionsChange(principal="r", add=["SELECT"])]
    _refused(
        lambda: w.shares.update_permissions("nope", changes=grant),
        ResourceDoesNotExist,
        "share 'nope' does not exist: create it first or check the name",
    )
    ghost = [PermissionsChange(principal="ghost", add=["SELECT"])]
    _refused(
        lambda: w.shares.update_permissions("s", changes=ghost),
        ResourceDoesNotExist,
        "recipient 'ghost' does not exist: create it first or check the name",
    )
    both = [PermissionsChange(principal="r", add=["SELECT"]), PermissionsChange(principal="ghost", add=["SELECT"])]
    _refused(lambda: w.shares.update_permissions("s", changes=both), ResourceDoesNotExist, has="recipient 'ghost'")
    modify = [PermissionsChange(principal="r", add=["MODIFY"])]
    _refused(
        lambda: w.shares.update_permissions("s", changes=modify),
        InvalidParameterValue,
        "privilege 'MODIFY' on share 's' is not supported: SELECT is the only privilege",
    )
    _refused(
        lambda: w.recipients.share_permissions("ghost"), ResourceDoesNotExist, has="recipient 'ghost' does not exist"
    )
    assert not w.shares.share_permissions("s").privilege_assignments  # all or nothing: r was not granted


# --- concurrent writes ------------------------------------------------------------------------------

#: What a racing admin call may be refused with: the object is gone, or taken already.
_RACE_REFUSALS = (NotFound, ResourceAlreadyExists)


def _racer(served: Served, root: Path, seed: int, seen: Counter, problems: list[str]) -> None:
    """One thread's share of the race: every call on the same share, recipient and table."""
    w = served.sdk(retry_timeout_seconds=1)  # a 503 would surface, not be retried away
    calls = [
        lambda: w.shares.create("contested"),
        lambda: _add(w, "contested", "main.sales.orders"),
        lambda: _add(w, "contested", "main.sales.changes", shared_as="other.changes"),
        lambda: w.shares.update("contested", comment=f"by {seed}"),
        lambda: w.shares.update_permissions(
            "contested", changes=[PermissionsChange(principal="rival", add=["SELECT"])]
        ),
        lambda: w.shares.delete("contested"),
        lambda: w.recipients.create("rival", authentication_type=AuthenticationType.TOKEN),
        lambda: w.recipients.rotate_token("rival", existing_token_expire_in_seconds=60),
        lambda: w.recipients.update("rival", comment=f"by {seed}"),
        lambda: w.recipients.delete("rival"),
        lambda: _create_table(w, "dv", root / "dv"),
        lambda: w.tables.delete("main.sales.dv"),
        lambda: _add(w, "s", "main.sales.dv"),
    ]
    for i in range(40):
        call = calls[(seed * 7 + i * (seed + 3)) % len(calls)]
        try:
            call()
            seen["ok"] += 1
        except _RACE_REFUSALS as exc:
            seen[type(exc).__name__] += 1
        except Exception as exc:  # a 5xx (InternalError, a 503 retried out), or anything unexpected
            problems.append(f"{type(exc).__name__}: {exc}")


def test_concurrent_writes_leave_whole_objects_and_never_a_5xx(served, root):
    w = served.sdk()
    _setup(w, root)
    _create_table(w, "changes", root / "changes")
    seen: Counter[str] = Counter()
    problems: list[str] = []
    threads = [threading.Thread(target=_racer, args=(served, root, seed, seen, problems)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert problems == []
    assert seen["ok"] > 20 and seen["ResourceAlreadyExists"] > 0 and seen["ResourceDoesNotExist"] > 0, seen
    _check_whole(served.db)
    served.db.served()  # the catalog as served loads


def _check_whole(db: CatalogDB) -> None:
    """No duplicates; every share's objects name existing tables, once each, with a valid shared_as;
    every recipient has its token(s); every grant names a share and a recipient that exist."""
    shares = db.list_shares(include_objects=True)
    assert len({s.name.lower() for s in shares}) == len(shares)
    for share in shares:
        names = [o.name.lower() for o in share.objects]
        assert len(set(names)) == len(names), share
        assert len({o.shared_as.lower() for o in share.objects}) == len(names), share
        for obj in share.objects:
            assert db.table_exists(obj.name) and obj.shared_as.count(".") == 1, obj
    recipients = db.list_recipients()
    assert len({r.name.lower() for r in recipients}) == len(recipients)
    for recipient in recipients:
        assert recipient.tokens, recipient.name
        assert len({t.id for t in recipient.tokens}) == len(recipient.tokens)
    names = {s.name for s in shares}
    for share in shares:
        for grant in db.share_permissions(share.name):
            assert grant.share in names and db.get_recipient(grant.recipient)


# --- a database that goes away ---------------------------------------------------------------------


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    """A cluster of this test's own, to stop and start (never the session's, which others use)."""
    cluster = PostgresCluster(require_bindir())
    yield cluster
    cluster.destroy()


def _recipient_reading(served: Served, root: Path) -> httpx.Client:
    """Share s (with main.sales.orders) granted to an activated recipient; its protocol client."""
    w = served.sdk()
    link = _setup(w, root)
    bearer = w.recipient_activation.retrieve_token(link.rsplit("/", 1)[1]).bearer_token
    secrets_used.add(bearer, label="an outage test recipient's bearer token")
    w.shares.update_permissions("s", changes=[PermissionsChange(principal="r", add=["SELECT"])])
    return httpx.Client(base_url=served.url + "/delta-sharing", headers={"Authorization": f"Bearer {bearer}"})


def _reads(recipient: httpx.Client) -> None:
    tables = recipient.get("/shares/s/all-tables")
    assert tables.status_code == 200 and [t["name"] for t in tables.json()["items"]] == ["orders"]
    query = recipient.post("/shares/s/schemas/sales/tables/orders/query", json={})
    assert query.status_code == 200 and '"file"' in query.text


def _admin_unavailable(served: Served, hidden: list[str]) -> None:
    """Admin reads and writes are 503 + Retry-After in Unity Catalog's shape, naming no database."""
    with served.admin() as admin:
        for answer in (admin.get("/shares"), admin.post("/shares", json={"name": "during"}), admin.get("/catalogs")):
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["Retry-After"]) > 0
            body = answer.json()
            assert set(body) == {"error_code", "message"} and body["error_code"] == "TEMPORARILY_UNAVAILABLE"
            assert "catalog database cannot be used right now" in body["message"]
            assert not any(h in body["message"] for h in hidden), body["message"]
    with pytest.raises(TimeoutError) as info:  # the SDK retries a 503 (Retry-After) until its deadline
        served.sdk(retry_timeout_seconds=2).shares.get("s")
    assert isinstance(info.value.__cause__, TemporarilyUnavailable)


def _back(served: Served) -> None:
    w = served.sdk()
    w.shares.create("after")
    w.shares.update_permissions("after", changes=[PermissionsChange(principal="r", add=["SELECT"])])
    assert {s.name for s in w.shares.list_shares()} == {"s", "after"}


def _audited(db: CatalogDB, request_id: str, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if any(event.request_id == request_id for _, event in db.audit_events(limit=10_000)):
            return True
        time.sleep(0.2)
    return False


def test_postgres_going_away_is_503_for_admin_and_recipients_keep_reading(own_postgres, root):
    served = Served(own_postgres.create_database())
    try:
        recipient = _recipient_reading(served, root)
        _reads(recipient)
        own_postgres.stop()
        _admin_unavailable(served, hidden=[str(own_postgres.port), "127.0.0.1", "postgres"])
        _reads(recipient)  # the catalog last loaded
        time.sleep(0.5)  # the feed's polls fail meanwhile; serving goes on
        _reads(recipient)
        assert recipient.get("/shares", headers={"X-Request-Id": "read-while-away"}).status_code == 200
        time.sleep(1.5)  # its audit event's block fails to go into the database meanwhile
        own_postgres.start()
        _back(served)
        assert {s["name"] for s in recipient.get("/shares").json()["items"]} == {"s", "after"}
        assert _audited(served.db, "read-while-away")  # kept by the audit log, stored once it could be
    finally:
        served.stop()


def test_a_sqlite_file_gone_is_503_for_admin_and_recipients_keep_reading(tmp_path, root):
    """As root a file's permissions stop no one, so the folder holding the database (with its WAL)
    is moved away and the pooled connections dropped, as a lost volume would break them; then it
    comes back."""
    folder = tmp_path / "catalog"
    folder.mkdir()
    served = Served(f"sqlite:///{folder / 'catalog.db'}")
    try:
        recipient = _recipient_reading(served, root)
        _reads(recipient)
        folder.rename(tmp_path / "away")
        served.db.close()
        _admin_unavailable(served, hidden=[str(tmp_path), "catalog.db"])
        _reads(recipient)
        (tmp_path / "away").rename(folder)
        _back(served)
        assert {s["name"] for s in recipient.get("/shares").json()["items"]} == {"s", "after"}
    finally:
        served.stop()
