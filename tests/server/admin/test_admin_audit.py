"""Admin writes and activations are audit events, as protocol requests are: in the `auditLog` file
and in the catalog database (read back through the admin API), never with a token."""

from __future__ import annotations

import httpx
import orjson
import test_admin_sdk as sdk_tests
from databricks.sdk import WorkspaceClient
from databricks.sdk.service.sharing import AuthenticationType
from servers import RunningServer
from test_admin_sdk import ADMIN, _activate, _add_table, _grant, _sharing, _table_setup

from deltaport.catalog.store import CatalogDB
from deltaport.server import create_app, parse_config

_sdk_debug_log_off = sdk_tests._sdk_debug_log_off  # fixture


def _server(tmp_path, **extra):
    config = parse_config(
        {"version": 1, "catalog": "catalog.db", "adminTokens": [ADMIN], "auditLog": "audit.jsonl", **extra},
        base=tmp_path,
    )
    app = create_app(config)
    return app, RunningServer(app)


def test_admin_writes_activations_and_reads_are_audited_in_the_file_and_the_catalog(tmp_path):
    app, server = _server(tmp_path)
    try:
        w = WorkspaceClient(host=server.url, token=ADMIN, auth_type="pat")
        full = _table_setup(w)
        w.shares.create("partners")
        _add_table(w, "partners", full, shared_as="retail.orders")
        made = w.recipients.create("acme", authentication_type=AuthenticationType.TOKEN)
        bearer = _activate(w, made.activation_url)
        _grant(w, "partners", "acme")
        with _sharing(server, bearer) as recipient:
            assert recipient.post("/shares/partners/schemas/retail/tables/orders/query", json={}).status_code == 200
        w.recipients.delete("acme")
        assert app.state.audit.flush(10)
        text = (tmp_path / "audit.jsonl").read_text()
        events = [orjson.loads(line) for line in text.splitlines()]
        mine = [(e["principal"], e["action"], e.get("detail", {}).get("name")) for e in events]
        assert ("admin", "createCatalog", "main") in mine
        assert ("admin", "createSchema", "main.sales") in mine
        assert ("admin", "createTable", full) in mine
        assert ("admin", "createShare", "partners") in mine
        assert ("admin", "updateShare", "partners") in mine
        assert ("admin", "createRecipient", "acme") in mine
        assert ("acme", "activateRecipient", None) in mine
        assert ("admin", "updateSharePermissions", "partners") in mine
        assert ("acme", "queryTable", None) in mine
        assert ("admin", "deleteRecipient", "acme") in mine
        assert all(e["request_id"] and e["status"] == 200 for e in events)
        assert bearer not in text and made.activation_url.rsplit("/", 1)[1] not in text and ADMIN not in text
        stored = w.api_client.do("GET", "/api/2.1/unity-catalog/audit-events", query={"action": "activateRecipient"})
        assert [(e["principal"], e["action"]) for e in stored["events"]] == [("acme", "activateRecipient")]
    finally:
        server.stop()


def test_a_separate_admin_listener_has_request_ids_and_audit_events(tmp_path):
    app, server = _server(tmp_path, adminPort=0)
    admin = RunningServer(app.state.admin_app)
    try:
        w = WorkspaceClient(host=admin.url, token=ADMIN, auth_type="pat")
        w.shares.create("solo")
        answer = w.api_client.do("GET", "/api/2.1/unity-catalog/shares/solo", response_headers=["X-Request-Id"])
        assert answer.get("X-Request-Id")
        assert app.state.audit.flush(10)
        events = [orjson.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        (created,) = [e for e in events if e["action"] == "createShare"]
        assert created["request_id"] and created["principal"] == "admin" and created["detail"] == {"name": "solo"}
    finally:
        admin.stop()
        server.stop()


def test_at_shutdown_the_last_events_are_stored_and_the_catalog_the_app_opened_is_closed(tmp_path):
    """The audit log writes what it holds, then the catalog database closes (SQLite then folds its
    write-ahead log into the database file and removes it)."""
    _, server = _server(tmp_path)
    try:
        made = httpx.post(
            server.url + "/api/2.1/unity-catalog/shares",
            json={"name": "late"},
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        assert made.status_code == 200
        assert (tmp_path / "catalog.db-wal").exists()
    finally:
        server.stop()
    assert not server.thread.is_alive()
    assert not (tmp_path / "catalog.db-wal").exists()
    stored = CatalogDB(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        assert [(e.action, e.detail) for _, e in stored.audit_events()] == [("createShare", {"name": "late"})]
    finally:
        stored.close()
