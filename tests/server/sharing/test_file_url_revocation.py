"""What a revoke must end: a file URL of the server's own (local tables) issued before a grant is
withdrawn or a table leaves a share stops working once the server has reloaded, through the admin
API and through an edit of the config file, for that recipient and that table only.

Each case guards one check of the file route: the recipient may still read the URL's share (a
grant withdrawn), the URL's recipient (another recipient who still may read the share does not
keep it alive) and the URL's table (a table removed from a share the recipient still reads)."""

from __future__ import annotations

import hashlib

import httpx
import orjson
import yaml
from conftest import TABLES
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, load_config, parse_config

ALICE = "revocation-token-alice-61b0"
BOB = "revocation-token-bob-0c7e"
ADMIN = "revocation-admin-token-9d2a"
secrets_used.add(ALICE, BOB, ADMIN, label="a revocation test's token")
UC = "/api/2.1/unity-catalog"
P = "/delta-sharing/shares/s/schemas/d/tables"
LOCATIONS = {"t1": TABLES / "basic_partitioned", "t2": TABLES / "cdf-table"}


def _file_url(server: RunningServer, token: str, table: str) -> str:
    answer = httpx.post(
        f"{server.url}{P}/{table}/query", json={}, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    urls = [orjson.loads(line)["file"]["url"] for line in answer.text.splitlines() if '"file"' in line]
    assert urls and urls[0].startswith(server.url)  # the server's own file URL
    return urls[0]


def _urls(server: RunningServer) -> dict[str, str]:
    """A file URL of each (recipient, table), issued while both recipients read both tables."""
    return {
        f"{who}:{t}": _file_url(server, token, t) for who, token in (("alice", ALICE), ("bob", BOB)) for t in LOCATIONS
    }


def _served(url: str) -> bool:
    answer = httpx.get(url, timeout=30)
    if answer.status_code == 200:
        assert answer.content[:4] == b"PAR1"
        return True
    assert answer.status_code == 403 and answer.json()["errorCode"] == "PERMISSION_DENIED", answer.text
    return False


def _check_revocations(server: RunningServer, remove_t1, revoke_alice) -> None:
    urls = _urls(server)
    assert all(_served(u) for u in urls.values())
    remove_t1()  # the table leaves the share; both recipients keep the share and its other table
    assert not _served(urls["alice:t1"]) and not _served(urls["bob:t1"])
    assert _served(urls["alice:t2"]) and _served(urls["bob:t2"])
    revoke_alice()  # alice's grant is withdrawn; bob still reads the share
    assert not _served(urls["alice:t2"])
    assert _served(urls["bob:t2"])


def test_admin_api_revocations_end_file_urls(tmp_path):
    catalog = CatalogDB(f"sqlite:///{tmp_path / 'catalog.db'}")
    for name, token in (("alice", ALICE), ("bob", BOB)):
        catalog.import_recipient(name, [hashlib.sha256(token.encode()).digest()])
    config = parse_config({"version": 1, "catalog": str(tmp_path / "catalog.db"), "adminTokens": [ADMIN]})
    server = RunningServer(create_app(config, catalog=catalog))
    admin = httpx.Client(base_url=server.url + UC, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    def call(method: str, path: str, body: dict) -> None:
        answer = admin.request(method, path, json=body)
        assert answer.status_code == 200, answer.text

    def change_t1(action: str) -> None:
        obj = {"name": "main.d.t1", "data_object_type": "TABLE", "shared_as": "d.t1"}
        call("PATCH", "/shares/s", {"updates": [{"action": action, "data_object": obj}]})

    try:
        call("POST", "/catalogs", {"name": "main", "storage_root": str(TABLES)})
        call("POST", "/schemas", {"name": "d", "catalog_name": "main"})
        for table, location in LOCATIONS.items():
            body = {"name": table, "catalog_name": "main", "schema_name": "d", "table_type": "EXTERNAL"}
            call("POST", "/tables", {**body, "data_source_format": "DELTA", "storage_location": str(location)})
        call("POST", "/shares", {"name": "s"})
        change_t1("ADD")
        obj = {"name": "main.d.t2", "data_object_type": "TABLE", "shared_as": "d.t2"}
        call("PATCH", "/shares/s", {"updates": [{"action": "ADD", "data_object": obj}]})
        call(
            "PATCH",
            "/shares/s/permissions",
            {"changes": [{"principal": w, "add": ["SELECT"]} for w in ("alice", "bob")]},
        )
        _check_revocations(
            server,
            lambda: change_t1("REMOVE"),
            lambda: call("PATCH", "/shares/s/permissions", {"changes": [{"principal": "alice", "remove": ["SELECT"]}]}),
        )
    finally:
        admin.close()
        server.stop()
        catalog.close()


def _config(tables: list[str], alice_shares: list[str]) -> dict:
    schema = {"name": "d", "tables": [{"name": t, "location": str(LOCATIONS[t])} for t in tables]}
    return {
        "version": 1,
        "shares": [{"name": "s", "schemas": [schema]}],
        "recipients": [
            {"name": "alice", "tokens": [ALICE], "shares": alice_shares},
            {"name": "bob", "tokens": [BOB], "shares": ["s"]},
        ],
        "catalogPollSeconds": 3600,  # reloaded by the test (as on SIGHUP), never by the poll
    }


def test_config_file_edits_end_file_urls(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(_config(["t1", "t2"], ["s"])))
    app = create_app(load_config(path))
    server = RunningServer(app)

    def edit(config: dict) -> None:
        path.write_text(yaml.safe_dump(config))
        app.state.catalog_feed.reload_now()

    try:
        _check_revocations(server, lambda: edit(_config(["t2"], ["s"])), lambda: edit(_config(["t2"], [])))
    finally:
        server.stop()
