"""Asynchronous queries over a real server on loopback: ``asyncquery=true`` answers a queryId when
planning is slow, polling ``…/queries/{queryId}`` gives the same files as a synchronous query,
idempotency keys, ids of other recipients and tables, expiry, failed planning, and state kept in a
catalog database across a restart."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from conftest import TABLES
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.catalog.model import ObjectType, SharedObject
from deltaport.catalog.store import CatalogDB, ObjectUpdate, PermissionChange
from deltaport.server import create_app, parse_config
from deltaport.storage import store_for

ALICE = "async-token-alice-3e81"
CAROL = "async-token-carol-90d2"
SECRET = "async-token-secret-7b4c"
secrets_used.add(ALICE, CAROL, SECRET, label="an async query test's token")
P = "/delta-sharing/shares/s/schemas/d/tables"
ASYNC = {"delta-sharing-capabilities": "asyncquery=true"}


def _config(**extra) -> dict:
    tables = [
        {"name": "t", "location": str(TABLES / "basic_partitioned"), "id": "id-t", "historyShared": True},
        {"name": "u", "location": str(TABLES / "cdf-table"), "id": "id-u"},
        {"name": "broken", "location": str(TABLES / "crc-malformed"), "id": "id-broken"},
    ]
    return {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "recipients": [
            {"name": "alice", "tokens": [ALICE], "shares": ["s"]},
            {"name": "carol", "tokens": [CAROL], "shares": ["s"]},
        ],
        "tokenSecret": SECRET,
        **extra,
    }


class Clock:
    """Real time plus an offset the test moves."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def slow_store(inner, delay: float, slow: threading.Event):
    """A table's real store (its URL signer still applies) whose listings take ``delay`` seconds
    each while ``slow`` is set."""
    listing = inner.list_dir

    def list_dir(*args, **kwargs):
        if slow.is_set():
            time.sleep(delay)
        return listing(*args, **kwargs)

    inner.list_dir = list_dir
    return inner


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock) -> Iterator[RunningServer]:
    """Planning always outlasts the threshold: 0 ms."""
    running = RunningServer(create_app(parse_config(_config(asyncQueryThresholdMs=0)), clock=clock))
    yield running
    running.stop()


def _client(server: RunningServer, token: str = ALICE) -> httpx.Client:
    return httpx.Client(base_url=server.url + P, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _lines(answer: httpx.Response) -> list[dict]:
    assert answer.status_code == 200, answer.text
    return [orjson.loads(line) for line in answer.text.splitlines() if line.strip()]


def _submit(c: httpx.Client, table: str = "t", **body) -> str:
    answer = c.post(f"/{table}/query", json=body, headers=ASYNC)
    lines = _lines(answer)
    assert answer.headers["delta-sharing-capabilities"] == "asyncquery=true"
    assert len(lines) == 1 and lines[0]["queryStatus"]["status"] == "pending", lines
    return lines[0]["queryStatus"]["queryId"]


def _poll(c: httpx.Client, query_id: str, table: str = "t", seconds: float = 20, **body) -> httpx.Response:
    """The first answer of ``…/queries/{id}`` that is not pending."""
    deadline = time.monotonic() + seconds
    while True:
        answer = c.post(f"/{table}/queries/{query_id}", json=body)
        lines = _lines(answer)
        if lines[0].get("queryStatus", {}).get("status") != "pending":
            return answer
        assert time.monotonic() < deadline, "the query stayed pending"
        time.sleep(0.05)


def _files(answer: httpx.Response) -> list[tuple]:
    """The files of a query's answer, without their (per-request) URLs."""
    return sorted(
        (f["file"]["id"], f["file"]["size"], orjson.dumps(f["file"]["partitionValues"], option=orjson.OPT_SORT_KEYS))
        for f in _lines(answer)
        if "file" in f
    )


def test_polling_gives_what_a_synchronous_query_gives(server):
    with _client(server) as c:
        query_id = _submit(c, predicateHints=["letter = 'a'"])
        done = _poll(c, query_id)
        sync = c.post("/t/query", json={"predicateHints": ["letter = 'a'"]})
    assert _files(done) == _files(sync) and len(_files(sync)) >= 1
    lines = _lines(done)
    assert "protocol" in lines[0] and "metaData" in lines[1]
    assert done.headers["delta-table-version"] == sync.headers["delta-table-version"]


def test_a_poll_pages_with_max_files_and_page_token(server):
    with _client(server) as c:
        query_id = _submit(c)
        first = _poll(c, query_id, maxFiles=2)
        token = _lines(first)[-1]["endStreamAction"]["nextPageToken"]
        second = c.post(f"/t/queries/{query_id}", json={"maxFiles": 100, "pageToken": token})
        everything = c.post("/t/query", json={})
    assert len(_files(first)) == 2
    assert sorted(_files(first) + _files(second)) == _files(everything)


def test_a_cached_table_answers_at_once_within_the_threshold():
    """With the default threshold, a table already planned (its snapshot cached) is answered as a
    synchronous query; a slow first plan goes asynchronous."""
    slow = threading.Event()

    def opener(location, options):
        return slow_store(store_for(location, options), 0.5, slow)

    running = RunningServer(create_app(parse_config(_config(asyncQueryThresholdMs=200)), store=opener))
    try:
        with _client(running) as c:
            slow.set()
            query_id = _submit(c)  # the first plan lists the log slowly: past the threshold
            assert _files(_poll(c, query_id))
            slow.clear()
            answer = c.post("/t/query", json={}, headers=ASYNC)
            assert "queryStatus" not in answer.text and _files(answer) == _files(c.post("/t/query", json={}))
            assert "asyncquery" not in answer.headers["delta-sharing-capabilities"]
    finally:
        running.stop()


def test_an_idempotency_key_maps_a_retry_to_the_same_query(server):
    with _client(server) as c, _client(server, CAROL) as carol:
        first = _submit(c, idempotencyKey="k-1", limitHint=5)
        assert _submit(c, idempotencyKey="k-1", limitHint=5) == first
        assert _submit(c, idempotencyKey="k-2", limitHint=5) != first
        assert _submit(carol, idempotencyKey="k-1", limitHint=5) != first  # another recipient's key
        assert _submit(c, "u", idempotencyKey="k-1", limitHint=5) != first  # another table
        other = c.post("/t/query", json={"idempotencyKey": "k-1", "limitHint": 6}, headers=ASYNC)
    assert other.status_code == 400, other.text
    assert other.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "idempotencyKey" in other.json()["message"] and "other parameters" in other.json()["message"]


def test_ids_of_other_recipients_or_tables_are_unknown(server):
    with _client(server) as c, _client(server, CAROL) as carol:
        query_id = _submit(c)
        made_up = c.post("/t/queries/not-an-id", json={})
        answers = {
            "made up": made_up,
            "altered": c.post(f"/t/queries/{query_id[:-2]}xx", json={}),
            "carol's poll": carol.post(f"/t/queries/{query_id}", json={}),
            "another table": c.post(f"/u/queries/{query_id}", json={}),
        }
        assert _poll(c, query_id).status_code == 200  # alice, on its table, still reads it
    for what, answer in answers.items():
        assert answer.status_code == 404, what
        assert answer.json() == made_up.json(), what
    assert made_up.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"


def test_an_expired_id_is_404_naming_the_expiry(server, clock):
    with _client(server) as c:
        query_id = _submit(c)
        assert _poll(c, query_id).status_code == 200
        clock.offset = 3601  # asyncQueryTtlSeconds defaults to an hour
        answer = c.post(f"/t/queries/{query_id}", json={})
    assert answer.status_code == 404
    assert "expired" in answer.json()["message"]


def test_a_poll_body_takes_only_max_files_and_page_token(server):
    with _client(server) as c:
        query_id = _submit(c)
        answer = c.post(f"/t/queries/{query_id}", json={"version": 1})
    assert answer.status_code == 400 and "maxFiles and pageToken" in answer.json()["message"]


def test_planning_that_fails_answers_failed_with_the_error(server):
    with _client(server) as c:
        sync = c.post("/broken/query", json={})
        query_id = _submit(c, "broken")
        answer = _poll(c, query_id, "broken")
    assert sync.status_code in (400, 404, 422), sync.text
    status = _lines(answer)[0]["queryStatus"]
    assert status["status"] == "failed" and status["queryId"] == query_id
    assert (status["errorCode"], status["message"]) == (sync.json()["errorCode"], sync.json()["message"])


def test_a_restart_without_a_catalog_forgets_its_queries(server, clock):
    with _client(server) as c:
        query_id = _submit(c)
        _poll(c, query_id)
    again = RunningServer(create_app(parse_config(_config()), clock=clock))
    try:
        with _client(again) as c:
            answer = c.post(f"/t/queries/{query_id}", json={})
    finally:
        again.stop()
    assert answer.status_code == 404 and "expired" in answer.json()["message"]


def _catalog(path) -> CatalogDB:
    catalog = CatalogDB(f"sqlite:///{path}")
    catalog.import_recipient("alice", [hashlib.sha256(ALICE.encode()).digest()])
    catalog.create_catalog("main")
    catalog.create_schema("main", "d")
    catalog.create_table("main", "d", "t", str(TABLES / "basic_partitioned"))
    catalog.create_share("s")
    obj = SharedObject("main.d.t", ObjectType.TABLE, shared_as="d.t")
    catalog.update_share("s", updates=[ObjectUpdate("ADD", obj)])
    catalog.update_permissions("s", [PermissionChange("alice", add=("SELECT",))])
    return catalog


def test_a_catalog_keeps_the_state_across_a_restart(tmp_path):
    path = tmp_path / "catalog.db"
    _catalog(path).close()
    config = parse_config({"version": 1, "catalog": str(path), "tokenSecret": SECRET, "asyncQueryThresholdMs": 0})
    first = RunningServer(create_app(config))
    try:
        with _client(first) as c:
            query_id = _submit(c, idempotencyKey="restart")
            before = _poll(c, query_id, maxFiles=3)
    finally:
        first.stop()
    second = RunningServer(create_app(config))
    try:
        with _client(second) as c:
            after = c.post(f"/t/queries/{query_id}", json={"maxFiles": 3})
            assert _submit(c, idempotencyKey="restart") == query_id
    finally:
        second.stop()
    assert _files(after) == _files(before) and len(_files(after)) == 3
    assert after.headers["delta-table-version"] == before.headers["delta-table-version"]
