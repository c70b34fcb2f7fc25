"""Remove lines carry the removed file's size, which the protocol requires, also when the log's
remove action leaves it out (optional in the Delta log; table-with-cdf's version 1 does)."""

from __future__ import annotations

import shutil

import httpx
import orjson
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables/cdf"


def _server(location) -> RunningServer:
    table = {"name": "cdf", "location": str(location), "historyShared": True}
    cfg = {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]}
    return RunningServer(create_app(parse_config(cfg)))


def _lines(resp) -> list[dict]:
    assert resp.status_code == 200, resp.text
    return [orjson.loads(x) for x in resp.content.splitlines() if x.strip()]


@pytest.fixture(scope="module")
def http():
    server = _server(TABLES / "table-with-cdf")
    with httpx.Client(base_url=server.url + T, timeout=30) as c:
        yield c
    server.stop()


@pytest.mark.parametrize("paged", [False, True])
def test_a_streaming_query_over_a_remove_without_a_size_names_the_size_of_the_file_it_removes(http, paged):
    body = {"startingVersion": 0, **({"maxFiles": 10} if paged else {})}
    lines = _lines(http.post("/query", json=body))
    removes = [line["remove"] for line in lines if "remove" in line]
    # version 0 adds fake/path/1 (size 1); version 1 removes it without a size; version 2 again with 635
    assert [(r["version"], r["size"]) for r in removes] == [(1, 1), (2, 635)]
    assert all(set(r) >= {"url", "id", "partitionValues", "size", "timestamp", "version"} for r in removes)


def test_a_remove_of_a_file_the_table_never_had_is_size_zero_not_a_server_error(tmp_path):
    table = tmp_path / "t"
    shutil.copytree(TABLES / "table-with-cdf", table)
    commit0 = table / "_delta_log" / f"{0:020d}.json"
    kept = [line for line in commit0.read_bytes().splitlines() if not line.startswith(b'{"add"')]
    commit0.write_bytes(b"\n".join(kept) + b"\n")  # version 1 now removes a file no commit added
    server = _server(table)
    try:
        lines = _lines(httpx.post(server.url + T + "/query", json={"startingVersion": 0, "endingVersion": 1}))
    finally:
        server.stop()
    assert [(line["remove"]["version"], line["remove"]["size"]) for line in lines if "remove" in line] == [(1, 0)]
