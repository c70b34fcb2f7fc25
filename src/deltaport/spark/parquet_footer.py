"""Parquet footers as trees: a generic thrift compact-protocol codec, and the footer of a compact entry.

:func:`decode` turns thrift compact-protocol bytes into a :class:`Struct` of :class:`Field`
(field id, wire type, value); :func:`encode` writes such a tree back, byte for byte what a
standard writer (parquet-mr, parquet-cpp) wrote. Nothing here knows Parquet but the helpers at
the end, which name the few fields of ``FileMetaData`` a compact staging entry rewrites
(parquet.thrift: FileMetaData, RowGroup, ColumnChunk, ColumnMetaData, KeyValue).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Field", "FooterError", "Raw", "Struct", "TList", "TMap", "append_field", "decode", "encode"]

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
_INTEGERS = (I16, I32, I64)
_COMPOSITE = (LIST, SET, MAP, STRUCT)


class FooterError(ValueError):
    """Bytes that are not a thrift compact-protocol struct."""


@dataclass
class TList:
    elem: int
    items: list[Any]


@dataclass
class TMap:
    key: int
    value: int
    items: list[tuple[Any, Any]]


@dataclass(frozen=True)
class Raw:
    """A list, map or struct value left encoded: its bytes, written back as they are."""

    data: bytes


#: Which fields :func:`decode` decodes: for each struct field id, what to decode of its struct
#: value (or of each struct in its list value). A list, map or struct field not named is kept
#: :class:`Raw`; plain values are always decoded.
Only = dict[int, "Only"]


@dataclass
class Field:
    id: int
    type: int  # TRUE or FALSE for booleans (the value says which)
    value: Any


@dataclass
class Struct:
    fields: list[Field] = field(default_factory=list)

    def get(self, fid: int, default: Any = None) -> Any:
        return next((f.value for f in self.fields if f.id == fid), default)

    def put(self, fid: int, wire: int, value: Any) -> None:
        """Set field ``fid`` (added in id order when absent)."""
        for f in self.fields:
            if f.id == fid:
                f.type, f.value = wire, value
                return
        self.fields.append(Field(fid, wire, value))
        self.fields.sort(key=lambda f: f.id)

    def drop(self, *fids: int) -> None:
        self.fields = [f for f in self.fields if f.id not in fids]


# --- decoding ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = bytes(data)  # indexing bytes is about twice as fast as a memoryview
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterError("the footer ends in the middle of a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        data, pos = self.data, self.pos
        if pos < len(data) and data[pos] < 0x80:  # most are one byte
            self.pos = pos + 1
            return data[pos]
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise FooterError("a varint longer than 10 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FooterError("the footer ends in the middle of a value")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def value(self, wire: int, depth: int, only: Only | None = None) -> Any:
        if depth > 64:
            raise FooterError("structs nested too deep")
        if wire in (TRUE, FALSE):
            return self.byte() == TRUE  # inside a list or map: one byte
        if wire == BYTE:
            return self.byte()
        if wire in _INTEGERS:
            return self.zigzag()
        if wire == DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if wire == BINARY:
            return self.take(self.varint())
        if wire in (LIST, SET):
            return self.list(depth, only)
        if wire == MAP:
            return self.map(depth)
        if wire == STRUCT:
            return self.struct(depth + 1, only)
        raise FooterError(f"unknown thrift compact type {wire}")

    def list_head(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        return (self.varint() if size == 15 else size), head & 0x0F

    def list(self, depth: int, only: Only | None = None) -> TList:
        size, elem = self.list_head()
        return TList(elem, [self.value(elem, depth + 1, only) for _ in range(size)])

    def map(self, depth: int) -> TMap:
        size = self.varint()
        if size == 0:
            return TMap(0, 0, [])
        kinds = self.byte()
        key, val = kinds >> 4, kinds & 0x0F
        return TMap(key, val, [(self.value(key, depth + 1), self.value(val, depth + 1)) for _ in range(size)])

    def struct(self, depth: int, only: Only | None = None) -> Struct:
        out, last, data = Struct(), 0, self.data
        while True:
            if self.pos >= len(data):
                raise FooterError("the footer ends in the middle of a value")
            head = data[self.pos]  # (inline: the header of every field)
            self.pos += 1
            wire = head & 0x0F
            if wire == STOP:
                return out
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            if wire in (TRUE, FALSE):
                value: Any = wire == TRUE
            elif only is not None and wire in _COMPOSITE and fid not in only:
                start = self.pos
                self.skip(wire, depth)
                value = Raw(self.data[start : self.pos])
            else:
                value = self.value(wire, depth, None if only is None else only.get(fid))
            out.fields.append(Field(fid, wire, value))
            last = fid

    def skip(self, wire: int, depth: int) -> None:
        """Past one value of type ``wire`` (a boolean: one byte, as in a list or map)."""
        if depth > 64:
            raise FooterError("structs nested too deep")
        if wire in _INTEGERS:
            self.varint()
        elif wire in (TRUE, FALSE, BYTE, DOUBLE, BINARY):
            self.advance(self.varint() if wire == BINARY else 8 if wire == DOUBLE else 1)
        elif wire in (LIST, SET):
            size, elem = self.list_head()
            for _ in range(size):
                self.skip(elem, depth + 1)
        elif wire == MAP:
            size = self.varint()
            kinds = self.byte() if size else 0
            for _ in range(size):
                self.skip(kinds >> 4, depth + 1)
                self.skip(kinds & 0x0F, depth + 1)
        elif wire == STRUCT:
            self.skip_struct(depth + 1)
        else:
            raise FooterError(f"unknown thrift compact type {wire}")

    def skip_struct(self, depth: int) -> None:
        data = self.data
        while True:
            if self.pos >= len(data):
                raise FooterError("the footer ends in the middle of a value")
            head = data[self.pos]
            self.pos += 1
            wire = head & 0x0F
            if wire == STOP:
                return
            if not head >> 4:
                self.varint()
            if wire in _INTEGERS:
                self.varint()
            elif wire == BINARY:
                self.advance(self.varint())
            elif wire not in (TRUE, FALSE):
                self.skip(wire, depth)

    def advance(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise FooterError("the footer ends in the middle of a value")
        self.pos += n


def decode(data: bytes | memoryview, only: Only | None = None) -> Struct:
    """The struct at the start of ``data`` (a Parquet footer: its FileMetaData): all of it, or the
    fields ``only`` names (the rest of its lists, maps and structs kept :class:`Raw`)."""
    try:
        return _Reader(data).struct(0, only)
    except (FooterError, struct.error) as exc:
        raise FooterError(f"not a parquet footer: {exc}") from None


# --- encoding ---------------------------------------------------------------------------------------


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int, out: bytearray) -> None:
    _varint((n << 1) ^ (n >> 63) if n < 0 else n << 1, out)


def _value(wire: int, value: Any, out: bytearray) -> None:
    if type(value) is Raw:
        out += value.data
    elif wire in (TRUE, FALSE):
        out.append(TRUE if value else FALSE)
    elif wire == BYTE:
        out.append(value & 0xFF)
    elif wire in _INTEGERS:
        _zigzag(value, out)
    elif wire == DOUBLE:
        out += struct.pack("<d", value)
    elif wire == BINARY:
        _varint(len(value), out)
        out += value
    elif wire in (LIST, SET):
        _list(value, out)
    elif wire == MAP:
        _map(value, out)
    elif wire == STRUCT:
        _struct(value, out)
    else:
        raise FooterError(f"unknown thrift compact type {wire}")


def _list(value: TList, out: bytearray) -> None:
    size = len(value.items)
    if size < 15:
        out.append(size << 4 | value.elem)
    else:
        out.append(0xF0 | value.elem)
        _varint(size, out)
    for item in value.items:
        _value(value.elem, item, out)


def _map(value: TMap, out: bytearray) -> None:
    _varint(len(value.items), out)
    if value.items:
        out.append(value.key << 4 | value.value)
    for k, v in value.items:
        _value(value.key, k, out)
        _value(value.value, v, out)


def _struct(value: Struct, out: bytearray) -> None:
    last = 0
    for f in value.fields:
        wire = (TRUE if f.value else FALSE) if f.type in (TRUE, FALSE) else f.type
        delta = f.id - last
        if 0 < delta <= 15:
            out.append(delta << 4 | wire)
        else:
            out.append(wire)
            _zigzag(f.id, out)
        if wire not in (TRUE, FALSE):
            _value(wire, f.value, out)
        last = f.id
    out.append(STOP)


def encode(value: Struct) -> bytes:
    out = bytearray()
    _struct(value, out)
    return bytes(out)


def append_field(raw: bytes, extra: Field) -> bytes:
    """The struct ``raw`` (encoded) with ``extra`` as its last field, its id written in full (a
    reader takes it for what its id says whatever came before; one that does not know the id
    skips it). Only the struct's final stop byte is read of ``raw``."""
    if not raw or raw[-1] != STOP:
        raise FooterError("not a thrift struct: it does not end in a stop byte")
    out = bytearray(raw[:-1])
    out.append(extra.type)
    _zigzag(extra.id, out)
    _value(extra.type, extra.value, out)
    out.append(STOP)
    return bytes(out)


# --- the fields of FileMetaData a compact entry rewrites -------------------------------------------

# FileMetaData
FMD_NUM_ROWS, FMD_ROW_GROUPS, FMD_KEY_VALUE = 3, 4, 5
# RowGroup
RG_COLUMNS, RG_FILE_OFFSET, RG_TOTAL_COMPRESSED, RG_ORDINAL = 1, 5, 6, 7
# ColumnChunk
CC_FILE_OFFSET, CC_META, CC_INDEXES = 2, 3, (4, 5, 6, 7)
# ColumnMetaData
CMD_COMPRESSED, CMD_DATA_PAGE, CMD_INDEX_PAGE, CMD_DICT_PAGE, CMD_BLOOM = 7, 9, 10, 11, (14, 15)

#: What of a footer a compact entry reads and rewrites: each row group's column chunks with their
#: metadata's offsets and sizes, and the key-value metadata. The rest (the schema, statistics,
#: encodings, paths) is kept as it was written: decoding it took most of a footer's time.
FOOTER_ONLY: Only = {FMD_ROW_GROUPS: {RG_COLUMNS: {CC_META: {}}}, FMD_KEY_VALUE: {}}


def key_values(meta: Struct) -> dict[str, str]:
    """FileMetaData's key-value metadata (values not UTF-8 are left out)."""
    out = {}
    kv = meta.get(FMD_KEY_VALUE)
    for item in kv.items if kv else ():
        try:
            out[item.get(1, b"").decode()] = item.get(2, b"").decode()
        except UnicodeDecodeError:
            continue
    return out


def put_key_value(meta: Struct, key: str, value: str) -> None:
    """Set (or replace) one key-value entry of FileMetaData."""
    kv = meta.get(FMD_KEY_VALUE) or TList(STRUCT, [])
    kv.items = [item for item in kv.items if item.get(1) != key.encode()]
    kv.items.append(Struct([Field(1, BINARY, key.encode()), Field(2, BINARY, value.encode())]))
    meta.put(FMD_KEY_VALUE, LIST, kv)
