"""Tables written by delta-rs in the test (plus hand-made DV commits) round-trip like the corpus."""

from __future__ import annotations

from urllib.parse import unquote

import builders
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaport import dv
from deltaport.delta import DeltaTable, SnapshotCache

BUILDERS = {
    "partitioned": builders.make_partitioned_table,
    "cdf": builders.make_cdf_table,
    "many_commits": builders.make_many_commits_table,
    "dv_on_disk": lambda d: builders.make_dv_table(d, inline=False),
    "dv_inline": lambda d: builders.make_dv_table(d, inline=True),
    "timestamp_ntz": builders.make_timestamp_ntz_table,
}


def _oracle(path: str, version: int) -> list[str]:
    return sorted(
        pa.table(deltalake.DeltaTable(path, version=version).get_add_actions(flatten=True)).column("path").to_pylist()
    )


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_version_matches_deltalake(kind, tmp_path):
    path = BUILDERS[kind](tmp_path)
    table = DeltaTable(path, cache=SnapshotCache())
    warm = DeltaTable(path, cache=SnapshotCache())  # walks versions in order: incremental path
    first, latest = table.earliest_version(), table.latest_version()
    assert table.snapshot().num_files > 0
    for version in range(first, latest + 1):
        expected = _oracle(path, version)
        assert sorted(table.snapshot(version).files().column("path").to_pylist()) == expected, version
        assert sorted(warm.snapshot(version).files().column("path").to_pylist()) == expected, version
    changes = table.changes(first, latest)
    assert [c.version for c in changes] == list(range(first, latest + 1))


def test_cdf_table_changes_carry_cdc_files(tmp_path):
    path = builders.make_cdf_table(tmp_path)
    changes = DeltaTable(path, cache=SnapshotCache()).changes(0)
    cdc = [c for c in changes if c.has_cdc]
    assert len(cdc) >= 2  # the update and the delete
    for c in cdc:
        assert all(p.startswith("_change_data/") for p in c.cdcs.column("path").to_pylist())
        assert c.config.change_data_feed_enabled


@pytest.mark.parametrize("inline", [False, True])
def test_dv_rows_match_deltalake(tmp_path, inline):
    path = builders.make_dv_table(tmp_path, inline=inline)
    table = DeltaTable(path, cache=SnapshotCache())
    parts = []
    for add in table.snapshot().add_actions():
        data = pq.read_table(f"{path}/{unquote(add['path'])}")
        if add.get("deletionVector"):
            deleted = dv.read_dv(dv.DeletionVectorDescriptor.from_dict(add["deletionVector"]), table.store.read_range)
            data = data.filter(pa.array(dv.keep_mask(deleted, data.num_rows)))
        parts.append(data)
    ours = sorted(pa.concat_tables(parts).column("id").to_pylist())
    theirs = sorted(pa.table(deltalake.DeltaTable(path).scan()).column("id").to_pylist())
    assert ours == theirs
    assert not set(builders.DV_TABLE_DELETED_IDS) & set(ours)
