"""Streamed snapshots (delta/streamed.py): the same files as a whole replay, in the same order, in
pieces, resumable at any file's place, read by ranges from a store that is not local disk."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltaport.delta.streamed as streamed_module
from deltaport.delta import DeltaTable, Snapshot, SnapshotCache
from deltaport.delta.streamed import Place, StreamedSnapshot
from deltaport.storage.local import LocalStore

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"
WITH_CHECKPOINTS = [  # parquet ones, and v2 checkpoints in JSON (with parquet sidecars or not)
    "app-txn-checkpoint",
    "external-table-different-nullability",
    "parquet_row_group_skipping",
    "parsed-stats",
    "v1-multi-part-partitioned-struct-stats-only",
    "v1-multi-part-struct-stats-only",
    "v1-single-part-struct-stats-only",
    "v2-checkpoints-json-with-last-checkpoint",
    "v2-checkpoints-json-with-sidecars",
    "v2-checkpoints-json-without-sidecars",
    "v2-checkpoints-parquet-with-last-checkpoint",
    "v2-checkpoints-parquet-with-sidecars",
    "v2-checkpoints-parquet-without-sidecars",
    "v2-classic-checkpoint-json",
    "v2-classic-checkpoint-parquet",
    "v2-classic-parquet-struct-stats-only",
    "v2-json-sidecars-struct-stats-only",
    "v2-parquet-sidecars-struct-stats-only",
    "with_checkpoint_no_last_checkpoint",
]


def _generate(out: Path, files: int, commits: int) -> Path:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_big_table.py"
    spec = importlib.util.spec_from_file_location("gen_big_table", script)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(out, files=files, commits=commits)
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A log of 3,000 checkpointed files and 4 later commits, each adding 100 files and removing
    50, some from the checkpoint and some from the commit before; its checkpoint is written in
    row groups of 500 rows, as big checkpoints come in many row groups."""
    out = _generate(tmp_path_factory.mktemp("big") / "t", files=3000, commits=4)
    checkpoint = next((out / "_delta_log").glob("*.checkpoint.parquet"))
    pq.write_table(pq.read_table(checkpoint), checkpoint, row_group_size=500)
    return out


def _whole(location: Path | str, **kw) -> Snapshot:
    return DeltaTable(str(location), cache=SnapshotCache(), **kw).snapshot()


def _streamed(location: Path | str, **kw) -> StreamedSnapshot:
    table = DeltaTable(str(location), cache=SnapshotCache(), **kw).streamed(above=0)
    assert isinstance(table, StreamedSnapshot)
    return table


def _joined(stream: StreamedSnapshot, start: Place = Place(0, 0)) -> tuple[pa.Table | None, list[Place]]:
    pieces = list(stream.pieces(start))
    if not pieces:
        return None, []
    places = [p.place(i) for p in pieces for i in range(p.snapshot.num_files)]
    return pa.concat_tables([p.snapshot.live for p in pieces]).combine_chunks(), places


@pytest.mark.parametrize("name", WITH_CHECKPOINTS)
def test_pieces_are_the_whole_replay_in_order(name, monkeypatch):
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 2)  # many pieces, even on small tables
    whole = _whole(TABLES / name)
    live, places = _joined(_streamed(TABLES / name))
    assert live is not None and whole.num_files == live.num_rows
    assert live.equals(whole.live.combine_chunks())
    assert places == sorted(places) and len(set(places)) == len(places)


def test_resuming_at_any_place_lists_the_rest(generated, monkeypatch):
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 700)
    stream = _streamed(generated)
    keys = _whole(generated).live.column("_key").to_pylist()
    live, places = _joined(stream)
    assert live is not None and live.column("_key").to_pylist() == keys
    later = stream.later.num_rows
    assert later == 4 * 100 - (4 - 1) * 10  # removes of the commit before took some of the later adds
    for i in (0, 1, 699, 700, 1500, len(keys) - later - 1, len(keys) - later, len(keys) - 1):
        rest, _ = _joined(stream, places[i])
        assert rest is not None and rest.column("_key").to_pylist() == keys[i:], i
    assert _joined(stream, stream.end) == (None, [])


@pytest.mark.parametrize("name", ["v2-checkpoints-json-with-sidecars", "v2-checkpoints-json-without-sidecars"])
def test_a_json_v2_checkpoint_resumes_at_every_place(name, monkeypatch):
    """Its own adds are a source read whole, its parquet sidecars sources of their own."""
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 1)
    stream = _streamed(TABLES / name)
    assert stream.sources[0].endswith(".json")
    live, places = _joined(stream)
    assert live is not None
    keys = live.column("_key").to_pylist()
    for i, place in enumerate(places):
        rest, _ = _joined(stream, place)
        assert rest is not None and rest.column("_key").to_pylist() == keys[i:], place


def test_files_removed_after_the_checkpoint_are_not_listed(generated):
    stream = _streamed(generated)
    live, _ = _joined(stream)
    assert live is not None
    removed = set(stream.touched.to_pylist()) - set(stream.later.column("_key").to_pylist())
    assert removed and removed.isdisjoint(live.column("_key").to_pylist())


class _RemoteStore(LocalStore):
    """The local store seen as an object store: no local paths, every read counted."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.ranged = self.reads = 0
        self.whole: list[str] = []

    def __getattribute__(self, name: str):
        if name == "local_path":
            raise AttributeError(name)
        return super().__getattribute__(name)

    def read_range(self, path: str, start: int, length: int) -> bytes:
        data = super().read_range(path, start, length)
        self.ranged += len(data)
        self.reads += 1
        return data

    def read(self, path: str) -> bytes:
        self.whole.append(path)
        return super().read(path)


def test_an_object_store_checkpoint_is_read_by_ranges(generated, monkeypatch):
    monkeypatch.setattr(streamed_module, "PIECE_ROWS", 500)
    store = _RemoteStore(str(generated))
    stream = _streamed(generated, store=store)
    assert not any(p.endswith(".parquet") for p in store.whole)  # never read whole
    live, places = _joined(stream)
    assert live is not None and live.equals(_whole(generated).live.combine_chunks())
    size = sum(f.stat().st_size for f in (generated / "_delta_log").glob("*.checkpoint.parquet"))
    store.ranged = 0
    _joined(stream, places[-stream.later.num_rows - 1])  # the last checkpoint file's row group only
    assert 0 < store.ranged < size / 3


def test_small_tables_and_cached_versions_are_read_whole(generated):
    table = DeltaTable(str(generated), cache=SnapshotCache())
    assert isinstance(table.streamed(above=10_000), Snapshot)  # 3,002 checkpoint rows
    table.snapshot()
    assert isinstance(table.streamed(above=0), Snapshot)  # cached: the cache answers
    assert isinstance(table.streamed(above=0, cached=False), StreamedSnapshot)
    no_checkpoint = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache())
    assert isinstance(no_checkpoint.streamed(above=0), Snapshot)


def test_a_corrupt_checkpoint_falls_back_to_the_whole_replay(tmp_path):
    table = tmp_path / "t"
    shutil.copytree(TABLES / "v1-single-part-struct-stats-only", table)
    checkpoint = next((table / "_delta_log").glob("*.checkpoint.parquet"))
    checkpoint.write_bytes(b"not parquet")
    got = DeltaTable(str(table), cache=SnapshotCache()).streamed(above=0)
    assert isinstance(got, Snapshot)  # whole replay, which falls back to the commits
    assert got.num_files == _whole(TABLES / "v1-single-part-struct-stats-only").num_files


def test_protocol_and_metadata_are_read_from_their_row_group_alone(generated, tmp_path):
    """Wherever the checkpoint holds them (here: its last rows), the protocol and metadata are
    found, and only the row groups their statistics do not rule out are read."""
    table = tmp_path / "t"
    shutil.copytree(generated, table)
    checkpoint = next((table / "_delta_log").glob("*.checkpoint.parquet"))
    rows = pq.read_table(checkpoint)
    moved = pa.concat_tables([rows.slice(2), rows.slice(0, 2)])  # protocol and metaData go last
    assert rows.column("metaData").null_count == rows.num_rows - 1
    pq.write_table(moved, checkpoint, row_group_size=500)
    store = _RemoteStore(str(table))
    stream = _streamed(table, store=store)
    assert stream.config.metadata.id == _whole(generated).config.metadata.id
    assert stream.config.partition_columns == ["part"]
    groups = pq.ParquetFile(checkpoint).metadata.num_row_groups
    assert groups == 7 and store.reads <= 3 * groups  # footers and one row group (all seven: 107 reads)


def test_a_checkpoint_whose_adds_have_no_path_is_a_corrupt_log(generated, tmp_path):
    from deltaport.errors import CorruptLog

    table = tmp_path / "t"
    shutil.copytree(generated, table)
    checkpoint = next((table / "_delta_log").glob("*.checkpoint.parquet"))
    rows = pq.read_table(checkpoint)
    adds = rows.column("add").combine_chunks()
    pathless = pa.StructArray.from_arrays(
        [adds.field(f.name) for f in adds.type if f.name != "path"],
        fields=[f for f in adds.type if f.name != "path"],
        mask=pa.compute.invert(adds.is_valid()),
    )
    pq.write_table(rows.set_column(rows.schema.get_field_index("add"), "add", pathless), checkpoint)
    stream = _streamed(table)
    with pytest.raises(CorruptLog, match="add actions without a path"):
        list(stream.pieces())
