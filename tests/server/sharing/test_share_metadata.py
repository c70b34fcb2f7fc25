"""A share's displayName, comment and properties in List Shares and Get Share, as the protocol's
examples show them, over a real server; the official client reads such shares as before."""

from __future__ import annotations

import json

import delta_sharing
import httpx
import pytest
from conftest import TABLES

from deltaport.server import create_app, parse_config

TOKEN = "share-metadata-token"
VACCINE = {
    "name": "vaccine_share",
    "id": "edacc4a7-6600-4fbb-85f3-a62a5ce6761f",
    "displayName": "Vaccine Share",
    "comment": "A sample share containing vaccine-related datasets",
    "properties": {"owner": "vaccine-team", "region": "us-west-2", "created_date": "2024-01-15"},
}


def _config() -> dict:
    table = {
        "name": "t",
        "location": str(TABLES / "basic_partitioned"),
        "accessModes": ["url", "dir"],
        "historyShared": True,
    }
    return {
        "version": 1,
        "shares": [
            {**VACCINE, "schemas": [{"name": "s", "tables": [table]}]},
            {"name": "plain", "schemas": [{"name": "s", "tables": [dict(table, accessModes=["url"])]}]},
        ],
        "recipients": [{"name": "r", "tokens": [TOKEN], "shares": ["vaccine_share", "plain"]}],
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from servers import RunningServer

    running = RunningServer(create_app(parse_config(_config())))
    profile = tmp_path_factory.mktemp("profile") / "r.share"
    endpoint = running.url + "/delta-sharing"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    with httpx.Client(base_url=endpoint, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        yield http, str(profile)
    running.stop()


def test_list_shares_shows_each_shares_metadata_as_the_protocol_example(served):
    http, _ = served
    answer = http.get("/shares")
    assert answer.status_code == 200
    assert answer.json()["items"] == [VACCINE, {"name": "plain"}]
    assert list(answer.json()["items"][0]) == ["name", "id", "displayName", "comment", "properties"]


def test_get_share_shows_its_metadata_as_the_protocol_example(served):
    http, _ = served
    assert http.get("/shares/vaccine_share").json() == {"share": VACCINE}
    assert http.get("/shares/plain").json() == {"share": {"name": "plain"}}


def test_the_official_client_reads_a_share_with_metadata(served):
    _, profile = served
    client = delta_sharing.SharingClient(profile)
    assert sorted(s.name for s in client.list_shares()) == ["plain", "vaccine_share"]
    df = delta_sharing.load_as_pandas(f"{profile}#vaccine_share.s.t")
    assert len(df) > 0
