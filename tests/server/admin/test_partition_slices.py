"""Per-recipient partition slices, set through the admin API with the real Databricks SDK and
enforced on every way to a table's files: /query, streaming queries, /changes and file URLs."""

from __future__ import annotations

import httpx
import orjson
import pytest
import test_admin_sdk as sdk_tests
from databricks.sdk.errors import InvalidParameterValue
from databricks.sdk.service.sharing import (
    AuthenticationType,
    Partition,
    PartitionValue,
    PartitionValueOp,
    SecurablePropertiesKvPairs,
)
from test_admin_sdk import TABLES, _activate, _add_table, _create_table, _grant, _sharing

running, w, _sdk_debug_log_off = sdk_tests.running, sdk_tests.w, sdk_tests._sdk_debug_log_off  # fixtures

QUERY = "/shares/{share}/schemas/sales/tables/{table}/query"


def _by_property(column: str, key: str) -> list[Partition]:
    return [Partition(values=[PartitionValue(name=column, op=PartitionValueOp.EQUAL, recipient_property_key=key)])]


def _setup(w, *tables: str) -> None:
    w.catalogs.create("main", storage_root=str(TABLES))
    w.schemas.create("sales", "main")
    for table in tables:
        _create_table(w, table.replace("-", "_"), str(TABLES / table))


def _recipient(w, share: str, name: str, properties: dict[str, str] | None = None) -> str:
    kv = SecurablePropertiesKvPairs(properties=properties) if properties else None
    made = w.recipients.create(name, authentication_type=AuthenticationType.TOKEN, properties_kvpairs=kv)
    _grant(w, share, name)
    return _activate(w, made.activation_url)


def _lines(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.text.splitlines()]


def _files(response: httpx.Response) -> list[dict]:
    """The file actions of a response, whatever their kind (file, add, cdf, remove)."""
    kinds = ("file", "add", "cdf", "remove")
    return [line[kind] for line in _lines(response) for kind in kinds if kind in line]


def _letters(client: httpx.Client, share: str = "s", body: dict | None = None) -> set:
    files = _files(client.post(QUERY.format(share=share, table="basic_partitioned"), json=body or {}))
    return {f["partitionValues"].get("letter") for f in files}


def test_each_recipient_reads_only_its_slice_and_learns_nothing_of_the_rest(w, running):
    _setup(w, "basic_partitioned")
    w.shares.create("s")
    _add_table(w, "s", "main.sales.basic_partitioned", partitions=_by_property("letter", "letter"))
    w.shares.create("whole")
    _add_table(w, "whole", "main.sales.basic_partitioned")
    a = _recipient(w, "s", "ra", {"letter": "a"})
    b = _recipient(w, "s", "rb", {"letter": "b"})
    none = _recipient(w, "s", "rn")
    _grant(w, "whole", "rn")
    with _sharing(running, a) as ra, _sharing(running, b) as rb, _sharing(running, none) as rn:
        assert _letters(ra) == {"a"} and _letters(rb) == {"b"}
        assert _letters(rn) == set()  # no such property: nothing, never everything
        assert _letters(rn, "whole") == {"a", "b", "c", "e", None}
        assert _letters(ra, body={"limitHint": 1}) == {"a"}  # the limit counts within the slice
        path = QUERY.format(share="s", table="basic_partitioned").replace("/query", "/metadata")
        sliced = _lines(ra.get(path))[1]["metaData"]
        whole = _lines(rn.get(path.replace("/s/", "/whole/")))[1]["metaData"]
        assert "size" not in sliced and "numFiles" not in sliced
        assert whole["numFiles"] == 6 and whole["size"] > 0


def test_static_values_and_like_combine_as_or_of_and(w, running):
    _setup(w, "basic_partitioned")
    w.shares.create("s")
    spec = [
        Partition(values=[PartitionValue(name="letter", op=PartitionValueOp.EQUAL, value="a")]),
        Partition(
            values=[
                PartitionValue(name="LETTER", op=PartitionValueOp.LIKE, value="_"),
                PartitionValue(name="letter", op=PartitionValueOp.LIKE, recipient_property_key="pattern"),
            ]
        ),
    ]
    _add_table(w, "s", "main.sales.basic_partitioned", partitions=spec)
    token = _recipient(w, "s", "r", {"pattern": "%c%"})
    with _sharing(running, token) as r:
        assert _letters(r) == {"a", "c"}


def test_the_change_feed_and_streaming_queries_keep_to_the_slice(w, running):
    _setup(w, "cdf-table-partitioned")
    w.shares.create("s")
    _add_table(w, "s", "main.sales.cdf_table_partitioned", partitions=_by_property("part", "part"), cdf_enabled=True)
    w.shares.create("whole")
    _add_table(w, "whole", "main.sales.cdf_table_partitioned", cdf_enabled=True)
    token = _recipient(w, "s", "r", {"part": "1"})
    _grant(w, "whole", "r")
    with _sharing(running, token) as r:
        for share in ("s", "whole"):
            path = QUERY.format(share=share, table="cdf_table_partitioned")
            changes = _files(r.get(path.replace("/query", "/changes"), params={"startingVersion": 0}))
            streamed = _files(r.post(path, json={"startingVersion": 0}))
            parts = {f["partitionValues"]["part"] for f in changes + streamed}
            assert changes and streamed
            assert parts == ({"1"} if share == "s" else {"0", "1"})
        sliced = _lines(
            r.get(
                QUERY.format(share="s", table="cdf_table_partitioned").replace("/query", "/changes"),
                params={"startingVersion": 0},
            )
        )
        assert any("metaData" in line for line in sliced)  # the header stays


def test_a_file_url_stops_working_when_the_recipients_slice_changes(w, running):
    _setup(w, "basic_partitioned")
    w.shares.create("s")
    _add_table(w, "s", "main.sales.basic_partitioned", partitions=_by_property("letter", "letter"))
    token = _recipient(w, "s", "ra", {"letter": "a"})
    with _sharing(running, token) as ra:
        url = _files(ra.post(QUERY.format(share="s", table="basic_partitioned"), json={}))[0]["url"]
        assert httpx.get(url, timeout=10).status_code == 200
        w.recipients.update("ra", properties_kvpairs=SecurablePropertiesKvPairs(properties={"letter": "b"}))
        refused = httpx.get(url, timeout=10)
        assert refused.status_code == 403 and "query the table again" in refused.json()["message"]
        assert _letters(ra) == {"b"}
        fresh = _files(ra.post(QUERY.format(share="s", table="basic_partitioned"), json={}))[0]["url"]
        assert httpx.get(fresh, timeout=10).status_code == 200


def test_partitions_must_name_partition_columns_of_the_table(w):
    _setup(w, "basic_partitioned")
    w.shares.create("s")
    with pytest.raises(InvalidParameterValue, match="not a partition column") as caught:
        _add_table(
            w,
            "s",
            "main.sales.basic_partitioned",
            partitions=[Partition(values=[PartitionValue(name="number", op=PartitionValueOp.EQUAL, value="1")])],
        )
    assert "letter" in str(caught.value)  # names the columns that would do
    assert w.shares.get("s", include_shared_data=True).objects in (None, [])
