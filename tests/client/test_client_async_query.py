"""The connector reading through an asynchronous query: a real server on loopback answers a
queryId (threshold 0 ms), the client polls it to the same files a synchronous read gets, follows
later pages through ``…/queries/{id}``, reports a failed query with the server's error, and gives
up after its timeout."""

from __future__ import annotations

import json
import time

import pytest
from client_support import TABLES
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.client.errors import SharingServerError
from deltaport.client.rest import QueryOptions, RestClient
from deltaport.server import create_app, parse_config

TOKEN = "async-client-token-51ae"
secrets_used.add(TOKEN, label="an async client test's token")


def _config(threshold_ms: int) -> dict:
    tables = [
        {"name": "t", "location": str(TABLES / "basic_partitioned"), "id": "id-t"},
        {"name": "broken", "location": str(TABLES / "crc-malformed"), "id": "id-broken"},
    ]
    return {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "recipients": [{"name": "alice", "tokens": [TOKEN], "shares": ["s"]}],
        "asyncQueryThresholdMs": threshold_ms,
    }


@pytest.fixture(scope="module")
def rest(tmp_path_factory):
    running = RunningServer(create_app(parse_config(_config(0))))
    path = tmp_path_factory.mktemp("profile") / "p.share"
    path.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": running.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    with RestClient(str(path)) as client:
        yield client
    running.stop()


def _ids(result) -> list[str]:
    return sorted(f.id for f in result.files)


def test_an_async_read_polls_to_the_synchronous_files(rest):
    waited: list[float] = []
    result = rest.query_table("s.d.t", async_query=True, on_pending=waited.append)
    assert waited, "the server answered a queryId: the client waited"
    sync = rest.query_table("s.d.t")
    assert _ids(result) == _ids(sync) and len(_ids(sync)) > 1
    assert result.table_version == sync.table_version


def test_later_pages_come_from_the_query_info_endpoint(rest):
    result = rest.query_table("s.d.t", QueryOptions(max_files=2), async_query=True)
    assert result.pages > 1
    assert _ids(result) == _ids(rest.query_table("s.d.t"))


def test_a_failed_query_raises_the_servers_error(rest):
    with pytest.raises(SharingServerError) as sync:
        rest.query_table("s.d.broken")
    with pytest.raises(SharingServerError) as failed:
        rest.query_table("s.d.broken", async_query=True)
    assert failed.value.error_code == sync.value.error_code
    assert failed.value.message == sync.value.message


def test_a_query_still_pending_after_the_timeout_fails_clearly(rest, monkeypatch):
    real = rest._ndjson

    def always_pending(method, path, **kwargs):
        page = real(method, path, **kwargs)
        if "/queries/" in path:  # the server would stay pending: as if planning never ended
            from deltaport.client.rest import Pending

            return Pending(path.rsplit("/", 1)[-1], "pending")
        return page

    monkeypatch.setattr(rest, "_ndjson", always_pending)
    started = time.monotonic()
    with pytest.raises(SharingServerError) as timed_out:
        rest.query_table("s.d.t", async_query=True, timeout=0.5)
    assert timed_out.value.error_code == "QUERY_TIMEOUT" and "0.5 s" in str(timed_out.value)
    assert time.monotonic() - started < 5
