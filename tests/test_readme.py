"""Every fenced code block of README.md is run (or, for install and bootstrap lines, checked) here.

A block is found by the heading it sits under and its first line's code (``Block.key``: without a
trailing comment): nothing is added to the README for the tests (a reader sees only the snippets,
and other edits to the README need not keep markers in step), and a block whose first line changes
is a changed snippet, whose runner then deserves a look. :func:`test_every_block_has_a_runner`
fails for a block no runner covers, so a new snippet comes with its runner: a test decorated with
``@covers((heading, first_line))``.

Runners run a snippet as written, with real parts: a ``deltaport serve`` process started from the
README's YAML, the Databricks SDK, the ``deltaport`` command, a sharing server on loopback, a local
SparkSession, a moto S3 server. The table the snippets call ``orders`` is written by delta-rs
(readme_support.make_orders_table): the snippets name a ``region`` partition column, version 3, a
change data feed from version 2, versions up to 5 and a time in May 2024, which no corpus table has.
Only the placeholders a reader fills in are replaced, each named where it is:

- ``ADMIN_TOKEN``, ``sha256:<hex digest>``, ``DELTAPORT_ADMIN_TOKEN``: a test admin token;
- ports 8080 and 9090 (and the addresses naming them): free ports, the same in YAML and snippet;
- ``/data``: a temporary folder holding ``orders``;
- ``profile.share``, ``recipient.share``, ``path/to/table``, ``path/or/uri``: files and folders of
  those very names in the folder the snippet runs in (the snippet's text is unchanged);
- ``hint``: a JSON predicate hint (``region = 'EU'``); ``spark``: the session;
  ``version_at_or_after(...)``: a time; ``/mnt/cache``: a temporary staging folder;
- ``s3://bucket/table``: ``orders`` in a moto server, its credentials in the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
import pytest
import yaml
from readme_support import (
    README,
    ROOT,
    Block,
    YamlServe,
    fill,
    make_orders_table,
    ports,
    readme_blocks,
    run_line,
    run_python,
    step,
)
from secret_scan import add_process_output, secrets_used
from servers import RunningServer, free_port

from deltaport.server import create_app, load_config, parse_config

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ADMIN_TOKEN = "readme-admin-token-5f1c2a9e"
READER_TOKEN = "readme-reader-token-8d03b7"
OTHER_TOKEN = "readme-other-token-41aa0c"
secrets_used.add(ADMIN_TOKEN, READER_TOKEN, OTHER_TOKEN)
HINT = json.dumps(
    {
        "op": "equal",
        "children": [
            {"op": "column", "name": "region", "valueType": "string"},
            {"op": "literal", "value": "EU", "valueType": "string"},
        ],
    }
)

BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUNNERS: dict[tuple[str, str], str] = {}  # (heading, first line's start) -> the test that runs it

SERVING = "Serving shares"
PROVIDER = "Running it as a provider's service: a catalog database and the admin API"
READING = "Reading shares"
DIRECTORY = "Directory access: recipients read a table's folder themselves"

# The blocks, by key (Block.key)
PIP = ("deltaport", "pip install deltaport")
BOOTSTRAP = ("deltaport", "bash scripts/demo.sh")
BENCHMARKS = ("Benchmarks", ".venv/bin/python benchmarks/log_replay.py")
SERVE = (
    SERVING,
    "deltaport serve --config server.yaml [--host 0.0.0.0] [--port 8080] [--workers 2] [--keying-processes 1]",
)
RECIPIENTS_YAML = (SERVING, "recipients:")
ADMIN_YAML = (PROVIDER, "version: 1")
ADMIN_SDK = (PROVIDER, "from databricks.sdk import WorkspaceClient")
ADMIN_CLI = (PROVIDER, "export DELTAPORT_HOST=http://127.0.0.1:9090")
READ = (READING, "import deltaport as delta_sharing")
SPARK_STAGED = (READING, "import deltaport")
DIR_YAML = (DIRECTORY, "version: 1")
DIR_READ = (DIRECTORY, "import deltaport as delta_sharing")
SPARK_SOURCE = (READING, "import deltaport.spark")
INSPECT = ("Inspecting a table", "deltaport inspect path/to/table")
CONFORMANCE = ("Checking a server against the protocol", "deltaport conformance --profile recipient.share")
ENGINE = ("The Delta log engine", "from deltaport.delta import DeltaTable")
METRICS_TOKEN = (PROVIDER, 'metricsToken: "sha256:<hex digest>"')
SCRAPE = (PROVIDER, "scrape_configs:")


def covers(key: tuple[str, str]) -> Callable:
    """Register the decorated test as the runner of the block with this key (see ``Block.key``)."""

    def mark(test: Callable) -> Callable:
        RUNNERS[key] = test.__name__
        return test

    return mark


def snippet(heading: str, first_line: str) -> Block:
    found = [b for b in BLOCKS if b.key == (heading, first_line)]
    assert len(found) == 1, f"{len(found)} README blocks under {heading!r} start with {first_line!r}"
    return found[0]


def uncovered(blocks: list[Block], keys) -> list[str]:
    """Blocks no runner covers, blocks that share a key, and runners that cover no block."""
    problems = []
    for b in blocks:
        if b.key not in keys:
            problems.append(f"README.md:{b.line} ({b.heading}: {b.first_line!r}) has no runner")
    for key, count in Counter(b.key for b in blocks).items():
        if count > 1:
            problems.append(f"{count} README blocks have the key {key}: give one another first line")
    for key in keys:
        if not any(b.key == key for b in blocks):
            problems.append(f"the runner for {key} matches no README block")
    return problems


# --- the parts the runners share ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A folder holding ``orders`` (see the module docstring)."""
    root = tmp_path_factory.mktemp("readme")
    make_orders_table(root / "orders")
    return root


def _oracle(world: Path, version: int | None = None) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(str(world / "orders"), version=version).to_pyarrow_table()


class Admin:
    """The README's admin YAML served by ``deltaport serve``: its protocol and admin listeners."""

    def __init__(self, workdir: Path, data: Path) -> None:
        self.port, self.admin_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        self.data = data
        digest = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
        filled = {"sha256:<hex digest>": f"sha256:{digest}", "8080": str(self.port), "9090": str(self.admin_port)}
        text = fill(snippet(*ADMIN_YAML).text, filled)
        self.server = YamlServe(text, workdir, f"{self.url}/health")

    def client(self):
        from databricks.sdk import WorkspaceClient

        return WorkspaceClient(host=self.admin_url, token=ADMIN_TOKEN, auth_type="pat")

    def reset(self) -> None:
        """An empty catalog: no share, recipient, table, schema or catalog."""
        w = self.client()
        for share in w.shares.list_shares():
            w.shares.delete(share.name)
        for recipient in w.recipients.list():
            w.recipients.delete(recipient.name)
        for catalog in w.catalogs.list():
            for schema in w.schemas.list(catalog.name):
                for table in w.tables.list(catalog.name, schema.name):
                    w.tables.delete(table.full_name)
                w.schemas.delete(schema.full_name)
            w.catalogs.delete(catalog.name)


@pytest.fixture(scope="module")
def admin(world, tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    shutil.copytree(world / "orders", data / "orders")
    server = Admin(tmp_path_factory.mktemp("admin"), data)
    yield server
    server.server.stop()
    add_process_output("deltaport serve (README admin YAML)", server.server.log.read_text())  # no token in it


@pytest.fixture(autouse=True)
def _sdk_debug_log_off():
    """The SDK's debug log prints the bodies it receives (credentials among them): the client's
    log, not the server's, kept out of the suite's secret scan (as in test_admin_sdk.py)."""
    import logging

    names = ("databricks.sdk", "urllib3.connectionpool", "httpx")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    yield
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)


class Reading:
    """A sharing server with ``sales.default.orders``, and a folder holding ``profile.share`` and
    ``recipient.share`` for it (where the reading snippets run)."""

    def __init__(self, world: Path, folder: Path) -> None:
        table = {"name": "orders", "location": str(world / "orders"), "id": "id-orders", "historyShared": True}
        config = {
            "version": 1,
            "shares": [{"name": "sales", "schemas": [{"name": "default", "tables": [table]}]}],
            "recipients": [{"name": "reader", "tokens": [READER_TOKEN], "shares": ["sales"]}],
        }
        self.server = RunningServer(create_app(parse_config(config)))
        self.folder = folder
        profile = {"shareCredentialsVersion": 1, "endpoint": f"{self.server.url}/delta-sharing"}
        for name in ("profile.share", "recipient.share"):
            (folder / name).write_text(json.dumps({**profile, "bearerToken": READER_TOKEN}))
        self.url = f"{folder / 'profile.share'}#sales.default.orders"


@pytest.fixture(scope="module")
def reading(world, tmp_path_factory):
    served = Reading(world, tmp_path_factory.mktemp("reader"))
    yield served
    served.server.stop()


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local SparkSession; one the session already runs (tests/spark's) is used and left running."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    running = SparkSession.getActiveSession()
    session = running or (
        SparkSession.builder.master("local[2]")
        .appName("deltaport-readme")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if running is None:
        session.stop()


# --- the README's blocks, each covered ---------------------------------------------------------------


def test_every_block_has_a_runner():
    assert len(BLOCKS) >= 10
    assert uncovered(BLOCKS, RUNNERS) == []
    assert all(callable(globals().get(name)) for name in RUNNERS.values())


def test_a_new_block_without_a_runner_is_found():
    text = README.read_text(encoding="utf-8") + "\n## Later\n\n```python\nprint('new')\n```\n"
    (problem,) = set(uncovered(readme_blocks(text), RUNNERS)) - set(uncovered(BLOCKS, RUNNERS))
    assert problem.endswith("(Later: \"print('new')\") has no runner")
    with pytest.raises(ValueError, match="never closed"):
        readme_blocks("# x\n```bash\nls\n")


def test_snippet_processes_import_this_deltaport(tmp_path):
    """Commands run in other folders than this one still run the deltaport under test."""
    import deltaport

    done = run_line(f'"{sys.executable}" -c "import deltaport; print(deltaport.__file__)"', tmp_path)
    assert done.stdout.strip() == deltaport.__file__


# --- install, bootstrap and benchmark lines: checked, not run -----------------------------------------


@covers(PIP)
def test_pip_lines_name_extras_that_exist():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for line in snippet(*PIP).lines():
        words = shlex.split(line, comments=True)
        assert words[:2] == ["pip", "install"] and len(words) == 3, line
        name, _, rest = words[2].partition("[")
        assert name == project["name"]
        for extra in filter(None, rest.rstrip("]").split(",")):
            assert extra in extras, f"{line}: no extra {extra!r} in pyproject.toml"
    everything = " ".join(extras["all"])
    assert all(part in everything for part in ("server", "spark", "polars")) and "s3" in everything


@covers(BOOTSTRAP)
def test_bootstrap_scripts_exist_and_parse():
    for line in snippet(*BOOTSTRAP).lines():
        words = shlex.split(line, comments=True)
        assert words[0] == "bash" and (ROOT / words[1]).is_file(), line
        assert subprocess.run(["bash", "-n", str(ROOT / words[1])]).returncode == 0


@covers(BENCHMARKS)
def test_benchmark_lines_name_scripts_whose_help_shows_their_flags():
    lines = [shlex.split(line, comments=True) for line in snippet(*BENCHMARKS).lines()]
    assert all(words[0] == ".venv/bin/python" for words in lines)
    scripts = {words[1] for words in lines}
    helps = {
        script: subprocess.Popen(
            [sys.executable, str(ROOT / script), "--help"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for script in scripts
    }
    for script, proc in helps.items():
        out = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 0, f"{script} --help: {out[-500:]}"
        helps[script] = out  # type: ignore[assignment]
    for words in lines:
        for flag in (w for w in words[2:] if w.startswith("--")):
            assert flag in helps[words[1]], f"{words[1]} has no {flag}"


@covers(SERVE)
def test_serve_line_shows_flags_serve_has():
    help_text = run_line("deltaport serve --help", ROOT).stdout
    flags = re.findall(r"--[a-z-]+", snippet(*SERVE).text)
    assert {"--config", "--host", "--port", "--keying-processes"} <= set(flags)
    for flag in flags:
        assert flag in help_text, f"deltaport serve has no {flag}"


# --- YAML: loaded by the server's config loader, its keys in effect ----------------------------------


@covers(RECIPIENTS_YAML)
def test_recipients_yaml_loads_and_its_keys_take_effect(tmp_path, world):
    """The block is what a config has *besides* its shares: here the shares it names, ``sales``
    holding ``orders``. Filled in: the other token's digest and ``tokenSecret``'s value."""
    other = hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()
    secret = "readme-token-secret-0f9e8d7c"
    text = fill(
        snippet(*RECIPIENTS_YAML).text,
        {"<hex digest of another token>": other, 'tokenSecret: "..."': f'tokenSecret: "{secret}"'},
    )
    table = {"name": "orders", "location": str(world / "orders")}
    shares = [{"name": n, "schemas": [{"name": "default", "tables": [table]}]} for n in ("sales", "marketing")]
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "shares": shares}) + text)
    config = load_config(path)
    (alice,) = config.recipients
    assert alice.name == "alice" and list(alice.shares) == ["sales", "marketing"]
    assert config.audit_log == str(tmp_path / "audit.jsonl")
    assert config.storage_options == {"endpoint": "http://127.0.0.1:9000", "allow_http": True}
    assert config.public_url == "https://sharing.example.com" and config.token_secret == secret.encode()

    before_expiry = 1_790_000_000.0  # 2026-09-21: the block's expirationTime (2027-01-01) is later
    app = create_app(config, clock=lambda: before_expiry)
    for token in ("a-plain-token", OTHER_TOKEN):
        inside = _get_shares(app, token, "203.0.113.7")
        assert inside.status_code == 200 and [s["name"] for s in inside.json()["items"]] == ["sales", "marketing"]
        assert _get_shares(app, token, "198.51.100.7").status_code == 403  # outside allowedIpAddresses
    after = create_app(config, clock=lambda: 1_798_761_601.0)  # 2027-01-01T00:00:01Z
    assert _get_shares(after, "a-plain-token", "203.0.113.7").status_code == 401


def _get_shares(app, token: str, client_ip: str) -> httpx.Response:
    """GET /shares from ``client_ip`` (the app called in process, as from that address)."""

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(client_ip, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://sharing") as client:
            return await client.get("/delta-sharing/shares", headers={"Authorization": f"Bearer {token}"})

    return asyncio.run(get())


@covers(ADMIN_YAML)
def test_admin_yaml_loads_and_serves_where_it_says(admin):
    """Filled in: the admin token's digest, and free ports for 8080 and 9090."""
    config = load_config(admin.server.log.parent / "server.yaml")
    assert (config.port, config.admin_port, config.admin_host) == (admin.port, admin.admin_port, "127.0.0.1")
    assert config.admin_token_hashes == (hashlib.sha256(ADMIN_TOKEN.encode()).digest(),)
    assert config.catalog_url.endswith(str(admin.server.log.parent / "catalog.db"))
    assert config.public_url == admin.url and config.trusted_proxies == ("10.0.0.0/8",)
    assert (config.activation_link_ttl_seconds, config.catalog_poll_seconds) == (604800, 1.0)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert httpx.get(f"{admin.admin_url}/api/2.1/unity-catalog/shares", headers=headers).status_code == 200
    assert httpx.get(f"{admin.url}/api/2.1/unity-catalog/shares", headers=headers).status_code == 404


# --- administering: the SDK and `deltaport admin` against the served YAML ----------------------------


def _read_as(admin: Admin, activation_url: str) -> pa.Table:
    """Activate a link (on the protocol's listener, as a recipient does) and read what it shares."""
    import deltaport

    token = activation_url.rsplit("/", 1)[1]
    secrets_used.add(token)
    page = httpx.get(activation_url)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    credential = httpx.get(f"{admin.url}/api/2.1/unity-catalog/public/data_sharing_activation/{token}").json()
    secrets_used.add(credential["bearerToken"])
    profile = admin.data / f"{token[-8:]}.share"
    profile.write_text(json.dumps(credential))
    return deltaport.load_as_arrow(f"{profile}#partners.retail.orders")


@covers(ADMIN_SDK)
def test_admin_sdk_block(admin, world):
    """Run against the YAML block's server. Filled in: ``ADMIN_TOKEN``, ``/data`` and the admin
    listener's port. The snippet must name the listener the YAML block puts the admin API on."""
    code = snippet(*ADMIN_SDK).text
    config = yaml.safe_load(snippet(*ADMIN_YAML).text)
    (host,) = re.findall(r'host="([^"]+)"', code)
    assert ports(host) == [config.get("adminPort", config.get("port", 80))], "the SDK must reach the admin API"
    assert config["adminHost"] in host and ports(config["publicUrl"]) == [config["port"]]

    admin.reset()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # it prints a live activation link: kept out of the logs
        filled = fill(code, {"/data": str(admin.data), "127.0.0.1:9090": f"127.0.0.1:{admin.admin_port}"})
        steps = run_python(filled, {"ADMIN_TOKEN": ADMIN_TOKEN})
    acme = step(steps, "acme = ").bound["acme"]
    assert out.getvalue().strip() == acme.activation_url
    w = admin.client()
    share = w.shares.get("partners", include_shared_data=True)
    assert [(o.name, o.shared_as) for o in share.objects] == [("main.sales.orders", "retail.orders")]
    assert w.recipients.get("acme").name == "acme"
    granted = w.shares.share_permissions("partners").privilege_assignments
    assert [(p.principal, [str(x.value) for x in p.privileges]) for p in granted] == [("acme", ["SELECT"])]
    read = _read_as(admin, acme.activation_url)
    assert sorted(read["order_id"].to_pylist()) == sorted(_oracle(world)["order_id"].to_pylist())


@covers(ADMIN_CLI)
def test_admin_cli_block(admin, world):
    """Each line run by bash against the YAML block's server, after the catalog the SDK block made
    (catalog, schema, table). Filled in: the admin listener's port; the token in the environment."""
    block = snippet(*ADMIN_CLI)
    export, *commands = fill(block.text, {"127.0.0.1:9090": f"127.0.0.1:{admin.admin_port}"}).splitlines()
    audit = [c for c in commands if c.startswith("deltaport admin audit")]
    setup = [c for c in commands if c not in audit]
    admin.reset()
    w = admin.client()
    w.catalogs.create("main", storage_root=str(admin.data))
    w.schemas.create("sales", "main")
    _create_orders(w, str(admin.data / "orders"))
    env = {"DELTAPORT_ADMIN_TOKEN": ADMIN_TOKEN}
    done = run_line("\n".join(["set -e", export, *setup]), admin.data, env)
    assert done.returncode == 0, done.stderr
    links = re.findall(r"https?://\S+/delta_sharing/activate/\S+", done.stdout)
    assert len(links) == 1 and links[0].startswith(admin.url)
    share = w.shares.get("partners", include_shared_data=True)
    (orders,) = share.objects
    assert orders.shared_as == "retail.orders" and orders.partitions
    assert w.recipients.get("acme").properties_kvpairs.properties["region"] == "emea"
    read = _read_as(admin, links[0])  # the slice: only acme's region
    expected = [r["order_id"] for r in _oracle(world).to_pylist() if r["region"] == "emea"]
    assert expected and sorted(read["order_id"].to_pylist()) == sorted(expected)

    printed = run_line("\n".join(["set -e", export, *audit]), admin.data, env)
    assert printed.returncode == 0, printed.stderr
    events = printed.stdout.splitlines()
    assert events and all(" acme " in line for line in events)
    assert any("queryTable" in line for line in events)


def _create_orders(w, location: str) -> None:
    from databricks.sdk.service.catalog import DataSourceFormat, TableType

    w.tables.create(
        name="orders",
        catalog_name="main",
        schema_name="sales",
        table_type=TableType.EXTERNAL,
        data_source_format=DataSourceFormat.DELTA,
        storage_location=location,
    )


# --- reading: the connector and PySpark against a sharing server -------------------------------------


def _rows(table: pa.Table, *columns: str) -> list[tuple]:
    return sorted(zip(*(table[c].to_pylist() for c in columns)))


def _oracle_changes(world: Path, start: int) -> list[tuple]:
    from deltalake import DeltaTable

    feed = pa.table(DeltaTable(str(world / "orders")).load_cdf(starting_version=start).read_all())
    return _rows(feed, "order_id", "_change_type", "_commit_version")


@pytest.fixture(scope="module")
def directory(world, tmp_path_factory):
    """The directory-access YAML served by ``deltaport serve`` (its own process: delta-rs holds the
    GIL while it waits for bytes), ``/data`` being the folder of ``orders``, and a ``profile.share``
    for it in the folder the reading snippet runs in."""
    workdir = tmp_path_factory.mktemp("directory")
    port = free_port()
    filled = {"/data": str(world), "8080": str(port), "a-plain-token": READER_TOKEN}
    server = YamlServe(fill(snippet(*DIR_YAML).text, filled), workdir, f"http://127.0.0.1:{port}/health")
    endpoint = f"http://127.0.0.1:{port}/delta-sharing"
    profile = {"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": READER_TOKEN}
    (workdir / "profile.share").write_text(json.dumps(profile))
    yield workdir, endpoint
    server.stop()
    add_process_output("deltaport serve (README directory YAML)", server.log.read_text())


@covers(DIR_YAML)
def test_directory_yaml_offers_the_folder(directory):
    _, endpoint = directory
    headers = {"Authorization": f"Bearer {READER_TOKEN}"}
    (item,) = httpx.get(f"{endpoint}/shares/sales/all-tables", headers=headers).json()["items"]
    assert item["accessModes"] == ["url", "dir"] and item["location"] == "s3://deltaport/sales/default/orders"
    answer = httpx.post(
        f"{endpoint}/shares/sales/schemas/default/tables/orders/temporary-table-credentials", headers=headers
    )
    creds = answer.json()["credentials"]
    secrets_used.add(creds["awsTempCredentials"]["secretAccessKey"], creds["awsTempCredentials"]["sessionToken"])
    assert answer.status_code == 200 and 3500_000 < creds["expirationTime"] - time.time() * 1000 <= 3600_000


@covers(DIR_READ)
def test_directory_read_block(directory, world, monkeypatch):
    """Run where ``profile.share`` is; both reads against delta-rs reading the folder itself."""
    monkeypatch.chdir(directory[0])
    steps = run_python(snippet(*DIR_READ).text, {})
    expected = sorted(_oracle(world)["order_id"].to_pylist())
    creds = step(steps, "creds = ").bound["creds"]
    secrets_used.add(creds.values["secretAccessKey"], creds.values["sessionToken"])
    assert creds.location == "s3://deltaport/sales/default/orders"
    assert sorted(step(steps, "table = ").bound["table"]["order_id"].to_pylist()) == expected
    assert sorted(step(steps, "orders = ").bound["orders"]["order_id"].to_pylist()) == expected


@covers(READ)
def test_reading_block(reading, world, monkeypatch):
    """Run where ``profile.share`` is; ``hint`` is ``region = 'EU'``. Each result against delta-rs."""
    monkeypatch.chdir(reading.folder)
    steps = run_python(snippet(*READ).text, {"hint": HINT})
    latest, v3 = _oracle(world), _oracle(world, 3)
    df = step(steps, "df = delta_sharing.load_as_pandas(url)").bound["df"]
    assert sorted(df["order_id"]) == sorted(latest["order_id"].to_pylist())
    old = step(steps, "df = delta_sharing.load_as_pandas(url, version=3)").bound["df"]
    assert sorted(old["order_id"]) == sorted(v3["order_id"].to_pylist()) != sorted(df["order_id"])
    table = step(steps, "table = ").bound["table"]
    assert set(table["region"].to_pylist()) == {"EU"}
    eu = [r["order_id"] for r in latest.to_pylist() if r["region"] == "EU"]
    assert sorted(table["order_id"].to_pylist()) == sorted(eu)
    frame = step(steps, "frame = ").bound["frame"]
    assert sorted(frame["order_id"].to_list()) == sorted(latest["order_id"].to_pylist())
    reader = step(steps, "reader = ").bound["reader"]
    assert sorted(reader.read_all()["order_id"].to_pylist()) == sorted(latest["order_id"].to_pylist())
    changes = step(steps, "changes = ").bound["changes"]
    got = sorted(zip(changes["order_id"], changes["_change_type"], changes["_commit_version"]))
    assert got == _oracle_changes(world, 2) and {c for _, c, _ in got} >= {"update_postimage", "delete"}


@covers(SPARK_STAGED)
def test_spark_staged_block(reading, world, spark, tmp_path):
    """``url`` is the profile's absolute path (Spark's Python workers do not run in this folder)
    and its table; ``/mnt/cache`` is a temporary folder."""
    code = fill(snippet(*SPARK_STAGED).text, {"/mnt/cache": str(tmp_path / "cache")})
    steps = run_python(code, {"spark": spark, "url": reading.url})
    latest = _oracle(world)
    df = step(steps, "df = deltaport.load_as_spark(url)").bound["df"]
    assert sorted(r.order_id for r in df.collect()) == sorted(latest["order_id"].to_pylist())
    feed = step(steps, "feed = ").bound["feed"].collect()
    assert sorted((r.order_id, r._change_type, r._commit_version) for r in feed) == _oracle_changes(world, 2)
    old = step(steps, "df = deltaport.spark.read_table(spark, url, versionAsOf=3").bound["df"]
    assert sorted(r.order_id for r in old.collect()) == sorted(_oracle(world, 3)["order_id"].to_pylist())
    assert any((tmp_path / "cache").rglob("*.parquet")), "the versionAsOf read staged its files there"
    eu = step(steps, "df = deltaport.spark.read_table(spark, url, where=").bound["df"].collect()
    assert {r.region for r in eu} == {"EU"}
    assert sorted(r.order_id for r in eu) == sorted(r["order_id"] for r in latest.to_pylist() if r["region"] == "EU")
    fewer = step(steps, "eu = deltaport.spark.read_table(spark, url, columns=").bound["eu"]
    assert fewer.columns == ["order_id", "amount"]
    expected = sorted((r["order_id"], r["amount"]) for r in latest.to_pylist() if r["amount"] > 10)
    assert expected and sorted((r.order_id, r.amount) for r in fewer.collect()) == expected


@covers(SPARK_SOURCE)
def test_spark_data_source_block(reading, world, spark, tmp_path):
    """``url`` as above; the stream is then run once to its end."""
    steps = run_python(snippet(*SPARK_SOURCE).text, {"spark": spark, "url": reading.url})
    old = step(steps, "df = ").bound["df"]
    assert sorted(r.order_id for r in old.collect()) == sorted(_oracle(world, 3)["order_id"].to_pylist())
    stream = step(steps, "stream = ").bound["stream"]
    assert stream.isStreaming
    query = (
        stream.writeStream.format("memory")
        .queryName("readme_orders")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = spark.sql("SELECT order_id FROM readme_orders").collect()
    assert sorted(r.order_id for r in rows) == sorted(_oracle(world)["order_id"].to_pylist())


# --- inspecting, conformance, the engine ---------------------------------------------------------


@covers(INSPECT)
def test_inspect_block(world, tmp_path, moto_server):
    """Each line run by bash where ``path/to/table`` is ``orders``; ``s3://bucket/table`` is
    ``orders`` put into a moto server, its endpoint and credentials in the environment."""
    shutil.copytree(world / "orders", tmp_path / "path" / "to" / "table")  # commit times kept
    lines = snippet(*INSPECT).lines()
    out = {}
    for line in lines:
        env = _moto_env(moto_server, world) if "s3://" in line else {}
        done = run_line(line, tmp_path, env)
        assert done.returncode == 0, f"{line}: {done.stderr}"
        out[line.split("#")[0].strip()] = done.stdout
    summary = out["deltaport inspect path/to/table"]
    assert re.search(r"^version\s+5\b", summary, re.M) and re.search(r"^partitions\s+region$", summary, re.M)
    assert json.loads(out["deltaport inspect path/to/table --version 3 --json"])["version"] == 3
    at = out["deltaport inspect path/to/table --timestamp 2024-05-01T00:00:00Z"]
    assert re.search(r"^version\s+2 ", at, re.M)
    files = [json.loads(line) for line in out["deltaport inspect path/to/table --files"].splitlines()]
    assert sorted(f["add"]["path"] for f in files) == sorted(_live_paths(world))
    changes = [json.loads(line) for line in out["deltaport inspect path/to/table --changes 2..5"].splitlines()]
    assert [c["commit"]["version"] for c in changes if "commit" in c] == [2, 3, 4, 5]
    assert any("cdc" in c for c in changes) and any("remove" in c for c in changes)
    s3 = out["deltaport inspect s3://bucket/table"]
    assert re.search(r"^table\s+s3://bucket/table", s3, re.M) and re.search(r"^version\s+5\b", s3, re.M)


def _moto_env(moto, world: Path) -> dict[str, str]:
    moto.upload_dir("bucket", "table", world / "orders")
    return {
        "AWS_ACCESS_KEY_ID": moto.access_key,
        "AWS_SECRET_ACCESS_KEY": moto.secret_key,
        "AWS_REGION": moto.region,
        "AWS_ENDPOINT": moto.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def _live_paths(world: Path) -> list[str]:
    from deltalake import DeltaTable

    return [a["path"] for a in pa.table(DeltaTable(str(world / "orders")).get_add_actions()).to_pylist()]


@covers(CONFORMANCE)
def test_conformance_block(reading):
    """Each line run by bash where ``recipient.share`` is (a profile of the reading server)."""
    first, second = snippet(*CONFORMANCE).lines()
    done = run_line(first, reading.folder)
    assert done.returncode == 0, done.stdout[-2000:]
    results = [line.split()[0] for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL", "SKIP"))]
    assert "PASS" in results and "FAIL" not in results
    done = run_line(second, reading.folder)
    assert done.returncode == 0, done.stdout[-2000:]
    checks = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(checks) == len(results)


@covers(ENGINE)
def test_engine_block(world, tmp_path, monkeypatch):
    """Run where ``path/or/uri`` is ``orders``; ``hint`` is ``region = 'EU'``; the ``...`` given to
    ``version_at_or_after`` is ``2024-05-01T12:00:00Z``."""
    shutil.copytree(world / "orders", tmp_path / "path" / "or" / "uri")
    monkeypatch.chdir(tmp_path)
    code = fill(
        snippet(*ENGINE).text,
        {"version_at_or_after(...)": 'version_at_or_after("2024-05-01T12:00:00Z")'},
    )
    steps = run_python(code, {"hint": HINT})
    live = _live_paths(world)
    version, _protocol, metadata, num_files, size = step(steps, "snap.version, ").value
    assert (version, num_files, metadata.partition_columns) == (5, len(live), ("region",))
    assert size == sum((world / "orders" / p).stat().st_size for p in live)
    assert step(steps, "snap.files()").value.num_rows == len(live)
    assert step(steps, "for add in").bound["add"]["path"] in live
    eu = list(step(steps, "scan(").value)
    assert eu and {a["partitionValues"]["region"] for a in eu} == {"EU"}
    assert [c.version for c in step(steps, "table.changes(2, 5)").value] == [2, 3, 4, 5]
    assert step(steps, "table.version_at_or_before").value == (2, 3)


METRICS_SECRET = "readme-metrics-token-5c1d2e"
secrets_used.add(METRICS_SECRET)


def _metrics_server(world: Path, tmp_path: Path) -> tuple[RunningServer, Path]:
    """A server configured with the README's metricsToken line (its digest filled in) and a recipient."""
    digest = hashlib.sha256(METRICS_SECRET.encode()).hexdigest()
    line = fill(snippet(*METRICS_TOKEN).text, {"<hex digest>": digest})
    table = {"name": "orders", "location": str(world / "orders")}
    config = {
        "version": 1,
        "shares": [{"name": "sales", "schemas": [{"name": "default", "tables": [table]}]}],
        "recipients": [{"name": "acme", "tokens": [OTHER_TOKEN], "shares": ["sales"]}],
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(config) + line)
    return RunningServer(create_app(load_config(path))), path


@covers(METRICS_TOKEN)
def test_metrics_token_line_opens_metrics_to_that_token_only(world, tmp_path):
    server, _ = _metrics_server(world, tmp_path)
    try:
        scrape = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_SECRET}"})
        assert scrape.status_code == 200 and "deltaport_" in scrape.text
        for headers in ({}, {"Authorization": f"Bearer {OTHER_TOKEN}"}):
            refused = httpx.get(server.url + "/metrics", headers=headers)
            assert refused.status_code == 401 and refused.json()["errorCode"]
    finally:
        server.stop()


@covers(SCRAPE)
def test_scrape_config_reads_metrics_as_prometheus_would(world, tmp_path):
    """Prometheus itself does not run here: its config is parsed, its admin target is the admin YAML's
    adminPort, and a scrape is made as its ``authorization.credentials_file`` makes it."""
    jobs = yaml.safe_load(snippet(*SCRAPE).text)["scrape_configs"]
    assert [job["job_name"] for job in jobs] == ["deltaport", "deltaport-admin"]
    admin_port = yaml.safe_load(snippet(*ADMIN_YAML).text)["adminPort"]
    assert jobs[1]["static_configs"][0]["targets"] == [f"127.0.0.1:{admin_port}"]
    server, _ = _metrics_server(world, tmp_path)
    try:
        for job in jobs:
            credentials = tmp_path / Path(job["authorization"]["credentials_file"]).name
            credentials.write_text(METRICS_SECRET + "\n")
            token = credentials.read_text().strip()  # as Prometheus reads the file
            scrape = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {token}"})
            assert scrape.status_code == 200 and "# TYPE" in scrape.text
    finally:
        server.stop()
