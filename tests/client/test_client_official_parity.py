"""deltaport.client and the official delta-sharing connector read the same rows from the same server."""

from __future__ import annotations

import datetime as dt
import json

import delta_sharing
import pytest
from client_support import CDF_FROM_0, CDF_FROM_1, CORPUS, TABLES, frame_rows

import deltaport.client as ds

pytest_plugins = ["client_fixtures"]


#: the official connector cannot read these (reason)
OFFICIAL_CANNOT = {"void": "it has no converter for the void type"}
#: tables readable in the parquet response format (no deletion vectors, no column mapping)
PARQUET_OK = [
    "cdf",
    "partitioned",
    "checkpointed",
    "sidecars",
    "decimal",
    "mixed_nulls",
    "cdf_partitioned",
    "cdf_plain",
    "no_dv",
    "ntz",
    "demo_sales",
    "demo_events_cdf",
    "built_partitioned",
    "built_ntz",
]
#: the official parquet path cannot parse timestamp_ntz partition values
OFFICIAL_PARQUET_CANNOT = {"ntz", "built_ntz"}


def _compare(ours, theirs, *, skip=()):
    assert list(ours.columns) == list(theirs.columns)
    cols = [c for c in theirs.columns if c not in skip]
    assert len(ours) == len(theirs)
    assert frame_rows(ours, cols) == frame_rows(theirs, cols)


def pytest_generate_tests(metafunc):
    if "any_table" in metafunc.fixturenames:
        names = sorted(
            (set(CORPUS) - set(OFFICIAL_CANNOT))
            | {
                "demo_sales",
                "demo_events_cdf",
                "demo_customers_dv",
                "built_dv_inline",
                "built_dv",
                "built_partitioned",
                "built_ntz",
            }
        )
        metafunc.parametrize("any_table", names)


@pytest.mark.parametrize("use_delta_format", [None, True])
def test_same_rows_as_the_official_client(table_url, table_paths, any_table, use_delta_format):
    if any_table not in table_paths:
        pytest.skip(f"{any_table} was not built here")
    ours = ds.load_as_pandas(table_url(any_table), use_delta_format=use_delta_format)
    theirs = delta_sharing.load_as_pandas(table_url(any_table), use_delta_format=use_delta_format)
    _compare(ours, theirs)


@pytest.mark.parametrize("name", PARQUET_OK)
def test_parquet_format_same_rows_as_the_official_client(table_url, table_paths, name):
    if name not in table_paths:
        pytest.skip(f"{name} was not built here")
    ours = ds.load_as_pandas(table_url(name), use_delta_format=False)
    if name in OFFICIAL_PARQUET_CANNOT:
        theirs = delta_sharing.load_as_pandas(table_url(name), use_delta_format=True)
    else:
        theirs = delta_sharing.load_as_pandas(table_url(name), use_delta_format=False)
    _compare(ours, theirs)


@pytest.mark.parametrize(
    ("name", "limit", "use_delta_format"),
    [
        ("partitioned", 2, None),
        ("partitioned", 0, None),
        ("partitioned", 100, None),
        ("dv", 3, True),
        ("sidecars", 10, False),
        ("demo_sales", 50, None),
        ("built_dv", 12, None),
    ],
)
def test_limit_same_rows_as_the_official_client(table_url, name, limit, use_delta_format):
    ours = ds.load_as_pandas(table_url(name), limit=limit, use_delta_format=use_delta_format)
    theirs = delta_sharing.load_as_pandas(table_url(name), limit=limit, use_delta_format=use_delta_format)
    assert len(ours) == len(theirs) == min(limit, len(ds.load_as_pandas(table_url(name))))
    _compare(ours, theirs)


@pytest.mark.parametrize("name", ["partitioned", "built_partitioned", "dv_cdf", "cm_name", "demo_customers_dv"])
def test_version_and_timestamp_same_rows_as_the_official_client(table_url, table_paths, name):
    from deltaport.delta import DeltaTable, SnapshotCache

    history = DeltaTable(table_paths[name], cache=SnapshotCache()).history()
    for version in range(len(history.timestamps)):
        try:
            theirs = delta_sharing.load_as_pandas(table_url(name), version=version)
        except Exception:  # e.g. a version before column mapping or DVs were readable; ours must fail too
            with pytest.raises(ds.SharingServerError):
                ds.load_as_pandas(table_url(name), version=version)
            continue
        _compare(ds.load_as_pandas(table_url(name), version=version), theirs)
    ts = history.timestamps[-1]
    iso = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")
    _compare(
        ds.load_as_pandas(table_url(name), timestamp=iso), delta_sharing.load_as_pandas(table_url(name), timestamp=iso)
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        (
            "partitioned",
            {
                "op": "equal",
                "children": [
                    {"op": "column", "name": "letter", "valueType": "string"},
                    {"op": "literal", "value": "a", "valueType": "string"},
                ],
            },
        ),
        (
            "cdf",
            {
                "op": "greaterThan",
                "children": [
                    {"op": "column", "name": "birthday", "valueType": "date"},
                    {"op": "literal", "value": "2023-12-23", "valueType": "date"},
                ],
            },
        ),
        (
            "built_partitioned",
            {"op": "isNull", "children": [{"op": "column", "name": "region", "valueType": "string"}]},
        ),
        ("partitioned", "not json at all"),
    ],
)
def test_json_predicate_hints_same_rows_as_the_official_client(table_url, name, hint):
    text = hint if isinstance(hint, str) else json.dumps(hint)
    ours = ds.load_as_pandas(table_url(name), jsonPredicateHints=text)
    theirs = delta_sharing.load_as_pandas(table_url(name), jsonPredicateHints=text)
    _compare(ours, theirs)
    if not isinstance(hint, str):
        assert len(ours) < len(ds.load_as_pandas(table_url(name)))  # the server pruned files


def test_official_client_cannot_read_some_tables_that_deltaport_reads(table_url):
    for name, why in OFFICIAL_CANNOT.items():
        with pytest.raises(Exception):  # noqa: B017 - the official client fails in several ways
            delta_sharing.load_as_pandas(table_url(name))
        assert len(ds.load_as_pandas(table_url(name))) > 0, why


# --- change data feed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*CDF_FROM_0, "demo_events_cdf"])
def test_changes_same_rows_as_the_official_client_delta_format(table_url, name):
    ours = ds.load_table_changes_as_pandas(table_url(name), starting_version=0, use_delta_format=True)
    theirs = delta_sharing.load_table_changes_as_pandas(table_url(name), starting_version=0, use_delta_format=True)
    # the official delta path derives _commit_timestamp from file mtimes in whole seconds, as a timestamp
    _compare(ours, theirs, skip=("_commit_timestamp",))
    assert str(ours["_commit_timestamp"].dtype) == "int64" and str(ours["_commit_version"].dtype) == "int64"


@pytest.mark.parametrize("name", ["cdf", "cdf_partitioned", "cdf_plain", "demo_events_cdf"])
@pytest.mark.parametrize("use_delta_format", [None, False])
def test_changes_same_rows_as_the_official_client_parquet_format(table_url, name, use_delta_format):
    ours = ds.load_table_changes_as_pandas(table_url(name), starting_version=0, use_delta_format=use_delta_format)
    theirs = delta_sharing.load_table_changes_as_pandas(table_url(name), starting_version=0, use_delta_format=False)
    _compare(ours, theirs)  # _commit_timestamp included: int64 milliseconds in both


@pytest.mark.parametrize("name", CDF_FROM_1)
def test_changes_of_column_mapping_tables_same_rows_as_the_official_client(table_url, name):
    ours = ds.load_table_changes_as_pandas(table_url(name), starting_version=1, ending_version=4)
    theirs = delta_sharing.load_table_changes_as_pandas(
        table_url(name), starting_version=1, ending_version=4, use_delta_format=True
    )
    _compare(ours, theirs, skip=("_commit_timestamp",))


def test_changes_by_timestamp_same_rows_as_the_official_client(table_url, table_paths):
    from deltaport.delta import DeltaTable, SnapshotCache

    ts = DeltaTable(table_paths["cdf"], cache=SnapshotCache()).history().timestamps
    iso = [dt.datetime.fromtimestamp(t / 1000, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z") for t in ts]
    ours = ds.load_table_changes_as_pandas(table_url("cdf"), starting_timestamp=iso[1], ending_timestamp=iso[2])
    theirs = delta_sharing.load_table_changes_as_pandas(
        table_url("cdf"), starting_timestamp=iso[1], ending_timestamp=iso[2]
    )
    _compare(ours, theirs)
    assert set(ours["_commit_version"]) == {1, 2}


def test_changes_equal_deltalake_load_cdf(table_url):
    import deltalake
    import pyarrow as pa

    ours = ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0, ending_version=3)
    oracle = pa.table(deltalake.DeltaTable(str(TABLES / CORPUS["cdf"])).load_cdf(starting_version=0, ending_version=3))
    expected = oracle.cast(
        pa.schema(
            [
                pa.field(
                    f.name,
                    pa.string()
                    if "string" in str(f.type)
                    else (pa.int64() if str(f.type).startswith("uint") else f.type),
                )
                for f in oracle.schema
            ]
        )
    ).to_pandas(date_as_object=True)
    cols = [c for c in expected.columns if c != "_commit_timestamp"]
    assert frame_rows(ours, cols) == frame_rows(expected, cols)
