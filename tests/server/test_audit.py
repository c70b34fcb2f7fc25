"""The audit log: one event per protocol request and per download, with the right fields and never a
secret; the request id round trip; the JSON-lines file rotating; batching and fan-out sinks that
never block or fail a request."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import orjson
import pytest
from conftest import TOKEN, corpus_config
from servers import RunningServer

from deltaport.catalog.model import AuditEvent
from deltaport.server import create_app, parse_config
from deltaport.server.audit import BatchingSink, FanOutSink, JsonLinesAuditSink, event_json

P = "/delta-sharing"
T = P + "/shares/corpus/schemas/default/tables"
ALICE = {"Authorization": f"Bearer {TOKEN}"}


class Audited:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sink = JsonLinesAuditSink(path)
        self.server = RunningServer(create_app(parse_config(corpus_config()), audit=self.sink))
        self.client = httpx.Client(base_url=self.server.url, timeout=30)

    def events(self) -> list[dict]:
        assert self.sink.flush(10)
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines()]

    def event(self, request_id: str) -> dict:
        """The event of a request: written once its response is sent, so a moment after the client
        has it."""
        deadline = time.monotonic() + 10
        while True:
            found = [e for e in self.events() if e["request_id"] == request_id]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert len(found) == 1, found
        return found[0]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    served = Audited(tmp_path_factory.mktemp("audit") / "audit.jsonl")
    yield served
    served.client.close()
    served.server.stop()
    served.sink.close()


def _file_lines(response: httpx.Response) -> list[dict]:
    return [orjson.loads(x)["file"] for x in response.content.splitlines() if x.startswith(b'{"file"')]


def test_a_query_s_event_names_who_what_and_how_much(audited):
    before = int(time.time() * 1000)
    headers = {**ALICE, "X-Request-Id": "audit-query-1", "User-Agent": "audit-test/1.0"}
    response = audited.client.post(T + "/partitioned/query", json={}, headers=headers)
    files = _file_lines(response)
    assert response.status_code == 200 and files and response.headers["x-request-id"] == "audit-query-1"
    event = audited.event("audit-query-1")
    assert event == {
        **event,
        "principal": "alice",
        "action": "queryTable",
        "status": 200,
        "client_ip": "127.0.0.1",
        "user_agent": "audit-test/1.0",
        "share": "corpus",
        "schema": "default",
        "table": "partitioned",
        "version": int(response.headers["delta-table-version"]),
        "files": len(files),
        "bytes": sum(f["size"] for f in files),
        "detail": {},
    }
    assert before <= event["time"] <= int(time.time() * 1000) and event["duration_ms"] > 0
    assert set(event) == {f for f in AuditEvent.__dataclass_fields__}


def test_a_download_s_event_names_the_table_and_the_bytes_sent(audited):
    url = _file_lines(audited.client.post(T + "/partitioned/query", json={}, headers=ALICE))[0]["url"]
    whole = audited.client.get(url, headers={"X-Request-Id": "audit-download-1"})
    part = audited.client.get(url, headers={"X-Request-Id": "audit-download-2", "Range": "bytes=0-9"})
    assert whole.status_code == 200 and part.status_code == 206
    event = audited.event("audit-download-1")
    assert {k: event[k] for k in ("principal", "action", "share", "schema", "table", "files", "bytes", "status")} == {
        "principal": "alice",
        "action": "downloadFile",
        "share": "corpus",
        "schema": "default",
        "table": "partitioned",
        "files": 1,
        "bytes": len(whole.content),
        "status": 200,
    }
    assert audited.event("audit-download-2")["bytes"] == 10
    forged = audited.client.get(
        url.replace("X-Amz-Signature=", "X-Amz-Signature=0"), headers={"X-Request-Id": "bad-sig"}
    )
    assert forged.status_code == 403
    refused = audited.event("bad-sig")
    assert (
        refused["action"] == "downloadFile" and refused["status"] == 403 and refused["principal"] == "unauthenticated"
    )


@pytest.mark.parametrize(
    "method, path, action",
    [
        ("GET", P + "/shares", "listShares"),
        ("GET", P + "/shares/corpus", "getShare"),
        ("GET", P + "/shares/corpus/schemas", "listSchemas"),
        ("GET", P + "/shares/corpus/schemas/default/tables", "listTables"),
        ("GET", P + "/shares/corpus/all-tables", "listAllTables"),
        ("GET", T + "/partitioned/version", "getTableVersion"),
        ("HEAD", T + "/partitioned", "getTableVersion"),
        ("GET", T + "/partitioned/metadata", "getTableMetadata"),
        ("GET", T + "/cdf/changes?startingVersion=0", "queryTableChanges"),
    ],
)
def test_every_protocol_action_has_its_name(audited, method, path, action):
    rid = f"action-{action}-{method}"
    response = audited.client.request(method, path, headers={**ALICE, "X-Request-Id": rid})
    assert response.status_code == 200
    event = audited.event(rid)
    assert (event["action"], event["principal"], event["status"]) == (action, "alice", 200)
    if "/tables/" in path:
        assert event["version"] == int(response.headers["delta-table-version"])


def test_refusals_are_audited_and_other_requests_are_not(audited):
    audited.client.get(P + "/shares", headers={"X-Request-Id": "no-token"})
    audited.client.get(T + "/missing/metadata", headers={**ALICE, "X-Request-Id": "no-table"})
    for path in ("/health", "/metrics", P + "/no/such/endpoint", "/openapi.json"):
        audited.client.get(path, headers={"X-Request-Id": "not-audited"})
    audited.client.get(P + "/shares", headers={**ALICE, "X-Request-Id": "after-them"})
    audited.event("after-them")  # events are written in the order requests are answered
    assert (audited.event("no-token")["principal"], audited.event("no-token")["status"]) == ("unauthenticated", 401)
    missing = audited.event("no-table")
    assert (missing["principal"], missing["status"], missing["table"], missing["version"]) == (
        "alice",
        404,
        "missing",
        None,
    )
    assert not [e for e in audited.events() if e["request_id"] == "not-audited"]


def test_the_audit_file_holds_no_token_and_no_url_signature(audited):
    lines = _file_lines(audited.client.post(T + "/partitioned/query", json={}, headers=ALICE))
    for line in lines[:2]:
        audited.client.get(line["url"])
    audited.client.get(P + "/shares", headers={"Authorization": "Bearer not-the-token-8c1e", "X-Request-Id": "last"})
    audited.event("last")  # and so every event before it
    text = audited.path.read_text()
    assert "alice" in text and "downloadFile" in text  # the file is the one these requests wrote to
    assert TOKEN not in text and "not-the-token-8c1e" not in text
    for line in lines:
        query = urlsplit(line["url"]).query
        assert query not in text
        for name, signed in parse_qsl(query):
            if "signature" in name.lower() or "credential" in name.lower():
                assert signed not in text, name


@pytest.mark.parametrize(
    "given, echoed",
    [
        ("abc-123_X.y", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("two words", False),
        ("semi;colon", False),
        ("", False),
    ],
)
def test_a_sane_request_id_comes_back_and_any_other_is_replaced(audited, given, echoed):
    for path in (P + "/shares", T + "/partitioned/version"):  # a route and a hot path
        response = audited.client.get(path, headers={**ALICE, "X-Request-Id": given})
        back = response.headers["x-request-id"]
        assert (back == given) is echoed
        if not echoed:
            assert 1 <= len(back) <= 64 and back.replace("-", "").isalnum()


def test_request_ids_are_made_afresh_for_each_request(audited):
    ids = {audited.client.get("/health").headers["x-request-id"] for _ in range(20)}
    assert len(ids) == 20


def test_a_failing_sink_never_fails_a_request(caplog):
    class Broken:
        def write(self, event):
            raise OSError("disk full")

    server = RunningServer(create_app(parse_config(corpus_config()), audit=Broken()))
    try:
        assert httpx.get(server.url + P + "/shares", headers=ALICE).status_code == 200
    finally:
        server.stop()
    assert "OSError" in caplog.text


# --- sinks ---------------------------------------------------------------------------------------------


def _event(n: int, **fields) -> AuditEvent:
    return AuditEvent(time=n, request_id=f"r{n}", principal="alice", action="queryTable", status=200, **fields)


def test_the_file_rotates_before_a_line_would_take_it_over_its_size(tmp_path):
    path = tmp_path / "audit.jsonl"
    size = len(event_json(_event(10))) + 1
    sink = JsonLinesAuditSink(path, max_bytes=size * 3, backups=2)
    try:
        for n in range(10, 20):
            sink.write(_event(n))
        assert sink.flush(10)
    finally:
        sink.close()
    files = [path, path.with_name("audit.jsonl.1"), path.with_name("audit.jsonl.2")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)
    times = [[orjson.loads(line)["time"] for line in p.read_bytes().splitlines()] for p in files]
    assert times == [[19], [16, 17, 18], [13, 14, 15]]  # newest first; 10 to 12 rotated away
    assert all(p.stat().st_size <= size * 3 for p in files)
    assert path.stat().st_mode & 0o007 == 0  # not readable by others


def test_without_backups_the_file_starts_afresh(tmp_path):
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesAuditSink(path, max_bytes=len(event_json(_event(10))) + 1, backups=0)
    for n in range(10, 13):
        sink.write(_event(n))
    sink.close()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.jsonl"]
    assert orjson.loads(path.read_bytes())["time"] == 12


def test_an_unwritable_path_fails_at_once(tmp_path):
    with pytest.raises(OSError):
        JsonLinesAuditSink(tmp_path / "no" / "such" / "dir" / "audit.jsonl")


def test_batches_go_out_when_full_or_when_due():
    batches: list[list[int]] = []
    arrived = threading.Event()

    def write_batch(events: Sequence[AuditEvent]) -> None:
        batches.append([e.time for e in events])
        arrived.set()

    sink = BatchingSink(write_batch, flush_every_s=60, max_batch=3)
    for n in range(7):
        sink.write(_event(n))
    assert arrived.wait(10)  # a full batch does not wait for its minute
    assert sink.flush(10)  # the rest, now
    sink.close()
    assert batches[0] == [0, 1, 2] and [t for b in batches for t in b] == list(range(7))
    due = BatchingSink(write_batch, flush_every_s=0.05, max_batch=500)
    arrived.clear()
    due.write(_event(99))
    assert arrived.wait(10) and batches[-1] == [99]
    due.close()


def test_a_failing_batch_is_logged_and_the_next_goes_out(caplog):
    calls: list[list[int]] = []

    def write_batch(events: Sequence[AuditEvent]) -> None:
        calls.append([e.time for e in events])
        if len(calls) == 1:
            raise RuntimeError("database is locked")

    sink = BatchingSink(write_batch, flush_every_s=0, max_batch=1)
    sink.write(_event(1))
    assert sink.flush(10)
    sink.write(_event(2))
    assert sink.flush(10)
    sink.close()
    assert calls == [[1], [2]] and "RuntimeError" in caplog.text


def test_a_full_queue_drops_rather_than_blocks(caplog):
    release = threading.Event()
    sink = BatchingSink(lambda events: release.wait(10), flush_every_s=0, max_batch=1, max_queue=2)
    started = time.perf_counter()
    for n in range(50):
        sink.write(_event(n))
    assert time.perf_counter() - started < 1
    release.set()
    sink.close()
    assert "dropped" in caplog.text


def test_fan_out_writes_to_every_sink_whatever_one_does():
    got: list[AuditEvent] = []

    class Broken:
        def write(self, event):
            raise RuntimeError("no")

    class Kept:
        def write(self, event):
            got.append(event)

    FanOutSink(Broken(), Kept()).write(_event(1))
    assert [e.time for e in got] == [1]
