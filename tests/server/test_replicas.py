"""Two `deltaport serve` replicas on one PostgreSQL catalog: what is written through replica A's
admin API is served by replica B within a few polls, what A revokes B refuses, and what A signs
(page tokens, refresh tokens, file URLs) B honours, since both share ``tokenSecret``.

Each replica is its own process on its own port with the same config (the catalog database, the
admin token, the token secret, ``catalogPollSeconds: 0.2``). The admin API is driven with the
Databricks SDK; the recipient side with plain HTTP and with the official ``delta-sharing`` client.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import delta_sharing
import httpx
import orjson
import pytest
from conftest import TABLES
from databricks.sdk import WorkspaceClient
from databricks.sdk.service.catalog import DataSourceFormat, TableType
from databricks.sdk.service.sharing import (
    AuthenticationType,
    PermissionsChange,
    SharedDataObject,
    SharedDataObjectDataObjectType,
    SharedDataObjectUpdate,
    SharedDataObjectUpdateAction,
)
from secret_scan import add_process_output, secrets_used
from servers import ServeProcess

from postgres import postgres_server  # noqa: F401  (the session's throwaway cluster)

ADMIN = "replicas-admin-token-5f1c2e9a"
TOKEN_SECRET = "replicas-token-secret-8d0b7a41c3"
secrets_used.add(ADMIN)
secrets_used.add(TOKEN_SECRET, label="the replicas' tokenSecret")

POLL_SECONDS = 0.2
DEADLINE = 5.0  # seconds a change made through A may take to be served by B (25 polls)
ENDPOINT = "/delta-sharing"
ORDERS = TABLES / "basic_partitioned"  # six data files in five partitions
SMALL = TABLES / "table-without-dv-small"


@pytest.fixture(scope="module", autouse=True)
def _client_debug_logs_off():
    """The SDK's debug log prints the bodies it receives (an activation's bearer token among them),
    urllib3's and httpx's the URLs they request (an activation link among them): those are the
    clients' logs, not the server's, so they stay out of the suite's secret scan. Module-scoped
    and autouse: in place before the module's fixtures make recipients."""
    quiet = {"databricks.sdk": logging.INFO, "urllib3.connectionpool": logging.INFO, "httpx": logging.WARNING}
    loggers = {logging.getLogger(name): level for name, level in quiet.items()}
    before = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(level)
    yield
    for logger, level in before.items():
        logger.setLevel(level)


@dataclass
class Replicas:
    a: ServeProcess
    b: ServeProcess
    w: WorkspaceClient  # the admin API of replica A

    def sharing(self, replica: ServeProcess, bearer: str) -> httpx.Client:
        return httpx.Client(base_url=replica.url + ENDPOINT, headers={"Authorization": f"Bearer {bearer}"}, timeout=30)


@pytest.fixture(scope="module")
def replicas(postgres_server, tmp_path_factory) -> Iterator[Replicas]:  # noqa: F811
    config = {
        "version": 1,
        "catalog": postgres_server.create_database(),
        "adminTokens": [ADMIN],
        "tokenSecret": TOKEN_SECRET,
        "catalogPollSeconds": POLL_SECONDS,
    }
    started: list[ServeProcess] = []
    try:
        for name in ("a", "b"):
            started.append(ServeProcess(config, tmp_path_factory.mktemp(f"replica-{name}"), "--keying-processes", "0"))
        a, b = started
        w = WorkspaceClient(host=a.url, token=ADMIN, auth_type="pat")
        w.catalogs.create("main", storage_root=str(TABLES))
        w.schemas.create("sales", "main")
        _create_table(w, "orders", ORDERS)
        yield Replicas(a, b, w)
    finally:
        for server in started:
            server.stop()
            add_process_output(f"deltaport serve replica on port {server.port}", server.log.read_text(errors="replace"))


# --- helpers ------------------------------------------------------------------------------------


def _create_table(w: WorkspaceClient, name: str, location: Path) -> None:
    w.tables.create(
        name=name,
        catalog_name="main",
        schema_name="sales",
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=str(location),
    )


def _share_table(w: WorkspaceClient, share: str, table: str, shared_as: str, *, remove: bool = False) -> None:
    obj = SharedDataObject(name=table, data_object_type=SharedDataObjectDataObjectType.TABLE, shared_as=shared_as)
    action = SharedDataObjectUpdateAction.REMOVE if remove else SharedDataObjectUpdateAction.ADD
    w.shares.update(share, updates=[SharedDataObjectUpdate(action=action, data_object=obj)])


def _permission(w: WorkspaceClient, share: str, recipient: str, *, revoke: bool = False) -> None:
    change = PermissionsChange(principal=recipient, **({"remove": ["SELECT"]} if revoke else {"add": ["SELECT"]}))
    w.shares.update_permissions(share, changes=[change])


def _activate(w: WorkspaceClient, activation_url: str | None) -> str:
    assert activation_url, "a new token comes with its activation link"
    link = activation_url.rsplit("/", 1)[1]
    secrets_used.add(link, label="an activation token")  # it buys the bearer token: never logged either
    bearer = w.recipient_activation.retrieve_token(link).bearer_token
    assert bearer
    secrets_used.add(bearer)
    return bearer


def _recipient(w: WorkspaceClient, name: str, share: str) -> str:
    """A new recipient granted ``share``, activated through A: its bearer token."""
    made = w.recipients.create(name, authentication_type=AuthenticationType.TOKEN)
    bearer = _activate(w, made.activation_url)
    _permission(w, share, name)
    return bearer


def _share(w: WorkspaceClient, name: str, *tables: tuple[str, str]) -> None:
    w.shares.create(name)
    for table, shared_as in tables:
        _share_table(w, name, table, shared_as)


def _wait(what: str, observe: Callable[[], object], done: Callable[[object], bool], seconds: float = DEADLINE) -> float:
    """Observe until ``done(observation)``; the seconds it took, or a failure naming ``what`` and the
    last observation once ``seconds`` have passed."""
    started = time.monotonic()
    while True:
        seen = observe()
        if done(seen):
            return time.monotonic() - started
        if time.monotonic() - started > seconds:
            pytest.fail(f"{what}: not within {seconds} s (catalogPollSeconds {POLL_SECONDS}); last seen: {seen!r}")
        time.sleep(0.05)


def _lines(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.content.splitlines() if line.strip()]


def _file_ids(lines: list[dict]) -> list[str]:
    return [line["file"]["id"] for line in lines if "file" in line]


def _end(lines: list[dict]) -> dict:
    return lines[-1]["endStreamAction"]


# --- what A writes, B serves --------------------------------------------------------------------


def test_a_recipient_grant_and_table_created_through_a_are_served_by_b(replicas):
    w = replicas.w
    _share(w, "written", ("main.sales.orders", "retail.orders"))
    bearer = _recipient(w, "newcomer", "written")
    with replicas.sharing(replicas.a, bearer) as on_a, replicas.sharing(replicas.b, bearer) as on_b:
        assert [s["name"] for s in on_a.get("/shares").json()["items"]] == ["written"]  # A: at once
        _wait(
            "B lists the share granted through A to the recipient made through A",
            lambda: (lambda r: (r.status_code, r.json()))(on_b.get("/shares")),
            lambda seen: seen[0] == 200 and [s["name"] for s in seen[1]["items"]] == ["written"],
        )
        assert _file_ids(_lines(on_b.post("/shares/written/schemas/retail/tables/orders/query", json={})))

        _create_table(w, "small", SMALL)  # a table created through A after B began serving
        _share_table(w, "written", "main.sales.small", "retail.small")
        _wait(
            "B lists the table created and shared through A",
            lambda: sorted(t["name"] for t in on_b.get("/shares/written/all-tables").json().get("items", [])),
            lambda names: names == ["orders", "small"],
        )
        on_b_lines = _lines(on_b.post("/shares/written/schemas/retail/tables/small/query", json={}))
        on_a_lines = _lines(on_a.post("/shares/written/schemas/retail/tables/small/query", json={}))
        assert sorted(_file_ids(on_b_lines)) == sorted(_file_ids(on_a_lines)) != []
        assert on_b_lines[1]["metaData"]["id"] == on_a_lines[1]["metaData"]["id"]  # one table id for both


def _revoke_by_deleting(w: WorkspaceClient, name: str, share: str) -> None:
    w.recipients.delete(name)


def _revoke_by_rotating(w: WorkspaceClient, name: str, share: str) -> None:
    w.recipients.rotate_token(name, existing_token_expire_in_seconds=0)


def _revoke_the_share(w: WorkspaceClient, name: str, share: str) -> None:
    _permission(w, share, name, revoke=True)


@pytest.mark.parametrize(
    ("revoke", "refused"),
    [(_revoke_by_deleting, 401), (_revoke_by_rotating, 401), (_revoke_the_share, 404)],
    ids=["recipient-deleted", "rotated-with-no-grace", "share-permission-revoked"],
)
def test_a_token_revoked_through_a_is_refused_by_b(replicas, revoke, refused):
    w = replicas.w
    share, name = f"revocable_{revoke.__name__.strip('_')}", f"leaving_{revoke.__name__.strip('_')}"
    _share(w, share, ("main.sales.orders", "retail.orders"))
    bearer = _recipient(w, name, share)
    version = f"/shares/{share}/schemas/retail/tables/orders/version"
    with replicas.sharing(replicas.a, bearer) as on_a, replicas.sharing(replicas.b, bearer) as on_b:
        _wait("B serves the new recipient", lambda: on_b.get(version).status_code, lambda status: status == 200)
        revoke(w, name, share)
        assert on_a.get(version).status_code == refused  # A reloads on its own write: refused at once
        took = _wait(
            f"B refuses the token after '{revoke.__name__}' through A",
            lambda: on_b.get(version).status_code,
            lambda status: status == refused,
        )
        assert took <= DEADLINE
        for _ in range(5):  # and keeps refusing it: no replica flips back
            assert on_b.get(version).status_code == refused
        if refused == 404:  # the token itself still works: only the share is gone
            assert on_b.get("/shares").status_code == 200


def test_a_rotated_recipients_new_token_activated_through_a_is_served_by_b(replicas):
    w = replicas.w
    _share(w, "rotating", ("main.sales.orders", "retail.orders"))
    _recipient(w, "rotor", "rotating")
    rotated = w.recipients.rotate_token("rotor", existing_token_expire_in_seconds=0)
    fresh = _activate(w, rotated.activation_url)
    with replicas.sharing(replicas.b, fresh) as on_b:
        _wait(
            "B serves the token activated through A after a rotation",
            lambda: on_b.get("/shares/rotating/schemas/retail/tables/orders/version").status_code,
            lambda status: status == 200,
        )


def test_activation_tokens_stay_out_of_the_replicas_logs(replicas):
    """An activation token buys its recipient's bearer token, once: like the bearer token, it must
    never reach a log line. The access log of the replica that served the activation is read back."""
    made = replicas.w.recipients.create("logged", authentication_type=AuthenticationType.TOKEN)
    assert made.activation_url
    link = made.activation_url.rsplit("/", 1)[1]
    assert httpx.get(made.activation_url, timeout=10).status_code == 200  # the page a person opens
    _activate(replicas.w, made.activation_url)  # the public route the SDK calls
    wanted = "/public/data_sharing_activation/"
    _wait("replica A logs the activation request", lambda: replicas.a.log.read_text(), lambda text: wanted in text)
    shown = [line.replace(link, "<the activation token>") for line in replicas.a.log.read_text().splitlines()]
    leaked = [line for line in shown if "<the activation token>" in line]  # the failure never shows the token
    count = len(leaked)
    assert count == 0, (
        f"replica A's log holds an activation token in {count} line(s), e.g. {leaked[:1]}: the access log "
        "(AccessLog in src/deltaport/server/ops/access_log.py) writes scope['path'], which for the activation page and "
        "the public activation route ends with the token"
    )


# --- what A signs, B honours --------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader(replicas) -> tuple[str, str]:
    """A recipient of share 'signed' (basic_partitioned as retail.orders) that both replicas serve:
    (bearer, the table's URL path under the endpoint)."""
    _share(replicas.w, "signed", ("main.sales.orders", "retail.orders"))
    bearer = _recipient(replicas.w, "signatory", "signed")
    table = "/shares/signed/schemas/retail/tables/orders"
    with replicas.sharing(replicas.b, bearer) as on_b:
        _wait("B serves the recipient", lambda: on_b.get(table + "/version").status_code, lambda s: s == 200)
    return bearer, table


def test_a_page_token_issued_by_a_is_honoured_by_b(replicas, reader):
    bearer, table = reader
    with replicas.sharing(replicas.a, bearer) as on_a, replicas.sharing(replicas.b, bearer) as on_b:
        everything = _file_ids(_lines(on_a.post(table + "/query", json={})))
        assert len(everything) > 4
        first = _lines(on_a.post(table + "/query", json={"maxFiles": 2}))
        token = _end(first)["nextPageToken"]
        second_on_a = _lines(on_a.post(table + "/query", json={"maxFiles": 2, "pageToken": token}))
        second_on_b = _lines(on_b.post(table + "/query", json={"maxFiles": 2, "pageToken": token}))
        assert _file_ids(second_on_b) == _file_ids(second_on_a) != []
        assert _end(second_on_b).get("nextPageToken")  # B's own next page token, for A or B
        seen, page, turn = _file_ids(first) + _file_ids(second_on_b), second_on_b, 0
        while token := _end(page).get("nextPageToken"):
            turn += 1
            client = on_a if turn % 2 else on_b  # alternate: each replica continues the other's pages
            page = _lines(client.post(table + "/query", json={"maxFiles": 2, "pageToken": token}))
            seen += _file_ids(page)
        assert sorted(seen) == sorted(everything) and len(set(seen)) == len(seen)


def test_a_refresh_token_issued_by_a_is_honoured_by_b(replicas, reader):
    bearer, table = reader
    with replicas.sharing(replicas.a, bearer) as on_a, replicas.sharing(replicas.b, bearer) as on_b:
        first = _lines(on_a.post(table + "/query", json={"includeRefreshToken": True}))
        refresh = _end(first)["refreshToken"]
        again = _lines(on_b.post(table + "/query", json={"includeRefreshToken": True, "refreshToken": refresh}))
        assert sorted(_file_ids(again)) == sorted(_file_ids(first)) != []
        assert _end(again)["refreshToken"]
        body, mac = refresh.split(".", 1)  # B really checks the signature: an altered one is refused
        forged = f"{body}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
        refused = on_b.post(table + "/query", json={"includeRefreshToken": True, "refreshToken": forged})
        assert refused.status_code == 400


def test_a_file_url_issued_by_a_downloads_through_b(replicas, reader):
    """B is sent the URL A issued, Host header and all, as a load balancer in front of both
    replicas would forward it: only its TCP destination differs."""
    bearer, table = reader
    with replicas.sharing(replicas.a, bearer) as on_a:
        files = [line["file"] for line in _lines(on_a.post(table + "/query", json={})) if "file" in line]
    url = urllib.parse.urlsplit(files[0]["url"])
    on_disk = (ORDERS / urllib.parse.unquote(url.path.split("/files/", 1)[1].split("/", 1)[1])).read_bytes()
    from_a = httpx.get(files[0]["url"], timeout=30)
    assert from_a.status_code == 200 and from_a.content == on_disk
    from_b = httpx.get(
        f"{replicas.b.url}{url.path}?{url.query}", headers={"Host": url.netloc}, timeout=30
    )  # the path and signed query, to B
    assert from_b.status_code == 200, (
        f"a file URL signed by replica A is refused by replica B ({from_b.status_code} {from_b.text}): "
        "the server's file URLs are signed with a per-process random key and access key "
        "(create_app in src/deltaport/server/app.py), not with the replicas' shared tokenSecret"
    )
    assert from_b.content == on_disk


# --- the official client reading through B ------------------------------------------------------


def test_the_official_client_reads_through_b_what_admin_writes_through_a(replicas, tmp_path):
    w = replicas.w
    _share(w, "official", ("main.sales.orders", "retail.orders"))
    bearer = _recipient(w, "connector", "official")
    profile = tmp_path / "b.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": replicas.b.url + ENDPOINT, "bearerToken": bearer})
    )
    client = delta_sharing.SharingClient(str(profile))

    def tables() -> list[str]:
        try:
            return sorted(f"{t.share}.{t.schema}.{t.name}" for t in client.list_all_tables())
        except Exception as exc:  # not served by B yet: the client raises the server's 401
            return [type(exc).__name__]

    _wait("the client lists, through B, the share granted through A", tables, lambda t: t == ["official.retail.orders"])
    import deltalake

    df = delta_sharing.load_as_pandas(f"{profile}#official.retail.orders")
    expected = deltalake.DeltaTable(str(ORDERS)).to_pandas()
    columns = sorted(expected.columns)
    assert sorted(df.columns) == columns

    def rows(frame) -> list[str]:
        return sorted(repr(row) for row in frame[columns].astype(str).itertuples(index=False, name=None))

    assert rows(df) == rows(expected) and len(df) > 0

    _create_table(w, "later", TABLES / "cdf-table")
    _share_table(w, "official", "main.sales.later", "retail.later")
    _wait(
        "the client lists, through B, a table shared through A",
        tables,
        lambda t: t == ["official.retail.later", "official.retail.orders"],
    )
    later = delta_sharing.load_as_pandas(f"{profile}#official.retail.later")
    assert len(later) == len(deltalake.DeltaTable(str(TABLES / "cdf-table")).to_pandas()) > 0

    _share_table(w, "official", "main.sales.later", "retail.later", remove=True)
    _wait(
        "the client no longer lists, through B, a table removed through A",
        tables,
        lambda t: t == ["official.retail.orders"],
    )
    w.recipients.delete("connector")
    _wait("the client is refused, through B, once A deleted its recipient", tables, lambda t: t and "." not in t[0])
