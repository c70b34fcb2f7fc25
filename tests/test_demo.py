"""The demo tables: every version read by delta-rs and by our engine, against rows spelled out here.

Expected rows are computed in this file from the documented recipe of each table, not with the
demo module's own helpers.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.demo import (
    DEMO_TABLES,
    _TableWriter,
    build_demo_tables,
    escape_path_name,
    file_stats,
    write_commit,
)
from deltaport.dv import DeletionVectorDescriptor, local_read_range, read_dv

HOUR = 3_600_000
T0 = int(dt.datetime(2024, 6, 1, 10, tzinfo=dt.timezone.utc).timestamp() * 1000)
UTC = dt.timezone.utc

# --- expected contents, from the recipe ---------------------------------------------------------

REGIONS = ["europe", "north america", "asia/pacific", "latam"]


def _order(i: int) -> dict:
    day = dt.date(2024, 1, 1) + dt.timedelta(days=i // 4)
    return {
        "order_id": i,
        "region": REGIONS[i % 4],
        "amount": None if i % 50 == 0 else round(5 + (i * 7919) % 20000 / 100, 2),
        "order_date": day,
        "ts": dt.datetime(day.year, day.month, day.day, 8 + i % 10, i * 7 % 60, tzinfo=UTC),
    }


def _sales(version: int) -> list[dict]:
    rows = [_order(i) for i in range(1, 201 if version == 0 else 321)]
    return [r for r in rows if r["region"] != "latam"] if version >= 2 else rows


def _player(i: int) -> dict:
    return {"id": i, "name": f"player_{i:02d}", "score": i * 37 % 100}


def _events(version: int) -> list[dict]:
    rows = [_player(i) for i in range(1, 11 if version == 0 else 21)]
    if version >= 2:
        rows = [dict(r, score=r["score"] + 100) if r["id"] % 5 == 0 else r for r in rows]
    if version >= 3:
        rows = [r for r in rows if r["score"] >= 20]
    return rows


def _customers(version: int) -> list[dict]:
    gone = {1: {2, 5, 8}, 2: {2, 5, 8, 16}}.get(version, set())
    countries = ["DE", "FR", "US", "JP", "BR"]
    return [{"id": i, "name": f"customer_{i:02d}", "country": countries[i % 5]} for i in range(1, 21) if i not in gone]


EXPECTED = {"sales": _sales, "events_cdf": _events, "customers_dv": _customers}
KEY = {"sales": "order_id", "events_cdf": "id", "customers_dv": "id"}
FILES_PER_VERSION = {"sales": [4, 8, 6], "events_cdf": [1, 2, 2, 2], "customers_dv": [2, 2, 2]}
OPERATIONS = {
    "sales": ["WRITE", "WRITE", "DELETE"],
    "events_cdf": ["WRITE", "WRITE", "UPDATE", "DELETE"],
    "customers_dv": ["WRITE", "DELETE", "DELETE"],
}
CASES = [(name, v) for name, counts in FILES_PER_VERSION.items() for v in range(len(counts))]

# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, str]:
    return build_demo_tables(tmp_path_factory.mktemp("demo"))


def _commits(path: str) -> list[list[dict]]:
    files = sorted((Path(path) / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines()] for f in files]


def _plain(table: pa.Table) -> pa.Table:
    """string_view -> string, unsigned -> int64 (delta-rs readers return arro3 view types)."""
    fields = []
    for f in table.schema:
        t = f.type
        if t == pa.string_view() or t == pa.large_string():
            t = pa.string()
        elif pa.types.is_unsigned_integer(t):
            t = pa.int64()
        fields.append(pa.field(f.name, t))
    return table.cast(pa.schema(fields))


def _sorted(rows: list[dict], key: str) -> list[dict]:
    return sorted(rows, key=lambda r: r[key])


def _deltalake_deleted(path: str, version: int) -> dict[str, list[int]]:
    dvs = pa.table(deltalake.DeltaTable(path, version=version).deletion_vectors())
    prefix = Path(path).resolve().as_uri() + "/"
    out = {}
    for uri, keep in zip(dvs.column("filepath").to_pylist(), dvs.column("selection_vector").to_pylist()):
        assert uri.startswith(prefix)
        out[unquote(uri[len(prefix) :])] = [i for i, k in enumerate(keep) if not k]
    return out


# --- every table, every version -----------------------------------------------------------------


def test_build_returns_every_table(tables):
    assert set(tables) == set(DEMO_TABLES) == {"sales", "events_cdf", "customers_dv"}
    for path in tables.values():
        assert Path(path).is_absolute() and (Path(path) / "_delta_log").is_dir()
        assert deltalake.DeltaTable(path).version() == len(_commits(path)) - 1


@pytest.mark.parametrize(("name", "version"), CASES)
def test_version_matches_deltalake_and_expected_rows(tables, name, version):
    path = tables[name]
    dl = deltalake.DeltaTable(path, version=version)
    assert dl.version() == version
    theirs = sorted(pa.table(dl.get_add_actions(flatten=True)).column("path").to_pylist())
    ours = sorted(DeltaTable(path, cache=SnapshotCache()).snapshot(version).files().column("path").to_pylist())
    assert ours == theirs
    assert len(ours) == FILES_PER_VERSION[name][version]

    expected = _sorted(EXPECTED[name](version), KEY[name])
    got = _plain(pa.table(dl.scan()))
    assert got.column_names == list(expected[0])
    assert _sorted(got.to_pylist(), KEY[name]) == expected

    import polars as pl

    ids = pl.read_delta(path, version=version)[KEY[name]].to_list()
    assert sorted(ids) == [r[KEY[name]] for r in expected]


@pytest.mark.parametrize("name", list(FILES_PER_VERSION))
def test_commit_files(tables, name):
    commits = _commits(tables[name])
    for version, actions in enumerate(commits):
        info = actions[0]["commitInfo"]
        assert info["timestamp"] == T0 + version * HOUR
        assert info["operation"] == OPERATIONS[name][version]
        assert ("protocol" in actions[1]) == (version == 0)
        for action in actions:
            if "add" in action:
                add = action["add"]
                assert set(add) >= {"path", "partitionValues", "size", "modificationTime", "dataChange", "stats"}
                assert add["size"] == (Path(tables[name]) / unquote(add["path"])).stat().st_size
                stats = json.loads(add["stats"])
                assert set(stats) >= {"numRecords", "minValues", "maxValues", "nullCount"}
            if "remove" in action:
                remove = action["remove"]
                assert set(remove) >= {
                    "path",
                    "deletionTimestamp",
                    "dataChange",
                    "extendedFileMetadata",
                    "partitionValues",
                    "size",
                }
                assert remove["deletionTimestamp"] == info["timestamp"]
    metadata = commits[0][2]["metaData"]
    assert metadata["createdTime"] == T0
    schema = json.loads(metadata["schemaString"])
    types = [(f["name"], f["type"]) for f in schema["fields"]]
    assert (
        types
        == {
            "sales": [
                ("order_id", "long"),
                ("region", "string"),
                ("amount", "double"),
                ("order_date", "date"),
                ("ts", "timestamp"),
            ],
            "events_cdf": [("id", "long"), ("name", "string"), ("score", "integer")],
            "customers_dv": [("id", "long"), ("name", "string"), ("country", "string")],
        }[name]
    )
    assert not list((Path(tables[name]) / "_delta_log").glob(".*"))  # no temp files left


# --- sales: partitions ------------------------------------------------------------------------------


def test_sales_partitions_and_stats(tables):
    path = Path(tables["sales"])
    assert {p.name for p in path.iterdir() if p.is_dir()} == {
        "_delta_log",
        "region=europe",
        "region=north america",
        "region=asia%2Fpacific",
        "region=latam",
    }
    adds = [a["add"] for a in _commits(str(path))[0] if "add" in a]
    by_region = {a["partitionValues"]["region"]: a for a in adds}
    assert by_region["asia/pacific"]["path"].startswith("region=asia%252Fpacific/part-")
    assert by_region["north america"]["path"].startswith("region=north%20america/part-")
    europe_file = pq.ParquetFile(path / unquote(by_region["europe"]["path"]))
    assert europe_file.schema_arrow.names == ["order_id", "amount", "order_date", "ts"]  # no partition column
    assert europe_file.metadata.row_group(0).column(0).compression == "SNAPPY"
    europe = [r for r in _sales(0) if r["region"] == "europe"]
    stats = json.loads(by_region["europe"]["stats"])
    assert stats == {
        "numRecords": len(europe),
        "minValues": {
            "order_id": 4,
            "amount": min(r["amount"] for r in europe if r["amount"] is not None),
            "order_date": "2024-01-02",
            "ts": "2024-01-02T12:28:00.000Z",
        },
        "maxValues": {
            "order_id": 200,
            "amount": max(r["amount"] for r in europe if r["amount"] is not None),
            "order_date": "2024-02-20",
            "ts": "2024-02-20T08:20:00.000Z",
        },
        "nullCount": {"order_id": 0, "amount": 2, "order_date": 0, "ts": 0},
    }
    removes = [a["remove"] for a in _commits(str(path))[2] if "remove" in a]
    assert len(removes) == 2 and all(r["partitionValues"] == {"region": "latam"} for r in removes)
    assert protocol_of(str(path)) == {"minReaderVersion": 1, "minWriterVersion": 2}


def protocol_of(path: str) -> dict:
    return _commits(path)[0][1]["protocol"]


# --- events_cdf: change data feed ---------------------------------------------------------------------


def test_cdf_matches_what_was_written(tables):
    path = tables["events_cdf"]
    assert protocol_of(path) == {"minReaderVersion": 1, "minWriterVersion": 4}
    assert deltalake.DeltaTable(path).metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    cdf = _plain(pa.table(deltalake.DeltaTable(path).load_cdf(starting_version=0)))
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["name"], r["score"]) for r in cdf.to_pylist())
    expected = [(0, "insert", r["id"], r["name"], r["score"]) for r in _events(0)]
    expected += [(1, "insert", r["id"], r["name"], r["score"]) for r in _events(1) if r["id"] > 10]
    for i in (5, 10, 15, 20):
        expected.append((2, "update_preimage", i, f"player_{i:02d}", _player(i)["score"]))
        expected.append((2, "update_postimage", i, f"player_{i:02d}", _player(i)["score"] + 100))
    expected += [(3, "delete", r["id"], r["name"], r["score"]) for r in _events(2) if r["score"] < 20]
    assert got == sorted(expected)
    assert {r["id"] for r in cdf.to_pylist() if r["_change_type"] == "delete"} == {3, 11, 14, 19}
    stamps = {(r["_commit_version"], r["_commit_timestamp"]) for r in cdf.to_pylist()}
    assert stamps == {(v, dt.datetime(2024, 6, 1, 10 + v)) for v in range(4)}


def test_cdf_files_in_our_engine(tables):
    path = tables["events_cdf"]
    changes = DeltaTable(path, cache=SnapshotCache()).changes(0)
    assert [len(c.cdcs) for c in changes] == [0, 0, 2, 2]
    assert [len(c.removes) for c in changes] == [0, 0, 2, 2]
    for change in changes[2:]:
        for cdc_path in change.cdcs.column("path").to_pylist():
            assert cdc_path.startswith("_change_data/cdc-")
            data = pq.read_table(Path(path) / cdc_path)
            assert data.schema.names == ["id", "name", "score", "_change_type"]
            assert data.schema.field("_change_type").type == pa.string()


# --- customers_dv: deletion vectors ------------------------------------------------------------------


def test_deletion_vectors(tables):
    path = tables["customers_dv"]
    assert protocol_of(path) == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors"],
    }
    adds0 = [a["add"] for a in _commits(path)[0] if "add" in a]
    first, second = sorted(adds0, key=lambda a: json.loads(a["stats"])["minValues"]["id"])
    assert pq.read_table(Path(path) / first["path"]).column("id").to_pylist() == list(range(1, 11))
    expected = {0: {}, 1: {first["path"]: [1, 4, 7]}, 2: {first["path"]: [1, 4, 7], second["path"]: [5]}}
    table = DeltaTable(path, cache=SnapshotCache())
    for version, deleted in expected.items():
        assert _deltalake_deleted(path, version) == deleted
        ours = {}
        for add in table.snapshot(version).add_actions():
            if add.get("deletionVector"):
                desc = DeletionVectorDescriptor.from_dict(add["deletionVector"])
                ours[add["path"]] = read_dv(desc, local_read_range(path)).tolist()
                stats = json.loads(add["stats"])
                assert stats["tightBounds"] is False and stats["numRecords"] == 10
        assert ours == deleted
    latest = {a["path"]: a for a in table.snapshot(2).add_actions()}
    assert latest[first["path"]]["deletionVector"]["storageType"] == "u"
    assert latest[second["path"]]["deletionVector"]["storageType"] == "i"
    dv_file = DeletionVectorDescriptor.from_dict(latest[first["path"]]["deletionVector"]).relative_path()
    assert (Path(path) / dv_file).is_file()
    assert json.loads(adds0[0]["stats"])["tightBounds"] is True
    for version in (1, 2):  # the DV commit removes the file's previous add
        removes = [a["remove"]["path"] for a in _commits(path)[version] if "remove" in a]
        assert removes == [(first if version == 1 else second)["path"]]


# --- the writer itself -----------------------------------------------------------------------------


def test_builds_without_deltalake(tmp_path):
    code = (
        "import sys\n"
        "for m in ('deltalake', 'polars'): sys.modules[m] = None  # importing them fails\n"
        "from deltaport.demo import build_demo_tables\n"
        "print(sorted(build_demo_tables(sys.argv[1])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['customers_dv', 'events_cdf', 'sales']"


def _normalized_logs(root: Path) -> dict[str, list]:
    out = {}
    for log in sorted(root.glob("*/_delta_log/*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines()]
        for action in actions:
            body = action.get("add") or action.get("remove") or {}
            body.pop("modificationTime", None)
            dv = body.get("deletionVector")
            if dv and dv["storageType"] == "u":
                dv.pop("pathOrInlineDv")  # a fresh random UUID each build
        out[str(log.relative_to(root))] = actions
    return out


def test_rebuild_overwrites_and_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_demo_tables(a)
    (a / "sales" / "stray.txt").write_text("left over from an earlier run")
    build_demo_tables(a)
    build_demo_tables(b)
    assert not (a / "sales" / "stray.txt").exists()
    assert len(list((a / "customers_dv").glob("deletion_vector_*.bin"))) == 1
    assert _normalized_logs(a) == _normalized_logs(b)
    data_a = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    assert data_a == sorted(p.relative_to(b) for p in b.rglob("*.parquet"))
    assert all((a / p).read_bytes() == (b / p).read_bytes() for p in data_a)


def test_refuses_to_overwrite_other_directories(tmp_path):
    (tmp_path / "sales").mkdir()
    (tmp_path / "sales" / "precious.csv").write_text("1,2,3\n")
    with pytest.raises(FileExistsError):
        build_demo_tables(tmp_path)
    assert (tmp_path / "sales" / "precious.csv").read_text() == "1,2,3\n"


def test_write_commit_never_overwrites(tmp_path):
    write_commit(tmp_path, 0, [{"commitInfo": {"timestamp": 1}}])
    with pytest.raises(FileExistsError):
        write_commit(tmp_path, 0, [{"commitInfo": {"timestamp": 2}}])
    assert [p.name for p in (tmp_path / "_delta_log").iterdir()] == [f"{0:020d}.json"]
    assert json.loads((tmp_path / "_delta_log" / f"{0:020d}.json").read_text()) == {"commitInfo": {"timestamp": 1}}


def test_escape_path_name_like_spark():
    assert escape_path_name("a b") == "a b"
    assert escape_path_name("x:y/z=1%?#") == "x%3Ay%2Fz%3D1%25%3F%23"
    assert escape_path_name("é\x01{") == "é%01%7B"


def test_partition_values_round_trip(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("part", pa.string()), ("day", pa.date32())])
    values = ["a b", "x:y/z", "50%", None, "é", "q?#"]
    rows = [{"id": i, "part": v, "day": dt.date(2024, 5, 1 + i % 2)} for i, v in enumerate(values)]
    w = _TableWriter(
        tmp_path / "t",
        schema,
        partition_by=["part", "day"],
        seed=7,
        protocol={"minReaderVersion": 1, "minWriterVersion": 2},
    )
    w.commit("WRITE", w.add(pa.Table.from_pylist(rows, schema)))
    path = str(tmp_path / "t")
    adds = [a["add"] for a in _commits(path)[0] if "add" in a]
    assert len(adds) == len(values)
    by_id = {}
    for add in adds:
        assert (Path(path) / unquote(add["path"])).is_file()
        ids = pq.ParquetFile(Path(path) / unquote(add["path"])).read().column("id").to_pylist()
        by_id[ids[0]] = add
    assert by_id[3]["partitionValues"] == {"part": None, "day": "2024-05-02"}
    assert by_id[3]["path"].startswith("part=__HIVE_DEFAULT_PARTITION__/day=2024-05-02/")
    assert by_id[1]["path"].startswith("part=x%253Ay%252Fz/day=2024-05-02/")
    assert by_id[0]["path"].startswith("part=a%20b/day=2024-05-01/")
    dl = deltalake.DeltaTable(path)
    assert sorted(pa.table(dl.get_add_actions(flatten=True)).column("path").to_pylist()) == sorted(
        DeltaTable(path, cache=SnapshotCache()).snapshot().files().column("path").to_pylist()
    )
    got = sorted(_plain(pa.table(dl.scan())).select(["id", "part", "day"]).to_pylist(), key=lambda r: r["id"])
    assert got == rows


def test_timestamp_max_stat_rounds_up():
    t = pa.table({"ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))})
    stats = json.loads(file_stats(t))
    assert stats["minValues"]["ts"] == "2024-01-01T00:00:00.001Z"
    assert stats["maxValues"]["ts"] == "2024-01-01T00:00:00.002Z"


def test_unsupported_type_is_refused_before_writing(tmp_path):
    with pytest.raises(TypeError):
        _TableWriter(tmp_path / "t", pa.schema([("x", pa.list_(pa.int64()))]), protocol={})
    assert not (tmp_path / "t").exists()
