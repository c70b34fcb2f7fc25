"""A file staged as only the bytes a query needs: its footer, then the needed column chunks.

Beside a file's whole-file entry ``<key>.parquet`` (:mod:`deltaport.spark.staging`) a query
that names its columns keeps:

* ``<key>.footer``: the file's last bytes (at least the footer, its length and ``PAR1``),
  fetched once by a ranged GET of the last 64 KiB (and a second one when the footer is longer);
* ``<key>.part.parquet``: the needed chunks, as a sparse entry when the query needs every row
  group and the cache keeps holes, else as a compact one (both: :mod:`deltaport.spark.chunks`).
  A later query it covers uses it as is; one it does not cover makes a new entry for the union
  of columns and row groups, copying the chunks it already holds and fetching the rest (ranges
  closer than :data:`~deltaport.spark.chunks.GAP` in one range; a file's ranges in one GET where
  the server answers them together, as deltaport's own does), written aside and renamed.

A file whose footer says the query needs none of its row groups (its ``where`` rules out each)
gets only its ``<key>.footer``, and is left out of the DataFrame.

A valid whole-file entry always wins. When the needed bytes are most of the file (80 %), the
whole file is fetched instead. A store that ignores ``Range`` answers the first GET with the
whole file: it becomes the whole-file entry. A file whose size is not the listed one, or whose
footer does not parse, is a one-line :class:`FileDownloadError` ("read the table again").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deltaport.client.byteranges import overlaps, span_at
from deltaport.client.download import ConnectionPool, RangesApart, copy_range, copy_ranges, copy_url
from deltaport.client.errors import FileDownloadError
from deltaport.client.model import FileAction
from deltaport.spark.chunks import (
    MAGIC,
    Chunk,
    Footer,
    Need,
    Record,
    chunks,
    coalesce,
    compact_footer,
    data_end,
    footer_chunks,
    parse_footer,
    sparse_footer,
    sparse_record,
)
from deltaport.spark.chunks import tail as footer_tail
from deltaport.spark.chunks import wanted as wanted_parts
from deltaport.spark.parquet_footer import FOOTER_ONLY, FooterError, Struct, decode
from deltaport.spark.staging import CacheArea

__all__ = ["covered", "footer_relpath", "nothing_needed", "part_relpath", "stage_needed"]

TAIL = 64 << 10
WHOLE_SHARE = 0.8


def part_relpath(relpath: str) -> str:
    return relpath.removesuffix(".parquet") + ".part.parquet"


def footer_relpath(relpath: str) -> str:
    return relpath.removesuffix(".parquet") + ".footer"


def _changed(action: FileAction, what: str) -> FileDownloadError:
    return FileDownloadError(
        f"file {action.id}: {what}: the file changed after it was listed; read the table again",
        http_status=400,
        file_id=action.id,
    )


# --- what the cache holds ---------------------------------------------------------------------------


def _footer_in(data: bytes, size: int | None = None) -> bytes | None:
    """The footer at the end of ``data`` (a file's last bytes), None when it is not all there."""
    if len(data) < 12 or data[-4:] != MAGIC:
        return None
    length = int.from_bytes(data[-8:-4], "little")
    if length + 8 > len(data) or (size is not None and length + 12 > size):
        return None
    return data[-8 - length : -8]


def _last_footer(area: CacheArea, path: str, length: int, limit: int | None = None) -> bytes | None:
    """The footer at the end of the cached file ``path`` of ``length`` bytes (read from its last
    64 KiB, or all of it when the footer is longer); ``limit``: the file it ends must be a parquet
    file of that many bytes."""
    raw = _footer_in(area.read(path, max(0, length - TAIL), TAIL), limit)
    if raw is None and length > TAIL:
        raw = _footer_in(area.read(path, 0, length), limit)
    return raw


def cached_footer(area: CacheArea, relpath: str) -> Footer | None:
    size = area.size(footer_relpath(relpath))
    if not size:
        return None
    try:
        raw = _last_footer(area, footer_relpath(relpath), size)
        return parse_footer(raw) if raw is not None else None
    except (OSError, FooterError):
        return None


@dataclass(frozen=True)
class Entry:
    """A compact or sparse entry found in the cache: what it holds, and where its chunks are (a
    compact entry's footer; a sparse one has them where the file does)."""

    record: Record
    footer: Footer
    tree: Struct | None  # a compact entry's footer; None for a sparse one

    def chunk(self, group: int, leaf: int) -> Chunk:
        if self.tree is None:
            return footer_chunks(self.footer, [group], [leaf])[0]
        return chunks(self.tree, [group], [leaf], as_groups=self.record.groups)[0]


def _every_group(footer: Footer) -> tuple[int, ...]:
    """The row groups a sparse entry holds: all of the file's."""
    return tuple(range(footer.arrow.num_row_groups))


def held_entry(area: CacheArea, relpath: str, footer: Footer, size: int) -> Entry | None:
    """The entry of a file of ``size`` bytes whose footer is ``footer``, when it is whole and
    says what it holds."""
    path = part_relpath(relpath)
    try:
        length = area.size(path)
        if length is None or length < 12:
            return None
        raw = _last_footer(area, path, length, length)
        if raw is None:
            return None
        sparse = sparse_record(raw, footer.raw)
        if sparse is not None:
            whole = sparse.size == size and length == size + len(raw) - len(footer.raw)
            every = sparse.groups == _every_group(footer)
            return Entry(sparse, footer, None) if whole and every else None
        tree = decode(raw, FOOTER_ONLY)
        record = Record.of(tree)
        if record is None or record.size != size:
            return None
        entry = Entry(record, footer, tree)
        end = max((c.end for c in chunks(tree, record.groups, record.leaves, as_groups=record.groups)), default=4)
        return entry if end <= length - len(raw) - 8 else None
    except (OSError, FooterError, ValueError, AttributeError, IndexError, TypeError):
        return None


def covered(area: CacheArea, relpath: str, size: int, need: Need) -> bool:
    """Whether the cache holds what ``need`` needs of the file (a compact entry, or only its footer
    where the ``where`` rules out every row group; the whole-file entry is checked by the caller)
    without fetching anything."""
    footer = cached_footer(area, relpath)
    if footer is None:
        return False
    groups, leaves = wanted_parts(footer, need)
    if _none_pass(need, groups):
        return True
    entry = held_entry(area, relpath, footer, size)
    return entry is not None and entry.record.covers(groups, leaves)


def _none_pass(need: Need, groups: tuple[int, ...]) -> bool:
    """Whether ``need``'s ``where`` rules out every row group of a file (``groups``: those it keeps)."""
    return need.where is not None and not groups


def nothing_needed(area: CacheArea, relpath: str, need: Need) -> bool:
    """Whether the file has no compact entry because its cached footer says ``need``'s ``where``
    rules out each of its row groups by their statistics. Such a file is not given to Spark: no
    row of it could pass the ``where`` the DataFrame applies. Asked after staging; without a
    ``where``, or with an entry (one stat), no footer is read."""
    if need.where is None or area.size(part_relpath(relpath)) is not None:
        return False
    footer = cached_footer(area, relpath)
    return footer is not None and _none_pass(need, wanted_parts(footer, need)[0])


# --- fetching -----------------------------------------------------------------------------------------


class _Spool:
    """The first GET's body: kept in memory while it is a range; a store that ignores ``Range``
    sends the whole file, which then goes to the whole-file entry as it comes."""

    def __init__(self, area: CacheArea, relpath: str, limit: int = TAIL) -> None:
        self.area, self.relpath, self.limit = area, relpath, limit
        self.data = bytearray()
        self.file: Any = None

    def write(self, data: Any) -> int:
        if self.file is None and len(self.data) + len(data) <= self.limit:
            self.data += data
        else:
            if self.file is None:
                self.file = self.area.write(self.relpath)
                self.file.write(bytes(self.data))
            self.file.write(data)
        return len(data)

    def whole(self, action: FileAction, got: int) -> int:
        """The body was the whole file: commit it as the whole-file entry."""
        if self.file is None:
            self.file = self.area.write(self.relpath)
            self.file.write(bytes(self.data))
        if got != action.size:
            self.file.abort()
            raise _changed(action, f"the storage sent {got} bytes where the server's answer says {action.size}")
        self.file.commit()
        return got

    def abort(self) -> None:
        if self.file is not None:
            self.file.abort()


def _fetch_footer(file: Any) -> tuple[Footer | None, int]:
    """(the footer, bytes fetched); (None, bytes) when the store sent the whole file instead
    (then staged as the whole-file entry)."""
    area, relpath, action, pool = file.area, file.relpath, file.action, file.pool
    spool = _Spool(area, relpath)
    start = max(0, action.size - TAIL)
    size = action.size
    try:
        got, ranged = copy_range(action.url, spool, pool=pool, file_id=action.id, start=start, end=size, size=size)
        if not ranged or start == 0:  # the store ignored Range, or the file is small: it is all here
            return None, spool.whole(action, got)
    except BaseException:
        spool.abort()
        raise
    data = bytes(spool.data)
    length = int.from_bytes(data[-8:-4], "little") if len(data) >= 8 and data[-4:] == MAGIC else -1
    if length < 0 or length + 12 > action.size:
        raise _changed(action, "its last bytes are not a parquet footer")
    if length + 8 > len(data):
        begin = action.size - 8 - length
        more = _Spool(area, relpath, limit=start - begin)
        try:
            got2, ranged = copy_range(action.url, more, pool=pool, file_id=action.id, start=begin, end=start, size=size)
            if not ranged:
                return None, got + more.whole(action, got2)
        except BaseException:
            more.abort()
            raise
        data, got = bytes(more.data) + data, got + got2
    raw = data[-8 - length : -8]
    try:
        footer = parse_footer(raw)
    except FooterError:
        raise _changed(action, "its footer does not parse") from None
    side = area.write(footer_relpath(relpath))
    side.write(data)
    side.commit()
    return footer, got


class _Appended:
    """A compact entry being written: each chunk's bytes after the last's."""

    def __init__(self, write: Any) -> None:
        self.file = write

    def put(self, offset: int, data: Any) -> None:
        self.file.write(data)


class _Placed:
    """A sparse entry being written: each byte at its offset in the original file."""

    def __init__(self, write: Any) -> None:
        self.file, self.pos = write, 0

    def put(self, offset: int, data: Any) -> None:
        if offset != self.pos:
            self.file.seek(offset)
        self.file.write(data)
        self.pos = offset + len(data)

    def splices(self) -> bool:
        """Whether the cache's file takes bytes straight from a socket (a local file does)."""
        return hasattr(self.file, "splice_at")

    def splice_at(self, move: Any, offset: int, limit: int) -> int:
        """Up to ``limit`` bytes at ``offset`` taken straight from the socket (see
        :mod:`deltaport.client.splicing`); returns how many."""
        moved = self.file.splice_at(move, offset, limit)
        self.pos = -1  # the file's own position did not move: the next put seeks
        return moved


class _Slicer:
    """A writer for one GET of a run of chunks: passes on only the chunks' bytes, with their
    offsets in the file."""

    def __init__(self, out: _Appended | _Placed, begin: int, pieces: list[Chunk]) -> None:
        self.out, self.pos = out, begin
        self.spans = [(piece.start, piece.end, None) for piece in pieces]

    def write(self, data: Any) -> int:
        for _, offset, piece in overlaps(memoryview(data), self.pos, self.spans):
            self.out.put(offset, piece)
        self.pos += len(data)
        return len(data)

    def splices(self) -> bool:
        """Whether the chunks can be taken straight from the socket: into a sparse entry's file."""
        return isinstance(self.out, _Placed) and self.out.splices()

    def splice(self, move: Any, limit: int) -> int:
        """Up to ``limit`` of the next bytes taken straight from the socket, where they are a
        chunk's (the bytes between chunks are written, and dropped)."""
        assert isinstance(self.out, _Placed)
        span = span_at(self.spans, self.pos)
        if span is None:
            return 0
        moved = self.out.splice_at(move, self.pos, min(limit, span[1] - self.pos))
        self.pos += moved
        return moved


class _RangeIgnored(Exception):
    """The store answered a chunk's range with the whole file."""


@dataclass(frozen=True)
class _File:
    """One file being staged: the cache, its whole-file entry's place, its action, the connections."""

    area: CacheArea
    relpath: str
    action: FileAction
    pool: ConnectionPool

    def fetch_runs(self, out: _Appended | _Placed, runs: list[list[Chunk]]) -> int:
        """Fetch ``runs`` into ``out`` in order: in one GET where the server answers several ranges
        together (deltaport's own), else one GET each."""
        if len(runs) > 1:
            action = self.action
            parts = [(run[0].start, run[-1].end, _Slicer(out, run[0].start, run)) for run in runs]
            try:
                return copy_ranges(action.url, parts, pool=self.pool, file_id=action.id, size=action.size)
            except RangesApart:
                pass
        return sum(self.fetch_run(out, run) for run in runs)

    def fetch_run(self, out: _Appended | _Placed, run: list[Chunk]) -> int:
        action = self.action
        got, ranged = copy_range(
            action.url,
            _Slicer(out, run[0].start, run),
            pool=self.pool,
            file_id=action.id,
            start=run[0].start,
            end=run[-1].end,
            size=action.size,
        )
        if not ranged:
            raise _RangeIgnored()
        return got

    def whole(self) -> int:
        action, write = self.action, self.area.write(self.relpath)
        try:
            got = copy_url(action.url, write, pool=self.pool, file_id=action.id)
            if got != action.size:
                raise _changed(action, f"the storage sent {got} bytes where the server's answer says {action.size}")
        except BaseException:
            write.abort()
            raise
        write.commit()
        return got


def _copy_chunks(file: _File, out: _Appended | _Placed, plan: list[Chunk], old: Entry | None) -> int:
    """Write ``plan``'s chunks: those in ``old`` copied from it, the others fetched (in order into
    a compact entry; into a sparse one, all fetched together)."""
    fetched, runs, remote = 0, list[list[Chunk]](), list[Chunk]()
    for piece in plan:
        if old is not None and old.record.covers([piece.group], [piece.leaf]):
            runs, remote = runs + coalesce(remote), []  # a run never spans a chunk already held
            if isinstance(out, _Appended):
                fetched, runs = fetched + file.fetch_runs(out, runs), []
            source = old.chunk(piece.group, piece.leaf)
            out.put(piece.start, file.area.read(part_relpath(file.relpath), source.start, source.length))
        else:
            remote.append(piece)
    return fetched + file.fetch_runs(out, runs + coalesce(remote))


def _write_part(file: _File, footer: Footer, plan: list[Chunk], old: Entry | None, record: Record) -> int:
    placed, place = {}, len(MAGIC)
    for piece in plan:
        placed[(piece.group, piece.leaf)] = place
        place += piece.length
    write = file.area.write(part_relpath(file.relpath))
    try:
        write.write(MAGIC)
        fetched = _copy_chunks(file, _Appended(write), plan, old)
        write.write(footer_tail(compact_footer(footer, record, placed)))
    except BaseException:
        write.abort()
        raise
    write.commit()
    return fetched


INDEXES = -1  # the row group of the piece of a sparse plan that is not a chunk: the page indexes


@dataclass(frozen=True)
class _Tail:
    """Where the bytes between the last chunk and the footer are (page indexes, bloom filters):
    ``start`` to ``end``, of which the side file (the file's last bytes) holds those from ``held``."""

    start: int
    end: int
    held: int

    @classmethod
    def of(cls, file: _File, footer: Footer) -> _Tail:
        size = file.action.size
        held = size - (file.area.size(footer_relpath(file.relpath)) or 0)
        return cls(data_end(footer), size - 8 - len(footer.raw), held)

    def fetched(self) -> list[Chunk]:
        """The piece of it the side file lacks, to fetch with the chunks."""
        end = min(self.held, self.end)
        return [Chunk(INDEXES, INDEXES, self.start, end - self.start)] if self.start < end else []


def _write_sparse(
    file: _File, footer: Footer, tail: _Tail, plan: list[Chunk], old: Entry | None, record: Record
) -> int:
    """``plan``: the chunks, and the piece of ``tail`` the side file lacks (:meth:`_Tail.fetched`)."""
    write = file.area.write(part_relpath(file.relpath))
    out = _Placed(write)
    try:
        out.put(0, MAGIC)
        fetched = _copy_chunks(file, out, plan, old)
        start = max(tail.start, tail.held)
        if start < tail.end:
            side = file.area.read(footer_relpath(file.relpath), start - tail.held, tail.end - start)
            if len(side) == tail.end - start:
                out.put(start, side)
            else:  # the side file was cut meanwhile: fetch its bytes instead
                fetched += file.fetch_run(out, [Chunk(INDEXES, INDEXES, start, tail.end - start)])
        out.put(tail.end, footer_tail(sparse_footer(footer.raw, record)))
    except BaseException:
        write.abort()
        raise
    write.commit()
    return fetched


def _to_fetch(plan: list[Chunk], old: Entry | None) -> int:
    """The bytes the GETs of ``plan`` would fetch: the chunks not in ``old``, coalesced."""
    remote = [c for c in plan if old is None or not old.record.covers([c.group], [c.leaf])]
    return sum(run[-1].end - run[0].start for run in coalesce(remote))


def stage_needed(area: CacheArea, relpath: str, action: FileAction, need: Need, pool: ConnectionPool) -> int:
    """One attempt at staging what ``need`` needs of a file whose whole-file entry would be
    ``relpath``; returns the bytes fetched (see the module docstring)."""
    file = _File(area, relpath, action, pool)
    footer, fetched = cached_footer(area, relpath), 0
    if footer is None:
        footer, fetched = _fetch_footer(file)
        if footer is None:
            return fetched  # the whole file came
    groups, leaves = wanted_parts(footer, need)
    if _none_pass(need, groups):  # see nothing_needed
        return fetched
    old = held_entry(area, relpath, footer, action.size)
    if old is not None:
        if old.record.covers(groups, leaves):
            return fetched
        groups, leaves = tuple(sorted({*groups, *old.record.groups})), tuple(sorted({*leaves, *old.record.leaves}))
    plan = footer_chunks(footer, groups, leaves)
    tail = _Tail.of(file, footer) if area.holes and groups == _every_group(footer) else None  # sparse
    if tail is not None:
        plan = sorted(plan + tail.fetched(), key=lambda c: c.start)
    if _to_fetch(plan, old) + len(footer.raw) >= WHOLE_SHARE * action.size:
        return fetched + file.whole()
    record = Record(action.size, groups, leaves)
    try:
        if tail is None:
            return fetched + _write_part(file, footer, plan, old, record)
        return fetched + _write_sparse(file, footer, tail, plan, old, record)
    except _RangeIgnored:
        return fetched + file.whole()
