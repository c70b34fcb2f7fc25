"""A cold load lists the log from the checkpoint ``_last_checkpoint`` names, and stays right when
the hint is stale, wrong or corrupt, and when an older version or the history is asked for."""

from __future__ import annotations

import shutil
from pathlib import Path

import builders
import deltalake
import pytest

from deltaport.delta import DeltaTable, SnapshotCache

HINT = Path("_delta_log") / "_last_checkpoint"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """25 versions, checkpoints at 10 and 20, ``_last_checkpoint`` naming 20."""
    return Path(builders.make_many_commits_table(tmp_path_factory.mktemp("lc"), commits=25, checkpoint_every=10))


@pytest.fixture
def table(built, tmp_path) -> Path:
    path = tmp_path / "t"
    shutil.copytree(built, path)
    return path


def _paths(snap) -> set[str]:
    return set(snap.files().column("path").to_pylist())


def _expected(path: Path, version: int | None = None) -> set[str]:
    """The live files as deltalake reads them (from the untouched table: it refuses stale hints)."""
    import pyarrow as pa

    actions = deltalake.DeltaTable(str(path), version=version).get_add_actions(flatten=True)
    return set(pa.table(actions).column("path").to_pylist())


class _Listings:
    """Records where each listing of ``_delta_log`` started."""

    def __init__(self, dt: DeltaTable) -> None:
        self.starts: list[str | None] = []
        inner = dt.store.list_dir

        def list_dir(directory, start_after=None):
            if directory.rstrip("/") == "_delta_log":
                self.starts.append(start_after)
            return inner(directory, start_after)

        dt.store.list_dir = list_dir


def _cold(path: Path) -> tuple[DeltaTable, _Listings]:
    dt = DeltaTable(str(path), cache=SnapshotCache())
    return dt, _Listings(dt)


def test_a_cold_load_lists_from_the_hinted_checkpoint(table, built):
    assert '"version":20' in (table / HINT).read_text().replace(" ", "")
    dt, listings = _cold(table)
    snap = dt.snapshot()
    assert snap.version == 24
    assert _paths(snap) == _expected(built)
    assert listings.starts == [f"{19:020d}.~"]  # nothing before the checkpoint's version is listed
    dt.snapshot()
    # then only what is new, from the newest known commit on (which shows the log is still the same)
    assert listings.starts[1:] == [f"{24:020d}"]


@pytest.mark.parametrize(
    "hint",
    [
        '{"version":10,"size":1}',  # stale: a newer checkpoint exists
        '{"version":15,"size":1}',  # names a version without a checkpoint (a newer one follows)
        '{"version":99,"size":1}',  # after the latest version
        '{"version":23,"size":1}',  # no checkpoint at or after it
        '{"version":"20"}',  # wrong type
        "not json at all",  # corrupt
        "",  # empty
    ],
)
def test_a_stale_or_corrupt_hint_still_gives_the_right_table(table, built, hint):
    (table / HINT).write_text(hint)
    dt, _ = _cold(table)
    snap = dt.snapshot()
    assert snap.version == 24
    assert _paths(snap) == _expected(built)


def test_a_missing_hint_lists_the_whole_log(table, built):
    (table / HINT).unlink()
    dt, listings = _cold(table)
    assert _paths(dt.snapshot()) == _expected(built)
    assert listings.starts == [None]


@pytest.mark.parametrize("version", [0, 5, 10, 19, 20, 23])
def test_older_versions_after_a_hinted_load(table, built, version):
    dt, listings = _cold(table)
    dt.snapshot()
    assert _paths(dt.snapshot(version)) == _expected(built, version)
    assert dt.snapshot(version).version == version
    if version < 20:
        assert None in listings.starts  # the whole log was listed to reach it
    assert _paths(dt.snapshot()) == _expected(built)  # and the latest is still right


def test_history_and_changes_after_a_hinted_load(table):
    full = DeltaTable(str(table), cache=SnapshotCache())
    full.refresh_listing(covering=0)
    dt, _ = _cold(table)
    dt.snapshot()
    assert dt.earliest_version() == 0
    assert dt.history().versions == full.history().versions == list(range(25))
    assert dt.history().timestamps == full.history().timestamps
    assert [c.version for c in dt.changes(3, 6)] == [3, 4, 5, 6]
    assert dt.config_at(2).schema == full.config_at(2).schema


def test_a_corrupt_hinted_checkpoint_falls_back_to_an_older_one(table, built):
    for part in (table / "_delta_log").glob(f"{20:020d}.checkpoint*.parquet"):
        part.write_bytes(b"PAR1 this is not a checkpoint PAR1")
    dt, _ = _cold(table)
    snap = dt.snapshot()
    assert snap.version == 24
    assert _paths(snap) == _expected(built)


def test_a_cold_call_that_needs_the_whole_log_lists_it_once(table, built):
    dt, listings = _cold(table)
    assert [c.version for c in dt.changes(3, 6)] == [3, 4, 5, 6]
    assert listings.starts == [None]  # no listing from the hint first, only to list past it
