"""No table-state work on the event loop: a slow table never holds up other requests."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from conftest import TOKEN, corpus_config
from servers import RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/corpus/schemas/default/tables/partitioned"
ALICE = {"Authorization": f"Bearer {TOKEN}"}
SLOW_SECONDS = 1.5


@pytest.mark.parametrize("call", ["version", "metadata"])
def test_a_slow_listing_of_a_warm_table_does_not_stall_the_server(call):
    app = create_app(parse_config(corpus_config()))
    server = RunningServer(app)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get(f"{T}/metadata", headers=ALICE).status_code == 200  # the snapshot is cached now
            service = app.state.service
            table = service.registry.table(
                service.principal(ALICE["Authorization"]), "corpus", "default", "partitioned"
            ).delta(service.cache)
            listed = table.store.list_dir

            def slow_list(*args, **kwargs):  # a log that gained commits on a slow store
                time.sleep(SLOW_SECONDS)
                return listed(*args, **kwargs)

            table.store.list_dir = slow_list
            slow = threading.Thread(target=lambda: http.get(f"{T}/{call}", headers=ALICE))
            slow.start()
            time.sleep(0.2)  # the slow call is in its listing now
            started = time.perf_counter()
            assert http.get("/health").status_code == 200
            waited = time.perf_counter() - started
            slow.join()
            assert waited < SLOW_SECONDS / 3, f"/health waited {waited:.2f} s behind a slow /{call}"
    finally:
        server.stop()
