"""FileList: a query's file actions held as compressed Arrow blocks, given back unchanged."""

from __future__ import annotations

import pytest

from deltaport.client.file_list import FileList, FileListBuilder
from deltaport.client.model import FileAction


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
