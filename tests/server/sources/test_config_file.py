"""A config file with shares, served as a catalog: edits take effect without a restart (polled, or
at once on SIGHUP), a broken edit keeps the last good catalog, and the admin API shows the file
read-only."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml
from secret_scan import secrets_used
from servers import RunningServer, ServeProcess

from deltaport.server import create_app, load_config

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
ADMIN = "config-file-admin-token-0123"
ALICE, BOB = "alice-token-config-file-0123", "bob-token-config-file-0123"
for _secret in (ADMIN, ALICE, BOB):
    secrets_used.add(_secret)


def _config(*shares: str, recipients: dict[str, list[str]] | None = None, **extra) -> dict:
    tokens = {"alice": ALICE, "bob": BOB}
    table = {"name": "t", "location": str(TABLES / "basic_partitioned")}
    return {
        "version": 1,
        "catalogPollSeconds": 0.1,
        "shares": [{"name": s, "schemas": [{"name": "d", "tables": [table]}]} for s in shares],
        "recipients": [
            {"name": r, "tokens": [tokens[r]], "shares": granted} for r, granted in (recipients or {}).items()
        ],
        **extra,
    }


def _write(path: Path, config: dict) -> None:
    path.write_text(yaml.safe_dump(config))


def _shares(url: str, token: str) -> list[str] | int:
    got = httpx.get(f"{url}/delta-sharing/shares", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    return [s["name"] for s in got.json()["items"]] if got.status_code == 200 else got.status_code


def _eventually(check, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture
def served(tmp_path):
    path = tmp_path / "server.yaml"
    _write(path, _config("s1", recipients={"alice": ["s1"]}, adminTokens=[ADMIN]))
    server = RunningServer(create_app(load_config(path)))
    yield server, path
    server.stop()


def test_an_edit_is_served_without_a_restart(served):
    server, path = served
    assert _shares(server.url, ALICE) == ["s1"]
    assert _shares(server.url, BOB) == 401
    _write(path, _config("s1", "s2", recipients={"alice": ["s2"], "bob": ["s1", "s2"]}, adminTokens=[ADMIN]))
    assert _eventually(lambda: _shares(server.url, BOB) == ["s1", "s2"])
    assert _shares(server.url, ALICE) == ["s2"]  # a grant taken away is gone too
    _write(path, _config("s1", recipients={"bob": ["s1"]}, adminTokens=[ADMIN]))  # alice removed
    assert _eventually(lambda: _shares(server.url, ALICE) == 401)


def test_a_reload_says_what_it_changed_and_what_waits_for_a_restart(served, caplog):
    _server, path = served
    caplog.set_level(logging.INFO, logger="deltaport.server")
    _write(path, _config("s1", "s2", recipients={"alice": ["s2"], "bob": ["s1"]}, adminTokens=[ADMIN], port=9))

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    assert _eventually(lambda: said("now serving"))
    assert said("now serving") == [
        "now serving: shares +1 (s2); tables +1 (s2.d.t); recipients +1 (bob); grants +2 (alice→s2, bob→s1); "
        "grants -1 (alice→s1)"
    ]
    assert said("restarts") == [f"config file {path}: port take effect when the server restarts"]
    for record in caplog.records:
        assert ALICE not in record.getMessage() and BOB not in record.getMessage()
    caplog.clear()
    path.write_text(path.read_text() + "\n# a comment changes no share\n")
    time.sleep(0.5)
    assert said("now serving") == []


def test_a_broken_edit_keeps_the_last_good_catalog(served, caplog):
    server, path = served
    caplog.set_level(logging.ERROR, logger="deltaport.server")
    for broken in ("version: 1\nshares: [\n", yaml.safe_dump({**_config("s1"), "sharez": []})):
        path.write_text(broken)
        assert _eventually(lambda: any(str(path) in r.getMessage() for r in caplog.records))
        assert _shares(server.url, ALICE) == ["s1"]
        caplog.clear()
    assert "sharez" in path.read_text()
    _write(path, _config("s1", "s3", recipients={"alice": ["s3"]}, adminTokens=[ADMIN]))
    assert _eventually(lambda: _shares(server.url, ALICE) == ["s3"])


def test_the_admin_api_shows_the_file_and_refuses_writes_naming_it(served):
    server, path = served
    admin = httpx.Client(base_url=server.url + "/api/2.1/unity-catalog", headers={"Authorization": f"Bearer {ADMIN}"})
    assert [s["name"] for s in admin.get("/shares").json()["shares"]] == ["s1"]
    objects = admin.get("/shares/s1", params={"include_shared_data": "true"}).json()["objects"]
    assert [o["shared_as"] for o in objects] == ["d.t"]
    assert [r["name"] for r in admin.get("/recipients").json()["recipients"]] == ["alice"]
    refused = admin.post("/shares", json={"name": "new"})
    assert refused.status_code == 403 and path.name in refused.json()["message"]
    assert refused.json()["error_code"] == "PERMISSION_DENIED"
    _write(path, _config("s1", "s2", recipients={"alice": ["s1"]}, adminTokens=[ADMIN]))
    assert _eventually(lambda: len(admin.get("/shares").json()["shares"]) == 2)


def test_sighup_reloads_at_once(tmp_path):
    config = _config("s1", recipients={"alice": ["s1"]}, catalogPollSeconds=3600)
    server = ServeProcess(config, tmp_path, "--keying-processes", "0")
    try:
        assert _shares(server.url, ALICE) == ["s1"]
        written = yaml.safe_load((tmp_path / "serve.yaml").read_text())
        written["recipients"][0]["shares"] = []
        (tmp_path / "serve.yaml").write_text(yaml.safe_dump(written))
        time.sleep(0.5)
        assert _shares(server.url, ALICE) == ["s1"]  # an hour's poll: not yet
        os.kill(server.proc.pid, signal.SIGHUP)
        assert _eventually(lambda: _shares(server.url, ALICE) == [])
        assert server.proc.poll() is None  # still serving
    finally:
        server.stop()


def test_yaml_recipients_ip_access_lists(tmp_path):
    config = _config("s1", recipients={"alice": ["s1"], "bob": ["s1"]})
    config["recipients"][0]["allowedIpAddresses"] = ["10.0.0.0/8"]
    config["recipients"][1]["allowedIpAddresses"] = ["127.0.0.1", "::1"]
    path = tmp_path / "server.yaml"
    _write(path, config)
    server = RunningServer(create_app(load_config(path)))
    try:
        got = httpx.get(f"{server.url}/delta-sharing/shares", headers={"Authorization": f"Bearer {ALICE}"})
        assert got.status_code == 403 and "127.0.0.1" in got.json()["message"]
        assert _shares(server.url, BOB) == ["s1"]
    finally:
        server.stop()
    config["recipients"][0]["allowedIpAddresses"] = ["10.0.0.300/8"]
    _write(path, config)
    with pytest.raises(Exception, match="allowedIpAddresses.*not an IP address"):
        load_config(path)
