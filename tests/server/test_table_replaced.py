"""A served table deleted or replaced on storage is answered from what is there now, not from cache."""

from __future__ import annotations

import shutil

import httpx
import pytest
from conftest import TABLES, TOKEN
from servers import RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables/t"


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(TABLES / "basic_partitioned", folder)
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(folder)}]}]}],
        "recipients": [{"name": "alice", "tokens": [TOKEN], "shares": ["s"]}],
    }
    running = RunningServer(create_app(parse_config(config)))
    with httpx.Client(base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        yield folder, http
    running.stop()


def _table_id(http: httpx.Client) -> str:
    lines = http.get(f"{T}/metadata").text.splitlines()
    return httpx.Response(200, content=lines[1]).json()["metaData"]["id"]


def test_a_deleted_table_is_an_error_not_the_cached_answer(served):
    folder, http = served
    assert http.get(f"{T}/version").status_code == 200
    assert http.post(f"{T}/query", json={}).status_code == 200
    shutil.rmtree(folder)
    for answer in (http.get(f"{T}/version"), http.get(f"{T}/metadata"), http.post(f"{T}/query", json={})):
        assert answer.status_code == 400, answer.text
        assert answer.json()["errorCode"] == "MALFORMED_REQUEST"
        assert "not a Delta table" in answer.json()["message"]
        assert str(folder) not in answer.text


def test_another_table_in_the_same_folder_is_served_as_itself(served):
    folder, http = served
    old_id = _table_id(http)
    old_files = http.post(f"{T}/query", json={}).text.count('"file"')
    shutil.rmtree(folder)
    shutil.copytree(TABLES / "cdf-table", folder)
    new_id = _table_id(http)
    assert new_id != old_id
    query = http.post(f"{T}/query", json={})
    assert query.status_code == 200
    assert query.text.count('"file"') != old_files
    for line in query.text.splitlines()[2:]:  # every file the answer lists is there to download
        url = httpx.Response(200, content=line).json()["file"]["url"]
        assert httpx.get(url, headers={"Range": "bytes=0-3"}).status_code == 206
