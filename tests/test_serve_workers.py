"""`deltaport serve --workers 2`: two server processes on one port, sharing the token secret, the catalog,
metrics and the audit log; a worker that dies is replaced; SIGTERM stops them all."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import psutil
import pytest
import yaml
from servers import ServeProcess

from workers_support import (
    each_on_a_new_connection,
    on_every_worker,
    pids_in_access_log,
    wait_for_workers,
    worker_pids,
)

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"
AUTH = {"Authorization": "Bearer t"}
DELTAPORT = str(Path(sys.executable).parent / "deltaport")
QUERY = "/delta-sharing/shares/s/schemas/d/tables/t/query"


@pytest.fixture
def server(tmp_path):
    config = {
        "version": 1,
        "recipients": [{"name": "a", "tokens": ["t"], "shares": ["s"]}],
        "metricsToken": "scraper",
        "catalogPollSeconds": 3600,  # an edit of the config is seen on SIGHUP only
        "auditLog": str(tmp_path / "audit.jsonl"),
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            }
        ],
    }
    serving = ServeProcess(config, tmp_path, "--workers", "2")
    wait_for_workers(serving)
    yield serving
    serving.stop()


def test_two_workers_answer_on_one_port_and_metrics_and_audit_add_up(server, tmp_path):
    answers = each_on_a_new_connection(40, lambda: httpx.get(f"{server.url}/delta-sharing/shares", headers=AUTH))
    assert [r.status_code for r in answers] == [200] * 40
    time.sleep(0.5)  # the access log line follows the response
    assert pids_in_access_log(server) == {str(pid) for pid in worker_pids(server)}
    scraped = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer scraper"})
    counted = re.search(r'deltaport_requests_total\{method="GET",route="/shares",status="200"\} (\S+)', scraped.text)
    assert counted is not None and float(counted.group(1)) == 40  # both workers' requests
    workers = worker_pids(server)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0
    assert not [pid for pid in workers if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    events = [orjson.loads(line) for line in (tmp_path / "audit.jsonl").read_bytes().splitlines()]
    assert [e["action"] for e in events].count("listShares") == 40


def test_a_page_token_and_a_file_url_of_one_worker_work_on_the_other(server):
    first = httpx.post(f"{server.url}{QUERY}", headers=AUTH, json={"maxFiles": 1})
    assert first.status_code == 200
    lines = [orjson.loads(line) for line in first.text.splitlines()]
    token = next(line["endStreamAction"]["nextPageToken"] for line in lines if "endStreamAction" in line)
    url = next(line["file"]["url"] for line in lines if "file" in line)
    pages = on_every_worker(
        server, lambda: httpx.post(f"{server.url}{QUERY}", headers=AUTH, json={"maxFiles": 1, "pageToken": token})
    )
    assert {r.status_code for r in pages} == {200}, [r.text for r in pages if r.status_code != 200][:1]
    files = on_every_worker(server, lambda: httpx.get(url))
    assert {r.status_code for r in files} == {200}


def test_a_worker_that_dies_is_replaced_and_the_port_keeps_answering(server):
    killed, kept = worker_pids(server)
    os.kill(killed, signal.SIGKILL)
    deadline = time.time() + 30
    while True:
        assert httpx.get(f"{server.url}/delta-sharing/shares", headers=AUTH).status_code == 200
        now = worker_pids(server)
        if len(now) == 2 and killed not in now:
            break
        assert time.time() < deadline, f"no worker replaced {killed}: {now}"
        time.sleep(0.2)
    assert kept in now
    assert f"worker {killed} stopped (exit code -9): starting another" in server.log.read_text()


def test_sighup_reloads_the_config_in_every_worker(server, tmp_path):
    path = tmp_path / "serve.yaml"
    config = yaml.safe_load(path.read_text())
    config["shares"].append({**config["shares"][0], "name": "s2"})
    config["recipients"][0]["shares"].append("s2")
    path.write_text(yaml.safe_dump(config))
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 20
    while True:
        answers = each_on_a_new_connection(
            12, lambda: httpx.get(f"{server.url}/delta-sharing/shares", headers=AUTH).json()["items"]
        )
        if all(items == [{"name": "s"}, {"name": "s2"}] for items in answers):
            break
        assert time.time() < deadline, f"not every worker reloaded: {answers}"
        time.sleep(0.5)
    answers = on_every_worker(server, lambda: httpx.get(f"{server.url}/delta-sharing/shares", headers=AUTH).json())
    assert all(answer["items"] == [{"name": "s"}, {"name": "s2"}] for answer in answers)
    assert server.proc.poll() is None and len(worker_pids(server)) == 2  # SIGHUP stopped no worker


def test_workers_that_cannot_start_stop_serve_with_their_error(tmp_path):
    from servers import free_port

    path = tmp_path / "serve.yaml"
    unreachable = "postgresql://deltaport@127.0.0.1:1/catalog"  # nothing listens on port 1
    path.write_text(yaml.safe_dump({"version": 1, "catalog": unreachable, "host": "127.0.0.1", "port": free_port()}))
    out = subprocess.run(
        [DELTAPORT, "serve", "--config", str(path), "--workers", "2"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr
    assert "error: " in out.stderr and "before serving: stopping" in out.stderr


def test_the_admin_listener_is_served_by_the_workers_too(tmp_path):
    from servers import free_port

    admin_port = free_port()
    share = {
        "name": "s",
        "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
    }
    config = {
        "version": 1,
        "shares": [share],
        "adminPort": admin_port,
        "adminTokens": ["adm"],
        "adminHost": "127.0.0.1",
    }
    serving = ServeProcess(config, tmp_path, "--workers", "2")
    try:
        url = f"http://127.0.0.1:{admin_port}/api/2.1/unity-catalog/shares"
        answers = each_on_a_new_connection(8, lambda: httpx.get(url, headers={"Authorization": "Bearer adm"}))
        assert [r.status_code for r in answers] == [200] * 8
        assert httpx.get(f"{serving.url}/api/2.1/unity-catalog/shares").status_code == 404
    finally:
        serving.stop()


def test_a_catalog_written_through_one_worker_is_served_by_every_worker(tmp_path):
    """SQLite catalog, admin writes (and the activation) through whichever worker answers: every
    worker's own poller sees a grant and a revocation."""
    from typer.testing import CliRunner

    from deltaport.cli.admin import admin_app

    admin = "workers-admin-token"
    config = {"version": 1, "catalog": str(tmp_path / "catalog.db"), "adminTokens": [admin], "catalogPollSeconds": 0.2}
    serving = ServeProcess(config, tmp_path, "--workers", "2")
    env = {"DELTAPORT_HOST": serving.url, "DELTAPORT_ADMIN_TOKEN": admin}

    def run(*args: str) -> str:
        result = CliRunner().invoke(admin_app, list(args), env=env)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    def shares() -> list | int:
        answer = httpx.get(f"{serving.url}/delta-sharing/shares", headers={"Authorization": f"Bearer {bearer}"})
        return [s["name"] for s in answer.json()["items"]] if answer.status_code == 200 else answer.status_code

    def shares_seen() -> list:
        return each_on_a_new_connection(12, shares)

    try:
        run("catalogs", "create", "main", "--storage-root", str(TABLES))
        run("schemas", "create", "main.sales")
        run("tables", "create", "main.sales.orders", "--location", str(TABLES / "basic_partitioned"))
        run("shares", "create", "partners")
        run("shares", "add-table", "partners", "main.sales.orders", "--as", "retail.orders")
        made = run("recipients", "create", "acme")
        link = next(line for line in made.splitlines() if line.startswith("activation link")).rsplit(" ", 1)[1]
        profile = httpx.get(
            f"{serving.url}/api/2.1/unity-catalog/public/data_sharing_activation/{link.rsplit('/', 1)[1]}"
        )
        assert profile.status_code == 200, profile.text
        bearer = profile.json()["bearerToken"]
        run("shares", "grant", "partners", "acme")
        deadline = time.time() + 20
        while shares_seen() != [["partners"]] * 12:
            assert time.time() < deadline, shares_seen()
            time.sleep(0.3)
        run("shares", "revoke", "partners", "acme")
        deadline = time.time() + 20
        while shares_seen() != [[]] * 12:
            assert time.time() < deadline, shares_seen()
            time.sleep(0.3)
        assert all(seen == [] for seen in on_every_worker(serving, shares))
    finally:
        serving.stop()


def test_two_workers_serve_tls_with_one_self_signed_certificate(tmp_path, monkeypatch):
    """ssl.selfSigned with --workers 2: one certificate for the port (a client that trusts it reaches
    every worker), plain http is refused, and the official client reads a table over https."""
    import ssl

    import pandas as pd
    from deltalake import DeltaTable

    config = {
        "version": 1,
        "ssl": {"selfSigned": True},
        "recipients": [{"name": "a", "tokens": ["t"], "shares": ["s"]}],
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            }
        ],
    }
    temporary = tmp_path / "tmp"  # where serve keeps the certificate while it serves
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    serving = ServeProcess(config, tmp_path, "--workers", "2", tls=True)
    try:
        wait_for_workers(serving)
        assert len(list(temporary.glob("deltaport-tls-*/server.key"))) == 1  # one key, the supervisor's
        certificate = ssl.get_server_certificate(("127.0.0.1", serving.port))
        trusted = ssl.create_default_context(cadata=certificate)  # verifies the name (127.0.0.1) too
        shares = f"{serving.url}/delta-sharing/shares"
        answers = on_every_worker(serving, lambda: httpx.get(shares, headers=AUTH, verify=trusted))
        assert {r.status_code for r in answers} == {200}
        with pytest.raises(httpx.TransportError):  # plain http on the https port: no answer, and no harm
            httpx.get(shares.replace("https:", "http:"), headers=AUTH)
        bundle = tmp_path / "server.pem"
        bundle.write_text(certificate)
        profile = tmp_path / "profile.share"
        endpoint = f"{serving.url}/delta-sharing"
        profile.write_text(
            orjson.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": "t"}).decode()
        )
        # in a process of its own: aiohttp (the client's file reads) makes its SSL context once, when
        # first imported, so the bundle must be in the environment before that
        env = {**os.environ, "REQUESTS_CA_BUNDLE": str(bundle), "SSL_CERT_FILE": str(bundle)}
        script = "import delta_sharing, sys; print(delta_sharing.load_as_pandas(sys.argv[1]).to_json(orient='records'))"
        done = subprocess.run(
            [sys.executable, "-c", script, f"{profile}#s.d.t"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        read = pd.read_json(io.StringIO(done.stdout), orient="records")
        expected = DeltaTable(str(TABLES / "basic_partitioned")).to_pandas()
        columns = sorted(expected.columns)
        assert len(read) == len(expected) > 0
        got = sorted(map(str, read[columns].astype(str).values.tolist()))
        assert got == sorted(map(str, expected[columns].astype(str).values.tolist()))
        assert serving.proc.poll() is None and len(worker_pids(serving)) == 2
        assert "Traceback" not in serving.log.read_text()
    finally:
        serving.stop()
    assert serving.proc.wait(30) == 0 and not list(temporary.glob("deltaport-tls-*"))  # and removed at the end
