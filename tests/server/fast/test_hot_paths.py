"""GET /version and /metadata answered by the hot-path middleware are the routes' answers, byte for byte."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from conftest import OTHER_TOKEN, TOKEN, corpus_config
from servers import RunningServer

from deltaport.server import create_app, parse_config
from deltaport.server.fast.hot_paths import HotTableCalls
from deltaport.storage import store_for

T = "/delta-sharing/shares/corpus/schemas/default/tables"
ALICE = {"Authorization": f"Bearer {TOKEN}"}

CASES = [
    ("GET", f"{T}/partitioned/version", ALICE),
    ("GET", f"{T}/cdf/version?startingTimestamp=2000-01-01T00:00:00Z", ALICE),
    ("GET", f"{T}/cdf/version?startingTimestamp=not-a-time", ALICE),
    ("GET", f"{T}/cdf/version?startingTimestamp=2999-01-01T00:00:00Z", ALICE),
    ("GET", f"{T}/partitioned/metadata", ALICE),
    ("GET", f"{T}/cdf/metadata?version=1", ALICE),
    ("GET", f"{T}/cdf/metadata?version=abc", ALICE),
    ("GET", f"{T}/cdf/metadata?version=-1", ALICE),
    ("GET", f"{T}/cdf/metadata?version=99999", ALICE),
    ("GET", f"{T}/cdf/metadata?timestamp=2000-01-01T00:00:00Z", ALICE),
    ("GET", f"{T}/cdf/metadata?version=1&timestamp=2000-01-01T00:00:00Z", ALICE),
    ("GET", f"{T}/nohistory/metadata?version=0", ALICE),
    ("GET", f"{T}/cm_name/metadata", {**ALICE, "delta-sharing-capabilities": "responseformat=delta"}),
    ("GET", f"{T}/dv/metadata", {**ALICE, "delta-sharing-capabilities": "responseformat=parquet,delta"}),
    ("GET", f"{T}/dv/metadata", {**ALICE, "delta-sharing-capabilities": "responseformat=avro"}),
    ("GET", f"{T}/broken/metadata", ALICE),
    ("GET", f"{T}/broken/version", ALICE),
    ("GET", f"{T}/missing/metadata", ALICE),
    ("GET", f"{T}/part%69tioned/version", ALICE),  # percent-encoded name
    ("GET", f"{T}/partitioned/metadata", {}),
    ("GET", f"{T}/partitioned/metadata", {"Authorization": "Bearer wrong"}),
    ("GET", f"{T}/partitioned/metadata", {"Authorization": f"Bearer {OTHER_TOKEN}"}),
    ("GET", "/delta-sharing/shares/other/schemas/s/tables/t/version", {"Authorization": f"Bearer {OTHER_TOKEN}"}),
    # passed on to the routes: their own answers either way
    ("GET", f"{T}/cdf/metadata?versoin=1", ALICE),
    ("GET", f"{T}/cdf/metadata?version=", ALICE),
    ("GET", f"{T}/cdf/metadata?version=0&version=1", ALICE),
    ("HEAD", f"{T}/partitioned/version", ALICE),
    ("POST", f"{T}/partitioned/metadata", ALICE),
]


def _headers(response: httpx.Response) -> list:
    return sorted((k, v) for k, v in response.headers.items() if k not in ("date", "x-request-id"))  # per request


@pytest.fixture(scope="module")
def clients():
    config = parse_config(corpus_config())
    secret = b"s" * 32
    hot = create_app(config, file_secret=secret)
    routed = create_app(config, file_secret=secret, hot_paths=False)
    servers = RunningServer(hot), RunningServer(routed)
    try:
        with httpx.Client(base_url=servers[0].url) as a, httpx.Client(base_url=servers[1].url) as b:
            yield a, b
    finally:
        for s in servers:
            s.stop()


@pytest.mark.parametrize(("method", "url", "headers"), CASES, ids=[f"{m} {u[len(T) :] or u}" for m, u, _ in CASES])
def test_hot_answers_are_the_routes_answers(clients, method, url, headers):
    hot, routed = clients
    for _ in range(2):  # cold, then with the snapshot cached
        a, b = hot.request(method, url, headers=headers), routed.request(method, url, headers=headers)
        assert (a.status_code, a.content) == (b.status_code, b.content)
        assert _headers(a) == _headers(b)
    if a.status_code >= 400 and method != "HEAD":
        assert set(a.json()) == {"errorCode", "message"}


def _taken(method: str, path: str, query: bytes = b"", headers=()) -> bool:
    """Whether the middleware answers the request itself (rather than passing it on)."""
    passed = []

    async def inner(scope, receive, send):
        passed.append(scope)

    async def handler(share, schema, table, q, h):
        from starlette.responses import Response

        return Response(b"")

    app = HotTableCalls(
        inner,
        prefix="/p",
        calls={
            "version": (handler, ("startingTimestamp",), ("authorization",)),
            "metadata": (handler, ("version", "timestamp"), ("authorization", "delta-sharing-capabilities")),
        },
    )
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query,
        "headers": list(headers),
        "root_path": "",
    }

    async def send(message):
        pass

    asyncio.run(app(scope, None, send))
    return not passed


def test_what_the_middleware_takes_and_what_it_passes_on():
    auth = (b"authorization", b"Bearer x")
    assert _taken("GET", "/p/shares/a/schemas/b/tables/c/version", headers=[auth])
    assert _taken("GET", "/p/shares/a/schemas/b/tables/c/metadata", b"version=3", [auth])
    assert _taken("GET", "/p/shares/a/schemas/b/tables/c/metadata", b"", [(b"delta-sharing-capabilities", b"x")])
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/metadata", b"versoin=3")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/metadata", b"version=")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/metadata", b"version=1&version=2")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/version", b"version=1")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/version", headers=[auth, auth])
    assert not _taken("HEAD", "/p/shares/a/schemas/b/tables/c/version")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/query")
    assert not _taken("GET", "/p/shares/a/schemas/b/tables/c/d/version")
    assert not _taken("GET", "/shares/a/schemas/b/tables/c/version")


def test_the_middleware_reads_what_the_routes_declare():
    app = create_app(parse_config(corpus_config()))
    hot = next(m for m in app.user_middleware if m.cls is HotTableCalls)
    calls = hot.kwargs["calls"]
    assert {name: call[1:] for name, call in calls.items()} == {
        "version": (("startingTimestamp",), ("authorization",)),
        "metadata": (("version", "timestamp"), ("authorization", "delta-sharing-capabilities")),
    }


def test_hot_answers_are_in_the_access_log(clients, caplog):
    hot, _ = clients
    with caplog.at_level(logging.INFO, logger="deltaport.access"):
        hot.get(f"{T}/partitioned/version", headers=ALICE)
    assert f"GET {T}/partitioned/version 200" in caplog.text
    assert TOKEN not in caplog.text
    record = next(r for r in caplog.records if r.name == "deltaport.access")
    assert (record.levelname, record.filename, record.funcName) == ("INFO", "access_log.py", "__call__")


class _FailingListing:
    """A table's store whose log listings fail with an error no layer expects (a bug, say)."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list_dir(self, *args, **kwargs):
        raise ZeroDivisionError("a bug")


def test_an_unexpected_error_on_the_hot_path_is_the_routes_500(caplog):
    config = parse_config(corpus_config())
    opener = lambda location, options: _FailingListing(store_for(location, options))  # noqa: E731
    servers = [RunningServer(create_app(config, store=opener, hot_paths=on)) for on in (True, False)]
    try:
        with caplog.at_level(logging.INFO):
            a, b = (httpx.get(f"{s.url}{T}/partitioned/version", headers=ALICE) for s in servers)
    finally:
        for s in servers:
            s.stop()
    assert (
        (a.status_code, a.json()) == (b.status_code, b.json()) == (500, {"errorCode": "INTERNAL_ERROR", "message": ""})
    )
    assert _headers(a) == _headers(b)
    logged = [r.getMessage().rsplit(" ", 1)[0] for r in caplog.records if r.name == "deltaport.access"]
    assert logged == [f"GET {T}/partitioned/version 0"] * 2, logged  # no response had started
    assert sum("unexpected error on GET" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("traced", [False, True])
def test_hot_answers_take_the_framework_s_way_only_under_opentelemetry(traced, monkeypatch):
    app = create_app(parse_config(corpus_config()))
    monkeypatch.setattr(app._native_telemetry, "enabled", lambda: traced)  # the framework's own check

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get(f"{T}/partitioned/version", headers=ALICE)

    answer = asyncio.run(get())
    assert answer.status_code == 200
    assert answer.headers["delta-table-version"]
    assert (app._hot_stack is None) == traced  # the hot paths' own stack is made when first taken
