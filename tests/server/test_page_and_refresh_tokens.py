"""Page and refresh tokens: they work without history sharing, bind the query's parameters, and pin
the version (or version range) they started on, whatever the table does meanwhile."""

from __future__ import annotations

import shutil

import httpx
import orjson
import pytest
from builders import writable_copy
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/corpus/schemas/default/tables"
S = "/delta-sharing/shares/s/schemas/d/tables"


def _lines(resp) -> list[dict]:
    assert resp.status_code == 200, resp.text
    return [orjson.loads(x) for x in resp.content.splitlines() if x.strip()]


def _files(out: list[dict]) -> list[str]:
    return [x["file"]["id"] for x in out if "file" in x]


def _end(out: list[dict]) -> dict:
    return out[-1]["endStreamAction"]


def test_pages_work_on_a_table_without_history_sharing(http):
    everything = _files(_lines(http.post(T + "/nohistory/query", json={})))
    seen, token = [], None
    while True:
        out = _lines(http.post(T + "/nohistory/query", json={"maxFiles": 2, **({"pageToken": token} if token else {})}))
        seen += _files(out)
        token = _end(out).get("nextPageToken")
        if not token:
            break
    assert sorted(seen) == sorted(everything) and len(seen) == len(everything) > 2


def test_refresh_works_on_a_table_without_history_sharing(http):
    first = _lines(http.post(T + "/nohistory/query", json={"includeRefreshToken": True}))
    refresh = _end(first)["refreshToken"]
    again = _lines(http.post(T + "/nohistory/query", json={"includeRefreshToken": True, "refreshToken": refresh}))
    assert sorted(_files(again)) == sorted(_files(first))
    # asking for a version directly still needs history sharing
    r = http.post(T + "/nohistory/query", json={"version": 0})
    assert r.status_code == 400 and "history sharing is not enabled" in r.json()["message"]


def test_a_refresh_token_is_bound_to_the_query_parameters(http):
    hint = orjson.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "letter", "valueType": "string"},
                {"op": "literal", "value": "a", "valueType": "string"},
            ],
        }
    ).decode()
    first = _lines(http.post(T + "/partitioned/query", json={"includeRefreshToken": True, "jsonPredicateHints": hint}))
    refresh = _end(first)["refreshToken"]
    same = _lines(
        http.post(
            T + "/partitioned/query",
            json={"includeRefreshToken": True, "refreshToken": refresh, "jsonPredicateHints": hint},
        )
    )
    assert sorted(_files(same)) == sorted(_files(first))
    r = http.post(T + "/partitioned/query", json={"includeRefreshToken": True, "refreshToken": refresh})
    assert r.status_code == 400
    assert "cannot change" in r.json()["message"]


def test_a_page_token_without_max_files_continues_from_its_offset(http):
    everything = _files(_lines(http.post(T + "/partitioned/query", json={})))
    first = _lines(http.post(T + "/partitioned/query", json={"maxFiles": 2}))
    rest = _lines(http.post(T + "/partitioned/query", json={"pageToken": _end(first)["nextPageToken"]}))
    assert "endStreamAction" in rest[-1]  # a paged reply always says whether more follows
    assert sorted(_files(first) + _files(rest)) == sorted(everything)
    assert not set(_files(first)) & set(_files(rest))


def test_changes_accept_and_echo_fileidhash(http):
    params = {"startingVersion": 0}
    r = http.get(T + "/cdf/changes", params=params, headers={"fileidhash": "delta"})
    assert r.headers["fileidhash"] == "delta"
    ids = [x[k]["id"] for x in _lines(r) for k in ("add", "cdf", "remove", "file") if k in x]
    assert ids and all(len(i) == 64 for i in ids)
    plain = [
        x[k]["id"]
        for x in _lines(http.get(T + "/cdf/changes", params=params))
        for k in ("add", "cdf", "remove", "file")
        if k in x
    ]
    assert all(len(i) == 32 for i in plain) and set(plain).isdisjoint(ids)
    r = http.get(T + "/cdf/changes", params=params, headers={"fileidhash": "sha512"})
    assert r.status_code == 400 and "fileidhash" in r.json()["message"]


def _append_commit(table, version: int) -> None:
    """A commit adding a copy of an existing data file (plain append, no change-data files)."""
    data = sorted(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts and "_change_data" not in p.parts)
    src = data[0]
    dst = src.with_name("appended-" + src.name)
    shutil.copy(src, dst)
    rel = dst.relative_to(table).as_posix()
    add = {
        "add": {
            "path": rel,
            "partitionValues": {},
            "size": dst.stat().st_size,
            "modificationTime": 1,
            "dataChange": True,
        }
    }
    info = {"commitInfo": {"timestamp": 4_102_444_800_000, "operation": "WRITE"}}
    (table / "_delta_log" / f"{version:020d}.json").write_bytes(orjson.dumps(info) + b"\n" + orjson.dumps(add) + b"\n")


@pytest.mark.parametrize("how", ["changes", "streaming"])
def test_change_pages_pin_the_version_range_they_started_on(tmp_path, how):
    table = tmp_path / "t"
    writable_copy(TABLES / "cdf-table", table)
    latest = max(int(p.name[:20]) for p in (table / "_delta_log").glob("*.json"))
    cfg = {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table), "historyShared": True}]}],
            }
        ],
    }
    server = RunningServer(create_app(parse_config(cfg)))

    def page(c, token=None):
        if how == "changes":
            params = {"startingVersion": 0, "maxFiles": 2, **({"pageToken": token} if token else {})}
            return _lines(c.get(S + "/t/changes", params=params))
        return _lines(
            c.post(
                S + "/t/query", json={"startingVersion": 0, "maxFiles": 2, **({"pageToken": token} if token else {})}
            )
        )

    def versions(out):
        return [x[k]["version"] for x in out for k in ("add", "cdf", "remove", "file") if k in x]

    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            whole, token = [], None
            first = page(c)
            head = [x for x in first if "metaData" in x]
            whole += versions(first)
            token = _end(first)["nextPageToken"]
            _append_commit(table, latest + 1)  # the table moves on between pages
            while token:
                out = page(c, token)
                assert [x for x in out if "metaData" in x] == head  # same header on every page
                whole += versions(out)
                token = _end(out).get("nextPageToken")
            assert whole and max(whole) == latest  # nothing from the commit made after the first page
            fresh = [v for p in [page(c)] for v in versions(p)]
            assert fresh  # a new query (no token) is free to see the new commit
    finally:
        server.stop()
