"""The download layer (deltaport.client.download) against the real sharing server on loopback.

A small front server on loopback forwards GETs to the sharing server's file URLs, so that a
test can make the "storage" answer a status a few times first, and can see what was asked.
"""

from __future__ import annotations

import io
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import pytest

from deltaport.client.download import ConnectionPool, Transient, copy_url, download, retrying
from deltaport.client.errors import ConnectionFailed, FileDownloadError, UrlExpired
from deltaport.client.rest import RestClient
from deltaport.client.retry import RetryPolicy
from deltaport.client.transport import file_http_client

pytest_plugins = ["client_fixtures"]

FAST = RetryPolicy(max_retries=3, initial_backoff=0.001, max_backoff=0.01)


class Front:
    """Forwards ``/<path>?<query>`` to ``upstream``; answers ``script`` [(status, body), ...] first."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.script: list[tuple[int, bytes]] = []
        self.seen: list[dict] = []  # headers of each request, lower-cased
        self.statuses: list[int] = []  # the status each request was answered with
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                front.seen.append({k.lower(): v for k, v in self.headers.items()})
                if front.script:
                    status, body = front.script.pop(0)
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() == "range"}
                    answer = httpx.get(front.upstream + self.path, headers=headers, timeout=30)
                    status, body = answer.status_code, answer.content
                front.statuses.append(status)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


def test_whole_files_and_ranges_come_from_the_server(file_action, front, http):
    whole = download(file_action.url, http, file_id=file_action.id)
    assert len(whole) == file_action.size and whole[:4] == b"PAR1"
    assert _copy(file_action.url, file_action.id) == whole
    part = download(front.via(file_action.url), http, byte_range=(5, 100), file_id=file_action.id)
    assert part == whole[5:105]
    assert front.seen[-1]["range"] == "bytes=5-104" and front.statuses[-1] == 206  # the storage cut it, not us


def test_a_store_that_ignores_range_still_gives_the_range(file_action, front, http):
    whole = download(file_action.url, http)
    front.script = [(200, whole)]
    assert download(front.via(file_action.url), http, byte_range=(7, 9)) == whole[7:16]


@pytest.mark.parametrize("fetch", ["download", "copy"])
def test_503_is_retried_with_the_policy_then_an_error_of_that_status(file_action, front, http, fetch):
    url = front.via(file_action.url)

    def get() -> bytes:
        if fetch == "download":
            return download(url, http, retry=FAST, file_id=file_action.id)
        return _copy(url, file_action.id)

    front.script = [(503, b"slow down"), (503, b"slow down")]
    assert len(get()) == file_action.size
    assert front.statuses == [503, 503, 200]
    front.script = [(503, b"slow down")] * (FAST.max_retries + 1)
    with pytest.raises(FileDownloadError, match="HTTP 503") as err:
        get()
    assert err.value.http_status == 503 and not isinstance(err.value, UrlExpired)
    assert front.statuses[3:] == [503] * (FAST.max_retries + 1)


@pytest.mark.parametrize("fetch", ["download", "copy"])
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
        if fetch == "download":
            download(url, http, retry=FAST, file_id=file_action.id)
        else:
            _copy(url, file_action.id)
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
