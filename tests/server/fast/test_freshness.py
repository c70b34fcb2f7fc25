"""The polled calls share refreshes of a table's state, and no answer is older than its request."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import deltalake
import httpx
import pyarrow as pa
import pytest
from servers import RunningServer

from deltaport.server import create_app, parse_config
from deltaport.server.fast import freshness
from deltaport.storage import store_for

T = "/delta-sharing/shares/s/schemas/d/tables/t"


class _SlowListing:
    """A table's store whose log listings are counted and, while ``slow`` is set, return what they
    listed only after ``delay`` seconds (a listing taken, then a slow network)."""

    def __init__(self, store, delay: float) -> None:
        self._store = store
        self.delay = delay
        self.slow = threading.Event()
        self.listings = 0
        self._count = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list_dir(self, *args, **kwargs):
        listed = self._store.list_dir(*args, **kwargs)
        with self._count:
            self.listings += 1
        if self.slow.is_set():
            time.sleep(self.delay)
        return listed


@pytest.fixture
def served(tmp_path):
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, pa.table({"x": [1, 2, 3]}))
    stores: list[_SlowListing] = []

    def open_store(location, options):
        stores.append(_SlowListing(store_for(location, options), delay=0.6))
        return stores[-1]

    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": path}]}]}],
    }
    server = RunningServer(create_app(parse_config(config), store=open_store))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get(f"{T}/version").headers["delta-table-version"] == "0"
            yield http, path, stores[0]
    finally:
        server.stop()


@pytest.mark.parametrize("call", ["version", "metadata"])
def test_a_request_that_arrives_during_a_refresh_sees_the_commits_before_it(served, call):
    http, path, store = served
    store.slow.set()
    answers: dict[str, str] = {}
    first = threading.Thread(
        target=lambda: answers.update(first=http.get(f"{T}/{call}").headers["delta-table-version"])
    )
    first.start()
    time.sleep(0.2)  # the first request's listing is taken (version 0) and on its slow way back
    deltalake.write_deltalake(path, pa.table({"x": [4]}), mode="append")  # version 1 lands
    second = http.get(f"{T}/{call}")  # arrives after the commit: must not share the older listing
    first.join()
    assert second.status_code == 200
    assert answers["first"] == "0"
    assert second.headers["delta-table-version"] == "1"


def test_concurrent_polls_share_refreshes(served):
    http, _, store = served
    store.slow.set()
    store.delay = 0.3
    before = store.listings
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda _: http.get(f"{T}/version"), range(24)))
    assert all(r.status_code == 200 and r.headers["delta-table-version"] == "0" for r in answers)
    listings = store.listings - before
    assert 1 <= listings <= 6, f"{listings} listings for 24 concurrent polls"


class _Listed:
    """A table whose latest version is how many listings it has had; each listing's start is noted."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.starts: list[float] = []

    def latest_version(self) -> int:
        self.starts.append(time.monotonic())
        time.sleep(self.seconds)
        return len(self.starts)


def test_refreshes_are_spaced_and_none_predates_a_request(monkeypatch):
    monkeypatch.setattr(freshness, "SPACING_S", 0.05)
    table = _Listed(seconds=0.01)

    async def polls() -> list[tuple[float, int]]:
        latest = freshness.LatestState(ThreadPoolExecutor(2))

        async def poll(delay: float) -> tuple[float, int]:
            await asyncio.sleep(delay)
            arrived = time.monotonic()
            return arrived, await latest.version(table)  # type: ignore[arg-type]  # a table's one call

        return await asyncio.gather(*(poll(i * 0.004) for i in range(60)))

    answers = asyncio.run(polls())
    starts = table.starts
    assert all(b - a >= 0.04 for a, b in itertools.pairwise(starts)), starts  # spaced (thread start jitter aside)
    assert 3 <= len(starts) <= 10, starts  # 60 requests over 0.24 s share a few refreshes
    for arrived, version in answers:  # each answer is of a listing that started after its request
        assert starts[version - 1] >= arrived, (arrived, version, starts)


def test_the_spacing_holds_a_request_only_right_after_a_refresh(monkeypatch):
    monkeypatch.setattr(freshness, "SPACING_S", 0.3)
    table = _Listed(seconds=0)

    async def timed(latest: freshness.LatestState) -> float:
        began = time.monotonic()
        await latest.version(table)  # type: ignore[arg-type]  # a table's one call
        return time.monotonic() - began

    async def polls() -> list[float]:
        latest = freshness.LatestState(ThreadPoolExecutor(1))
        first, second = await timed(latest), await timed(latest)
        await asyncio.sleep(0.35)
        return [first, second, await timed(latest)]

    first, second, later = asyncio.run(polls())
    assert first < 0.2  # the first refresh starts at once
    assert 0.2 < second < 1.0  # right after it, the next waits for the spacing
    assert later < 0.2  # long after it, not
