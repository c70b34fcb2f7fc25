"""/changes with includeHistoricalMetadata on tables whose metadata changes inside the range."""

from __future__ import annotations

import json

import httpx
import orjson
import pyarrow as pa
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables"


def _evolving_table(root) -> str:
    """v0: (id) with change data feed; v1: append adding column 'note' (new metaData + add); v2: append."""
    from deltalake import write_deltalake

    path = str(root / "evolving")
    write_deltalake(
        path, pa.table({"id": pa.array([1, 2], pa.int64())}), configuration={"delta.enableChangeDataFeed": "true"}
    )
    write_deltalake(
        path, pa.table({"id": pa.array([3], pa.int64()), "note": ["three"]}), mode="append", schema_mode="merge"
    )
    write_deltalake(path, pa.table({"id": pa.array([4], pa.int64()), "note": ["four"]}), mode="append")
    return path


@pytest.fixture(scope="module")
def http(tmp_path_factory):
    tables = [
        {"name": "cdfmeta", "location": str(TABLES / "table-with-cdf"), "historyShared": True},
        {"name": "evolving", "location": _evolving_table(tmp_path_factory.mktemp("hist")), "historyShared": True},
    ]
    server = RunningServer(
        create_app(
            parse_config({"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
        )
    )
    with httpx.Client(base_url=server.url + T, timeout=30) as c:
        yield c
    server.stop()


def _lines(resp) -> list[dict]:
    assert resp.status_code == 200, resp.text
    return [orjson.loads(x) for x in resp.content.splitlines() if x.strip()]


def _fields(meta: dict) -> list[tuple[str, bool]]:
    return [(f["name"], f["nullable"]) for f in json.loads(meta["schemaString"])["fields"]]


def test_corpus_table_head_is_the_starting_metadata_and_the_change_follows(http):
    # table-with-cdf: version 3 (re-)enables change data feed, version 4 makes 'id' not nullable
    out = _lines(
        http.get(
            "/cdfmeta/changes", params={"startingVersion": 3, "endingVersion": 4, "includeHistoricalMetadata": "true"}
        )
    )
    assert list(out[0]) == ["protocol"]
    head, later = out[1]["metaData"], [x["metaData"] for x in out[2:] if "metaData" in x]
    assert head["version"] == 3 and _fields(head) == [("part", True), ("id", True)]
    assert [(m["version"], _fields(m)) for m in later] == [(4, [("part", True), ("id", False)])]

    out = _lines(http.get("/cdfmeta/changes", params={"startingVersion": 3, "endingVersion": 4}))
    head = out[1]["metaData"]
    assert head["version"] == 4 and _fields(head) == [("part", True), ("id", False)]
    assert not [x for x in out[2:] if "metaData" in x]


def test_added_column_metadata_comes_before_the_files_of_its_version(http):
    out = _lines(
        http.get(
            "/evolving/changes", params={"startingVersion": 0, "endingVersion": 2, "includeHistoricalMetadata": "true"}
        )
    )
    head = out[1]["metaData"]
    assert head["version"] == 0 and [n for n, _ in _fields(head)] == ["id"]
    rest = [(k, v.get("version")) for x in out[2:] for k, v in x.items()]
    # the version-1 metaData line (with 'note') sits between version 0's files and version 1's
    assert rest == [("add", 0), ("metaData", 1), ("add", 1), ("add", 2)], rest
    meta1 = out[2 + rest.index(("metaData", 1))]["metaData"]
    assert [n for n, _ in _fields(meta1)] == ["id", "note"]

    out = _lines(http.get("/evolving/changes", params={"startingVersion": 0, "endingVersion": 2}))
    head = out[1]["metaData"]
    assert head["version"] == 2 and [n for n, _ in _fields(head)] == ["id", "note"]
    assert [(k, v.get("version")) for x in out[2:] for k, v in x.items()] == [("add", 0), ("add", 1), ("add", 2)]


def test_historical_metadata_for_a_range_without_a_change_adds_no_line(http):
    out = _lines(
        http.get(
            "/evolving/changes", params={"startingVersion": 1, "endingVersion": 2, "includeHistoricalMetadata": "true"}
        )
    )
    assert out[1]["metaData"]["version"] == 1
    assert not [x for x in out[2:] if "metaData" in x]
