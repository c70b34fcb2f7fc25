"""``deltaport admin`` against a real server over loopback with a catalog database: the whole
lifecycle up to a recipient reading its share, partition filters, the audit log, help on every
command, and failures as one ``error:`` line with exit code 1 (never a traceback, never the token)."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from secret_scan import secrets_used
from typer.testing import CliRunner, Result

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store import CatalogDB
from deltaport.cli.admin import admin_app
from deltaport.cli.admin_shares import partitions_body
from deltaport.server import AuditLog, create_app, parse_config
from deltaport.server.admin.activation import ACTIVATION_API
from server.admin.test_admin_sdk import ADMIN, ENDPOINT, TABLES

runner = CliRunner()


@dataclass
class Server:
    url: str
    catalog: CatalogDB
    audit: AuditLog

    def admin(self, *args: str, token: str | None = ADMIN, code: int = 0) -> Result:
        """``deltaport admin ARGS`` against this server; asserts the exit code and that no output
        holds the admin token or a traceback."""
        env = {"DELTAPORT_HOST": self.url, "DELTAPORT_ADMIN_TOKEN": token}
        return run(*args, env=env, code=code)


def run(*args: str, env: dict[str, str | None], code: int = 0) -> Result:
    result = runner.invoke(admin_app, list(args), env=env)
    assert result.exit_code == code, (args, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and ADMIN not in result.output
    for secret, _ in secrets_used.items():  # noqa: PERF102  # a registry of secrets, not a dict
        assert secret not in result.output
    if code == 1:
        assert result.stdout == "" and result.stderr.startswith("error: "), result.output
        assert result.stderr.count("\n") == 1, result.stderr  # one line
    return result


@pytest.fixture
def server(tmp_path):
    from servers import RunningServer

    config = parse_config(
        {"version": 1, "catalog": str(tmp_path / "catalog.db"), "adminTokens": [ADMIN], "catalogPollSeconds": 0.2},
        base=tmp_path,
    )
    catalog = CatalogDB(config.catalog_url)
    audit = AuditLog([catalog.add_audit_block], flush_every_s=0.05)
    running = RunningServer(create_app(config, catalog=catalog, audit=audit))
    yield Server(running.url, catalog, audit)
    running.stop()
    audit.close()
    catalog.close()


def _get(url: str, bearer: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _activation_link(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("activation link")]
    assert len(lines) == 1, output
    return lines[0].rsplit(" ", 1)[1]


def _activate(server: Server, link: str) -> str:
    """The bearer token from the printed link: its page opens, then its download gives the profile."""
    status, page = _get(link)
    assert status == 200 and "config.share" in page
    status, body = _get(server.url + ACTIVATION_API + "/" + link.rsplit("/", 1)[1])
    assert status == 200, body
    profile = json.loads(body)
    assert profile["endpoint"].endswith(ENDPOINT)
    secrets_used.add(profile["bearerToken"])
    return profile["bearerToken"]


def _tables_setup(server: Server) -> None:
    server.admin("catalogs", "create", "main", "--storage-root", str(TABLES), "--comment", "the corpus")
    server.admin("schemas", "create", "main.sales")
    server.admin("tables", "create", "main.sales.orders", "--location", str(TABLES / "basic_partitioned"))


def test_catalogs_schemas_and_tables(server):
    assert server.admin("catalogs", "list").stdout == "no catalogs\n"
    _tables_setup(server)
    listed = server.admin("catalogs", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "STORAGE", "ROOT", "COMMENT"]
    assert listed[1].split(None, 1)[0] == "main" and str(TABLES) in listed[1] and "the corpus" in listed[1]
    assert json.loads(server.admin("catalogs", "get", "main", "--json").stdout)["storage_root"] == str(TABLES)
    assert "the corpus" in server.admin("catalogs", "get", "main").stdout
    assert "main.sales" in server.admin("schemas", "list", "main").stdout
    assert json.loads(server.admin("--json", "schemas", "get", "main.sales").stdout)["catalog_name"] == "main"
    assert "main.sales.orders" in server.admin("tables", "list", "main.sales").stdout
    described = server.admin("tables", "get", "main.sales.orders").stdout
    letter = next(line for line in described.splitlines() if line.startswith("letter "))
    assert letter.split() == ["letter", "string", "yes", "yes"]  # column, type, nullable, partition
    server.admin("tables", "delete", "main.sales.orders")
    assert server.admin("tables", "list", "main.sales").stdout == "no tables\n"
    server.admin("schemas", "delete", "main.sales")
    server.admin("catalogs", "delete", "main")
    assert json.loads(server.admin("catalogs", "list", "--json").stdout) == {"catalogs": []}


def test_the_whole_lifecycle_up_to_a_recipient_reading_its_share(server):
    _tables_setup(server)
    server.admin("shares", "create", "partners", "--comment", "for partners")
    added = server.admin("shares", "add-table", "partners", "main.sales.orders", "--as", "retail.orders", "--history")
    assert added.stdout == "added table main.sales.orders to share partners\n"
    shown = server.admin("shares", "get", "partners").stdout
    assert "main.sales.orders" in shown and "retail.orders" in shown and "for partners" in shown

    made = server.admin("recipients", "create", "acme", "--comment", "Acme Corp", "--property", "region=eu")
    bearer = _activate(server, _activation_link(made.stdout))
    assert "region=eu" in server.admin("recipients", "get", "acme").stdout
    assert "acme" in server.admin("recipients", "list").stdout
    sharing = server.url + ENDPOINT
    assert json.loads(_get(sharing + "/shares", bearer)[1])["items"] == []

    server.admin("shares", "grant", "partners", "acme")
    assert server.admin("shares", "permissions", "partners").stdout.splitlines()[1].split() == ["acme", "SELECT"]
    assert server.admin("recipients", "permissions", "acme").stdout.splitlines()[1].split() == ["partners", "SELECT"]
    assert [s["name"] for s in json.loads(_get(sharing + "/shares", bearer)[1])["items"]] == ["partners"]
    tables = json.loads(_get(sharing + "/shares/partners/all-tables", bearer)[1])["items"]
    assert [(t["schema"], t["name"]) for t in tables] == [("retail", "orders")]

    server.admin("shares", "revoke", "partners", "acme")
    assert _get(sharing + "/shares/partners", bearer)[0] == 404
    assert server.admin("shares", "permissions", "partners").stdout == "no privilege assignments\n"

    server.admin("shares", "grant", "partners", "acme")
    rotated = server.admin("recipients", "rotate-token", "acme", "--grace-seconds", "0")
    second = _activate(server, _activation_link(rotated.stdout))
    assert _get(sharing + "/shares", bearer)[0] == 401 and _get(sharing + "/shares", second)[0] == 200

    server.admin("shares", "remove", "partners", "main.sales.orders")
    assert "no shared objects" in server.admin("shares", "get", "partners").stdout
    server.admin("recipients", "delete", "acme")
    assert _get(sharing + "/shares", second)[0] == 401
    server.admin("shares", "delete", "partners")
    assert server.admin("shares", "list").stdout == "no shares\n"


def test_recipient_options_reach_the_server(server):
    made = server.admin(
        "recipients",
        "create",
        "props",
        "--expires",
        "2999-01-02T03:04:05Z",
        "--allow-ip",
        "10.0.0.0/8",
        "--allow-ip",
        "::1",
        "--json",
    )
    link = json.loads(made.stdout)["activation_url"]
    assert link
    got = json.loads(server.admin("recipients", "get", "props", "--json").stdout)
    assert got["expiration_time"] == int(dt.datetime(2999, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert got["ip_access_list"] == {"allowed_ip_addresses": ["10.0.0.0/8", "::1"]}
    assert got["activation_url"] == link  # shown until used, as Unity Catalog


def test_partition_options_round_trip(server):
    _tables_setup(server)
    server.admin("shares", "create", "sliced")
    server.admin(
        "shares",
        "add-table",
        "sliced",
        "main.sales.orders",
        "--partition",
        "letter=a",
        "--partition",
        "letter LIKE 'b%'",
        "--partition",
        "letter='x,y'",
        "--partition-property",
        "letter=letter",
        "--cdf",
        "--start-version",
        "1",
    )
    obj = json.loads(server.admin("shares", "get", "sliced", "--json").stdout)["objects"][0]
    by_recipient = {"name": "letter", "op": "EQUAL", "recipient_property_key": "letter"}
    assert obj["partitions"] == [
        {"values": [{"name": "letter", "op": "EQUAL", "value": "a"}, by_recipient]},
        {"values": [{"name": "letter", "op": "LIKE", "value": "b%"}, by_recipient]},
        {"values": [{"name": "letter", "op": "EQUAL", "value": "x,y"}, by_recipient]},
    ]
    assert obj["cdf_enabled"] is True and obj["start_version"] == 1
    shown = server.admin("shares", "get", "sliced").stdout
    assert "letter=a,letter=CURRENT_RECIPIENT('letter') OR letter LIKE b%," in shown

    server.admin("shares", "create", "mine")
    server.admin("shares", "add-table", "mine", "main.sales.orders", "--partition", "letter=CURRENT_RECIPIENT('l')")
    only = json.loads(server.admin("shares", "get", "mine", "--json").stdout)["objects"][0]["partitions"]
    assert only == [{"values": [{"name": "letter", "op": "EQUAL", "recipient_property_key": "l"}]}]


@pytest.mark.parametrize(
    ("partitions", "properties", "expected"),
    [
        ([], [], None),
        (
            ["a=1, b = 2"],
            [],
            [{"values": [{"name": "a", "op": "EQUAL", "value": "1"}, {"name": "b", "op": "EQUAL", "value": "2"}]}],
        ),
        (["a like 'x''s%'"], [], [{"values": [{"name": "a", "op": "LIKE", "value": "x's%"}]}]),
        (
            ["a LIKE current_recipient('k')"],
            [],
            [{"values": [{"name": "a", "op": "LIKE", "recipient_property_key": "k"}]}],
        ),
        ([], ["c=k"], [{"values": [{"name": "c", "op": "EQUAL", "recipient_property_key": "k"}]}]),
        (["a=''"], [], [{"values": [{"name": "a", "op": "EQUAL", "value": ""}]}]),
    ],
)
def test_the_partition_syntax(partitions, properties, expected):
    assert partitions_body(partitions, properties) == expected


@pytest.mark.parametrize("bad", ["letter", "letter=", "letter='a", "letter=a'b", "=a", "letter LIKE"])
def test_a_bad_partition_is_one_error_line_and_nothing_is_sent(server, bad):
    _tables_setup(server)
    server.admin("shares", "create", "s")
    failed = server.admin("shares", "add-table", "s", "main.sales.orders", "--partition", bad, code=1)
    assert "--partition" in failed.stderr
    assert json.loads(server.admin("shares", "get", "s", "--json").stdout).get("objects", []) == []


def test_the_audit_command_pages_filters_and_prints_json_lines(server):
    server.admin("shares", "create", "s1")
    made = server.admin("recipients", "create", "acme")
    bearer = _activate(server, _activation_link(made.stdout))
    server.admin("shares", "grant", "s1", "acme")
    for path in ("/shares", "/shares/s1", "/shares/nope"):
        _get(server.url + ENDPOINT + path, bearer)
    assert server.audit.flush(10)
    lines = server.admin("audit", "--principal", "acme").stdout.splitlines()
    lines = [line for line in lines if line.split()[3] in ("listShares", "getShare")]  # not its activation
    assert [line.split()[1:4] for line in lines] == [
        ["200", "acme", "listShares"],
        ["200", "acme", "getShare"],
        ["404", "acme", "getShare"],
    ]
    assert lines[1].split()[4] == "s1" and "id=" in lines[1]
    events = [json.loads(line) for line in server.admin("audit", "--json", "--share", "S1").stdout.splitlines()]
    assert [(e["action"], e["share"]) for e in events] == [("getShare", "s1")]
    assert server.admin("audit", "--since", "2999-01-01").stdout == ""
    assert len(server.admin("audit", "--until", "2000-01-01T00:00:00+01:00").stdout.splitlines()) == 0

    bulk = [
        AuditEvent(time=1_000 + n, request_id=f"b{n}", principal="bulk", action="queryTable", status=200)
        for n in range(2100)
    ]
    server.catalog.add_audit_events(bulk)
    every = server.admin("audit", "--principal", "bulk", "--json").stdout.splitlines()
    assert [json.loads(line)["request_id"] for line in every] == [f"b{n}" for n in range(2100)]
    assert len(server.admin("audit", "--principal", "bulk", "--limit", "1500").stdout.splitlines()) == 1500
    window = server.admin("audit", "--principal", "bulk", "--since", "1010", "--until", "1012").stdout.splitlines()
    assert [line.split()[0] for line in window] == ["1970-01-01T00:00:01.010Z", "1970-01-01T00:00:01.011Z"]


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every group and command under ``group`` (typer's click objects), by their paths."""
    out: list[tuple[tuple[str, ...], Any]] = [(path, group)]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            out += _commands(command, (*path, name))
        else:
            out.append(((*path, name), command))
    return out


def test_help_on_every_command_exits_0_and_says_what_it_does():
    commands = _commands(typer.main.get_command(admin_app))
    paths = {" ".join(path) for path, _ in commands}
    for expected in ("catalogs create", "shares add-table", "shares permissions", "recipients rotate-token", "audit"):
        assert expected in paths
    assert len(commands) >= 30
    for path, command in commands:
        assert (command.help or "").strip(), path
        result = run(*path, "--help", env={"DELTAPORT_ADMIN_TOKEN": ADMIN})
        assert "Usage:" in result.stdout


def test_the_admin_group_is_a_deltaport_command():
    from deltaport.cli import app

    result = runner.invoke(app, ["admin", "shares", "--help"])
    assert result.exit_code == 0 and "add-table" in result.stdout


def test_failures_are_one_error_line_with_exit_code_1(server):
    unknown = server.admin("shares", "get", "nope", code=1)
    assert "nope" in unknown.stderr
    wrong = "wrong-admin-token-987654"
    secrets_used.add(wrong)
    refused = server.admin("shares", "list", token=wrong, code=1)
    assert "admin token is not valid" in refused.stderr
    assert "no admin token" in server.admin("shares", "list", token=None, code=1).stderr
    assert "is not a time" in server.admin("audit", "--since", "yesterday", code=1).stderr
    assert "CATALOG.SCHEMA.TABLE" in server.admin("tables", "create", "a.b", "--location", "/x", code=1).stderr
    bad_host = run("--host", "localhost:8080", "shares", "list", env={"DELTAPORT_ADMIN_TOKEN": ADMIN}, code=1)
    assert "--host must be a base URL" in bad_host.stderr


def test_a_server_that_is_down_is_named_in_one_line(tmp_path):
    from servers import free_port

    host = f"http://127.0.0.1:{free_port()}"
    down = run("--host", host, "catalogs", "list", env={"DELTAPORT_ADMIN_TOKEN": ADMIN}, code=1)
    assert f"cannot reach the server at {host}" in down.stderr and "--host" in down.stderr
    process = subprocess.run(  # the real process: stderr as a person sees it
        [str(Path(sys.executable).parent / "deltaport"), "admin", "--host", host, "--token", ADMIN, "audit"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 1 and process.stdout == ""
    assert process.stderr.startswith("error: cannot reach the server at") and process.stderr.count("\n") == 1
    assert "Traceback" not in process.stderr and ADMIN not in process.stderr


def test_a_server_without_the_admin_api_is_named(tmp_path):
    from servers import RunningServer

    plain = RunningServer(create_app(parse_config({"version": 1, "shares": []}, base=tmp_path)))
    try:
        failed = run("--host", plain.url, "shares", "list", env={"DELTAPORT_ADMIN_TOKEN": ADMIN}, code=1)
    finally:
        plain.stop()
    assert f"{plain.url} serves no admin API" in failed.stderr


def test_a_redirect_is_refused_and_the_token_stays_with_the_host_it_was_given_for():
    seen: list[str | None] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    class Redirect(Elsewhere):
        def do_GET(self):
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{other.server_port}{self.path}")
            self.end_headers()

    other = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)
    first = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (other, first)]
    for thread in threads:
        thread.start()
    try:
        host = f"http://127.0.0.1:{first.server_port}"
        failed = run("--host", host, "catalogs", "list", env={"DELTAPORT_ADMIN_TOKEN": ADMIN}, code=1)
    finally:
        for s in (other, first):
            s.shutdown()
            s.server_close()
    assert f"the server at {host} redirects to http://127.0.0.1:{other.server_port}/" in failed.stderr
    assert seen == []


def test_share_metadata_and_access_modes_from_the_command_line(server):
    _tables_setup(server)
    made = server.admin(
        "shares",
        "create",
        "vaccine",
        "--display-name",
        "Vaccine Share",
        "--property",
        "owner=vaccine-team",
        "--property",
        "region=us-west-2",
        "--json",
    ).stdout
    assert (json.loads(made)["display_name"], json.loads(made)["properties"]) == (
        "Vaccine Share",
        {"owner": "vaccine-team", "region": "us-west-2"},
    )
    server.admin(
        "shares",
        "add-table",
        "vaccine",
        "main.sales.orders",
        "--access-mode",
        "url",
        "--access-mode",
        "dir",
        "--auxiliary-location",
        "s3://aux/orders",
        "--history",
    )
    (obj,) = json.loads(server.admin("shares", "get", "vaccine", "--json").stdout)["objects"]
    assert (obj["access_modes"], obj["auxiliary_locations"]) == (["url", "dir"], ["s3://aux/orders"])
    shown = server.admin("shares", "get", "vaccine").stdout
    assert "Vaccine Share" in shown and "owner=vaccine-team, region=us-west-2" in shown and "url,dir" in shown
    (table,) = server.catalog.served().shares[0].schemas[0].tables
    assert (table.access_modes, table.auxiliary_locations) == (("url", "dir"), ("s3://aux/orders",))
    refused = server.admin("shares", "add-schema", "vaccine", "main.sales", "--access-mode", "files", code=1)
    assert "unknown access mode(s) ['files']" in refused.stderr
    refused = server.admin("shares", "create", "x", "--display-name", "D" * 256, code=1)
    assert "more than the 255 the protocol allows" in refused.stderr
