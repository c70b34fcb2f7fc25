"""`deltaport catalog import`: a config file's shares and recipients moved into a catalog database,
served from there with the recipients' tokens unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, parse_config

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"
TOKEN, BEARER = "import-alice-token-0123456789", "import-global-bearer-0123456789"
secrets_used.add(TOKEN)
secrets_used.add(BEARER)
SHARE_ID, TABLE_ID = "11111111-1111-1111-1111-111111111111", "00000000-0000-0000-0000-0000000000aa"
DELTAPORT = str(Path(sys.executable).parent / "deltaport")


def _yaml(tmp_path: Path, **extra) -> Path:
    table = {"name": "t", "location": str(TABLES / "basic_partitioned"), "id": TABLE_ID}
    config = {
        "version": 1,
        "shares": [
            {
                "name": "sales.eu",
                "id": SHARE_ID,
                "schemas": [{"name": "d", "tables": [table]}],
            },
            {"name": "again", "schemas": [{"name": "x", "tables": [{**table, "name": "same", "historyShared": True}]}]},
        ],
        "recipients": [
            {"name": "alice", "tokens": [TOKEN], "shares": ["sales.eu"], "allowedIpAddresses": ["127.0.0.1"]}
        ],
        "authorization": {"bearerToken": BEARER},
        **extra,
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _import(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DELTAPORT, "catalog", "import", *args], capture_output=True, text=True, timeout=120)


def test_imported_catalog_serves_the_same_shares_to_the_same_tokens(tmp_path):
    done = _import(str(_yaml(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert "imported 2 share(s), 2 table(s), 2 recipient(s)" in done.stdout and "restart" in done.stdout
    db = CatalogDB(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        alice = db.get_recipient("alice")
        assert alice.allowed_ip_addresses == ("127.0.0.1",)
        (token,) = alice.tokens
        assert token.activated_at is not None and token.activation_hash is None  # working, no link
        assert [t.name for t in db.list_tables("sales_eu", "d")] == ["t"]
        assert {c.name for c in db.list_catalogs()} == {"sales_eu", "again"}
    finally:
        db.close()
    served = parse_config({"version": 1, "catalog": str(tmp_path / "catalog.db")}, base=tmp_path)
    server = RunningServer(create_app(served))
    try:

        def get(path: str, token: str) -> httpx.Response:
            return httpx.get(f"{server.url}/delta-sharing{path}", headers={"Authorization": f"Bearer {token}"})

        assert [s["name"] for s in get("/shares", TOKEN).json()["items"]] == ["sales.eu"]
        assert get("/shares/sales.eu", TOKEN).json()["share"]["id"] == SHARE_ID
        tables = get("/shares/sales.eu/all-tables", TOKEN).json()["items"]
        assert [(t["schema"], t["name"], t["id"]) for t in tables] == [("d", "t", TABLE_ID)]
        assert sorted(s["name"] for s in get("/shares", BEARER).json()["items"]) == ["again", "sales.eu"]
        assert get("/shares/again/schemas/x/tables/same/version", BEARER).status_code == 200  # one location, two shares
        assert get("/shares", "not-a-token").status_code == 401
    finally:
        server.stop()


def test_a_refused_import_leaves_the_database_as_it_was(tmp_path):
    bad = _yaml(tmp_path)
    config = yaml.safe_load(bad.read_text())
    config["shares"][1]["schemas"][0]["tables"][0]["location"] = "relative/path"
    bad.write_text(yaml.safe_dump(config))
    done = _import(str(bad), "--into", str(tmp_path / "target.db"))
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    db = CatalogDB(f"sqlite:///{tmp_path / 'target.db'}")
    try:
        assert db.list_shares() == [] and db.list_recipients() == [] and db.list_catalogs() == []
    finally:
        db.close()
    again = _import(str(_yaml(tmp_path)), "--into", str(tmp_path / "target.db"))
    assert again.returncode == 0, again.stderr
    twice = _import(str(_yaml(tmp_path)), "--into", str(tmp_path / "target.db"))
    assert twice.returncode == 2 and "already" in twice.stderr
