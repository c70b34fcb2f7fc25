"""Which bytes of a parquet file a query needs, and the footer of a compact entry holding only them.

A query that names its columns (and maybe a ``where``) needs, of each file, the footer and the
column chunks of those columns in the row groups the ``where`` cannot rule out
(:mod:`deltaport.spark.pruning`). A *compact entry* is a parquet file made of ``PAR1``, those
chunks back to back, and the original footer rewritten (:func:`compact_footer`):

* only the kept row groups, ``num_rows`` summed again;
* every offset of a fetched chunk moved to its new place; a chunk not fetched points at the
  start of its row group's bytes in the entry (readers that project only the fetched columns
  never read it, see the tests), without dictionary or index page offsets;
* each row group's ``file_offset`` and ``total_compressed_size`` describe its bytes in the entry,
  so that readers assigning row groups to splits by their midpoint find each in exactly one;
* column and offset indexes and bloom filters are dropped (their bytes are not fetched);
* a key-value entry ``deltaport.chunks`` records which original row groups and leaf columns
  the entry holds, and the original file's size (:class:`Record`).

A *sparse entry* serves a query that needs every row group, in a cache that keeps holes (a local
folder): the file's own bytes at their own offsets, only the needed chunks and the bytes between
the last chunk and the footer (page indexes, bloom filters) written, the rest left a hole. Its
footer is the original with the record appended as a field no parquet reader knows, so skips
(:func:`sparse_footer`): no footer is decoded or rewritten to make one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from deltaport.spark import parquet_footer as pf
from deltaport.spark.parquet_footer import (
    FooterError,
    Struct,
    append_field,
    decode,
    encode,
    key_values,
    put_key_value,
)

__all__ = [
    "Chunk",
    "Footer",
    "Need",
    "Record",
    "coalesce",
    "compact_footer",
    "data_end",
    "footer_chunks",
    "parse_footer",
    "sparse_footer",
    "sparse_record",
    "wanted",
]

MAGIC = b"PAR1"
RECORD_KEY = "deltaport.chunks"
#: Ranges closer than this are fetched as one GET. A GET of the server's own file URLs costs about
#: 0.4 ms of CPU (server and fetcher), a byte of hole about 1.1 ns: they break even near 384 KiB.
#: At 1 MiB a 6-column table's count+sum fetched whole files (its value chunks lie ~800 KB apart)
#: and its first read took 10-25 % longer (benchmarks/spark_read.py).
GAP = 384 << 10


@dataclass(frozen=True)
class Need:
    """What a query needs of each file: ``columns``, the physical names of the top-level data
    columns to fetch (all their leaves), and ``where`` (Spark SQL) with ``kinds``: (logical name,
    physical name, kind) of the columns whose statistics may rule row groups out."""

    columns: tuple[str, ...]
    where: str | None = None
    kinds: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Chunk:
    group: int  # row group in the original file
    leaf: int  # leaf column
    start: int  # where its bytes start (in the file they are read from)
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class Footer:
    raw: bytes  # the FileMetaData bytes, as in the file
    arrow: Any  # pyarrow's FileMetaData of the same bytes (statistics, schema, chunk offsets)


def tail(raw: bytes) -> bytes:
    """The last bytes of a parquet file whose footer is ``raw``."""
    return raw + len(raw).to_bytes(4, "little") + MAGIC


def parse_footer(raw: bytes) -> Footer:
    """A footer read by pyarrow (in C++: the plan needs no more); :class:`FooterError` when it does
    not parse. The codec decodes it only to rewrite it (:func:`compact_footer`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        arrow = pq.read_metadata(pa.BufferReader(MAGIC + tail(raw)))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise FooterError(f"not a parquet footer: {exc}") from None
    return Footer(raw, arrow)


def footer_chunks(footer: Footer, groups: Iterable[int], leaves: Iterable[int]) -> list[Chunk]:
    """The chunks of ``leaves`` in ``groups`` of the file ``footer`` describes, in (group, start)
    order, from pyarrow's reading of it (the same offsets :func:`chunks` reads from the codec's)."""
    out = []
    for group in sorted(set(groups)):
        row_group = footer.arrow.row_group(group)
        for leaf in sorted(set(leaves)):
            column = row_group.column(leaf)
            dictionary = column.dictionary_page_offset if column.has_dictionary_page else None
            start = _chunk_start(column.data_page_offset, dictionary)
            out.append(Chunk(group, leaf, start, column.total_compressed_size))
    return sorted(out, key=lambda c: (c.group, c.start))


def data_end(footer: Footer) -> int:
    """Where the last row group's chunks end: what lies from there to the footer (page indexes,
    bloom filters) is read by readers that filter pages."""
    arrow = footer.arrow
    if arrow.num_row_groups == 0:
        return len(MAGIC)
    last = arrow.num_row_groups - 1
    return max(c.end for c in footer_chunks(footer, [last], range(arrow.num_columns)))


def _chunk(column: Struct, group: int, leaf: int) -> Chunk:
    meta = column.get(pf.CC_META)
    if meta is None:
        raise FooterError("a column chunk without metadata (an encrypted file?)")
    start = _chunk_start(meta.get(pf.CMD_DATA_PAGE), meta.get(pf.CMD_DICT_PAGE))
    return Chunk(group, leaf, start, meta.get(pf.CMD_COMPRESSED))


def _chunk_start(data_page: int, dictionary_page: int | None) -> int:
    """Where a column chunk's bytes start: its dictionary page when it has one (an offset of 0 is
    a writer's way of saying none), else its first data page."""
    if dictionary_page is not None and dictionary_page > 0:
        return min(data_page, dictionary_page)
    return data_page


def _columns(tree: Struct, group: int) -> list[Struct]:
    return tree.get(pf.FMD_ROW_GROUPS).items[group].get(pf.RG_COLUMNS).items


def chunks(
    tree: Struct, groups: Iterable[int], leaves: Iterable[int], *, as_groups: Sequence[int] | None = None
) -> list[Chunk]:
    """The chunks of ``leaves`` in ``groups`` of ``tree``, in (group, start) order. ``as_groups``
    names the original row group of each of ``tree``'s (a compact entry's footer)."""
    wanted_leaves = sorted(set(leaves))
    out = []
    for group in sorted(set(groups)):
        index = group if as_groups is None else list(as_groups).index(group)
        columns = _columns(tree, index)
        out += [_chunk(columns[leaf], group, leaf) for leaf in wanted_leaves]
    return sorted(out, key=lambda c: (c.group, c.start))


def leaves_of(footer: Footer, columns: Iterable[str]) -> tuple[int, ...]:
    """The leaf columns under the top-level ``columns`` (the first leaf when none is named: a
    row count still needs the row groups)."""
    names = set(columns)
    schema = footer.arrow.schema
    found = tuple(i for i in range(len(schema)) if schema.column(i).path.split(".")[0] in names)
    return found or (0,)


def wanted(footer: Footer, need: Need) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(row groups, leaf columns) of the file that ``need`` needs."""
    from deltaport.spark.pruning import row_group_filter

    keep = row_group_filter(need.where, need.kinds, footer.arrow)
    groups = tuple(i for i in range(footer.arrow.num_row_groups) if keep(i))
    return groups, leaves_of(footer, need.columns)


def coalesce(pieces: Sequence[Chunk], gap: int | None = None) -> list[list[Chunk]]:
    """``pieces`` (in order) grouped into runs fetched by one GET each: the next starts at most
    ``gap`` (default :data:`GAP`) bytes after the previous ends."""
    gap = GAP if gap is None else gap
    runs: list[list[Chunk]] = []
    for piece in pieces:
        if runs and runs[-1][-1].end <= piece.start <= runs[-1][-1].end + gap:
            runs[-1].append(piece)
        else:
            runs.append([piece])
    return runs


# --- the record of what an entry holds -------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    size: int  # the original file's size
    groups: tuple[int, ...]
    leaves: tuple[int, ...]

    def covers(self, groups: Iterable[int], leaves: Iterable[int]) -> bool:
        return set(groups) <= set(self.groups) and set(leaves) <= set(self.leaves)

    def to_json(self) -> str:
        return json.dumps({"v": 1, "size": self.size, "groups": list(self.groups), "leaves": list(self.leaves)})

    @classmethod
    def of(cls, tree: Struct) -> Record | None:
        """The record in a compact entry's footer, or None when it has none or it is not sound."""
        text = key_values(tree).get(RECORD_KEY)
        try:
            data = json.loads(text or "null")
            groups, leaves = tuple(int(g) for g in data["groups"]), tuple(int(c) for c in data["leaves"])
            record = cls(int(data["size"]), groups, leaves)
        except (ValueError, TypeError, KeyError):
            return None
        groups = tree.get(pf.FMD_ROW_GROUPS)
        if data.get("v") != 1 or groups is None or len(groups.items) != len(record.groups):
            return None
        return record


# --- the compact footer -----------------------------------------------------------------------------


def _shift(meta: Struct, column: Struct, by: int) -> None:
    for fid in (pf.CMD_DATA_PAGE, pf.CMD_DICT_PAGE, pf.CMD_INDEX_PAGE):
        offset = meta.get(fid)
        if offset is not None and offset > 0:
            meta.put(fid, pf.I64, offset + by)
        elif offset is not None:
            meta.drop(fid)
    offset = column.get(pf.CC_FILE_OFFSET)
    if offset is not None:
        column.put(pf.CC_FILE_OFFSET, pf.I64, max(0, offset + by))


def _point_at(meta: Struct, column: Struct, place: int) -> None:
    meta.put(pf.CMD_DATA_PAGE, pf.I64, place)
    meta.drop(pf.CMD_DICT_PAGE, pf.CMD_INDEX_PAGE)
    column.put(pf.CC_FILE_OFFSET, pf.I64, place)


Placed = dict[tuple[int, int], int]  # (original row group, leaf) -> offset or length


def _row_group(group: Struct, number: int, placed: Placed, lengths: Placed) -> Struct:
    """``group`` (of a tree decoded for this footer alone: changed in place) as the entry holds it."""
    mine = [(leaf, place) for (g, leaf), place in placed.items() if g == number]
    region = min(place for _, place in mine)
    for leaf, column in enumerate(group.get(pf.RG_COLUMNS).items):
        meta = column.get(pf.CC_META)
        column.drop(*pf.CC_INDEXES)
        meta.drop(*pf.CMD_BLOOM)
        if (number, leaf) in placed:
            _shift(meta, column, placed[(number, leaf)] - _chunk(column, number, leaf).start)
        else:
            _point_at(meta, column, region)
    group.put(pf.RG_FILE_OFFSET, pf.I64, region)
    group.put(pf.RG_TOTAL_COMPRESSED, pf.I64, sum(lengths[(number, leaf)] for leaf, _ in mine))
    group.drop(pf.RG_ORDINAL)
    return group


def compact_footer(footer: Footer, record: Record, placed: dict[tuple[int, int], int]) -> bytes:
    """The FileMetaData of a compact entry: ``placed`` maps (original row group, leaf) of every
    chunk it holds to the chunk's offset in the entry (see the module docstring)."""
    tree = decode(footer.raw, pf.FOOTER_ONLY)
    row_groups = tree.get(pf.FMD_ROW_GROUPS)
    if row_groups is None or len(row_groups.items) != footer.arrow.num_row_groups:
        raise FooterError("not a parquet footer: its row groups do not add up")
    originals = row_groups.items
    lengths = {(g, leaf): _chunk(_columns(tree, g)[leaf], g, leaf).length for g, leaf in placed}
    groups = [_row_group(originals[g], g, placed, lengths) for g in record.groups]
    tree.put(pf.FMD_ROW_GROUPS, pf.LIST, pf.TList(pf.STRUCT, groups))
    tree.put(pf.FMD_NUM_ROWS, pf.I64, sum(footer.arrow.row_group(g).num_rows for g in record.groups))
    put_key_value(tree, RECORD_KEY, record.to_json())
    return encode(tree)


# --- the sparse entry's footer ------------------------------------------------------------------------

#: The FileMetaData field a sparse entry's record is appended as: far above parquet.thrift's ids,
#: so that every reader skips it as a field of a later format version.
SPARSE_FIELD = 31_337
_SPARSE_MARK = b"DPSE"


def _sparse_payload(record: Record) -> bytes:
    text = record.to_json().encode()
    return text + len(text).to_bytes(4, "little") + _SPARSE_MARK


def sparse_footer(raw: bytes, record: Record) -> bytes:
    """The footer ``raw`` of the original file with ``record`` appended (see the module docstring)."""
    return append_field(raw, pf.Field(SPARSE_FIELD, pf.BINARY, _sparse_payload(record)))


def sparse_record(raw: bytes, original: bytes) -> Record | None:
    """The record of a sparse entry whose footer is ``raw``, made from the footer ``original``;
    None when ``raw`` is not exactly that (a compact entry, another file's, a damaged one)."""
    if len(raw) < 10 or raw[-5:-1] != _SPARSE_MARK:
        return None
    length = int.from_bytes(raw[-9:-5], "little")
    try:
        data = json.loads(raw[-9 - length : -9])
        record = Record(int(data["size"]), tuple(int(g) for g in data["groups"]), tuple(int(c) for c in data["leaves"]))
        again = sparse_footer(original, record)
    except (ValueError, TypeError, KeyError, FooterError):
        return None
    return record if data.get("v") == 1 and again == raw else None
