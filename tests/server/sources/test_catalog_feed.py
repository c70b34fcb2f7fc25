"""The catalog feed: loads on demand share one load, polling picks up another writer's change,
and a database that goes away leaves the last catalog serving."""

from __future__ import annotations

import threading
import time

from deltaport.catalog.store import CatalogDB
from deltaport.server.sources.catalog_feed import CatalogFeed


class _SlowCatalog(CatalogDB):
    """A real SQLite catalog whose first load waits until the test lets it go."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.loads = 0
        self.first_started = threading.Event()
        self.release = threading.Event()

    def served(self, **kw):
        self.loads += 1
        if self.loads == 1:
            self.first_started.set()
            self.release.wait(10)
        return super().served(**kw)


def test_calls_waiting_behind_a_load_share_the_next_one(tmp_path):
    db = _SlowCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    served: list[tuple[str, ...]] = []
    feed = CatalogFeed(db, lambda s: served.append(tuple(x.name for x in s.shares)))
    first = threading.Thread(target=feed.reload_now)
    first.start()
    assert db.first_started.wait(10)
    db.create_share("made_during_the_first_load")  # committed after the first load began reading
    waiting = [threading.Thread(target=feed.reload_now) for _ in range(3)]
    for t in waiting:
        t.start()
    time.sleep(0.2)  # all three queue behind the first load
    db.release.set()
    for t in (first, *waiting):
        t.join(10)
    assert db.loads == 2  # the first, then one for the three that asked after it began
    assert served[-1] == ("made_during_the_first_load",)


def test_polling_serves_another_writers_change_and_survives_an_outage(tmp_path):
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    db = CatalogDB(url)
    served: list[tuple[str, ...]] = []
    feed = CatalogFeed(db, lambda s: served.append(tuple(x.name for x in s.shares)), poll_seconds=0.05)
    feed.reload_now()
    feed.start_polling()
    try:
        CatalogDB(url).create_share("from_another_replica")
        deadline = time.time() + 5
        while served[-1] != ("from_another_replica",):
            assert time.time() < deadline, "the change was never served"
            time.sleep(0.05)
        (tmp_path / "catalog.db").rename(tmp_path / "gone.db")
        (tmp_path / "catalog.db").mkdir()  # the database cannot be opened any more
        time.sleep(0.3)
        assert served[-1] == ("from_another_replica",)  # the last catalog keeps serving
        assert feed._thread is not None and feed._thread.is_alive()
    finally:
        feed.stop()
