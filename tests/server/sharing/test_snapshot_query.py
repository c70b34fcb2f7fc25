"""Snapshot queries of tables read a piece at a time (``streamAboveFiles``) answer what the same
query of the table read whole answers: the same files in the same order, with the same limits,
predicates, pages and slices; their page tokens resume where they stopped."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from servers import RunningServer

import deltaport.delta.streamed as streamed_module
from deltaport.catalog.model import PartitionOp, PartitionValue
from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.delta.scan import scan
from deltaport.delta.streamed import StreamedSnapshot
from deltaport.expressions.tree import Column, Comparison, Literal
from deltaport.server import create_app, parse_config
from deltaport.server.sharing.slices import slice_for
from deltaport.server.sharing.streamed_query import Cursors, StreamedFiles, StreamedPlan, keep_files

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
T = "/delta-sharing/shares/s/schemas/d/tables"
CAPS = {"delta-sharing-capabilities": "responseformat=parquet;includeendstreamaction=true"}
DELTA = {
    "delta-sharing-capabilities": "responseformat=delta;includeendstreamaction=true;"
    "readerfeatures=deletionvectors,columnmapping,v2checkpoint,timestampntz,typewidening"
}
SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """3,000 checkpointed files (row groups of 500) and 4 later commits that add and remove files."""
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "gen_big_table.py"
    spec = importlib.util.spec_from_file_location("gen_big_table", script)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path_factory.mktemp("big") / "t"
    gen.generate(out, files=3000, commits=4)
    checkpoint = next((out / "_delta_log").glob("*.checkpoint.parquet"))
    pq.write_table(pq.read_table(checkpoint), checkpoint, row_group_size=500)
    return out


def _config(big: Path, stream_above: int) -> dict:
    tables = [
        {"name": "big", "location": str(big)},
        {"name": "multipart", "location": str(TABLES / "v1-multi-part-partitioned-struct-stats-only")},
        {"name": "sidecars", "location": str(TABLES / "v2-checkpoints-parquet-with-sidecars")},
        {"name": "json_v2", "location": str(TABLES / "v2-checkpoints-json-with-sidecars")},
    ]
    return {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "tokenSecret": SECRET,
        "streamAboveFiles": stream_above,
        "queryTablePageSizeLimit": 100_000,
    }


@pytest.fixture(scope="module")
def servers(big):
    """The same tables served twice: read whole (and cached), and a piece at a time."""
    whole = RunningServer(create_app(parse_config(_config(big, 1 << 40))))
    streamed = RunningServer(create_app(parse_config(_config(big, 0)), cache=SnapshotCache()))
    clients = [httpx.Client(base_url=s.url, timeout=60) for s in (whole, streamed)]
    yield clients
    for c in clients:
        c.close()
    whole.stop()
    streamed.stop()


def _lines(resp: httpx.Response) -> list[dict]:
    assert resp.status_code == 200, resp.text
    return [json.loads(x) for x in resp.text.splitlines()]


def _unsigned(value):
    """``value`` with its URLs cut to their paths and expiry times dropped (servers differ in both)."""
    if isinstance(value, dict):
        return {k: _unsigned(v) for k, v in value.items() if k != "expirationTimestamp"}
    if isinstance(value, str) and value.startswith("http"):
        return urlsplit(value).path
    return value


def _files(out: list[dict]) -> list[str]:
    """Each file line, unsigned."""
    return [json.dumps(_unsigned(x["file"]), sort_keys=True) for x in out if "file" in x]


def _end(out: list[dict]) -> dict:
    assert "endStreamAction" in out[-1], out[-1]
    return out[-1]["endStreamAction"]


def _all_pages(client: httpx.Client, table: str, body: dict) -> tuple[list[str], int]:
    files, pages, token = [], 0, None
    while True:
        out = _lines(client.post(f"{T}/{table}/query", json={**body, **({"pageToken": token} if token else {})}))
        files += _files(out)
        pages += 1
        token = _end(out).get("nextPageToken")
        if not token:
            return files, pages


ID_BETWEEN = {
    "op": "and",
    "children": [
        {
            "op": "greaterThanOrEqual",
            "children": [
                {"op": "column", "name": "id", "valueType": "long"},
                {"op": "literal", "value": "1000000", "valueType": "long"},
            ],
        },
        {
            "op": "lessThan",
            "children": [
                {"op": "column", "name": "id", "valueType": "long"},
                {"op": "literal", "value": "2000000", "valueType": "long"},
            ],
        },
    ],
}


@pytest.mark.parametrize(
    "body",
    [{}, {"limitHint": 25_000}, {"jsonPredicateHints": json.dumps(ID_BETWEEN)}, {"predicateHints": ["part = 'p0007'"]}],
    ids=["all", "limit", "json-predicate", "sql-predicate"],
)
@pytest.mark.parametrize("table", ["big", "multipart", "sidecars", "json_v2"])
def test_a_streamed_query_answers_what_the_whole_one_does(servers, table, body, monkeypatch):
    whole, streamed = servers
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 700)  # the server runs in this process
    caps = CAPS if table == "big" else DELTA
    a = _lines(whole.post(f"{T}/{table}/query", json=body, headers=caps))
    b = _lines(streamed.post(f"{T}/{table}/query", json=body, headers=caps))
    assert _files(a) == _files(b) and (_files(a) or table != "big")  # the predicates name big's columns
    assert [x for x in a if "protocol" in x] == [x for x in b if "protocol" in x]
    meta_a, meta_b = (next(x["metaData"] for x in out if "metaData" in x) for out in (a, b))
    counts = ("size", "numFiles")
    assert {k: v for k, v in meta_a.items() if k not in counts} == {k: v for k, v in meta_b.items() if k not in counts}


@pytest.mark.parametrize("body", [{"maxFiles": 650}, {"maxFiles": 650, "limitHint": 1_500_000}])
def test_streamed_pages_list_the_same_files_as_whole_ones(servers, body, monkeypatch):
    whole, streamed = servers
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 700)
    a, _ = _all_pages(whole, "big", body)
    b, pages_b = _all_pages(streamed, "big", body)
    assert a == b and pages_b >= len(b) // 650


@pytest.mark.parametrize("cursors", ["kept", "dropped"])
def test_a_tiny_page_reads_from_where_the_last_stopped(servers, cursors, monkeypatch):
    """maxFiles=1 at the end of a 3,000-file table: with the last page's cursor kept, nothing is read
    again; without it (another replica, or dropped), one piece, not the table from its start."""
    whole, streamed = servers
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 100)
    if cursors == "dropped":
        monkeypatch.setattr(Cursors, "keep", lambda self, key, pieces: None)
    reads = []
    real = StreamedSnapshot.pieces

    def counting(self, start=streamed_module.Place(0, 0)):
        for piece in real(self, start):
            reads.append(piece.snapshot.num_files)
            yield piece

    first = _lines(streamed.post(f"{T}/big/query", json={"maxFiles": 2990}))
    token = _end(first)["nextPageToken"]
    monkeypatch.setattr(StreamedSnapshot, "pieces", counting)
    files, pages = [], 0
    while token and pages < 5:
        out = _lines(streamed.post(f"{T}/big/query", json={"maxFiles": 1, "pageToken": token}))
        files += _files(out)
        token, pages = _end(out).get("nextPageToken"), pages + 1
    expected, _ = _all_pages(whole, "big", {"maxFiles": 100_000})
    assert files == expected[2990:2995]
    if cursors == "kept":
        assert reads == []  # each page went on from the last one's cursor
    else:
        assert 0 < sum(reads) <= 5 * 100  # a piece a page (from the start: 2,990 files a page)


def test_a_page_token_is_bound_to_its_kind_of_query(servers):
    whole, streamed = servers
    token = _end(_lines(streamed.post(f"{T}/big/query", json={"maxFiles": 10})))["nextPageToken"]
    out = _lines(whole.post(f"{T}/big/query", json={"maxFiles": 10, "pageToken": token}))
    assert _files(out)  # the same secret: a streamed token resumes a streamed read on any replica
    bad = streamed.post(f"{T}/big/query", json={"maxFiles": 10, "pageToken": token + "x"})
    assert bad.status_code == 400 and bad.json()["errorCode"] == "INVALID_PARAMETER_VALUE"


def test_slices_predicates_and_limits_per_piece_equal_the_whole_scan(big, monkeypatch):
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 333)
    snap = DeltaTable(str(big), cache=SnapshotCache()).snapshot()
    stream = DeltaTable(str(big), cache=SnapshotCache()).streamed(above=0)
    assert isinstance(stream, StreamedSnapshot)
    part = slice_for(((PartitionValue("part", PartitionOp.LIKE, "p1%"),),), {})
    assert part is not None
    predicate = Comparison(">=", Column("id", "long"), Literal(500_000, "long"))
    for limit in (None, 0, 3_000_000):
        within = part.mask_of_struct(snap.config, snap.live.column("partitionValues"))
        expected = scan(snap, predicate, limit, within=within).indices.to_pylist()

        def mask(s):
            return part.mask_of_struct(s.config, s.live.column("partitionValues"))

        plan = StreamedPlan(streamed_module.Place(0, 0), keep_files(predicate, mask), limit, None)
        got = [
            k
            for s, idx in StreamedFiles(stream, plan, lambda s: None).pieces()
            for k in np.asarray(s.live.column("_key"))[idx]
        ]
        assert got == [snap.live.column("_key")[i].as_py() for i in expected], limit
        assert limit != 0 or got == []


def _served(client: httpx.Client) -> float:
    text = client.get("/metrics", headers={"Authorization": "Bearer scraper"}).text
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith("deltaport_files_served_total{"))


def test_the_files_served_are_counted_once_streamed(big):
    """The metrics (and the audit log, from the same record) learn the files handed out when the
    stream ends."""
    server = RunningServer(create_app(parse_config(_config(big, 0)), metrics_token="scraper"))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            before = _served(client)
            out = _lines(client.post(f"{T}/multipart/query", json={}, headers=DELTA))
            out += _lines(client.post(f"{T}/big/query", json={"limitHint": 1}))
            assert _served(client) - before == len(_files(out)) == 5 + 1
    finally:
        server.stop()


def test_an_asynchronous_query_of_a_streamed_table_pages_to_the_same_files(big):
    """Planned in the background (its later commits and footers), then polled page by page."""
    config = {**_config(big, 0), "asyncQueryThresholdMs": 0}
    server = RunningServer(create_app(parse_config(config), cache=SnapshotCache()))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            pending = _lines(
                c.post(f"{T}/big/query", json={}, headers={"delta-sharing-capabilities": "asyncquery=true"})
            )
            query_id = pending[0]["queryStatus"]["queryId"]
            files, token, deadline = [], None, time.monotonic() + 30
            while True:
                body = {"maxFiles": 1000, **({"pageToken": token} if token else {})}
                out = _lines(c.post(f"{T}/big/queries/{query_id}", json=body))
                if out[0].get("queryStatus", {}).get("status") == "pending":
                    assert time.monotonic() < deadline, "the query stayed pending"
                    time.sleep(0.05)
                    continue
                files += _files(out)
                token = _end(out).get("nextPageToken")
                if not token:
                    break
            whole, _ = _all_pages(c, "big", {"maxFiles": 100_000})
        assert files == whole and len(files) == 3000 + 4 * 50
    finally:
        server.stop()
