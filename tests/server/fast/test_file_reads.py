"""GET and HEAD of the server's own file URLs answered by the fast path (file_reads.py) are the file
routes' answers: status, headers and body, errors included."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import unquote

import httpx
import orjson
import pytest
from conftest import OTHER_TOKEN, TOKEN, corpus_config
from servers import RunningServer

from deltaport.cli.serve import _http_protocol
from deltaport.server import create_app, parse_config
from deltaport.server.fast import file_reads, zerocopy
from deltaport.server.sharing.registry import recipient_key

T = "/delta-sharing/shares/corpus/schemas/default/tables"
ALICE = {"Authorization": f"Bearer {TOKEN}"}
NOW = [time.time()]  # both servers' clock: a test moves it to expire URLs

#: (request id, method, request headers); an empty URL transform in CASES keeps the URL as issued.
CASES = [
    ("whole", "GET", {}),
    ("head", "HEAD", {}),
    ("first bytes", "GET", {"Range": "bytes=0-9"}),
    ("open end", "GET", {"Range": "bytes=10-"}),
    ("suffix", "GET", {"Range": "bytes=-5"}),
    ("suffix past the start", "GET", {"Range": "bytes=-99999999"}),
    ("end past the file", "GET", {"Range": "bytes=3-99999999"}),
    ("head of a range", "HEAD", {"Range": "bytes=0-3"}),
    ("start past the file", "GET", {"Range": "bytes=99999999-"}),
    ("start past the file, head", "HEAD", {"Range": "bytes=99999999-100000000"}),
    ("empty suffix", "GET", {"Range": "bytes=-0"}),
    ("end before start", "GET", {"Range": "bytes=5-2"}),
    ("end before start, head", "HEAD", {"Range": "bytes=5-2"}),
    ("several ranges", "GET", {"Range": "bytes=0-1,4-5"}),
    ("several ranges, head", "HEAD", {"Range": "bytes=0-1,4-5"}),
    ("several ranges of each form, out of order", "GET", {"Range": "bytes=-3, 10-12,0-1,20-"}),
    ("overlapping and touching ranges merged", "GET", {"Range": "bytes=0-5,3-9,10-12,30-40"}),
    ("several ranges merged into one", "GET", {"Range": "bytes=0-5,2-8"}),
    ("several ranges, one past the file", "GET", {"Range": "bytes=0-1,99999999-"}),
    ("several ranges, one ending before it starts", "GET", {"Range": "bytes=0-1,9-4"}),
    ("a hundred ranges", "GET", {"Range": "bytes=" + ",".join(f"{3 * i}-{3 * i}" for i in range(100))}),
    # read by the routes: their own answers either way
    ("more than a hundred ranges", "GET", {"Range": "bytes=" + ",".join(f"{3 * i}-{3 * i}" for i in range(101))}),
    ("a malformed range among several", "GET", {"Range": "bytes=0-1,x-4"}),
    ("not bytes", "GET", {"Range": "items=0-1"}),
    ("not a number", "GET", {"Range": "bytes=abc"}),
    ("no dash", "GET", {"Range": "bytes=5"}),
    ("stale if-range", "GET", {"Range": "bytes=0-3", "If-Range": '"not-this-etag"'}),
    ("upper case unit", "GET", {"Range": "Bytes=0-3"}),
]

#: name -> what makes a URL as issued into the one requested.
BROKEN = {
    "forged signature": lambda url: url.replace("X-Amz-Signature=", "X-Amz-Signature=0"),
    "another file": lambda url: url.replace(".parquet?", ".parquet.crc?"),
    "another recipient": lambda url: url.replace(recipient_key("alice"), recipient_key("bob")),
    "no file": lambda url: url.split("?")[0].rsplit("/", 1)[0] + "/?" + url.split("?")[1],
    "unsigned": lambda url: url.split("?")[0],
}


def _headers(response: httpx.Response) -> list:
    return sorted((k, v) for k, v in response.headers.items() if k not in ("date", "x-request-id"))  # per request


def _answer(response: httpx.Response) -> tuple[int, bytes, list]:
    """Status, body and headers, a multipart answer's random boundary left out."""
    boundary = response.headers.get("content-type", "").partition("boundary=")[2]
    body, headers = response.content, _headers(response)
    if boundary:
        body = body.replace(boundary.encode(), b"<boundary>")
        headers = [(k, v.replace(boundary, "<boundary>")) for k, v in headers]
    return response.status_code, body, headers


def _file_urls(client: httpx.Client, table: str = "partitioned", headers=ALICE) -> list[str]:
    lines = client.post(f"{T}/{table}/query", json={}, headers=headers).content.splitlines()
    return [orjson.loads(x)["file"]["url"] for x in lines if x.startswith(b'{"file"')]


@pytest.fixture(scope="module", params=["buffered", "zero-copy"])
def apps(request):
    """The fast path's app and clients of it and of the routes' app. The fast path's server sends
    file bodies as ``http.response.body`` pieces, or by ``sendfile`` (serve's own protocol,
    zerocopy.py): every test runs with each."""
    config = parse_config(corpus_config())
    clock = lambda: NOW[0]  # noqa: E731
    hot = create_app(config, file_secret=b"s" * 32, clock=clock)
    routed = create_app(config, file_secret=b"s" * 32, clock=clock, hot_paths=False)
    protocol = _http_protocol(hot) if request.param == "zero-copy" else {}  # as serve runs it
    servers = RunningServer(hot, **protocol), RunningServer(routed)
    try:
        with httpx.Client(base_url=servers[0].url) as a, httpx.Client(base_url=servers[1].url) as b:
            yield hot, a, b
    finally:
        for s in servers:
            s.stop()


def _same(hot: httpx.Client, routed: httpx.Client, method: str, headers: dict, change=lambda url: url, index=0):
    a_url, b_url = (change(_file_urls(c)[index]) for c in (hot, routed))
    a, b = hot.request(method, a_url, headers=headers), routed.request(method, b_url, headers=headers)
    assert _answer(a) == _answer(b)
    if a.status_code >= 400 and method == "GET":
        assert set(a.json()) == {"errorCode", "message"}
    return a


@pytest.mark.parametrize(("name", "method", "headers"), CASES, ids=[c[0] for c in CASES])
def test_fast_answers_are_the_routes_answers(apps, name, method, headers):
    _, hot, routed = apps
    answer = _same(hot, routed, method, headers)
    assert answer.status_code in (200, 206, 400, 416)


def test_several_ranges_are_answered_under_the_process_boundary(apps):
    """A Python client compiles a pattern of each answer's boundary and caches it by pattern: the
    fast path draws its boundary once per process, so that a reader's later answers hit that cache."""
    _, hot, _ = apps
    url = _file_urls(hot)[0]
    kinds = {hot.get(url, headers={"Range": f"bytes=0-1,{4 + i}-{5 + i}"}).headers["content-type"] for i in range(3)}
    assert kinds == {f"multipart/byteranges; boundary={file_reads.BOUNDARY}"}


@pytest.mark.parametrize("name", list(BROKEN))
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_refused_urls_are_the_routes_refusals(apps, name, method):
    _, hot, routed = apps
    answer = _same(hot, routed, method, {}, BROKEN[name])
    assert answer.status_code in (403, 404)


def test_an_expired_url_is_the_routes_refusal(apps):
    _, hot, routed = apps
    urls = [_file_urls(c)[0] for c in (hot, routed)]
    NOW[0] += 24 * 3600
    try:
        a, b = (c.get(u) for c, u in zip((hot, routed), urls))
    finally:
        NOW[0] -= 24 * 3600
    assert a.status_code == 403 and (a.status_code, a.content) == (b.status_code, b.content)
    assert _headers(a) == _headers(b)


def test_a_matching_if_range_reads_the_range(apps):
    _, hot, routed = apps
    etags = {c.head(_file_urls(c)[0]).headers["etag"] for c in (hot, routed)}
    assert len(etags) == 1  # the same file, the same stat: the same ETag from both
    _same(hot, routed, "GET", {"Range": "bytes=2-5", "If-Range": etags.pop()})


def test_another_recipient_s_table_is_the_routes_refusal(apps):
    _, hot, routed = apps
    bob = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    urls = []
    for c in (hot, routed):
        lines = c.post("/delta-sharing/shares/other/schemas/s/tables/t/query", json={}, headers=bob).content
        url = next(orjson.loads(x)["file"]["url"] for x in lines.splitlines() if x.startswith(b'{"file"'))
        urls.append(url.replace(recipient_key("bob"), recipient_key("alice")))
    a, b = (c.get(u) for c, u in zip((hot, routed), urls))
    assert a.status_code == 403 and (a.content, _headers(a)) == (b.content, _headers(b))


@pytest.mark.parametrize("cached", [True, False])
def test_a_file_in_many_pieces_read_from_the_page_cache_or_by_threads(apps, monkeypatch, cached):
    _, hot, routed = apps
    monkeypatch.setattr(file_reads, "PIECE", 7)
    if not cached:
        monkeypatch.setattr(file_reads, "_cached", lambda fd, size, offset: None)
        monkeypatch.setattr(zerocopy, "resident", lambda fd, offset, count: False)
    whole = _same(hot, routed, "GET", {})
    assert whole.status_code == 200 and len(whole.content) > 7 * 3
    part = _same(hot, routed, "GET", {"Range": "bytes=5-40"})
    assert part.status_code == 206 and part.content == whole.content[5:41]


def test_the_fast_path_answers_file_urls_and_notes_the_download(apps, caplog):
    app, hot, _ = apps
    url = _file_urls(hot)[0]
    path = unquote(url.split("?")[0].split("//", 1)[1].split("/", 1)[1])  # as the scope has it
    scope = {"type": "http", "method": "GET", "path": "/" + path, "headers": [], "root_path": ""}
    assert app.files.take(scope) == (None,)
    assert app.files.take({**scope, "headers": [(b"range", b"bytes=1-2")]}) == (((1, 2),),)
    assert app.files.take({**scope, "headers": [(b"range", b"bytes=1-2, 5-,-3")]}) == (((1, 2), (5, None), (None, 3)),)
    assert app.files.take({**scope, "headers": [(b"range", b"bytes=1-2,x")]}) is None  # the route's
    assert app.files.take({**scope, "headers": [(b"range", b"bytes=1-2"), (b"range", b"bytes=1-2")]}) is None
    assert app.files.take({**scope, "method": "POST"}) is None
    assert app.files.take({**scope, "root_path": "/x"}) is None
    with caplog.at_level(logging.INFO, logger="deltaport.access"):
        answer = hot.get(url, headers={"Range": "bytes=0-9"})
        deadline = time.monotonic() + 5  # the line is written once the answer is sent: maybe after it arrived
        line = f"GET /{path} 206 "  # waited for itself: the query's own line may be logged meanwhile
        while time.monotonic() < deadline and not any(
            r.name == "deltaport.access" and r.getMessage().startswith(line) for r in caplog.records
        ):
            time.sleep(0.01)
    assert answer.status_code == 206
    logged = [r.getMessage() for r in caplog.records if r.name == "deltaport.access"]
    assert any(m.startswith(line) for m in logged), logged
    server_lines = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("deltaport"))
    assert url.split("?")[1] not in server_lines and "X-Amz" not in server_lines


def test_downloads_through_the_fast_path_are_counted_and_audited():
    events = []

    class Audit:
        def request(self, info, route, method, seconds, path_params):
            events.append((route, method, info.download, info.bytes_sent, info.principal, info.table, info.status))

        def flush(self):
            pass

    app = create_app(parse_config(corpus_config()), audit=Audit(), metrics_token="m")

    async def fetch() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            url = _file_urls_async(await c.post(f"{T}/partitioned/query", json={}, headers=ALICE))[0]
            part = await c.get(url, headers={"Range": "bytes=0-9"})
            metrics = await c.get("/metrics", headers={"Authorization": "Bearer m"})
            return part, metrics

    part, metrics = asyncio.run(fetch())
    assert part.status_code == 206 and app._hot_stack is not None  # the fast path's own stack answered it
    download = [e for e in events if e[0] == "/files/{key}/{path:path}"]
    assert download == [("/files/{key}/{path:path}", "GET", True, 10, "alice", "partitioned", 206)]
    assert 'deltaport_download_bytes_total{recipient="alice",share="corpus"} 10.0' in metrics.text


def _file_urls_async(response: httpx.Response) -> list[str]:
    return [orjson.loads(x)["file"]["url"] for x in response.content.splitlines() if x.startswith(b'{"file"')]
