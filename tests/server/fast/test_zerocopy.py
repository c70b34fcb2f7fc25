"""File bodies sent by ``sendfile`` (zerocopy.py): a real uvicorn server with the protocol, an ASGI
app sending ``http.response.zerocopysend`` messages, and clients that read fast, slowly, or leave.
The sharing server's own answers through it are held equal to the routes' in test_file_reads.py."""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest
from conftest import TOKEN, corpus_config
from servers import RunningServer

from deltaport.cli.serve import _http_protocol
from deltaport.server import create_app, parse_config
from deltaport.server.fast import file_reads, zerocopy

#: Larger than loopback's socket buffers (4 MiB at most here): a send fills them and waits.
BIG = 24 << 20
#: path -> the body: bytes as they are, (start, end) a range of the file by the extension.
PLANS: dict[str, list] = {
    "/whole": [(0, BIG)],
    "/parts": [b"--head--", (0, 1000), b"--between--", (5 << 20, 13 << 20), b"--tail--", (BIG - 7, BIG)],
    "/empty-range": [b"a", (10, 10), b"b"],
    # more than the socket takes as ordinary body bytes: the transport still holds some of them
    # when the file range is sent, which must wait for them
    "/queued": [b"q" * (8 << 20), (0, 1 << 20)],
    "/not-offered": [b"x", (0, 1 << 20)],
}
#: The paths offered the extension (as serve offers it to the file URLs only).
OFFERED = lambda path: path != "/not-offered"  # noqa: E731


class App:
    """Answers each planned path with its body; notes per request whether the scope offered the
    extension and how the app ended ("done" or the exception)."""

    def __init__(self, path) -> None:
        self.path = path
        self.ended: list[str] = []
        self.offered: list[bool] = []

    async def __call__(self, scope, receive, send):
        offered = zerocopy.EXTENSION in (scope.get("extensions") or {})
        self.offered.append(offered)
        plan = PLANS.get(scope["path"], PLANS["/whole"])
        length = sum(len(s) if isinstance(s, bytes) else s[1] - s[0] for s in plan)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if scope["path"] == "/bad/before-start":
                await send({"type": zerocopy.EXTENSION, "file": fd, "offset": 0, "count": 1, "more_body": False})
            head = [(b"content-length", str(length - (scope["path"] == "/bad/too-long")).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": head})
            for i, segment in enumerate(plan, 1):
                more = i < len(plan)
                if not isinstance(segment, bytes) and not offered:  # a server without it: the bytes
                    segment = os.pread(fd, segment[1] - segment[0], segment[0])
                if isinstance(segment, bytes):
                    await send({"type": "http.response.body", "body": segment, "more_body": more})
                else:
                    start, end = segment
                    message = {"type": zerocopy.EXTENSION, "offset": start, "count": end - start, "more_body": more}
                    await send({**message, "file": fd if i % 2 else _FileNo(fd)})  # an fd or fileno()
            self.ended.append("done")
        except Exception as exc:
            self.ended.append(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            os.close(fd)


class _FileNo:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def _expected(data: bytes, plan: list) -> bytes:
    return b"".join(s if isinstance(s, bytes) else data[s[0] : s[1]] for s in plan)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("zerocopy") / "big"
    path.write_bytes(os.urandom(BIG))
    return path, path.read_bytes()


@pytest.fixture(scope="module")
def served(big):
    app = App(big[0])
    server = RunningServer(app, http=zerocopy.protocol_class(file_reads.READERS, OFFERED), lifespan="off")
    try:
        yield app, server.url
    finally:
        server.stop()


@pytest.fixture
def sendfiles(monkeypatch):
    """The threads ``os.sendfile`` ran on, by name, while a test runs."""
    threads: list[str] = []
    real = os.sendfile

    def noted(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(os, "sendfile", noted)
    return threads


@pytest.mark.parametrize("path", list(PLANS))
def test_bodies_are_the_planned_bytes(served, big, path, sendfiles):
    app, url = served
    answer = httpx.get(url + path, timeout=30)
    assert answer.status_code == 200 and app.ended[-1] == "done" and app.offered[-1] == OFFERED(path)
    assert answer.content == _expected(big[1], PLANS[path])
    assert bool(sendfiles) == (OFFERED(path) and path != "/empty-range")  # the file's bytes, when there are any


@pytest.mark.parametrize("cached", [True, False])
def test_cached_ranges_are_sent_on_the_loop_and_others_by_threads(served, big, monkeypatch, sendfiles, cached):
    _, url = served
    monkeypatch.setattr(zerocopy, "resident", lambda fd, offset, count: cached)
    assert httpx.get(url + "/parts", timeout=30).content == _expected(big[1], PLANS["/parts"])
    readers = {name.startswith("deltaport-file-read") for name in sendfiles}
    assert readers == {not cached}


def test_a_slow_reader_gets_every_byte(served, big):
    app, url = served
    got = bytearray()
    with httpx.stream("GET", url + "/parts", timeout=30) as answer:
        for piece in answer.iter_bytes(1 << 20):
            got += piece
            time.sleep(0.02)  # the server's sends find the socket full, and wait for it
    assert bytes(got) == _expected(big[1], PLANS["/parts"]) and app.ended[-1] == "done"


@pytest.mark.parametrize("paths", [["/queued"], ["/whole", "/parts"]], ids=["queued bytes first", "pipelined"])
def test_a_slow_small_window_gets_every_answer_in_order(served, big, paths):
    """Bytes the transport queued (a body's first bytes, the next answer's head) go before a file
    range sent after them."""
    _, url = served
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # a small window: the server's sends wait
        s.connect(("127.0.0.1", port))
        s.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p.encode() for p in paths))
        time.sleep(0.3)
        stream = s.makefile("rb")
        bodies = [_read_answer(stream) for _ in paths]
    assert bodies == [_expected(big[1], PLANS[p]) for p in paths]


def _read_answer(stream) -> bytes:
    """One HTTP/1.1 answer's body from ``stream`` (read slowly), by its Content-Length."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += stream.read(1)
    lines = head.lower().split(b"\r\n")
    length = int(next(line.split(b":")[1] for line in lines if line.startswith(b"content-length")))
    body = bytearray()
    while len(body) < length:
        body += stream.read(min(1 << 20, length - len(body)))
        time.sleep(0.005)
    return bytes(body)


def test_a_reader_that_leaves_ends_the_body_quietly_and_the_server_serves_on(served, big):
    app, url = served
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(1 << 16)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset on close
    deadline = time.monotonic() + 10
    while len(app.ended) < len(app.offered) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert app.ended[-1] == "done"  # no error for the app: the body just ended
    assert httpx.get(url + "/whole", timeout=30).content == big[1]


class _GatedReaders(ThreadPoolExecutor):
    """File-read threads whose calls wait until ``opened`` is set (``waiting`` tells one does)."""

    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="deltaport-file-read-gated")
        self.waiting, self.opened = threading.Event(), threading.Event()

    def submit(self, fn, /, *args, **kwargs):
        def gated():
            self.waiting.set()
            self.opened.wait(10)
            return fn(*args, **kwargs)

        return super().submit(gated)


def test_a_send_pending_when_its_client_leaves_never_reaches_another_connection(big, monkeypatch):
    """The transport closes its socket's descriptor when the client goes, and the next connection
    may get that number at once: a file range still waiting in a thread must not go to it."""
    monkeypatch.setattr(zerocopy, "resident", lambda fd, offset, count: False)  # ranges go by the threads
    readers = _GatedReaders()
    app = App(big[0])
    server = RunningServer(app, http=zerocopy.protocol_class(readers, OFFERED), lifespan="off")
    port = int(server.url.rsplit(":", 1)[1])
    others: list[socket.socket] = []
    try:
        with socket.create_connection(("127.0.0.1", port)) as leaving:
            leaving.sendall(b"GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")
            assert readers.waiting.wait(10)  # its range waits in a thread
            leaving.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        time.sleep(0.3)  # the server saw it go and closed its descriptor
        others = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]  # one gets that number
        time.sleep(0.3)
        readers.opened.set()
        readable, _, _ = select.select(others, [], [], 1.0)
        assert readable == []  # not a byte to connections that asked for nothing
        others[0].sendall(b"GET /parts HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_answer(others[0].makefile("rb")) == _expected(big[1], PLANS["/parts"])
    finally:
        readers.opened.set()
        for other in others:
            other.close()
        server.stop()
        readers.shutdown()


def test_a_head_request_sends_no_body(served):
    app, url = served
    answer = httpx.head(url + "/parts", timeout=30)
    assert answer.status_code == 200 and answer.content == b"" and app.ended[-1] == "done"
    assert int(answer.headers["content-length"]) == len(_expected(b"\0" * BIG, PLANS["/parts"]))


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/bad/before-start", "only sent after the start of a response"),
        ("/bad/too-long", "longer than Content-Length"),
    ],
)
def test_a_misused_extension_is_the_app_s_error(served, path, error):
    app, url = served
    with pytest.raises(httpx.HTTPError):  # a 500 before the start, or a body cut short after it
        httpx.get(url + path, timeout=30).raise_for_status()
    assert error in app.ended[-1]


def test_requests_it_is_not_offered_to_are_served_as_before(served, big):
    app, url = served
    answer = httpx.get(url + "/not-offered", timeout=30)
    assert app.offered[-1] is False and answer.content == _expected(big[1], PLANS["/not-offered"])


def test_plain_uvicorn_does_not_offer_it(big):
    app = App(big[0])
    server = RunningServer(app, lifespan="off")
    try:
        answer = httpx.get(server.url + "/parts", timeout=30)
    finally:
        server.stop()
    assert app.offered == [False] and answer.content == _expected(big[1], PLANS["/parts"])


def test_downloads_sent_by_sendfile_are_counted_and_audited():
    events = []

    class Audit:
        def request(self, info, route, method, seconds, path_params):
            events.append((info.download, info.bytes_sent, info.status))

        def flush(self):
            pass

    app = create_app(parse_config(corpus_config()), audit=Audit(), metrics_token="m")
    server = RunningServer(app, **_http_protocol(app))  # as serve runs it
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            lines = c.post(
                "/delta-sharing/shares/corpus/schemas/default/tables/partitioned/query",
                json={},
                headers={"Authorization": f"Bearer {TOKEN}"},
            ).content.splitlines()
            url = next(orjson.loads(x)["file"]["url"] for x in lines if x.startswith(b'{"file"'))
            whole, part = c.get(url), c.get(url, headers={"Range": "bytes=0-9,20-29"})
            deadline = time.monotonic() + 5  # the record is written once the answer is sent
            while len([e for e in events if e[0]]) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            metrics = c.get("/metrics", headers={"Authorization": "Bearer m"}).text
    finally:
        server.stop()
    assert part.status_code == 206 and whole.status_code == 200
    assert [e for e in events if e[0]] == [(True, len(whole.content), 200), (True, len(part.content), 206)]
    total = len(whole.content) + len(part.content)
    assert f'deltaport_download_bytes_total{{recipient="alice",share="corpus"}} {float(total)}' in metrics


def test_resident_tells_whether_the_page_cache_holds_a_range(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.pread(fd, 1 << 20, 0)
        assert zerocopy.resident(fd, 0, 1 << 20) and zerocopy.resident(fd, 4096, 10)
        assert not zerocopy.resident(fd, 0, 2 << 20)  # past the end: nothing there to hold
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert not zerocopy.resident(fd, 0, 1 << 20)
    finally:
        os.close(fd)


def test_the_protocol_is_uvicorn_s_httptools_one():
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    protocol = zerocopy.protocol_class(file_reads.READERS, OFFERED)
    assert protocol is not None and issubclass(protocol, HttpToolsProtocol)
