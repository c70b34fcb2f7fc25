"""Units of the client: types, partition values, line parsing, DV pairing, conforming, the fetch pipeline."""

from __future__ import annotations

import datetime as dt
import threading
import time
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest

from deltaport.client.errors import IncompleteResponse, SharingServerError
from deltaport.client.fetch import FileFetcher
from deltaport.client.model import FileAction, Metadata, Protocol, pair_deletion_vector_changes
from deltaport.client.pages import PageParser
from deltaport.client.reader import conform
from deltaport.client.rest import ChangesOptions, QueryOptions, capabilities_header
from deltaport.client.schema import TableInfo, delta_to_arrow, parse_partition_value
from deltaport.errors import UnsupportedTableFeature

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    ("text", "typ", "expected"),
    [
        ("12", pa.int32(), 12),
        ("-3", pa.int64(), -3),
        ("1.5", pa.float64(), 1.5),
        ("true", pa.bool_(), True),
        ("False", pa.bool_(), False),
        ("2021-04-28", pa.date32(), dt.date(2021, 4, 28)),
        ("2021-04-28 10:11:12", pa.timestamp("us", tz="UTC"), dt.datetime(2021, 4, 28, 10, 11, 12, tzinfo=UTC)),
        (
            "2021-04-28 10:11:12.5",
            pa.timestamp("us", tz="UTC"),
            dt.datetime(2021, 4, 28, 10, 11, 12, 500000, tzinfo=UTC),
        ),
        ("1971-07-22T03:06:40.000000Z", pa.timestamp("us", tz="UTC"), dt.datetime(1971, 7, 22, 3, 6, 40, tzinfo=UTC)),
        ("2021-04-28T10:11:12+02:00", pa.timestamp("us", tz="UTC"), dt.datetime(2021, 4, 28, 8, 11, 12, tzinfo=UTC)),
        ("2013-07-05 17:01:00.123456", pa.timestamp("us"), dt.datetime(2013, 7, 5, 17, 1, 0, 123456)),
        ("-2342342.23423", pa.decimal128(12, 5), Decimal("-2342342.23423")),
        ("a b/c", pa.string(), "a b/c"),
        ("", pa.int32(), None),
        (None, pa.date32(), None),
        ("", pa.string(), None),
    ],
)
def test_partition_values(text, typ, expected):
    value = parse_partition_value(text, typ)
    assert value == expected
    pa.scalar(value, typ)  # and Arrow accepts it


def test_bad_partition_values_raise():
    for text, typ in (
        ("x", pa.int32()),
        ("maybe", pa.bool_()),
        ("2021-13", pa.date32()),
        ("1.2.3", pa.decimal128(5, 2)),
    ):
        with pytest.raises(ValueError):
            parse_partition_value(text, typ)


def test_delta_types_to_arrow():
    assert delta_to_arrow("timestamp")[0] == pa.timestamp("us", tz="UTC")
    assert delta_to_arrow("timestamp_ntz")[0] == pa.timestamp("us")
    assert delta_to_arrow("decimal(10,2)")[0] == pa.decimal128(10, 2)
    assert delta_to_arrow("decimal(50,2)")[0] == pa.decimal256(50, 2)
    nested = {
        "type": "struct",
        "fields": [
            {
                "name": "a",
                "type": {"type": "array", "elementType": "integer", "containsNull": False},
                "nullable": True,
                "metadata": {"delta.columnMapping.physicalName": "col-a"},
            },
            {
                "name": "m",
                "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
                "nullable": False,
                "metadata": {"delta.columnMapping.physicalName": "col-m"},
            },
        ],
    }
    logical, physical = delta_to_arrow(nested, mapping=True)
    assert [f.name for f in logical] == ["a", "m"] and [f.name for f in physical] == ["col-a", "col-m"]
    assert logical.field("m").nullable is False
    with pytest.raises(UnsupportedTableFeature, match="variant"):
        delta_to_arrow("variant")


def _info(schema: dict, *, partitions=(), configuration=None, features=None) -> TableInfo:
    md = Metadata(
        id="x",
        schema_string=orjson.dumps(schema).decode(),
        partition_columns=tuple(partitions),
        configuration=configuration or {},
    )
    proto = Protocol(3, 7, tuple(features) if features is not None else None, None)
    return TableInfo.from_metadata(md, proto, format="delta", version=1)


def test_unsupported_reader_features_are_named():
    schema = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]}
    with pytest.raises(UnsupportedTableFeature) as err:
        _info(schema, features=["deletionVectors", "variantType", "geospatial"])
    assert "variantType" in str(err.value) and "geospatial" in str(err.value)
    assert err.value.features == ["geospatial", "variantType"]
    _info(schema, features=["deletionVectors", "columnMapping", "timestampNtz", "v2Checkpoint"])


def test_conform_renames_nested_physical_fields_and_casts():
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "s",
                "nullable": True,
                "metadata": {"delta.columnMapping.physicalName": "col-s"},
                "type": {
                    "type": "struct",
                    "fields": [
                        {
                            "name": "x",
                            "type": "long",
                            "nullable": True,
                            "metadata": {"delta.columnMapping.physicalName": "col-x"},
                        },
                        {
                            "name": "when",
                            "type": "timestamp",
                            "nullable": True,
                            "metadata": {"delta.columnMapping.physicalName": "col-w"},
                        },
                        {
                            "name": "later",
                            "type": "string",
                            "nullable": True,
                            "metadata": {"delta.columnMapping.physicalName": "col-l"},
                        },
                    ],
                },
            }
        ],
    }
    info = _info(schema, configuration={"delta.columnMapping.mode": "name"})
    spec = info.column("s")
    raw = pa.array(
        [{"col-x": 1, "col-w": 1_000_000_000}, None, {"col-x": None, "col-w": None}],
        pa.struct([("col-x", pa.int32()), ("col-w", pa.timestamp("ns"))]),
    )
    out = conform(raw.slice(0), spec.physical_type, spec.type)
    assert out.type == info.arrow_schema.field("s").type
    assert out.to_pylist() == [
        {"x": 1, "when": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), "later": None},
        None,
        {"x": None, "when": None, "later": None},
    ]
    lists = conform(
        pa.array([[{"col-x": 1}], None], pa.list_(pa.struct([("col-x", pa.int64())]))).slice(1),
        pa.list_(pa.struct([("col-x", pa.int64())])),
        pa.list_(pa.struct([("x", pa.int64())])),
    )
    assert lists.to_pylist() == [None]


def _line(obj) -> bytes:
    return orjson.dumps(obj)


PROTOCOL = {"protocol": {"minReaderVersion": 1}}
METADATA = {
    "metaData": {
        "id": "t",
        "format": {"provider": "parquet"},
        "schemaString": '{"type":"struct","fields":[]}',
        "partitionColumns": [],
    }
}
FILE = {"file": {"url": "http://x/f?sig", "id": "f1", "partitionValues": {}, "size": 10}}


def test_page_parser_accepts_both_formats():
    p = PageParser(changes=False, request="POST q")
    for obj in (PROTOCOL, METADATA, FILE, {"endStreamAction": {"nextPageToken": "n", "minUrlExpirationTimestamp": 5}}):
        p.feed(_line(obj))
    page = p.finish(table_version=3, expect_end_stream=True)
    assert page.format == "parquet" and page.files[0].id == "f1" and page.end_stream.next_page_token == "n"
    d = PageParser(changes=True, request="GET c")
    d.feed(_line({"protocol": {"deltaProtocol": {"minReaderVersion": 3, "minWriterVersion": 7}}}))
    d.feed(_line({"metaData": {"deltaMetadata": METADATA["metaData"], "version": 2}}))
    d.feed(
        _line(
            {
                "file": {
                    "id": "a",
                    "version": 2,
                    "timestamp": 9,
                    "deltaSingleAction": {"remove": {"path": "http://x/r", "partitionValues": {}, "size": 1}},
                }
            }
        )
    )
    d.feed(
        _line(
            {
                "file": {
                    "id": "c",
                    "version": 2,
                    "timestamp": 9,
                    "deltaSingleAction": {"cdc": {"path": "http://x/c", "partitionValues": {}, "size": 1}},
                }
            }
        )
    )
    page = d.finish(table_version=None, expect_end_stream=False)
    assert page.format == "delta" and [f.change_type for f in page.files] == ["delete", "cdf"]


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ([FILE], "before protocol and metaData"),
        ([PROTOCOL, METADATA, b"{not json"], "not JSON"),
        ([PROTOCOL, METADATA, {"endStreamAction": {}}, FILE], "after its endStreamAction"),
        ([PROTOCOL, METADATA, {"file": {"id": "x"}}], "lacks"),
        (
            [{"protocol": {"deltaProtocol": {"minReaderVersion": 3, "minWriterVersion": 7}}}, METADATA, FILE],
            "mixes response formats",
        ),
        ([PROTOCOL, METADATA, {"endStreamAction": {"errorMessage": "UNSUPPORTED_OPERATION: no"}}], "no"),
    ],
)
def test_page_parser_refuses_bad_responses(lines, needle):
    p = PageParser(changes=False, request="POST q")
    with pytest.raises(IncompleteResponse, match=needle):
        for obj in lines:
            p.feed(obj if isinstance(obj, bytes) else _line(obj))
        p.finish(table_version=1, expect_end_stream=False)


def test_page_parser_needs_its_head_and_tail():
    p = PageParser(changes=False, request="POST q")
    with pytest.raises(IncompleteResponse, match="before its protocol"):
        p.finish(table_version=1, expect_end_stream=False)
    p.feed(_line(PROTOCOL))
    p.feed(_line(METADATA))
    with pytest.raises(IncompleteResponse, match="cut short"):
        p.finish(table_version=1, expect_end_stream=True)


def test_dv_pairs_are_marked():
    dv = {"storageType": "i", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": 1}
    files = [
        FileAction("u1", "a", 1, version=1, change_type="insert", deletion_vector=dv),
        FileAction("u2", "a", 1, version=1, change_type="delete"),
        FileAction("u3", "b", 1, version=1, change_type="insert"),
        FileAction("u4", "a", 1, version=2, change_type="insert"),
    ]
    out = pair_deletion_vector_changes(files)
    assert out[0].paired and out[0].paired_deletion_vector is None
    assert out[1].paired and out[1].paired_deletion_vector == dv
    assert not out[2].paired and not out[3].paired


def test_request_options_render_only_what_is_set():
    assert QueryOptions().to_body() == b"{}"
    body = QueryOptions(limit_hint=0, version=3, max_files=2, include_refresh_token=True).to_body()
    assert orjson.loads(body) == {"limitHint": 0, "version": 3, "maxFiles": 2, "includeRefreshToken": True}
    body = QueryOptions(limit_hint=5, max_files=2, include_refresh_token=True).to_body()
    assert QueryOptions.parse(body) == QueryOptions(limit_hint=5, max_files=2, include_refresh_token=True)
    assert ChangesOptions(starting_version=0, include_historical_metadata=True).params() == {
        "startingVersion": "0",
        "includeHistoricalMetadata": "true",
    }
    assert capabilities_header("parquet") == "responseformat=parquet;includeendstreamaction=true"
    assert capabilities_header("delta", end_stream=False).startswith("responseformat=delta;readerfeatures=")
    with pytest.raises(ValueError):
        capabilities_header("csv")


def test_server_error_str_is_one_line_with_code_message_and_fix():
    err = SharingServerError(404, "RESOURCE_DOES_NOT_EXIST", "table 'a'\nnot found", request="GET /shares/x")
    text = str(err)
    assert text.startswith("RESOURCE_DOES_NOT_EXIST (HTTP 404 on GET /shares/x): table 'a' not found -- ")
    assert "\n" not in text and "list_all_tables" in text


# --- the fetch pipeline ---------------------------------------------------------------------------------


def test_fetcher_keeps_order_and_bounds_files_in_flight():
    schema = {"type": "struct", "fields": [{"name": "i", "type": "long", "nullable": True, "metadata": {}}]}
    info = _info(schema)
    state = {"running": 0, "max_running": 0, "started": 0}
    lock = threading.Lock()

    def fake_read(action, table, *, columns=None, http=None):
        with lock:
            state["running"] += 1
            state["started"] += 1
            state["max_running"] = max(state["max_running"], state["running"])
        time.sleep(0.01 if int(action.id) % 3 else 0.03)
        with lock:
            state["running"] -= 1
        return pa.table({"i": [int(action.id)]})

    fetcher = FileFetcher(info, http=None, max_workers=3, max_in_flight=5)
    fetcher._read = fake_read
    actions = [FileAction(f"u{i}", str(i), 1) for i in range(40)]
    seen = []
    for table in fetcher.tables(actions):
        seen.append(table.column("i")[0].as_py())
        assert state["started"] - len(seen) <= 5  # never more than max_in_flight ahead of the consumer
    assert seen == list(range(40))
    assert state["max_running"] <= 3


def test_fetcher_limit_submits_only_what_stats_need():
    schema = {"type": "struct", "fields": [{"name": "i", "type": "long", "nullable": True, "metadata": {}}]}
    info = _info(schema)
    calls = []

    def fake_read(action, table, *, columns=None, http=None):
        calls.append(action.id)
        return pa.table({"i": list(range(10))})

    fetcher = FileFetcher(info, http=None, max_workers=4)
    fetcher._read = fake_read
    actions = [FileAction(f"u{i}", str(i), 1, stats='{"numRecords":10}') for i in range(20)]
    tables = list(fetcher.tables(actions, limit=15))
    assert sum(t.num_rows for t in tables) == 15 and len(calls) == 2
    liars = [FileAction(f"u{i}", str(i), 1, stats='{"numRecords":100}') for i in range(5)]
    calls.clear()
    assert sum(t.num_rows for t in fetcher.tables(liars, limit=25)) == 25  # stats overstated: keeps reading
    assert len(calls) >= 3
