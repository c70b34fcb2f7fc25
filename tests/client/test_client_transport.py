"""The http.client-based transport for presigned file URLs."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pyarrow as pa
import pytest

from deltaport.client.download import download_into
from deltaport.client.transport import FileTransport, direct_pool, file_http_client

BODY = bytes(range(256)) * 4096  # 1 MiB


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list = []  # noqa: RUF012  # shared by the handler instances of one test server, on purpose

    def log_message(self, *args) -> None:  # quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except ConnectionResetError:  # a client reset a kept-alive connection: nothing to report
            self.close_connection = True

    def do_GET(self) -> None:
        type(self).seen.append((self.path, dict(self.headers), self.client_address[1]))
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/data?x=1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/close"):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"ok")
            self.close_connection = True
            return
        if self.path.startswith("/missing"):
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")
            return
        rng = self.headers.get("Range")
        if rng:
            start, end = (int(x) for x in rng.split("=")[1].split("-"))
            chunk = BODY[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(BODY)}")
        else:
            chunk = BODY
            self.send_response(200)
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        try:
            self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client hung up before the whole body: nothing to report

    do_HEAD = do_GET


@pytest.fixture(scope="module")
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_downloads_whole_files_and_ranges(http_server):
    _Handler.seen.clear()
    with file_http_client() as http:
        response = http.get(http_server + "/data?X-Amz-Signature=abc%3D%2F&b=c+d")
        assert response.status_code == 200 and response.content == BODY
        part = http.get(http_server + "/data", headers={"Range": "bytes=10-19"})
        assert part.status_code == 206 and part.content == BODY[10:20]
    paths = [p for p, _, _ in _Handler.seen]
    assert paths[0] == "/data?X-Amz-Signature=abc%3D%2F&b=c+d"  # byte for byte: signatures survive
    headers = {k.lower(): v for k, v in _Handler.seen[0][1].items()}
    assert "authorization" not in headers and "accept-encoding" not in headers
    assert headers["host"] == http_server.split("//")[1]


def test_connections_are_kept_alive_and_reused(http_server):
    _Handler.seen.clear()
    with file_http_client() as http:
        for _ in range(5):
            assert http.get(http_server + "/data").content == BODY
    ports = {port for _, _, port in _Handler.seen}
    assert len(ports) == 1


def test_server_closed_connections_are_replaced(http_server):
    transport = FileTransport()
    with httpx.Client(transport=transport) as http:
        assert http.get(http_server + "/close").content == b"ok"
        assert http.get(http_server + "/data").content == BODY  # a new connection, transparently
        # a kept-alive connection that went away meanwhile
        key = next(iter(k for k, v in transport.pool._idle.items() if v))
        transport.pool._idle[key][0].sock.shutdown(socket.SHUT_RDWR)
        assert http.get(http_server + "/data").content == BODY


def test_redirects_and_errors(http_server):
    with file_http_client() as http:
        assert http.get(http_server + "/redirect").content == BODY
        missing = http.get(http_server + "/missing")
        assert missing.status_code == 404 and missing.text == "not found"
        assert http.head(http_server + "/data").headers["content-length"] == str(len(BODY))


def test_connection_failures_are_httpx_errors():
    with file_http_client() as http, pytest.raises(httpx.ConnectError):
        http.get("http://127.0.0.1:9/nothing")


def test_proxies_from_the_environment_use_httpx(monkeypatch, http_server):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    transport = FileTransport()
    assert transport._proxied(httpx.Request("GET", "http://example.com/x"))
    monkeypatch.setenv("NO_PROXY", "example.com")
    assert not FileTransport()._proxied(httpx.Request("GET", "http://example.com/x"))


def test_whole_files_straight_into_arrow_memory_on_the_transports_connections(monkeypatch, http_server):
    with file_http_client() as http:
        pool = direct_pool(http, http_server + "/data")
        assert pool is not None
        assert download_into(http_server + "/data", pool, pa.allocate_buffer).to_pybytes() == BODY
        assert download_into(http_server + "/redirect", pool, pa.allocate_buffer) is None  # httpx follows those
        assert sum(len(conns) for conns in pool._idle.values()) == 1  # kept alive for the next file
    with httpx.Client() as plain:
        assert direct_pool(plain, http_server + "/data") is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    with file_http_client() as proxied:
        assert direct_pool(proxied, "http://example.com/x") is None
