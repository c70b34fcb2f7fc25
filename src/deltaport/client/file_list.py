"""A table query's file list, held compactly: a :class:`FileList` is a read-only sequence of
:class:`~deltaport.client.model.FileAction` stored as zstd-compressed Arrow blocks.

A listing of millions of files as Python objects costs ~1.4 KB per file (strings, dicts and a
dataclass each); the same actions as columns (mappings as JSON text), compressed a block of
:data:`BLOCK` files at a time, cost a small fraction of that (the presigned URLs, stats and ids
of one table share most of their bytes). A file's action is made again when its turn comes:
iteration decodes one block at a time, so a pass over the list holds one block of objects.
"""

from __future__ import annotations

import dataclasses
import operator
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import orjson
import pyarrow as pa

from deltaport.client.model import FileAction

__all__ = ["BLOCK", "FileList", "FileListBuilder"]

BLOCK = 4096
_JSON = ("partition_values", "deletion_vector", "paired_deletion_vector")
_SCHEMA = pa.schema(
    [
        ("url", pa.string()),
        ("id", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.binary()),
        ("stats", pa.string()),
        ("deletion_vector", pa.binary()),
        ("version", pa.int64()),
        ("timestamp", pa.int64()),
        ("change_type", pa.string()),
        ("expiration_timestamp", pa.int64()),
        ("paired", pa.bool_()),
        ("paired_deletion_vector", pa.binary()),
    ]
)
_FIELDS = tuple(_SCHEMA.names)
assert tuple(f.name for f in dataclasses.fields(FileAction)) == _FIELDS, "FileList stores every field, in order"
_WRITE = pa.ipc.IpcWriteOptions(compression="zstd")


_ROW = operator.attrgetter(*_FIELDS)


def _dump(value: Mapping[str, Any] | None) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def _pack(rows: list[tuple]) -> pa.Buffer:
    arrays = []
    for name, column in zip(_FIELDS, zip(*rows)):
        values = [_dump(v) for v in column] if name in _JSON else column
        arrays.append(pa.array(values, type=_SCHEMA.field(name).type))
    batch = pa.record_batch(arrays, schema=_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _SCHEMA, options=_WRITE) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _unpack(block: pa.Buffer) -> list[FileAction]:
    batch = pa.ipc.open_stream(block).read_next_batch()
    columns = {name: batch.column(name).to_pylist() for name in _FIELDS}
    for name in _JSON:
        columns[name] = [None if text is None else orjson.loads(text) for text in columns[name]]
    columns["partition_values"] = [value or {} for value in columns["partition_values"]]
    return [FileAction(*row) for row in zip(*(columns[name] for name in _FIELDS))]


class FileListBuilder:
    """Collects actions (:meth:`append`) into blocks of ``block`` files; :meth:`build` ends it."""

    def __init__(self, block: int = BLOCK) -> None:
        self.block = block
        self._blocks: list[tuple[pa.Buffer, int]] = []
        self._rows: list[tuple] = []
        self._total_bytes = 0

    def append(self, action: FileAction) -> None:
        self._rows.append(_ROW(action))
        self._total_bytes += action.size
        if len(self._rows) >= self.block:
            self._flush()

    def extend(self, actions: Iterable[FileAction]) -> None:
        for action in actions:
            self.append(action)

    def _flush(self) -> None:
        if self._rows:
            self._blocks.append((_pack(self._rows), len(self._rows)))
            self._rows = []

    def build(self) -> FileList:
        self._flush()
        return FileList(self._blocks, self._total_bytes)


class FileList(Sequence[FileAction]):
    """The files of a query, in the server's order (see the module docstring). ``total_bytes`` is
    the sum of their sizes. Lists join with ``+`` (the blocks are shared, not copied)."""

    def __init__(self, blocks: Sequence[tuple[pa.Buffer, int]] = (), total_bytes: int = 0) -> None:
        self._blocks = tuple(blocks)
        self._starts: list[int] = []
        length = 0
        for _, rows in self._blocks:
            self._starts.append(length)
            length += rows
        self._length = length
        self.total_bytes = total_bytes
        self._cached: tuple[int, list[FileAction]] | None = None

    @classmethod
    def of(cls, actions: Iterable[FileAction]) -> FileList:
        builder = FileListBuilder()
        builder.extend(actions)
        return builder.build()

    @classmethod
    def join(cls, lists: Iterable[FileList]) -> FileList:
        """The files of ``lists`` one after the other (their blocks shared, not copied)."""
        lists = list(lists)
        return cls([b for one in lists for b in one._blocks], sum(one.total_bytes for one in lists))

    @property
    def nbytes(self) -> int:
        """The bytes the compressed blocks take."""
        return sum(block.size for block, _ in self._blocks)

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[FileAction]:
        for block, _ in self._blocks:
            yield from _unpack(block)

    def _block(self, index: int) -> list[FileAction]:
        cached = self._cached  # one read: threads may replace it meanwhile
        if cached is None or cached[0] != index:
            cached = self._cached = (index, _unpack(self._blocks[index][0]))
        return cached[1]

    @overload
    def __getitem__(self, index: int) -> FileAction: ...

    @overload
    def __getitem__(self, index: slice) -> list[FileAction]: ...

    def __getitem__(self, index: int | slice) -> FileAction | list[FileAction]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("FileList index out of range")
        b = bisect_right(self._starts, index) - 1
        return self._block(b)[index - self._starts[b]]

    def __add__(self, other: FileList) -> FileList:
        if not isinstance(other, FileList):
            return NotImplemented
        return FileList.join((self, other))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FileList({self._length} files, {self.total_bytes} bytes, {self.nbytes} bytes held)"
