"""The audit log: one event per protocol request and per download, with the right fields and never a
secret; the request id round trip; the JSON-lines file rotating; the audit log's writer thread,
which batches events into blocks for every sink and never blocks or fails a request."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx
import orjson
import pytest
from conftest import TOKEN, corpus_config
from servers import RunningServer

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store_audit import AuditBlock, event_line
from deltaport.server import AuditLog, JsonLinesAuditSink, create_app, parse_config

P = "/delta-sharing"
T = P + "/shares/corpus/schemas/default/tables"
ALICE = {"Authorization": f"Bearer {TOKEN}"}


class Audited:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sink = JsonLinesAuditSink(path)
        self.log = AuditLog([self.sink.write])
        self.server = RunningServer(create_app(parse_config(corpus_config()), audit=self.log))
        self.client = httpx.Client(base_url=self.server.url, timeout=30)

    def events(self) -> list[dict]:
        assert self.log.flush(10)
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
    served.log.close()
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
    ("method", "path", "action"),
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
    ("given", "echoed"),
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


def test_a_failing_sink_never_fails_a_request_nor_keeps_the_events_from_the_others(tmp_path, caplog):
    def broken(block: AuditBlock) -> None:
        raise OSError("disk full")

    kept = JsonLinesAuditSink(tmp_path / "audit.jsonl")
    log = AuditLog([broken, kept.write])
    server = RunningServer(create_app(parse_config(corpus_config()), audit=log))
    try:
        response = httpx.get(server.url + P + "/shares", headers={**ALICE, "X-Request-Id": "still-written"})
        assert response.status_code == 200
        assert log.flush(10)
    finally:
        server.stop()
        log.close()
        kept.close()
    assert "OSError" in caplog.text and "disk full" not in caplog.text
    assert [orjson.loads(line)["request_id"] for line in (tmp_path / "audit.jsonl").read_bytes().splitlines()] == [
        "still-written"
    ]


# --- the writer and the file ---------------------------------------------------------------------------


def _event(n: int, **fields) -> AuditEvent:
    return AuditEvent(time=n, request_id=f"r{n}", principal="alice", action="queryTable", status=200, **fields)


class Blocks:
    """A sink that keeps the blocks it is given."""

    def __init__(self) -> None:
        self.blocks: list[AuditBlock] = []
        self.arrived = threading.Event()

    def __call__(self, block: AuditBlock) -> None:
        self.blocks.append(block)
        self.arrived.set()

    def times(self) -> list[list[int]]:
        return self.times_of(self.blocks)

    @staticmethod
    def times_of(blocks: list[AuditBlock]) -> list[list[int]]:
        return [[orjson.loads(line)["time"] for line in block.lines.splitlines()] for block in blocks]


def test_the_file_rotates_before_a_line_would_take_it_over_its_size(tmp_path):
    path = tmp_path / "audit.jsonl"
    size = len(event_line(_event(10)))
    sink = JsonLinesAuditSink(path, max_bytes=size * 3, backups=2)
    sink.write(AuditBlock.of([_event(n) for n in range(10, 14)]))  # a block that does not fit: line by line
    for n in range(14, 20):
        sink.write(AuditBlock.of([_event(n)]))
    sink.close()
    files = [path, path.with_name("audit.jsonl.1"), path.with_name("audit.jsonl.2")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)
    times = [[orjson.loads(line)["time"] for line in p.read_bytes().splitlines()] for p in files]
    assert times == [[19], [16, 17, 18], [13, 14, 15]]  # newest first; 10 to 12 rotated away
    assert all(p.stat().st_size <= size * 3 for p in files)
    assert path.stat().st_mode & 0o007 == 0  # not readable by others


def test_without_backups_the_file_starts_afresh(tmp_path):
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesAuditSink(path, max_bytes=len(event_line(_event(10))), backups=0)
    sink.write(AuditBlock.of([_event(n) for n in range(10, 13)]))
    sink.close()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.jsonl"]
    assert orjson.loads(path.read_bytes())["time"] == 12


def test_a_block_that_fits_is_appended_whole(tmp_path):
    path = tmp_path / "audit.jsonl"
    sink = JsonLinesAuditSink(path)
    first, second = AuditBlock.of([_event(1), _event(2)]), AuditBlock.of([_event(3, detail={"n": "\u00e9\n"})])
    sink.write(first)
    sink.write(second)
    sink.close()
    assert path.read_bytes() == first.lines + second.lines
    assert [orjson.loads(line)["time"] for line in path.read_bytes().splitlines()] == [1, 2, 3]


def test_an_unwritable_path_fails_at_once(tmp_path):
    with pytest.raises(OSError):
        JsonLinesAuditSink(tmp_path / "no" / "such" / "dir" / "audit.jsonl")


def test_events_go_out_as_one_block_when_due_or_when_a_block_is_full(monkeypatch):
    from deltaport.server.ops import audit

    monkeypatch.setattr(audit, "BLOCK_EVENTS", 3)
    sink = Blocks()
    log = AuditLog([sink], flush_every_s=60)
    for n in (5, 3, 4):
        log.add(_event(n))
    assert sink.arrived.wait(10)  # a full block does not wait for its minute
    (block,) = sink.blocks
    assert (block.count, block.first_time, block.last_time) == (3, 3, 5)
    log.add(_event(9))
    log.add(_event(7))
    assert log.flush(10)  # the rest, now
    assert sink.times() == [[5, 3, 4], [9, 7]] and sink.blocks[1].first_time == 7
    log.close()
    due, sink.arrived = AuditLog([sink], flush_every_s=0.05), threading.Event()
    due.add(_event(99))
    assert sink.arrived.wait(10) and sink.times()[-1] == [99]
    due.close()


def _rendered(log: AuditLog) -> bool:
    """Whether ``log`` renders what is queued within moments (a busy server's events are not kept
    waiting as values for their block's second)."""
    deadline = time.monotonic() + 5
    while log.waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    return log.waiting == 0


def test_queued_events_are_rendered_at_once_and_written_together_when_their_block_is_due():
    sink = Blocks()
    log = AuditLog([sink], flush_every_s=60)
    log.add(_event(1))
    log.add(_event(2))
    assert _rendered(log) and not sink.blocks  # rendered, the block not yet due
    log.add(_event(3))
    assert _rendered(log) and not sink.blocks
    assert log.flush(10) and sink.times() == [[1, 2, 3]]  # one block
    log.close()


def test_a_request_whose_method_has_no_event_gives_the_sinks_nothing():
    from deltaport.server.errors import ADMIN_PREFIX
    from deltaport.server.ops.request_info import RequestInfo

    sink = Blocks()
    log = AuditLog([sink], flush_every_s=60)
    read = RequestInfo("r1", "127.0.0.1", None, 1, 0.0, principal="admin", status=200)
    log.request(read, ADMIN_PREFIX + "/shares", "GET", 0.001, {})  # a listing, on a route writes share
    assert log.flush(10) and sink.blocks == []
    log.close()


def test_a_block_never_takes_more_than_block_events(monkeypatch):
    from deltaport.server.ops import audit

    monkeypatch.setattr(audit, "BLOCK_EVENTS", 3)
    sink = Blocks()
    log = AuditLog([sink], flush_every_s=60)
    for n in (1, 2):
        log.add(_event(n))
    assert _rendered(log) and not sink.blocks
    for n in (3, 4):
        log.add(_event(n))
    assert sink.arrived.wait(10) and sink.times() == [[1, 2]]  # 3 and 4 would take it over
    assert log.flush(10) and sink.times() == [[1, 2], [3, 4]]
    log.close()


def test_flush_waits_for_the_sinks_and_close_writes_what_is_queued():
    release = threading.Event()
    sink = Blocks()

    def slow(block: AuditBlock) -> None:
        release.wait(10)
        sink(block)

    log = AuditLog([slow], flush_every_s=60)
    log.add(_event(1))
    assert not log.flush(0.2)  # the sink is still writing
    release.set()
    assert log.flush(10) and sink.times() == [[1]]
    log.add(_event(2))
    log.close()
    assert sink.times() == [[1], [2]]
    log.add(_event(3))  # after close: dropped, never raised
    assert log.flush(1) and sink.times() == [[1], [2]]


def test_a_block_a_sink_failed_is_logged_and_written_before_its_next_one(caplog):
    written: list[list[int]] = []

    def flaky(block: AuditBlock) -> None:
        if not caplog.records:  # fails once, as a database gone for a moment
            raise RuntimeError("database is locked")
        written.extend(Blocks.times_of([block]))

    others = Blocks()
    log = AuditLog([flaky, others], flush_every_s=60)
    log.add(_event(1))
    assert log.flush(10) and written == [] and others.times() == [[1]]
    log.add(_event(2))
    assert log.flush(10)
    log.close()
    assert written == [[1], [2]] and others.times() == [[1], [2]]
    assert "RuntimeError" in caplog.text and "flaky" in caplog.text and "never written" not in caplog.text


def test_a_failed_block_is_tried_again_though_nothing_new_comes():
    fails = [True]
    written = Blocks()

    def once_down(block: AuditBlock) -> None:
        if fails.pop() if fails else False:
            raise OSError("connection refused")
        written(block)

    log = AuditLog([once_down], flush_every_s=0.05)
    log.add(_event(1))
    assert written.arrived.wait(10) and written.times() == [[1]]
    log.close()


def test_a_sink_that_keeps_failing_keeps_at_most_max_pending_events_and_says_what_it_lost(caplog):
    up = threading.Event()
    written = Blocks()

    def down_for_a_while(block: AuditBlock) -> None:
        if not up.is_set():
            raise OSError("connection refused")
        written(block)

    log = AuditLog([down_for_a_while], flush_every_s=60, max_pending=2)
    for n in range(1, 6):
        log.add(_event(n))
        assert log.flush(10)
    assert caplog.text.count("1 event(s) dropped, never written") == 3
    up.set()
    log.add(_event(6))
    assert log.flush(10) and written.times() == [[4], [5], [6]]  # the newest two kept, in order
    log.add(_event(7))
    up.clear()
    log.close()
    assert "1 event(s) never written, the log closed" in caplog.text


def test_a_full_log_drops_rather_than_blocks(caplog):
    release = threading.Event()
    log = AuditLog([lambda block: release.wait(10)], flush_every_s=0, max_pending=2)
    started = time.perf_counter()
    for n in range(50):
        log.add(_event(n))
    assert time.perf_counter() - started < 1
    assert log.dropped >= 48 - 2  # at most one block in the sink's hands, two waiting
    release.set()
    log.close()
    assert "dropped" in caplog.text


def test_a_detail_key_json_cannot_hold_is_left_out_and_the_event_kept():
    sink = Blocks()
    log = AuditLog([sink], flush_every_s=60)
    log.add(_event(1, detail={(1, 2): "a key JSON cannot hold", "big": 2**70}))
    log.close()
    (block,) = sink.blocks
    assert block.count == 1
    assert b'"big": 1180591620717411303424' in block.lines and b"cannot hold" not in block.lines


def _append_blocks(path: str, first: int, blocks: int, max_bytes: int) -> None:
    sink = JsonLinesAuditSink(path, max_bytes=max_bytes, backups=1000)
    for n in range(first, first + 3 * blocks, 3):
        sink.write(AuditBlock.of([_event(n), _event(n + 1), _event(n + 2)]))
    sink.close()


def test_processes_sharing_the_file_neither_interleave_nor_lose_lines(tmp_path):
    """`deltaport serve --workers` appends from several processes to one file, rotating it as it
    fills: every line arrives whole, once, and no file grows past its size."""
    import multiprocessing

    path = tmp_path / "audit.jsonl"
    size = len(event_line(_event(100_000)))
    spawn = multiprocessing.get_context("fork")
    writers = [spawn.Process(target=_append_blocks, args=(str(path), w * 100_000, 300, size * 7)) for w in (1, 2, 3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    times = [orjson.loads(line)["time"] for p in tmp_path.iterdir() for line in p.read_bytes().splitlines()]
    assert sorted(times) == [w * 100_000 + n for w in (1, 2, 3) for n in range(900)]
    assert all(p.stat().st_size <= size * 7 for p in tmp_path.iterdir())
