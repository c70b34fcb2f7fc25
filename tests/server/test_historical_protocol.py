"""includeHistoricalProtocol: a protocol change inside the range is inlined, with its version, on
change feeds and streaming queries in the delta format; the parquet format and requests without
the flag carry no extra protocol line."""

from __future__ import annotations

import httpx
import orjson
import pytest
from builders import make_cdf_table, write_commit
from servers import RunningServer

from deltaport.delta import DeltaTable
from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables/t"
DELTA = {"delta-sharing-capabilities": "responseformat=delta"}
UPGRADED = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly", "invariants"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    table = make_cdf_table(tmp_path_factory.mktemp("hp") / "t")
    upgraded_at = write_commit(table, [{"protocol": UPGRADED}])
    cfg = {"name": "t", "location": str(table), "historyShared": True}
    server = RunningServer(
        create_app(parse_config({"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [cfg]}]}]}))
    )
    with httpx.Client(base_url=server.url) as client:
        assert DeltaTable(str(table)).latest_version() == upgraded_at
        yield client, upgraded_at
    server.stop()


def _protocols(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    rows = [orjson.loads(x) for x in response.content.splitlines() if x.strip()]
    return [r["protocol"] for r in rows if "protocol" in r]


def test_the_change_feed_inlines_the_protocol_change_with_its_version(served):
    client, upgraded_at = served
    params = {"startingVersion": 0, "includeHistoricalProtocol": "true"}
    found = _protocols(client.get(T + "/changes", headers=DELTA, params=params))
    assert found[0]["version"] == 0
    assert [p["version"] for p in found[1:]] == [upgraded_at]
    assert found[1]["deltaProtocol"]["writerFeatures"] == UPGRADED["writerFeatures"]


def test_a_streaming_query_inlines_it_too(served):
    client, upgraded_at = served
    body = {"startingVersion": 1, "includeHistoricalProtocol": True}
    found = _protocols(client.post(T + "/query", headers=DELTA, json=body))
    assert [p["version"] for p in found[1:]] == [upgraded_at]


def test_without_the_flag_or_in_parquet_only_the_head_protocol(served):
    client, _ = served
    assert len(_protocols(client.get(T + "/changes", headers=DELTA, params={"startingVersion": 0}))) == 1
    parquet = {"startingVersion": 0, "includeHistoricalProtocol": "true"}
    assert _protocols(client.get(T + "/changes", params=parquet)) == [{"minReaderVersion": 1}]
