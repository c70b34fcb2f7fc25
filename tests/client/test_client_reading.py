"""Reading natively: deletion vectors, column mapping, typed partitions, Arrow types, polars, streaming."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import deltalake
import pyarrow as pa
import pytest
from client_support import CORPUS, frame_rows

import deltaport.client as ds
from deltaport.client.progress import ReadProgress
from deltaport.client.reader import read_change_file, read_file
from deltaport.client.rest import QueryOptions, RestClient

pytest_plugins = ["client_fixtures"]


DV_TABLES = ["dv", "dv_cdf", "multipart", "short_dv", "cdc_dv", "built_dv", "built_dv_inline", "demo_customers_dv"]
#: tables deltalake reads as an oracle (it refuses the rest, e.g. type widening or variant)
ORACLE_TABLES = [
    *sorted(set(CORPUS) - {"cm_partition"}),
    "demo_sales",
    "demo_events_cdf",
    "demo_customers_dv",
    "built_dv",
    "built_dv_inline",
    "built_partitioned",
]


def _pylist(table: pa.Table) -> list:
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def _oracle(path: str, version: int | None = None) -> pa.Table:
    return pa.table(deltalake.DeltaTable(path, version=version).scan())


@pytest.mark.parametrize("name", ORACLE_TABLES)
def test_rows_equal_deltalake(table_url, table_paths, name):
    ours = ds.load_as_arrow(table_url(name))
    expected = _oracle(table_paths[name])
    assert ours.column_names == expected.column_names
    assert _pylist(ours) == _pylist(expected)


@pytest.mark.parametrize("name", DV_TABLES)
@pytest.mark.parametrize("use_delta_format", [None, True])
def test_deletion_vectors_are_applied(table_url, table_paths, name, use_delta_format):
    ours = ds.load_as_arrow(table_url(name), use_delta_format=use_delta_format)
    assert _pylist(ours) == _pylist(_oracle(table_paths[name]))


def test_dv_table_drops_the_deleted_ids(table_url):
    from builders import DV_TABLE_DELETED_IDS

    for name in ("built_dv", "built_dv_inline"):
        ids = ds.load_as_arrow(table_url(name)).column("id").to_pylist()
        assert sorted(ids) == [i for i in range(20) if i not in DV_TABLE_DELETED_IDS]


def test_column_mapping_gives_logical_names(table_url):
    for name in ("cm_name", "cm_id", "cm37"):
        table = ds.load_as_arrow(table_url(name))
        assert table.column_names == ["id", "name", "value"]
        assert not any(c.startswith("col-") for c in table.column_names)
    nested = ds.load_as_arrow(table_url("all_types"))
    struct = nested.schema.field("nested_struct").type
    assert [struct.field(i).name for i in range(struct.num_fields)] == [
        "inner_int",
        "inner_string",
        "inner_struct",
    ] or all(not struct.field(i).name.startswith("col-") for i in range(struct.num_fields))
    assert nested.num_rows == 4
    empty = ds.load_as_arrow(table_url("cm_partition"))
    assert empty.column_names == ["value", "category"] and empty.num_rows == 0


def test_arrow_types_follow_the_delta_schema(table_url):
    ntz = ds.load_as_arrow(table_url("ntz"))
    assert ntz.schema.field("tsNtz").type == pa.timestamp("us")
    assert ntz.schema.field("tsNtzPartition").type == pa.timestamp("us")
    assert dt.datetime(2013, 7, 5, 17, 1, 0, 123456) in ntz.column("tsNtzPartition").to_pylist()
    assert None in ntz.column("tsNtzPartition").to_pylist()
    sales = ds.load_as_arrow(table_url("demo_sales"))
    assert sales.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert sales.schema.field("order_date").type == pa.date32()
    assert set(sales.column("region").to_pylist()) == {"europe", "north america", "asia/pacific"}
    dec = ds.load_as_arrow(table_url("decimal"))
    assert dec.schema.field("part").type == pa.decimal128(12, 5)
    assert Decimal("-2342342.23423") in dec.column("part").to_pylist()
    ts = ds.load_as_arrow(table_url("ts_partition"))
    assert ts.schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert ts.column("time").to_pylist() == [dt.datetime(1971, 7, 22, 3, 6, 40, tzinfo=dt.timezone.utc)]
    part = ds.load_as_arrow(table_url("built_partitioned"))
    assert part.schema.field("year").type == pa.int32()
    assert None in part.column("region").to_pylist()  # a null partition value
    void = ds.load_as_arrow(table_url("void"))
    assert void.schema.field("void_col").type == pa.null()


def test_polars_output_equals_pandas_output(table_url):
    for name in ("demo_sales", "cm_name", "dv", "ntz", "decimal"):
        pdf = ds.load_as_pandas(table_url(name))
        pl = ds.load_as_polars(table_url(name))
        assert pl.columns == list(pdf.columns)
        assert pl.height == len(pdf)
        assert _polars_rows(pl) == frame_rows(pdf, pdf.columns)
    changes = ds.load_table_changes_as_polars(table_url("cdf"), starting_version=0)
    pchanges = ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0)
    assert _polars_rows(changes) == frame_rows(pchanges, pchanges.columns)


def _polars_rows(frame) -> list[tuple]:
    from client_support import norm

    return sorted((tuple(norm(v) for v in row) for row in frame.rows()), key=repr)


def test_record_batch_reader_streams_the_same_rows(table_url):
    reader = ds.load_as_arrow_reader(table_url("sidecars"), max_workers=2)
    assert isinstance(reader, pa.RecordBatchReader)
    streamed = reader.read_all()
    assert streamed.schema == ds.load_as_arrow(table_url("sidecars")).schema
    assert _pylist(streamed) == _pylist(ds.load_as_arrow(table_url("sidecars")))
    part = ds.load_as_arrow_reader(table_url("demo_sales"), columns=["amount", "region"]).read_all()
    assert part.column_names == ["region", "amount"]  # table-schema order
    limited = ds.load_as_arrow_reader(table_url("sidecars"), limit=7).read_all()
    assert limited.num_rows == 7


def test_record_batch_reader_closed_early_stops_reading(table_url):
    reader = ds.load_as_arrow_reader(table_url("sidecars"), max_workers=2)
    first = reader.read_next_batch()
    assert first.num_rows > 0
    reader.close()


def test_empty_results_are_typed(table_url):
    df = ds.load_as_pandas(table_url("demo_sales"), limit=0)
    assert list(df.columns) == ["order_id", "region", "amount", "order_date", "ts"] and len(df) == 0
    assert str(df["ts"].dtype) == "datetime64[us, UTC]"
    arrow = ds.load_as_arrow(table_url("cm_partition"))
    assert arrow.schema.field("value").type == pa.int32()


def test_convert_in_batches_gives_the_same_frame(table_url):
    a = ds.load_as_pandas(table_url("sidecars"))
    b = ds.load_as_pandas(table_url("sidecars"), convert_in_batches=True)
    assert frame_rows(a, a.columns) == frame_rows(b, b.columns)


# --- the read_file contract -------------------------------------------------------------------------


def test_read_file_contract(sharing_profile):
    with RestClient(sharing_profile) as rest:
        result = rest.query_table("corpus.default.demo_sales", QueryOptions(), response_format="delta")
        info = result.table_info()
        assert info.format == "delta" and info.version == result.table_version
        assert info.partition_columns == ("region",)
        assert info.schema_json["type"] == "struct"
        for action in result.files:
            table = read_file(action, info)
            assert table.schema == info.arrow_schema
            assert set(table.column("region").to_pylist()) == {action.partition_values["region"]}
            none = read_file(action, info, columns=[])
            assert none.num_columns == 0 and none.num_rows == table.num_rows
            only_partition = read_file(action, info, columns=["region"])
            assert only_partition.num_rows == table.num_rows
            sub = read_file(action, info, columns=["ts", "order_id"])
            assert sub.column_names == ["order_id", "ts"]
            assert sub.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_read_file_contract_with_column_mapping_and_dvs(sharing_profile):
    with RestClient(sharing_profile) as rest:
        result = rest.query_table("corpus.default.cm_name", response_format="delta")
        info = result.table_info()
        assert info.column_mapping_mode == "name"
        assert [c.physical_name.startswith("col-") for c in info.columns] == [True, True, True]
        rows = pa.concat_tables([read_file(f, info) for f in result.files])
        assert rows.column_names == ["id", "name", "value"]
        for name, storage in (("built_dv", "p"), ("built_dv_inline", "i")):
            dv = rest.query_table(f"corpus.default.{name}", response_format="delta")
            with_dv = [f for f in dv.files if f.deletion_vector]
            assert len(with_dv) == 1 and with_dv[0].deletion_vector["storageType"] == storage
            assert read_file(with_dv[0], dv.table_info()).column("id").to_pylist() == [1, 2, 4, 5, 6, 7, 8]


def test_read_change_file_appends_the_change_columns(sharing_profile):
    with RestClient(sharing_profile) as rest:
        result = rest.query_changes("corpus.default.cdf", ds.ChangesOptions(starting_version=0))
        info = result.table_info()
        kinds = {f.change_type for f in result.files}
        assert kinds == {"insert", "delete", "cdf"} or kinds <= {"insert", "delete", "cdf"}
        for action in result.files:
            table = read_change_file(action, info)
            assert table.schema == info.change_schema
            assert set(table.column("_commit_version").to_pylist()) == {action.version}
            if action.change_type != "cdf":
                assert set(table.column("_change_type").to_pylist()) <= {action.change_type}
        with pytest.raises(ValueError):
            read_change_file(result.files[0].__class__(url="x", id="y", size=1), info)


def test_progress_bar_counts_and_can_be_forced(table_url, capsys):
    ds.load_as_pandas(table_url("sidecars"), progress=True)
    with ReadProgress(total_bytes=10, total_files=2, description="x", enabled=False) as progress:
        progress.advance(4)
        progress.advance(6)
    assert progress.files_done == 2 and progress.bytes_done == 10
    auto = ReadProgress(total_bytes=1 << 40, total_files=1000, description="x")
    assert auto.enabled is False  # stderr is not a terminal under pytest


def test_version_oracle(table_url, table_paths):
    for version in (0, 1):
        ours = ds.load_as_arrow(table_url("partitioned"), version=version)
        assert _pylist(ours) == _pylist(_oracle(table_paths["partitioned"], version))


@pytest.mark.parametrize("name", ["demo_sales", "cm_name", "dv", "decimal", "sidecars"])
def test_pandas_frame_is_pyarrows_frame_of_the_arrow_table(table_url, name):
    """load_as_pandas reads string columns as dictionaries: the frame is still pyarrow's of load_as_arrow."""
    from pandas.testing import assert_frame_equal

    expected = ds.load_as_arrow(table_url(name)).to_pandas(date_as_object=True)
    assert_frame_equal(ds.load_as_pandas(table_url(name)), expected)
    changes = ds.load_table_changes_as_arrow(table_url("cdf"), starting_version=0)
    assert_frame_equal(
        ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0), changes.to_pandas(date_as_object=True)
    )


def test_dictionary_reads_keep_file_strings_as_dictionaries(sharing_profile):
    from deltaport.client.reader import reader_for

    with RestClient(sharing_profile) as rest:
        result = rest.query_table("corpus.default.cm_name", response_format="delta")
        info = result.table_info()
        read = reader_for(False, dictionaries=True)
        for action in result.files:
            table = read(action, info)
            assert table.schema.field("name").type == pa.dictionary(pa.int32(), pa.string())
            assert table.column("name").cast(pa.string()).equals(read_file(action, info).column("name"))
