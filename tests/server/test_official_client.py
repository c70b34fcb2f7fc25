"""The official delta-sharing client (from PyPI) against a running deltaport server, over loopback."""

from __future__ import annotations

import datetime as dt
import json
import math

import delta_sharing
import pytest
from conftest import CORPUS, TABLES

from deltaport.delta import DeltaTable, SnapshotCache


def _norm(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    return value


def _rows(df, columns) -> list[tuple]:
    return sorted((tuple(_norm(v) for v in row) for row in df[columns].itertuples(index=False, name=None)), key=repr)


def _expected(name: str, version: int | None = None):
    import deltalake
    import pyarrow as pa

    table = pa.table(deltalake.DeltaTable(str(TABLES / CORPUS[name]), version=version).scan())
    return table.to_pandas(date_as_object=True)  # dates as dates, as the client returns them


def url(profile: str, table: str) -> str:
    return f"{profile}#corpus.default.{table}"


def test_list_all_tables_shows_only_granted_shares(profile):
    client = delta_sharing.SharingClient(profile)
    names = sorted(t.name for t in client.list_all_tables())
    assert names == sorted([*CORPUS, "nohistory", "broken"])
    assert [s.name for s in client.list_shares()] == ["corpus"]


@pytest.mark.parametrize(
    "name", ["dv", "dv_cdf", "cdf", "cm_name", "cm_id", "ntz", "sidecars", "multipart", "partitioned", "checkpointed"]
)
def test_load_as_pandas_autoresolve_equals_table_rows(profile, name):
    df = delta_sharing.load_as_pandas(url(profile, name))
    expected = _expected(name)
    assert sorted(df.columns) == sorted(expected.columns)
    cols = list(expected.columns)
    assert _rows(df, cols) == _rows(expected, cols)


@pytest.mark.parametrize("name", ["dv", "cm_name", "ntz", "partitioned", "sidecars"])
def test_load_as_pandas_delta_format(profile, name):
    df = delta_sharing.load_as_pandas(url(profile, name), use_delta_format=True)
    expected = _expected(name)
    cols = list(expected.columns)
    assert _rows(df, cols) == _rows(expected, cols)


@pytest.mark.parametrize(
    "name", ["partitioned", "cdf", "checkpointed", "sidecars"]
)  # the client cannot parse timestamp_ntz in parquet format
def test_load_as_pandas_parquet_format(profile, name):
    df = delta_sharing.load_as_pandas(url(profile, name), use_delta_format=False)
    expected = _expected(name)
    cols = list(expected.columns)
    assert _rows(df, cols) == _rows(expected, cols)


def test_parquet_format_on_a_dv_table_is_refused_with_the_feature_named(profile):
    with pytest.raises(Exception) as err:
        delta_sharing.load_as_pandas(url(profile, "dv"), use_delta_format=False)
    text = str(err.value)
    assert "UNSUPPORTED_OPERATION" in text and "deletionvectors" in text


def test_limit(profile):
    df = delta_sharing.load_as_pandas(url(profile, "partitioned"), limit=2)
    assert len(df) == 2
    df = delta_sharing.load_as_pandas(url(profile, "dv"), limit=3, use_delta_format=True)
    assert len(df) == 3


def test_version_and_timestamp(profile):
    expected = _expected("partitioned", version=0)
    cols = list(expected.columns)
    df = delta_sharing.load_as_pandas(url(profile, "partitioned"), version=0)
    assert _rows(df, cols) == _rows(expected, cols)
    ts = DeltaTable(str(TABLES / CORPUS["partitioned"]), cache=SnapshotCache()).history().timestamps[0]
    iso = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")
    df = delta_sharing.load_as_pandas(url(profile, "partitioned"), timestamp=iso)
    assert _rows(df, cols) == _rows(expected, cols)


def test_time_travel_without_history_sharing_is_refused(profile):
    with pytest.raises(Exception, match="history sharing is not enabled"):
        delta_sharing.load_as_pandas(url(profile, "nohistory"), version=0)


def test_json_predicate_hints_prune_but_never_lose_rows(profile):
    hint = json.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "letter", "valueType": "string"},
                {"op": "literal", "value": "a", "valueType": "string"},
            ],
        }
    )
    df = delta_sharing.load_as_pandas(url(profile, "partitioned"), jsonPredicateHints=hint)
    assert set(df["letter"]) == {"a"}
    expected = _expected("partitioned")
    assert len(df) == int((expected["letter"] == "a").sum())


@pytest.mark.parametrize("use_delta_format", [False, True])
def test_table_changes(profile, use_delta_format):
    table = DeltaTable(str(TABLES / CORPUS["cdf"]), cache=SnapshotCache())
    df = delta_sharing.load_table_changes_as_pandas(
        url(profile, "cdf"), starting_version=0, ending_version=3, use_delta_format=use_delta_format
    )
    assert {"_change_type", "_commit_version", "_commit_timestamp"} <= set(df.columns)
    import deltalake
    import pyarrow as pa

    reader = deltalake.DeltaTable(str(TABLES / CORPUS["cdf"])).load_cdf(starting_version=0, ending_version=3)
    oracle = pa.table(reader)
    oracle = oracle.cast(
        pa.schema(
            [
                pa.field(
                    f.name,
                    pa.large_string()
                    if "string" in str(f.type)
                    else (pa.int64() if str(f.type).startswith("uint") else f.type),
                )
                for f in oracle.schema
            ]
        )
    )
    expected = oracle.to_pandas()
    cols = [c for c in expected.columns if c != "_commit_timestamp"]
    assert _rows(df, cols) == _rows(expected, cols)
    assert table.latest_version() >= 3


def test_table_version_metadata_protocol(profile):
    u = url(profile, "dv")
    assert delta_sharing.get_table_version(u) == 1
    meta = delta_sharing.get_table_metadata(u)
    assert meta.id == "testId"
    proto = delta_sharing.get_table_protocol(u)
    assert proto.min_reader_version == 3


def test_broken_table_does_not_stop_the_others(profile):
    with pytest.raises(Exception) as err:
        delta_sharing.load_as_pandas(url(profile, "broken"))
    assert "RESOURCE_DOES_NOT_EXIST" in str(err.value) or "not a Delta table" in str(err.value)
    assert len(delta_sharing.load_as_pandas(url(profile, "partitioned"))) > 0
