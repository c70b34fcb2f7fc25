"""Activation links through the real Databricks SDK: shown by recipients.get and recipients.list
until used or expired (kept only encrypted in the catalog), refused clearly when used twice or
after rotation, and built on the listener that serves them (two listeners, adminPort)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import PermissionDenied
from databricks.sdk.service.sharing import AuthenticationType
from secret_scan import secrets_used
from servers import RunningServer, free_port
from test_admin_sdk import ADMIN, ENDPOINT, _activate, _sdk_debug_log_off  # noqa: F401  (an autouse fixture)

from deltaport.server import create_app, parse_config

SECRET = "activation-links-test-token-secret"
secrets_used.add(SECRET, label="the activation test's tokenSecret")


def _serve(db: Path, **settings) -> RunningServer:
    config = {"version": 1, "catalog": str(db), "adminTokens": [ADMIN], "catalogPollSeconds": 0.2, **settings}
    return RunningServer(create_app(parse_config(config, base=db.parent)))


def _sdk(server: RunningServer) -> WorkspaceClient:
    return WorkspaceClient(host=server.url, token=ADMIN, auth_type="pat")


def _link(url: str) -> str:
    secrets_used.add(url.rsplit("/", 1)[1])  # a live link's token: never in the server's logs
    return url


def _stored(db: Path) -> bytes:
    """Every byte the catalog's SQLite files hold (the database and its write-ahead log)."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_the_link_is_shown_until_used_and_the_database_never_holds_it_in_clear(tmp_path):
    db = tmp_path / "catalog.db"
    server = _serve(db, tokenSecret=SECRET)
    try:
        w = _sdk(server)
        made = w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN)
        link = _link(made.activation_url)
        got = w.recipients.get("acme")
        assert got.activation_url == link and [t.activation_url for t in got.tokens] == [link]
        assert [r.activation_url for r in w.recipients.list() if r.name == "acme"] == [link]
        activation = link.rsplit("/", 1)[1]
        with sqlite3.connect(db) as conn:
            (sealed,) = conn.execute("SELECT activation_sealed FROM recipient_tokens").fetchone()
        assert sealed and activation.encode() not in sealed
        stored = _stored(db)
        assert activation.encode() not in stored and activation[4:].encode() not in stored
        assert b"/delta_sharing/activate/" not in stored

        bearer = _activate(w, link)
        assert w.recipients.get("acme").activation_url is None  # empty once used, as Unity Catalog
        assert [t.activation_url for t in w.recipients.get("acme").tokens] == [None]
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT activation_sealed FROM recipient_tokens").fetchall() == [(None,)]
        assert bearer.encode() not in _stored(db)
    finally:
        server.stop()


def test_with_a_token_secret_the_link_outlives_a_restart_without_one_it_is_not_shown(tmp_path):
    db = tmp_path / "catalog.db"
    first = _serve(db, tokenSecret=SECRET)
    try:
        link = _link(_sdk(first).recipients.create("acme", authentication_type=AuthenticationType.TOKEN).activation_url)
    finally:
        first.stop()
    again = _serve(db, tokenSecret=SECRET)
    try:
        shown = _sdk(again).recipients.get("acme").activation_url  # rebuilt on this server's address
        assert shown == f"{again.url}/delta_sharing/activate/{link.rsplit('/', 1)[1]}"
    finally:
        again.stop()
    random_key = _serve(db)  # no tokenSecret: a random key per process opens nothing sealed before
    try:
        w = _sdk(random_key)
        assert w.recipients.get("acme").activation_url is None
        assert _activate(w, link)  # the link itself still works
    finally:
        random_key.stop()


def test_a_link_used_twice_or_after_rotation_is_refused_and_nothing_else_changes(tmp_path):
    server = _serve(tmp_path / "catalog.db", tokenSecret=SECRET)
    try:
        w = _sdk(server)
        w.shares.create("s1")
        first = _link(w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN).activation_url)
        w.shares.update_permissions("s1", changes=[_grant("acme")])
        bearer = _activate(w, first)
        with pytest.raises(PermissionDenied, match="has been used already: ask the data provider for a new"):
            _activate(w, first)
        with httpx.Client(base_url=server.url + ENDPOINT, headers={"Authorization": f"Bearer {bearer}"}) as reader:
            assert [s["name"] for s in reader.get("/shares").json()["items"]] == ["s1"]

        pending = _link(w.recipients.rotate_token("acme", existing_token_expire_in_seconds=3600).activation_url)
        assert w.recipients.get("acme").activation_url == pending
        newest = _link(w.recipients.rotate_token("acme", existing_token_expire_in_seconds=0).activation_url)
        shown = w.recipients.get("acme")
        assert shown.activation_url == newest and [t.activation_url for t in shown.tokens].count(None) == 2
        with pytest.raises(PermissionDenied, match="has expired: ask the data provider for a new"):
            _activate(w, pending)
        page = httpx.get(pending, timeout=10)  # the page still opens; its download says why it fails
        assert page.status_code == 200
        second = _activate(w, newest)
        with httpx.Client(base_url=server.url + ENDPOINT, headers={"Authorization": f"Bearer {second}"}) as reader:
            assert reader.get("/shares").status_code == 200
        assert w.recipients.get("acme").activation_url is None
    finally:
        server.stop()


def _grant(recipient: str):
    from databricks.sdk.service.sharing import PermissionsChange

    return PermissionsChange(principal=recipient, add=["SELECT"])


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_with_an_admin_listener_the_link_points_at_the_recipients_listener(tmp_path, host):
    port = free_port()
    config = {
        "version": 1,
        "catalog": str(tmp_path / "catalog.db"),
        "adminTokens": [ADMIN],
        "adminPort": 0,
        "host": host,
        "port": port,
    }
    app = create_app(parse_config(config, base=tmp_path))
    server, admin = RunningServer(app, port=port), RunningServer(app.state.admin_app)
    try:
        w = _sdk(admin)
        link = _link(w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN).activation_url)
        assert link.startswith(f"http://127.0.0.1:{port}/delta_sharing/activate/")
        page = httpx.get(link, timeout=10)
        assert page.status_code == 200 and "config.share" in page.text
        api = link.replace("/delta_sharing/activate/", "/api/2.1/unity-catalog/public/data_sharing_activation/")
        profile = httpx.get(api, timeout=10).json()
        secrets_used.add(profile["bearerToken"])
        assert profile["endpoint"] == f"http://127.0.0.1:{port}{ENDPOINT}"
        shares = httpx.get(
            profile["endpoint"] + "/shares", headers={"Authorization": f"Bearer {profile['bearerToken']}"}, timeout=10
        )
        assert shares.status_code == 200
        assert httpx.get(admin.url + "/delta_sharing/activate/" + link.rsplit("/", 1)[1]).status_code == 404
    finally:
        admin.stop()
        server.stop()
