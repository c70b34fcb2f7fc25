"""The download layer (deltaport.client.download, .renewal) against the real sharing server on loopback.

A small front server on loopback forwards GETs to the sharing server's file URLs, so that a
test can make the "storage" answer a status a few times first, and can see what was asked.
"""

from __future__ import annotations

import dataclasses
import io
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import pyarrow as pa
import pytest

from deltaport.client.download import (
    ConnectionPool,
    RangesApart,
    Transient,
    copy_range,
    copy_ranges,
    copy_url,
    download,
    download_into,
    retrying,
)
from deltaport.client.errors import ConnectionFailed, FileDownloadError, IncompleteResponse, UrlExpired
from deltaport.client.renewal import MAX_ATTEMPTS, UrlRenewer
from deltaport.client.rest import RestClient
from deltaport.client.retry import RetryPolicy
from deltaport.client.transport import file_http_client

pytest_plugins = ["client_fixtures"]

FAST = RetryPolicy(max_retries=3, initial_backoff=0.001, max_backoff=0.01)


class _Server(ThreadingHTTPServer):
    """A test store: a client closing a connection unread (which copy_ranges does to an answer it
    will not use) resets it, which is no error of the store's."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class Front:
    """Forwards ``/<path>?<query>`` to ``upstream``; answers ``script`` [(status, body[, headers]), ...] first."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.script: list[tuple] = []
        self.seen: list[dict] = []  # headers of each request, lower-cased
        self.statuses: list[int] = []  # the status each request was answered with
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                front.seen.append({k.lower(): v for k, v in self.headers.items()})
                extra: dict[str, str] = {}
                if front.script:
                    status, body, *more = front.script.pop(0)
                    extra = more[0] if more else {}
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() == "range"}
                    answer = httpx.get(front.upstream + self.path, headers=headers, timeout=30)
                    status, body = answer.status_code, answer.content
                    names = {"content-range": "Content-Range", "content-type": "Content-Type"}
                    extra = {names[k]: v for k, v in answer.headers.items() if k in names}
                front.statuses.append(status)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def via(self, url: str) -> str:
        parts = urlsplit(url)
        return f"{self.url}{parts.path}?{parts.query}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def file_action(table_url):
    profile, _, name = table_url("partitioned").rpartition("#")
    with RestClient(profile) as rest:
        files = rest.query_table(name).files
    return max(files, key=lambda f: f.size)


@pytest.fixture
def front(sharing_server):
    server = Front(sharing_server.url)
    yield server
    server.close()


@pytest.fixture
def http():
    with file_http_client() as client:
        yield client


def _copy(url: str, file_id: str, retry: RetryPolicy = FAST) -> bytes:
    out = io.BytesIO()
    pool = ConnectionPool()

    def once() -> int:
        out.seek(0)
        out.truncate()
        return copy_url(url, out, pool=pool, file_id=file_id)

    try:
        assert retrying(once, retry, what=f"file {file_id}", url=url, file_id=file_id) == len(out.getvalue())
    finally:
        pool.close()
    return out.getvalue()


def _into(url: str, file_id: str, retry: RetryPolicy = FAST) -> bytes:
    pool = ConnectionPool()
    try:
        return download_into(url, pool, pa.allocate_buffer, retry=retry, file_id=file_id).to_pybytes()
    finally:
        pool.close()


def _get(fetch: str, url: str, http: httpx.Client, file_id: str) -> bytes:
    if fetch == "download":
        return download(url, http, retry=FAST, file_id=file_id)
    return (_copy if fetch == "copy" else _into)(url, file_id)


def test_whole_files_and_ranges_come_from_the_server(file_action, front, http):
    whole = download(file_action.url, http, file_id=file_action.id)
    assert len(whole) == file_action.size and whole[:4] == b"PAR1"
    assert _copy(file_action.url, file_action.id) == whole
    assert _into(file_action.url, file_action.id) == whole
    part = download(front.via(file_action.url), http, byte_range=(5, 100), file_id=file_action.id)
    assert part == whole[5:105]
    assert front.seen[-1]["range"] == "bytes=5-104" and front.statuses[-1] == 206  # the storage cut it, not us


def test_a_store_that_ignores_range_still_gives_the_range(file_action, front, http):
    whole = download(file_action.url, http)
    front.script = [(200, whole)]
    assert download(front.via(file_action.url), http, byte_range=(7, 9)) == whole[7:16]


def _copy_range(url: str, action, start: int, end: int, size: int | None = None) -> tuple[bytes, bool]:
    out = io.BytesIO()
    pool = ConnectionPool()
    try:
        got, ranged = copy_range(url, out, pool=pool, file_id=action.id, start=start, end=end, size=size or action.size)
    finally:
        pool.close()
    assert got == len(out.getvalue())
    return out.getvalue(), ranged


def test_a_range_is_streamed_and_its_content_range_checked(file_action, front, http):
    whole = download(file_action.url, http)
    assert _copy_range(front.via(file_action.url), file_action, 10, 110) == (whole[10:110], True)
    assert front.seen[-1]["range"] == "bytes=10-109" and front.statuses[-1] == 206
    tail = file_action.size - 64
    assert _copy_range(front.via(file_action.url), file_action, tail, file_action.size) == (whole[tail:], True)


def test_a_store_that_ignores_range_sends_the_whole_file_and_says_so(file_action, front, http):
    whole = download(file_action.url, http)
    front.script = [(200, whole)]
    assert _copy_range(front.via(file_action.url), file_action, 10, 110) == (whole, False)


def test_a_file_of_another_size_than_listed_is_one_line_naming_the_fix(file_action, front):
    with pytest.raises(FileDownloadError) as caught:
        _copy_range(front.via(file_action.url), file_action, 0, 10, size=file_action.size + 1)
    assert "changed after it was listed" in str(caught.value) and "read the table again" in str(caught.value)
    assert "\n" not in str(caught.value)
    front.script = [(206, b"x" * 10, {"Content-Range": "bytes 5-14/" + str(file_action.size)})]
    with pytest.raises(FileDownloadError, match="where 0-9 were asked"):
        _copy_range(front.via(file_action.url), file_action, 0, 10)


@pytest.mark.parametrize("fetch", ["download", "copy", "into"])
def test_503_is_retried_with_the_policy_then_an_error_of_that_status(file_action, front, http, fetch):
    url = front.via(file_action.url)

    def get() -> bytes:
        return _get(fetch, url, http, file_action.id)

    front.script = [(503, b"slow down"), (503, b"slow down")]
    assert len(get()) == file_action.size
    assert front.statuses == [503, 503, 200]
    front.script = [(503, b"slow down")] * (FAST.max_retries + 1)
    with pytest.raises(FileDownloadError, match="HTTP 503") as err:
        get()
    assert err.value.http_status == 503 and not isinstance(err.value, UrlExpired)
    assert front.statuses[3:] == [503] * (FAST.max_retries + 1)


@pytest.mark.parametrize("fetch", ["download", "copy", "into"])
@pytest.mark.parametrize(
    ("status", "body", "error", "needle"),
    [
        (403, b"", UrlExpired, "refused the presigned URL of file"),
        (401, b"", UrlExpired, "refused the presigned URL"),
        (400, b"<Code>ExpiredToken</Code>", UrlExpired, "the file list must be refreshed"),
        (400, b"bad\n  request", FileDownloadError, "failed with HTTP 400: bad request"),
        (404, b"", FileDownloadError, "was not found in storage .* read the table again"),
        (410, b"gone", FileDownloadError, "failed with HTTP 410: gone"),
    ],
)
def test_4xx_is_an_error_at_once(file_action, front, http, fetch, status, body, error, needle):
    url = front.via(file_action.url)
    front.script = [(status, body)]
    with pytest.raises(error, match=needle) as err:
        _get(fetch, url, http, file_action.id)
    assert type(err.value) is error and err.value.http_status == status and err.value.file_id == file_action.id
    assert len(front.seen) == 1  # not retried
    assert urlsplit(url).query not in str(err.value)


def test_a_forged_signature_is_refused_by_the_real_server(file_action, http):
    forged = file_action.url.replace("X-Amz-Signature=", "X-Amz-Signature=00")
    assert forged != file_action.url
    with pytest.raises(UrlExpired):
        download(forged, http, retry=FAST, file_id=file_action.id)
    with pytest.raises(UrlExpired):
        _copy(forged, file_action.id)
    with pytest.raises(UrlExpired):
        _into(forged, file_action.id)


def test_connection_errors_are_retried_then_one_line(http):
    calls = []

    def refused() -> bytes:
        calls.append(1)
        raise Transient("ConnectError: refused")

    with pytest.raises(ConnectionFailed, match=r"could not download file f1 after 4 attempts .*storage are reachable"):
        retrying(refused, FAST, what="file f1", url="http://127.0.0.1:9/x?sig=1", file_id="f1")
    assert len(calls) == FAST.max_retries + 1
    with pytest.raises(ConnectionFailed, match="after 2 attempts"):
        download("http://127.0.0.1:9/x?sig=1", http, retry=RetryPolicy(max_retries=1, initial_backoff=0.001))


def test_the_pool_keeps_connections_alive(file_action, front):
    pool = ConnectionPool()
    try:
        for _ in range(3):
            out = io.BytesIO()
            assert copy_url(front.via(file_action.url), out, pool=pool, file_id=file_action.id) == file_action.size
        assert sum(len(conns) for conns in pool._idle.values()) == 1
    finally:
        pool.close()


# --- renewal ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listing(table_url):
    """The real server's file list of a table, and a refresher that asks for it again (counting)."""
    profile, _, name = table_url("partitioned").rpartition("#")
    rest = RestClient(profile)
    calls = []

    def refresher():
        calls.append(1)
        return rest.query_table(name).files

    yield rest.query_table(name).files, refresher, calls
    rest.close()


def _tampered(action, **changes):
    return dataclasses.replace(action, url=action.url + "&tampered=1", **changes)


def test_an_expiring_url_is_renewed_before_it_is_used(listing, http):
    files, refresher, calls = listing
    now = [1_000.0]
    renewer = UrlRenewer(refresher, margin_seconds=30, clock=lambda: now[0])
    used = []

    def get(action):
        used.append(action.url)
        return download(action.url, http, file_id=action.id)

    soon = _tampered(files[0], expiration_timestamp=int(now[0] * 1000) + 10_000)  # 10 s left: within the margin
    before = len(calls)
    data = renewer.read(soon, get)
    assert len(data) == files[0].size and renewer.refreshes == 1 and len(calls) == before + 1
    assert len(used) == 1 and "tampered" not in used[0] and used[0].split("?")[0] == files[0].url.split("?")[0]
    later = _tampered(files[1], expiration_timestamp=int(now[0] * 1000) + 3_600_000)  # an hour left: used as is
    with pytest.raises(UrlExpired):
        UrlRenewer(None, margin_seconds=30, clock=lambda: now[0]).read(later, get)
    assert used[-1] == later.url


def test_a_refused_url_is_renewed_once_for_every_thread_waiting(listing, http):
    files, refresher, calls = listing
    renewer = UrlRenewer(refresher, preemptive=False)
    refused = [_tampered(f, expiration_timestamp=1) for f in files]  # long expired: not preemptive, so tried
    before = len(calls)
    with ThreadPoolExecutor(len(refused)) as pool:
        sizes = list(pool.map(lambda a: len(renewer.read(a, lambda b: download(b.url, http, file_id=b.id))), refused))
    assert sizes == [f.size for f in files]
    assert renewer.refreshes == 1 and len(calls) == before + 1


def test_renewal_keeps_what_the_reader_set_and_finds_the_file_by_id(listing, http):
    files, refresher, _ = listing
    mine = _tampered(files[0], version=7, change_type="insert")  # a snapshot file a reader labelled itself
    got = UrlRenewer(refresher).read(mine, lambda a: (a, download(a.url, http, file_id=a.id)))
    assert got[0].version == 7 and got[0].change_type == "insert" and len(got[1]) == files[0].size


class _Listed(Sequence):
    """A refreshed file list that records each pass over it."""

    def __init__(self, files, passes):
        self.files, self.passes = files, passes

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        return self.files[index]

    def __iter__(self):
        self.passes.append(1)
        return iter(self.files)


def test_a_renewed_file_is_found_at_its_position_without_indexing_the_fresh_list(listing, http):
    files, refresher, _ = listing
    passes: list = []
    renewer = UrlRenewer(lambda: _Listed(refresher(), passes), preemptive=False)

    def get(action):
        return download(action.url, http, file_id=action.id)

    assert len(renewer.read(_tampered(files[1], expiration_timestamp=1), get, position=1)) == files[1].size
    assert renewer.refreshes == 1 and passes == []
    assert len(renewer.read(_tampered(files[2], expiration_timestamp=1), get, position=0)) == files[2].size
    assert passes == [1]  # a position that misses: the list is indexed, once


def test_a_url_refused_every_time_or_a_file_gone_or_no_refresher_are_one_line(listing, http):
    files, refresher, calls = listing
    attempts = []

    def refuse(action):
        attempts.append(action.url)
        return download(action.url + "&tampered=1", http, file_id=action.id)

    with pytest.raises(UrlExpired, match=r"refused the presigned URL of file .* 4 times, fresh URLs included"):
        UrlRenewer(refresher, preemptive=False).read(files[0], refuse)
    assert len(attempts) == MAX_ATTEMPTS
    gone = _tampered(dataclasses.replace(files[0], id="not-in-the-table"))
    with pytest.raises(IncompleteResponse, match="table changed during the read") as err:
        UrlRenewer(refresher, hint="pin it").read(gone, lambda a: download(a.url, http, file_id=a.id))
    assert err.value.error_code == "TABLE_CHANGED" and err.value.hint == "pin it"
    before = len(calls)
    with pytest.raises(UrlExpired, match="expired or was revoked.* cannot be renewed; read the table again"):
        UrlRenewer(None).read(_tampered(files[0]), lambda a: download(a.url, http, file_id=a.id))
    assert len(calls) == before


# --- several ranges in one GET --------------------------------------------------------------------


def _spans(size: int) -> list[tuple[int, int]]:
    return [(4, 20), (size // 2, size // 2 + 100), (size - 40, size)]


def _copy_ranges(url: str, action, pool: ConnectionPool, spans) -> list[bytes]:
    outs = [io.BytesIO() for _ in spans]
    got = copy_ranges(
        url, [(a, b, o) for (a, b), o in zip(spans, outs)], pool=pool, file_id=action.id, size=action.size
    )
    assert got >= sum(b - a for a, b in spans)  # the body: the parts and their headers
    return [o.getvalue() for o in outs]


@pytest.mark.parametrize("hot_paths", [True, False], ids=["fast path", "route"])
def test_several_ranges_come_in_one_get_from_the_server(file_action, front, http, hot_paths, monkeypatch):
    whole = download(file_action.url, http)
    spans = _spans(file_action.size)
    if not hot_paths:  # more ranges than the fast path takes: the route answers them, multipart too
        monkeypatch.setattr("deltaport.server.fast.file_reads.MAX_RANGES", 2)
    pool = ConnectionPool()
    try:
        assert _copy_ranges(front.via(file_action.url), file_action, pool, spans) == [whole[a:b] for a, b in spans]
    finally:
        pool.close()
    assert front.seen[-1]["range"] == ",".join(f"{a}-{b - 1}" for a, b in spans).join(("bytes=", ""))
    assert front.statuses == [206]


def test_one_range_spanning_them_all_is_taken_too(file_action, front, http):
    whole = download(file_action.url, http)
    spans = _spans(file_action.size)
    first, last = spans[0][0], spans[-1][1]
    front.script = [(206, whole[first:last], {"Content-Range": f"bytes {first}-{last - 1}/{file_action.size}"})]
    pool = ConnectionPool()
    try:
        assert _copy_ranges(front.via(file_action.url), file_action, pool, spans) == [whole[a:b] for a, b in spans]
    finally:
        pool.close()


@pytest.mark.parametrize("answer", ["whole file", "first range"])
def test_a_store_that_serves_one_range_at_a_time_is_asked_so_from_then_on(file_action, front, http, answer):
    whole = download(file_action.url, http)
    spans = _spans(file_action.size)
    (a, b), size = spans[0], file_action.size
    front.script = (
        [(200, whole)]
        if answer == "whole file"
        else [(206, whole[a:b], {"Content-Range": f"bytes {a}-{b - 1}/{size}"})]
    )
    pool = ConnectionPool()
    try:
        with pytest.raises(RangesApart):
            _copy_ranges(front.via(file_action.url), file_action, pool, spans)
        with pytest.raises(RangesApart):  # remembered: not asked again
            _copy_ranges(front.via(file_action.url), file_action, pool, spans)
    finally:
        pool.close()
    assert len(front.seen) == 1


@pytest.mark.parametrize("answer", ["multipart", "one spanning range"])
def test_a_part_of_a_file_of_another_size_is_one_line_naming_the_fix(file_action, front, http, answer):
    whole = download(file_action.url, http)
    spans, size = _spans(file_action.size), file_action.size
    if answer == "multipart":
        body = b"".join(
            f"\r\n--x\r\nContent-Range: bytes {a}-{b - 1}/{size + 1}\r\n\r\n".encode() + whole[a:b] for a, b in spans
        )
        front.script = [(206, body + b"\r\n--x--", {"Content-Type": "multipart/byteranges; boundary=x"})]
    else:
        first, last = spans[0][0], spans[-1][1]
        front.script = [(206, whole[first:last], {"Content-Range": f"bytes {first}-{last - 1}/{size + 1}"})]
    pool = ConnectionPool()
    try:
        with pytest.raises(FileDownloadError, match="changed after it was listed; read the table again"):
            _copy_ranges(front.via(file_action.url), file_action, pool, spans)
    finally:
        pool.close()


def test_s3_answers_several_ranges_with_the_whole_object_so_they_are_asked_apart(moto_server):
    """moto, as S3, answers a GET of several ranges 200 with the whole object: the pool then asks
    it one range per GET, and never reads that body."""
    client = moto_server.client()
    client.create_bucket(Bucket="ranges-apart")
    data = bytes(range(256)) * 400
    client.put_object(Bucket="ranges-apart", Key="f.parquet", Body=data)
    url = client.generate_presigned_url("get_object", Params={"Bucket": "ranges-apart", "Key": "f.parquet"})
    action = dataclasses.make_dataclass("Action", ["id", "size"])("f1", len(data))
    spans = _spans(len(data))
    pool = ConnectionPool()
    try:
        with pytest.raises(RangesApart):
            _copy_ranges(url, action, pool, spans)
        apart = [_copy_range_with(pool, url, action, a, b) for a, b in spans]
    finally:
        pool.close()
    assert apart == [data[a:b] for a, b in spans]


def _copy_range_with(pool: ConnectionPool, url: str, action, start: int, end: int) -> bytes:
    out = io.BytesIO()
    _, ranged = copy_range(url, out, pool=pool, file_id=action.id, start=start, end=end, size=action.size)
    assert ranged
    return out.getvalue()
