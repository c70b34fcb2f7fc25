"""Bodies taken straight from the socket (deltaport.client.splicing) by copy_ranges' writers that
can: the file's bytes, against the real sharing server; a server that stalls or closes mid-body is
an error to retry, never a hang or a short range; TLS and writers that cannot keep the ordinary
reads."""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from deltaport.client.download import ConnectionPool, Transient, copy_ranges, download
from deltaport.client.rest import RestClient
from deltaport.client.splicing import mover
from deltaport.client.transport import file_http_client


class FileAt:
    """A range's writer into a file at the range's own offsets, which takes bytes from the socket."""

    def __init__(self, fd: int, start: int) -> None:
        self.fd, self.pos, self.moved = fd, start, 0

    def write(self, data) -> int:
        view = memoryview(data)
        while len(view):
            n = os.pwrite(self.fd, view, self.pos)
            self.pos, view = self.pos + n, view[n:]
        return len(data)

    def splices(self) -> bool:
        return True

    def splice(self, move, limit: int) -> int:
        n = move(self.fd, self.pos, limit)
        self.pos += n
        self.moved += n
        return n


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """(URL, action) of a 4.8 MB file served by the real sharing server."""
    from deltalake import write_deltalake
    from servers import RunningServer

    from deltaport.server import create_app, parse_config

    work = tmp_path_factory.mktemp("splicing")
    rng = np.random.default_rng(3)
    write_deltalake(str(work / "t"), pa.table({"a": rng.random(300_000), "b": rng.random(300_000)}))
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(work / "t")}]}]}],
        "recipients": [{"name": "r", "tokens": ["token"], "shares": ["s"]}],
    }
    server = RunningServer(create_app(parse_config(config)))
    profile = work / "p.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": "token"})
    )
    with RestClient(str(profile)) as rest:
        (action,) = rest.query_table("s.d.t").files
    yield action
    server.stop()


def _spans(size: int) -> list[tuple[int, int]]:
    return [(4, 300_000), (1_000_000, 2_500_000), (2_500_100, 2_500_200), (size - 700_000, size)]


def test_ranges_taken_from_the_socket_are_the_files_bytes(big_file, tmp_path):
    action = big_file
    with file_http_client() as http:
        whole = download(action.url, http)
    spans = _spans(action.size)
    target = tmp_path / "entry"
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
    pool = ConnectionPool()
    moved = 0
    try:
        for _ in range(2):  # the second GET on the kept-alive connection
            outs = [FileAt(fd, a) for a, _ in spans]
            parts = [(a, b, out) for (a, b), out in zip(spans, outs)]
            copy_ranges(action.url, parts, pool=pool, file_id=action.id, size=action.size)
            assert [out.pos for out in outs] == [b for _, b in spans]
            moved += sum(out.moved for out in outs)
    finally:
        os.close(fd)
        pool.close()
    data = target.read_bytes()
    for a, b in spans:
        assert data[a:b] == whole[a:b]
    assert moved > 0.8 * 2 * sum(b - a for a, b in spans)  # most bytes never went through Python


class _Stalling:
    """A server that answers one GET with the start of a multipart body, then ``then``:
    ``"stall"`` (sends nothing more) or ``"close"``."""

    def __init__(self, then: str) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/f"
        self.then = then
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.recv(65536)
        head = b"--B\r\nContent-Range: bytes 0-199999/400000\r\n\r\n"
        conn.sendall(
            b"HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; boundary=B\r\n"
            b"Content-Length: 400200\r\n\r\n" + head + b"x" * 100_000
        )
        if self.then == "stall":
            time.sleep(10)
        conn.close()


@pytest.mark.parametrize("then", ["stall", "close"])
def test_a_server_that_stalls_or_closes_mid_body_is_an_error_to_retry(then, tmp_path):
    server = _Stalling(then)
    fd = os.open(tmp_path / "entry", os.O_RDWR | os.O_CREAT, 0o600)
    pool = ConnectionPool(timeout=0.5)
    parts = [(0, 200_000, FileAt(fd, 0)), (300_000, 400_000, FileAt(fd, 300_000))]
    started = time.monotonic()
    try:
        with pytest.raises(Transient, match="no bytes came" if then == "stall" else "closed the connection"):
            copy_ranges(server.url, parts, pool=pool, file_id="f", size=400_000)
    finally:
        os.close(fd)
        pool.close()
    assert time.monotonic() - started < 5


def test_one_range_spanning_the_parts_is_taken_from_the_socket_too(tmp_path):
    data = os.urandom(400_000)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-399999/400000\r\n"
            b"Content-Length: 400000\r\n\r\n" + data
        )
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    target = tmp_path / "entry"
    fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
    outs = [FileAt(fd, 0), FileAt(fd, 250_000)]
    pool = ConnectionPool(timeout=5)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"
        copy_ranges(url, [(0, 150_000, outs[0]), (250_000, 400_000, outs[1])], pool=pool, file_id="f", size=400_000)
    finally:
        os.close(fd)
        pool.close()
        listener.close()
    written = target.read_bytes()
    assert written[:150_000] == data[:150_000]
    assert written[250_000:400_000] == data[250_000:400_000]
    assert not any(written[150_000:250_000])  # the bytes between the ranges were dropped
    assert sum(out.moved for out in outs) > 200_000


def test_after_a_failure_the_next_body_is_right(big_file, tmp_path):
    test_a_server_that_stalls_or_closes_mid_body_is_an_error_to_retry("close", tmp_path)  # drops the thread's pipe
    test_ranges_taken_from_the_socket_are_the_files_bytes(big_file, tmp_path)


def test_the_pipes_of_threads_that_ended_are_closed(big_file, tmp_path):
    def pipes() -> int:  # the server's sockets close in their own time: only pipes are counted
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
        return sum(link.startswith("pipe:") for link in links)

    read = test_ranges_taken_from_the_socket_are_the_files_bytes
    read(big_file, tmp_path)  # this thread's pipe
    before = pipes()
    for _ in range(5):
        thread = threading.Thread(target=read, args=(big_file, tmp_path))
        thread.start()
        thread.join()
    assert pipes() == before


def test_tls_and_missing_sockets_keep_the_ordinary_reads():
    plain = socket.socket()
    tls = ssl.create_default_context().wrap_socket(socket.socket(), server_hostname="example.com")
    try:
        assert mover(None) is None
        assert mover(tls) is None
        assert mover(plain) is not None
    finally:
        plain.close()
        tls.close()
