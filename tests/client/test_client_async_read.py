"""The readers (``load_as_arrow/pandas/polars``) with ``async_query=True`` against a real server on
loopback whose planning is slow (its table's store lists slowly): the same rows as a synchronous
read, polled through ``…/queries/{id}``, the timeout's error, and the progress line while the
server plans."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from client_support import TABLES, RecordingTransport
from secret_scan import secrets_used
from servers import RunningServer, SlowPlanning

import deltaport.client as ds
from deltaport.client.errors import SharingServerError
from deltaport.server import create_app, parse_config

TOKEN = "async-read-token-c41f"
secrets_used.add(TOKEN, label="an async read test's token")
pytest_plugins = ["client_fixtures"]
WAITING = "s.d.t: waiting for the server to plan the query ("


@pytest.fixture
def slow() -> SlowPlanning:
    return SlowPlanning()


@pytest.fixture
def url(slow, tmp_path) -> Iterator[str]:
    """A table on a server that answers every asynchronous query with a queryId (threshold 0 ms)."""
    table = {"name": "t", "location": str(TABLES / "basic_partitioned"), "id": "id-t"}
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}],
        "recipients": [{"name": "alice", "tokens": [TOKEN], "shares": ["s"]}],
        "asyncQueryThresholdMs": 0,
    }
    running = RunningServer(create_app(parse_config(config), store=slow))
    profile = tmp_path / "p.share"
    endpoint = running.url + "/delta-sharing"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    yield f"{profile}#s.d.t"
    running.stop()


def _rows(table) -> list[str]:
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def _polls(transport: RecordingTransport) -> int:
    return sum(1 for r in transport.requests if "/queries/" in r.url.path)


def test_an_async_read_of_a_slowly_planned_table_equals_a_synchronous_read(url, slow, recording):
    slow.delay = 0.3
    table = ds.load_as_arrow(url, async_query=True, progress=False, transport=recording)
    assert _polls(recording) >= 2, "the query was pending: the client polled until the plan was ready"
    submitted = [r for r in recording.requests if r.url.path.endswith("/query")]
    assert "asyncquery=true" in submitted[0].headers["delta-sharing-capabilities"]
    slow.delay = 0.0
    expected = ds.load_as_arrow(url, progress=False)
    assert table.num_rows > 1 and _rows(table) == _rows(expected)
    assert table.schema == expected.schema


def test_pandas_and_polars_read_asynchronously_too(url, slow, recording):
    slow.delay = 0.1
    frame = ds.load_as_pandas(url, async_query=True, progress=False, transport=recording)
    lazy = ds.load_as_polars(url, async_query=True, timeout=30, progress=False, transport=recording)
    assert _polls(recording) >= 2
    expected = ds.load_as_arrow(url, progress=False)
    assert len(frame) == len(lazy) == expected.num_rows
    assert sorted(frame.columns) == sorted(lazy.columns) == sorted(expected.column_names)


def test_reads_are_synchronous_by_default(url, recording):
    ds.load_as_arrow(url, progress=False, transport=recording)
    submitted = [r for r in recording.requests if r.url.path.endswith("/query")]
    assert submitted and "asyncquery" not in submitted[0].headers["delta-sharing-capabilities"]
    assert _polls(recording) == 0


def test_a_plan_slower_than_the_timeout_fails_with_query_timeout(url, slow):
    slow.delay = 2.0
    started = time.monotonic()
    with pytest.raises(SharingServerError) as timed_out:
        ds.load_as_arrow(url, async_query=True, timeout=0.4, progress=False)
    assert timed_out.value.error_code == "QUERY_TIMEOUT" and "0.4 s" in str(timed_out.value)
    assert time.monotonic() - started < 2.0, "the client gave up at its timeout, not when planning ended"


def test_timeout_without_async_query_is_refused():
    with pytest.raises(ValueError, match="async_query=True"):
        ds.load_as_arrow("p.share#s.d.t", timeout=5)
    with pytest.raises(ValueError, match="positive number"):
        ds.load_as_arrow("p.share#s.d.t", async_query=True, timeout=0)


def test_progress_shows_the_wait_for_the_plan(url, slow, capsys):
    slow.delay = 0.4
    ds.load_as_arrow(url, async_query=True, progress=True)
    waits = [line for line in capsys.readouterr().err.splitlines() if line.startswith(WAITING)]
    assert len(waits) >= 2 and waits[0] == WAITING + "0 s)"


def test_progress_false_shows_nothing(url, slow, capsys):
    slow.delay = 0.4
    ds.load_as_arrow(url, async_query=True, progress=False)
    assert WAITING not in capsys.readouterr().err


def test_on_a_terminal_the_wait_is_one_status_line_removed_when_ready(monkeypatch):
    from deltaport.client import progress

    monkeypatch.setattr(progress, "_stderr_is_terminal", lambda: True)
    with progress.PlanningProgress("s.d.t") as planning:
        assert planning.enabled, "None: shown on a terminal"
        planning.update(0.1)
        status = planning._status
        planning.update(3.2)
        assert planning._status is status and status.status == WAITING + "3 s)"
    assert planning._status is None and not status._live.is_started
