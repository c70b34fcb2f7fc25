"""One file spelled two ways in the log (relative or absolute, percent-encoded or not) is one file
to the replay, as Delta's own readers resolve paths (they are URIs)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from builders import make_partitioned_table, write_commit

from deltaport.delta import DeltaTable
from deltaport.delta.replay import normalise_paths


def _remove(path: str) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}}


@pytest.mark.parametrize(
    "spell",
    [
        pytest.param(lambda root, rel: f"file://{root}/{rel}", id="absolute"),
        pytest.param(lambda root, rel: f"file:{root}/{rel}", id="absolute-one-slash"),
        pytest.param(lambda root, rel: quote(rel, safe=""), id="encoded-separators-and-all"),
        pytest.param(lambda root, rel: f"file://{quote(str(root))}/{quote(rel)}", id="absolute-encoded"),
    ],
)
def test_a_remove_spelt_another_way_removes_the_file(tmp_path, spell):
    table = Path(make_partitioned_table(tmp_path / "t"))
    before = DeltaTable(str(table)).snapshot()
    gone = sorted(before.live.column("path").to_pylist())[0]
    write_commit(table, [_remove(spell(table.resolve(), gone))])
    after = DeltaTable(str(table)).snapshot()
    assert after.num_files == before.num_files - 1
    assert gone not in after.live.column("path").to_pylist()


def test_decoding_is_the_uri_rule_for_every_escape():
    paths = ["a%20b.parquet", "x=%C3%A9/p.parquet", "p%2541.parquet", "plain", "q%3a%3A.parquet"]
    assert normalise_paths(pa.array(paths), "file:///r").to_pylist() == [
        "a b.parquet",
        "x=é/p.parquet",
        "p%41.parquet",
        "plain",
        "q::.parquet",
    ]


def test_a_path_outside_the_root_stays_absolute():
    paths = ["file:///r/t2/a.parquet", "file:/r/t/b.parquet", "s3://bucket/t/c.parquet"]
    assert normalise_paths(pa.array(paths), "file:///r/t").to_pylist() == [
        "file:///r/t2/a.parquet",
        "b.parquet",
        "s3://bucket/t/c.parquet",
    ]
