"""Big listings: the streamed reader pages through ``/query`` (one page of the listing held at a
time, every page at one version), and a listing of many files is held compactly. Against
``deltaport serve`` as its own process: the /query requests are counted in its access log."""

from __future__ import annotations

import json
import re
import sys
import time
import tracemalloc
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from client_support import server_config, write_profile
from servers import ServeProcess

import deltaport.client as ds
from deltaport.client.rest import QueryOptions, RestClient

pytest_plugins = ["client_fixtures"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
FILES, ROWS, PAGE = 23, 5, 10
SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def _add(root: Path, name: str, part: str, ids: range) -> dict:
    path = root / f"part={part}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    stats = json.dumps({"numRecords": len(ids), "minValues": {"id": ids[0]}, "maxValues": {"id": ids[-1]}})
    add = {"path": f"part={part}/{name}", "partitionValues": {"part": part}, "size": path.stat().st_size}
    return {"add": {**add, "modificationTime": 1_700_000_000_000, "dataChange": True, "stats": stats}}


def _commit(root: Path, version: int, actions: list[dict]) -> None:
    log = root / "_delta_log"
    log.mkdir(exist_ok=True)
    (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def _many_files_table(root: Path) -> Path:
    """A partitioned table of FILES parquet files of ROWS rows each, written by pyarrow, with a
    hand-written log (version 0)."""
    head = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "paged-table",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA_STRING,
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": 1_700_000_000_000,
            }
        },
    ]
    adds = [_add(root, f"f{i:03d}.parquet", str(i % 3), range(i * ROWS, (i + 1) * ROWS)) for i in range(FILES)]
    _commit(root, 0, head + adds)
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("paged")
    tables = {"many": str(_many_files_table(root / "many"))}
    big = root / "big"
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from gen_big_table import generate
    finally:
        sys.path.remove(str(BENCHMARKS))
    generate(big, 200_000, 1)
    tables["big"] = str(big)
    server = ServeProcess(server_config(tables), root)
    profile = write_profile(root / "alice.share", server.url + "/delta-sharing")
    yield server, profile, root / "many"
    server.stop()


def _queries(server: ServeProcess, table: str) -> int:
    """The /query requests of ``table`` the server's access log shows (its lines follow the responses)."""
    time.sleep(0.3)
    return len(re.findall(rf"POST /delta-sharing/shares/corpus/schemas/default/tables/{table}/query 200", _log(server)))


def _log(server: ServeProcess) -> str:
    return server.log.read_text()


def _ids(table: pa.Table) -> list[tuple]:
    return list(zip(table.column("id").to_pylist(), table.column("part").to_pylist()))


def test_the_streamed_reader_pages_through_the_listing(served):
    server, profile, _ = served
    url = f"{profile}#corpus.default.many"
    whole = ds.load_as_arrow(url, version=0)
    before = _queries(server, "many")
    reader = ds.load_as_arrow_reader(url, version=0, max_files=PAGE, max_workers=2)
    first = reader.read_next_batch()
    assert _queries(server, "many") == before + 1  # the next page is asked for once this one is read
    rest = reader.read_all()
    assert _queries(server, "many") == before + 3  # 23 files in pages of 10
    paged = pa.concat_tables([pa.Table.from_batches([first]), rest])
    assert _ids(paged) == _ids(whole)  # the same rows, in the same order
    assert len(whole) == FILES * ROWS


def test_a_limit_counts_the_rows_of_every_page(served):
    server, profile, _ = served
    url = f"{profile}#corpus.default.many"
    whole = ds.load_as_arrow(url)
    before = _queries(server, "many")
    limited = ds.load_as_arrow_reader(url, limit=12, max_files=1).read_all()
    assert _ids(limited) == _ids(whole)[:12]
    assert _queries(server, "many") == before + 3  # a file (5 rows) a page


def test_every_page_reads_the_first_pages_version(served):
    _, profile, root = served
    url = f"{profile}#corpus.default.many"
    at_start = _ids(ds.load_as_arrow(url))
    reader = ds.load_as_arrow_reader(url, max_files=PAGE, max_workers=2)
    batches = [reader.read_next_batch()]
    _commit(root, 1, [_add(root, "late.parquet", "9", range(1000, 1010))])  # the table moves on
    try:
        batches.extend(reader)
        paged = pa.Table.from_batches(batches)
        assert _ids(paged) == at_start
        assert len(ds.load_as_arrow(url)) == len(at_start) + 10  # a new read sees the commit
    finally:
        (root / "_delta_log" / f"{1:020d}.json").unlink()


def test_a_refused_url_is_renewed_by_asking_its_own_page_again(served, recording):
    server, profile, _ = served
    url = f"{profile}#corpus.default.many"
    with RestClient(profile) as rest:
        pages = [page.files for _, page in rest.query_pages("corpus.default.many", QueryOptions(max_files=PAGE))]
    second = pages[1][0].url.split("?")[0]  # the storage refuses a file of the second page, once
    recording.add_rule(
        lambda r: r.method == "GET" and str(r.url).split("?")[0] == second,
        lambda r: httpx.Response(403, text="<Error><Code>AccessDenied</Code><Message>expired</Message></Error>"),
    )
    whole = ds.load_as_arrow(url)
    before = _queries(server, "many")
    paged = ds.load_as_arrow_reader(url, max_files=PAGE, max_workers=2, transport=recording).read_all()
    assert _ids(paged) == _ids(whole)
    asked = [r for r in recording.requests if r.url.path.endswith("/query")]
    assert len(asked) == 4 and _queries(server, "many") == before + 4  # 3 pages, and the second again
    # the second page asked again, with its own token, before the third page is asked for
    assert json.loads(asked[2].content)["pageToken"] == json.loads(asked[1].content)["pageToken"]
    assert [json.loads(r.content).get("pageToken") is None for r in asked] == [True, False, False, False]


def test_a_listing_of_many_files_is_held_compactly(served):
    """Before the listing was held compactly, it took ~1.4 KB of Python objects per file."""
    _, profile, _ = served
    with RestClient(profile) as rest:
        arrow_before = pa.total_allocated_bytes()
        tracemalloc.start()
        try:
            result = rest.query_table("corpus.default.big", response_format="parquet")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        held = pa.total_allocated_bytes() - arrow_before
        files = len(result.files)
    assert files == 200_050
    per_file = (peak + held) / files
    assert per_file < 400, f"{per_file:.0f} bytes per listed file"
    last = result.files[files - 1]
    assert last.url.startswith("http") and last.partition_values.keys() == {"part"} and last.num_records
