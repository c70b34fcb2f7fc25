"""A table query's file list, held compactly: a :class:`FileList` is a read-only sequence of
:class:`~deltaport.client.model.FileAction` stored as zstd-compressed Arrow blocks.

A listing of millions of files as Python objects costs ~1.4 KB per file (strings, dicts and a
dataclass each); the same actions as columns (mappings as JSON text), compressed a block of
:data:`BLOCK` files at a time, cost a small fraction of that (the presigned URLs, stats and ids
of one table share most of their bytes: ~130 bytes a file in parquet format, ~250 in delta). A
file's action is made again when its turn comes: iteration decodes one block at a time, so a pass
over the list holds one block of objects.

Memory is bounded: a builder keeps blocks in memory up to :data:`MEMORY_BUDGET` bytes and writes
the rest to an anonymous temporary file (``tempfile.TemporaryFile`` in ``TMPDIR``: it has no name,
so the OS frees it when it is closed or the process dies), read back a block at a time with
``os.pread``. Joining lists (``+``, :meth:`FileList.join`, a query's pages) copies their spilled
blocks into the joined list's own file, so a list holds one descriptor. The file is closed when its
list is closed (:meth:`FileList.close`, ``with``) or collected. A disk that fills is a
:class:`~deltaport.client.errors.SpillFailed`, never a short list.
"""

from __future__ import annotations

import dataclasses
import errno
import operator
import os
import tempfile
import threading
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, NamedTuple, overload

import orjson
import pyarrow as pa

from deltaport.client.errors import SpillFailed
from deltaport.client.model import FileAction

__all__ = ["BLOCK", "MEMORY_BUDGET", "FileList", "FileListBuilder"]

BLOCK = 4096
#: compressed bytes a list builder keeps in memory; the blocks beyond go to a temporary file
MEMORY_BUDGET = 64 * 1024 * 1024
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


def _unpack(block: pa.Buffer | bytes) -> list[FileAction]:
    batch = pa.ipc.open_stream(block).read_next_batch()
    columns = {name: batch.column(name).to_pylist() for name in _FIELDS}
    for name in _JSON:
        columns[name] = [None if text is None else orjson.loads(text) for text in columns[name]]
    columns["partition_values"] = [value or {} for value in columns["partition_values"]]
    return [FileAction(*row) for row in zip(*(columns[name] for name in _FIELDS))]


def _temporary_file(directory: str) -> BinaryIO:
    return tempfile.TemporaryFile(dir=directory, buffering=0)


def _spill_error(directory: str, budget: int, exc: OSError) -> SpillFailed:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = f"no space left in {directory} for the file listing beyond its {budget / 2**20:g} MiB of memory"
        fix = "free space there or point TMPDIR at a directory with room"
    else:
        what = f"cannot write the file listing beyond its {budget / 2**20:g} MiB of memory to {directory}"
        fix = "point TMPDIR at a writable directory with room"
    return SpillFailed(f"{what} ({exc.strerror or exc}): {fix}; the listing is not returned")


class _Spill:
    """A temporary file of blocks, held by its builder and then by the list it builds: the last to
    :meth:`release` it closes it (as does collecting it). Written by its builder alone; read from
    any thread."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._fd = file.fileno()
        self.end = 0
        self._users = 0
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, file.close)

    def write(self, data: pa.Buffer) -> _Far:
        view = memoryview(data)
        offset = self.end
        while view:
            view = view[self._file.write(view) :]
        self.end += data.size
        return _Far(self, offset, data.size)

    def read(self, offset: int, length: int) -> bytes:
        if not self._closer.alive:  # its descriptor may be another file's by now
            raise ValueError("the file list is closed")
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise OSError(errno.EIO, f"the file list's temporary file is short ({len(data)} of {length} bytes)")
        return data

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self._closer()


class _Far(NamedTuple):
    """A block in a :class:`_Spill`: its offset and length."""

    spill: _Spill
    offset: int
    length: int


_Block = tuple[pa.Buffer | _Far, int]  # (the block, or where it was spilled; its rows)


def _release_all(spills: set[_Spill]) -> None:
    for spill in spills:
        spill.release()
    spills.clear()


class _Holds:
    """The spill files an owner reads from, released when it is closed or collected."""

    def __init__(self, owner: object) -> None:
        self.spills: set[_Spill] = set()
        self.release = weakref.finalize(owner, _release_all, self.spills)

    def hold(self, spill: _Spill) -> None:
        if spill not in self.spills:
            spill.acquire()
            self.spills.add(spill)


class FileListBuilder:
    """Collects actions (:meth:`append`) into blocks of ``block`` files; :meth:`build` ends it.

    Up to ``budget`` bytes of blocks (default :data:`MEMORY_BUDGET`) stay in memory; the rest go
    to a temporary file in ``spill_dir`` (default ``tempfile.gettempdir()``: ``TMPDIR``) opened by
    ``open_spill`` (default ``tempfile.TemporaryFile``, unbuffered)."""

    def __init__(
        self,
        block: int = BLOCK,
        *,
        budget: int | None = None,
        spill_dir: str | None = None,
        open_spill: Callable[[str], BinaryIO] | None = None,
    ) -> None:
        self.block = block
        self.budget = MEMORY_BUDGET if budget is None else budget
        self._spill_dir = spill_dir
        self._open_spill = open_spill or _temporary_file
        self._blocks: list[_Block] = []
        self._rows: list[tuple] = []
        self._total_bytes = 0
        self.held_bytes = 0
        self._spill: _Spill | None = None
        self._holds = _Holds(self)

    def append(self, action: FileAction) -> None:
        self._rows.append(_ROW(action))
        self._total_bytes += action.size
        if len(self._rows) >= self.block:
            self._flush()

    def extend(self, actions: Iterable[FileAction]) -> None:
        for action in actions:
            self.append(action)

    def add(self, files: FileList) -> None:
        """Appends the blocks of ``files`` as they are, not decoded: one held in memory is shared
        while the budget allows; a spilled one is copied, so that a list reads one spill file
        however many it was joined from."""
        if files.closed:
            raise ValueError("the file list is closed")
        self._flush()
        self._total_bytes += files.total_bytes
        for data, rows in files._blocks:
            if isinstance(data, _Far):
                data = pa.py_buffer(data.spill.read(data.offset, data.length))
            self._keep(data, rows)

    def _flush(self) -> None:
        if self._rows:
            self._keep(_pack(self._rows), len(self._rows))
            self._rows = []

    def _keep(self, data: pa.Buffer, rows: int) -> None:
        if self.held_bytes + data.size <= self.budget:
            self.held_bytes += data.size
            self._blocks.append((data, rows))
            return
        directory = self._spill_dir or tempfile.gettempdir()
        try:
            if self._spill is None:
                self._spill = _Spill(self._open_spill(directory))
                self._holds.hold(self._spill)
            self._blocks.append((self._spill.write(data), rows))
        except OSError as exc:
            self._holds.release()
            self._blocks = []
            raise _spill_error(directory, self.budget, exc) from exc

    def build(self) -> FileList:
        self._flush()
        files = FileList(self._blocks, self._total_bytes)
        self._holds.release()  # the list holds what it reads now
        return files


class FileList(Sequence[FileAction]):
    """The files of a query, in the server's order (see the module docstring). ``total_bytes`` is
    the sum of their sizes. Lists join with ``+`` (the blocks are shared, not copied).

    :meth:`close` (or ``with``) lets go of the temporary file of its spilled blocks at once
    (collecting the list does too); a closed list keeps its length but reads no action."""

    def __init__(self, blocks: Sequence[_Block] = (), total_bytes: int = 0) -> None:
        self._blocks = tuple(blocks)
        self._holds = _Holds(self)
        self._starts: list[int] = []
        length = 0
        for data, rows in self._blocks:
            if isinstance(data, _Far):
                self._holds.hold(data.spill)
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
        """The files of ``lists`` one after the other (blocks shared, not copied, within the
        memory budget; the blocks held in memory beyond it are spilled)."""
        builder = FileListBuilder()
        for one in lists:
            builder.add(one)
        return builder.build()

    def close(self) -> None:
        """Lets go of the temporary file (removed once no other list shares it). Idempotent."""
        self._holds.release()
        self._cached = None

    @property
    def closed(self) -> bool:
        return not self._holds.release.alive

    def __enter__(self) -> FileList:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def nbytes(self) -> int:
        """The bytes the compressed blocks take, in memory and spilled."""
        return sum(data.length if isinstance(data, _Far) else data.size for data, _ in self._blocks)

    @property
    def held_bytes(self) -> int:
        """The bytes of the compressed blocks held in memory."""
        return sum(data.size for data, _ in self._blocks if not isinstance(data, _Far))

    def _decoded(self, data: pa.Buffer | _Far) -> list[FileAction]:
        if self.closed:
            raise ValueError("the file list is closed")
        if isinstance(data, _Far):
            return _unpack(data.spill.read(data.offset, data.length))
        return _unpack(data)

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[FileAction]:
        for data, _ in self._blocks:
            yield from self._decoded(data)

    def _block(self, index: int) -> list[FileAction]:
        cached = self._cached  # one read: threads may replace it meanwhile
        if cached is None or cached[0] != index:
            cached = self._cached = (index, self._decoded(self._blocks[index][0]))
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
        held, spilled = self.held_bytes, self.nbytes - self.held_bytes
        return f"FileList({self._length} files, {self.total_bytes} bytes, {held} bytes held, {spilled} spilled)"
