"""FileList: a query's file actions held as compressed Arrow blocks, given back unchanged, in memory up
to a budget and in a temporary file beyond it."""

from __future__ import annotations

import dataclasses
import errno
import gc
import os
import tempfile
import weakref
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from deltaport.client import file_list
from deltaport.client.errors import SpillFailed
from deltaport.client.file_list import FileList, FileListBuilder
from deltaport.client.model import FileAction
from deltaport.client.query_types import ChangesOptions
from deltaport.client.rest import QueryOptions, RestClient

pytest_plugins = ["client_fixtures"]


def _actions(n: int) -> list[FileAction]:
    out = []
    for i in range(n):
        out.append(
            FileAction(
                url=f"https://storage/t/part-{i}.parquet?sig={i:064x}",
                id=f"id-{i}",
                size=1000 + i,
                partition_values={"part": str(i % 3), "empty": None} if i % 2 else {},
                stats=f'{{"numRecords": {i}}}' if i % 5 else None,
                deletion_vector={"storageType": "i", "pathOrInlineDv": "abc", "cardinality": 1} if i % 7 == 0 else None,
                version=i if i % 4 else None,
                timestamp=1_700_000_000_000 + i,
                change_type=("insert", "delete", "cdf", None)[i % 4],
                expiration_timestamp=None if i % 6 == 0 else 1_800_000_000_000,
                paired=i % 9 == 0,
                paired_deletion_vector={"storageType": "p", "pathOrInlineDv": "x"} if i % 9 == 0 else None,
            )
        )
    return out


def test_every_field_comes_back_in_order_across_blocks():
    actions = _actions(25)
    builder = FileListBuilder(block=4)
    builder.extend(actions)
    files = builder.build()
    assert len(files) == 25 and list(files) == actions and files == actions
    assert files[0] == actions[0] and files[-1] == actions[-1] and files[13] == actions[13]
    assert files[3:9] == actions[3:9]
    assert files.total_bytes == sum(a.size for a in actions)
    assert files[14].num_records == actions[14].num_records == 14 - 1  # stats, net of the DV
    with pytest.raises(IndexError):
        files[25]


def test_lists_join_in_order():
    a, b = _actions(10), _actions(3)
    joined = FileList.of(a) + FileList.of(b)
    assert list(joined) == a + b and joined.total_bytes == sum(x.size for x in a + b)
    assert list(FileList.join([])) == [] and not FileList()


def test_the_blocks_hold_less_than_the_objects():
    files = FileList.of(_actions(4096))
    assert files.nbytes < 100 * len(files)


# -- beyond the memory budget: blocks spilled to a temporary file ---------------------------------


def _spill_fds(directory: Path) -> list[str]:
    """The descriptors this process has open on files in ``directory`` (a spill file is unlinked
    from the start: its link reads '<directory>/<name> (deleted)')."""
    return _fds_on(f"{directory}/")


def _fds_on(prefix: str) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
        if target.startswith(prefix):
            out.append(target)
    return out


def _built(actions: list[FileAction], **kw) -> FileList:
    builder = FileListBuilder(block=8, **kw)
    builder.extend(actions)
    return builder.build()


def test_a_spilled_list_gives_back_what_an_unspilled_one_does(tmp_path):
    actions = _actions(203)  # 25 blocks of 8 and one of 3
    whole = _built(actions, budget=1 << 30)
    spilled = _built(actions, budget=8000, spill_dir=str(tmp_path))
    assert whole.nbytes == whole.held_bytes and 0 < spilled.held_bytes <= 8000 < spilled.nbytes
    assert spilled.nbytes == whole.nbytes and spilled.total_bytes == whole.total_bytes
    assert len(spilled) == len(whole) == 203
    assert list(spilled) == list(whole) == actions
    assert list(reversed(spilled)) == actions[::-1]
    for i in [*range(-203, 203, 7), 7, 8, 9, 199, 200, 202, -1]:  # across block boundaries, both ways
        assert spilled[i] == actions[i]
    for i in range(0, 203, 13):  # random access in an order iteration would not take
        assert spilled[202 - i] == actions[202 - i] and spilled[i] == actions[i]
    for s in [slice(5, 30), slice(190, None), slice(None, None, 9), slice(150, 20, -11), slice(-12, -3)]:
        assert spilled[s] == actions[s]
    assert [dataclasses.astuple(a) for a in spilled] == [dataclasses.astuple(a) for a in actions]  # every field
    with pytest.raises(IndexError):
        spilled[203]


def test_a_budget_of_nothing_spills_every_block(tmp_path):
    actions = _actions(50)
    files = _built(actions, budget=0, spill_dir=str(tmp_path))
    assert files.held_bytes == 0 and files.nbytes > 0
    assert list(files) == actions and files[17] == actions[17]


def test_the_bytes_held_stay_within_the_budget_and_one_block(tmp_path):
    actions = _actions(20_000)
    budget = 50_000
    arrow_before = pa.total_allocated_bytes()  # the blocks are pyarrow buffers
    builder = FileListBuilder(block=256, budget=budget, spill_dir=str(tmp_path))
    peak = 0
    for action in actions:
        builder.append(action)
        assert builder.held_bytes <= budget
        peak = max(peak, pa.total_allocated_bytes() - arrow_before)
    files = builder.build()
    block = max(len(pa.ipc.open_stream(b).read_all().to_batches()) and b.size for b in _blocks_of(files))
    assert peak <= budget + block, f"{peak} bytes held for a budget of {budget} (blocks of {block} bytes)"
    assert pa.total_allocated_bytes() - arrow_before <= budget + block
    assert files.held_bytes <= budget and files.nbytes > 10 * budget  # most of it spilled
    assert list(files) == actions


def _blocks_of(files: FileList) -> list[pa.Buffer]:
    """Every block of ``files`` as bytes, read back from memory or the spill file."""
    out = []
    for data, _ in files._blocks:
        out.append(data if isinstance(data, pa.Buffer) else pa.py_buffer(data.spill.read(data.offset, data.length)))
    return out


def test_closing_a_list_removes_its_temporary_file(tmp_path):
    files = _built(_actions(100), budget=0, spill_dir=str(tmp_path))
    (open_,) = _spill_fds(tmp_path)
    assert open_.endswith("(deleted)") and os.listdir(tmp_path) == []  # anonymous from the start
    files.close()
    files.close()  # again: nothing to do
    assert _spill_fds(tmp_path) == [] and files.closed and len(files) == 100
    with pytest.raises(ValueError, match="closed"):
        files[3]
    with pytest.raises(ValueError, match="closed"):
        list(files)
    with _built(_actions(100), budget=0, spill_dir=str(tmp_path)) as other:
        assert len(_spill_fds(tmp_path)) == 1 and other[99] == _actions(100)[99]
    assert _spill_fds(tmp_path) == []
    dropped = _built(_actions(100), budget=0, spill_dir=str(tmp_path))
    assert len(_spill_fds(tmp_path)) == 1
    del dropped  # collected: closed too
    gc.collect()
    assert _spill_fds(tmp_path) == []


def test_a_joined_list_reads_one_file_of_its_own(tmp_path, monkeypatch):
    a, b = _actions(30), _actions(20)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(file_list, "MEMORY_BUDGET", 0)
    lists = [_built(a, budget=0), _built(b, budget=0), _built(a, budget=0)]
    joined = FileList.join(lists)
    assert len(_spill_fds(tmp_path)) == 4
    for one in lists:
        one.close()
    assert list(joined) == a + b + a and len(_spill_fds(tmp_path)) == 1
    joined.close()
    assert _spill_fds(tmp_path) == []


def test_a_join_spills_what_is_beyond_its_budget(tmp_path, monkeypatch):
    pages = [_built(_actions(40), budget=1 << 30) for _ in range(5)]  # held in memory, each
    monkeypatch.setattr(file_list, "MEMORY_BUDGET", pages[0].nbytes)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    joined = FileList.join(pages)
    assert joined.held_bytes <= pages[0].nbytes < joined.nbytes and len(_spill_fds(tmp_path)) == 1
    assert list(joined) == _actions(40) * 5


def test_many_lists_leak_no_descriptor(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    for i in range(300):
        files = _built(_actions(20), budget=0, spill_dir=str(tmp_path))
        joined = files + _built(_actions(5), budget=0, spill_dir=str(tmp_path))
        assert joined[-1] == _actions(5)[-1]
        if i % 2:
            joined.close()
    del files, joined
    gc.collect()
    assert _spill_fds(tmp_path) == [] and len(os.listdir("/proc/self/fd")) <= before


def _on_a_full_disk(directory: str):
    """A file on a disk with no room left: the kernel's /dev/full fails every write with ENOSPC."""
    assert os.path.isdir(directory)
    return open("/dev/full", "wb", buffering=0)


def test_a_full_disk_is_one_clear_error_not_a_short_list(tmp_path):
    builder = FileListBuilder(block=8, budget=0, spill_dir=str(tmp_path), open_spill=_on_a_full_disk)
    with pytest.raises(SpillFailed) as failed:
        builder.extend(_actions(50))
    message = str(failed.value)
    assert "\n" not in message and str(tmp_path) in message and "TMPDIR" in message and "free space" in message
    assert isinstance(failed.value.__cause__, OSError) and failed.value.__cause__.errno == errno.ENOSPC
    assert _fds_on("/dev/full") == []  # closed at once


def test_a_folder_that_cannot_be_written_names_itself(tmp_path):
    missing = tmp_path / "gone"
    with pytest.raises(SpillFailed, match=f"to {missing} .*point TMPDIR"):
        _built(_actions(20), budget=0, spill_dir=str(missing))


# -- against the sharing server: every query's listing, spilled ------------------------------------

LISTED = ["partitioned", "multipart", "dv", "cdf_partitioned", "checkpointed", "sidecars"]
CHANGES = ["corpus.default.cdf", "corpus.default.dv_cdf"]


def _unsigned(files) -> list[FileAction]:
    """The actions without what a new query signs anew (the URLs' signatures and expiry)."""
    return [
        dataclasses.replace(
            f,
            url=_unsign(f.url),
            expiration_timestamp=None,
            deletion_vector=_unsigned_dv(f.deletion_vector),
            paired_deletion_vector=_unsigned_dv(f.paired_deletion_vector),
        )
        for f in files
    ]


def _unsign(url: str) -> str:
    return url.split("?")[0]


def _unsigned_dv(dv: dict | None) -> dict | None:
    return dv and {**dv, "pathOrInlineDv": _unsign(dv["pathOrInlineDv"])}


@pytest.fixture
def spill_everything(tmp_path, monkeypatch) -> Path:
    """No memory budget, and the spill files in a folder of their own."""
    monkeypatch.setattr(file_list, "MEMORY_BUDGET", 0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_queries_spilled_whole_list_the_same_files(sharing_profile, tmp_path, monkeypatch):
    with RestClient(sharing_profile) as rest:
        answers = {}
        for name in LISTED:
            for fmt in ("auto", "delta"):  # auto: parquet where the table allows it
                held = rest.query_table(f"corpus.default.{name}", response_format=fmt).files
                answers[name, fmt] = _unsigned(held)
        changes = {t: _unsigned(rest.query_changes(t, ChangesOptions(starting_version=0)).files) for t in CHANGES}
        monkeypatch.setattr(file_list, "MEMORY_BUDGET", 0)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        for (name, fmt), expected in answers.items():
            for options in (QueryOptions(), QueryOptions(max_files=2)):  # one page, and pages joined
                with rest.query_table(f"corpus.default.{name}", options, response_format=fmt).files as files:
                    assert files.held_bytes == 0 and files.nbytes > 0 and len(_spill_fds(tmp_path)) >= 1
                    assert _unsigned(files) == expected and _unsigned(files[-1:]) == expected[-1:], (name, fmt)
        for table, expected_changes in changes.items():  # dv_cdf's are paired again: FileList.of
            with rest.query_changes(table, ChangesOptions(starting_version=0, max_files=3)).files as files:
                assert files.held_bytes == 0 and _unsigned(files) == expected_changes, table
    gc.collect()
    assert _spill_fds(tmp_path) == []


def test_many_queries_leak_no_descriptor(sharing_profile, spill_everything):
    with RestClient(sharing_profile) as rest:
        for i in range(40):
            files = rest.query_table("corpus.default.partitioned", QueryOptions(max_files=1)).files
            assert len(files) > 1 and files.nbytes > 0 == files.held_bytes
            assert len(_spill_fds(spill_everything)) == 1  # the pages' files let go once joined
            if i % 2:
                files.close()
            del files  # the others are let go by collection
    gc.collect()
    assert _spill_fds(spill_everything) == []


def test_a_query_on_a_full_disk_fails_with_the_fix(sharing_profile, spill_everything, monkeypatch):
    monkeypatch.setattr(file_list, "_temporary_file", _on_a_full_disk)
    with RestClient(sharing_profile) as rest, pytest.raises(SpillFailed, match=f"no space left in {spill_everything} "):
        rest.query_table("corpus.default.partitioned")
    assert _fds_on("/dev/full") == []


def test_a_query_lets_go_of_each_page_once_joined(sharing_profile, recording, monkeypatch):
    built: list[weakref.ref] = []
    build = FileListBuilder.build

    def recorded(self: FileListBuilder) -> FileList:
        files = build(self)
        built.append(weakref.ref(files))
        return files

    monkeypatch.setattr(FileListBuilder, "build", recorded)
    held = []  # the pages' lists alive when the next page is asked for

    def when_asked(request) -> bool:
        held.append(sum(ref() is not None for ref in built))
        return False

    recording.add_rule(when_asked, lambda r: httpx.Response(500), times=1000)
    with RestClient(sharing_profile, transport=recording) as rest:
        files = rest.query_table("corpus.default.partitioned", QueryOptions(max_files=1)).files
    assert len(held) == len(files) > 2 and set(held) == {0}, held
