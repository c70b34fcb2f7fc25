"""The change feed reads each commit from where a page stopped: paging a feed reads each commit file
at most twice (not every commit once per page), and a page token whose commit log cleanup removed,
or a range over a removed commit, is a 4xx naming the fix."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
from servers import RunningServer

from deltaport.server import create_app, parse_config
from deltaport.storage import store_for
from deltaport.storage.local import LocalStore

S = "/delta-sharing/shares/s/schemas/d/tables/t"
SCHEMA = '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'


def write_feed_table(root: Path, commits: int) -> None:
    """A table of ``commits`` commits with the change data feed on, each adding one file."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v in range(commits):
        actions = [{"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}]
        if v == 0:
            actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}})
            meta = {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": SCHEMA}
            meta |= {"partitionColumns": [], "configuration": {"delta.enableChangeDataFeed": "true"}}
            actions.append({"metaData": meta})
        add = {"path": f"f{v}.parquet", "partitionValues": {}, "size": 100 + v, "modificationTime": 1}
        actions.append({"add": add | {"dataChange": True}})
        (log / f"{v:020d}.json").write_bytes(b"\n".join(orjson.dumps(a) for a in actions) + b"\n")


class CountingStores:
    """Opens tables' stores (local ones, which the server signs its own URLs for), counting every
    read of a commit file."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}

    def __call__(self, location, options=None):
        return _Counting(location, self.reads)


class _Counting(LocalStore):
    def __init__(self, root, reads: dict[str, int]) -> None:
        super().__init__(root)
        self._reads = reads

    def read(self, path):
        if path.endswith(".json") and path.startswith("_delta_log/"):
            self._reads[path] = self._reads.get(path, 0) + 1
        return super().read(path)


def _server(table: Path, stores: CountingStores | None = None) -> RunningServer:
    cfg = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}]}],
    }
    cfg["shares"][0]["schemas"][0]["tables"][0]["historyShared"] = True
    return RunningServer(create_app(parse_config(cfg), store=stores or store_for))


def _pages(c: httpx.Client, how: str, size: int = 1) -> list[list[dict]]:
    pages, token = [], None
    while True:
        more = {"maxFiles": size, **({"pageToken": token} if token else {})}
        if how == "changes":
            r = c.get(S + "/changes", params={"startingVersion": 0, **more})
        else:
            r = c.post(S + "/query", json={"startingVersion": 0, **more})
        assert r.status_code == 200, r.text
        lines = [orjson.loads(x) for x in r.content.splitlines()]
        pages.append(lines)
        token = lines[-1]["endStreamAction"].get("nextPageToken")
        if not token:
            return pages


def _versions(pages: list[list[dict]]) -> list[int]:
    return [line[k]["version"] for page in pages for line in page for k in ("add", "file") if k in line]


@pytest.mark.parametrize("how", ["changes", "streaming"])
def test_paging_a_feed_reads_each_commit_file_at_most_twice(tmp_path, how):
    commits = 30
    write_feed_table(tmp_path / "t", commits)
    stores = CountingStores()
    server = _server(tmp_path / "t", stores)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            pages = _pages(c, how)
    finally:
        server.stop()
    assert _versions(pages) == list(range(commits))  # every commit's file, in order, one a page
    assert len(stores.reads) == commits
    assert max(stores.reads.values()) <= 2, stores.reads


def test_a_page_token_at_a_commit_log_cleanup_removed_names_the_fix(tmp_path):
    write_feed_table(tmp_path / "t", 8)
    server = _server(tmp_path / "t")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            first = c.get(S + "/changes", params={"startingVersion": 0, "maxFiles": 2})
            token = [orjson.loads(x) for x in first.content.splitlines()][-1]["endStreamAction"]["nextPageToken"]
            for v in range(3):  # log cleanup: the commits up to the token's position (version 2) go
                (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
            r = c.get(S + "/changes", params={"startingVersion": 0, "maxFiles": 2, "pageToken": token})
    finally:
        server.stop()
    assert (r.status_code, r.json()["errorCode"]) == (400, "INVALID_PARAMETER_VALUE")
    assert "version 2" in r.json()["message"] and "Restart the feed from a later version" in r.json()["message"]


@pytest.mark.parametrize("params", [{}, {"maxFiles": 3}])
def test_a_range_over_a_commit_removed_since_it_was_listed_is_table_files_missing(tmp_path, params):
    write_feed_table(tmp_path / "t", 8)
    server = _server(tmp_path / "t")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get(S + "/version").status_code == 200  # the server has listed the log
            (tmp_path / "t" / "_delta_log" / f"{5:020d}.json").unlink()
            r = c.get(S + "/changes", params={"startingVersion": 0, **params})
    finally:
        server.stop()
    assert (r.status_code, r.json()["errorCode"]) == (400, "RESOURCE_DOES_NOT_EXIST")
    assert r.json()["message"].startswith("table files missing.")
