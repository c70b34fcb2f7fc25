"""Deletion vectors: descriptors, Z85, the roaring-bitmap payload and DV files.

This module is shared by the Delta engine (provider side) and the recipient-side client, so it
depends only on the standard library, numpy, pyroaring (imported lazily, when a bitmap is
actually decoded or encoded) and :mod:`deltaport.errors`.

Formats (Delta protocol, "Deletion Vector Format"):

* **Z85** (Delta's variant): the ZeroMQ base-85 alphabet over big-endian 4-byte groups, every
  group giving 5 characters. Unaligned input is zero-padded to a multiple of 4 bytes; the
  consumer knows the real length (``sizeInBytes`` for inline DVs, 16 for UUIDs). The decoder
  also accepts the ``#``-padded last group some writers emit (see :func:`z85_decode`).
* **Descriptor** (``add.deletionVector``): ``storageType`` ``u`` (relative path derived from a
  UUID), ``i`` (inline) or ``p`` (absolute path); ``pathOrInlineDv``; ``offset``;
  ``sizeInBytes``; ``cardinality``; optional ``maxRowIndex``.
* **Payload** ("RoaringBitmapArray", portable): int32 LE magic 1681511377, int64 LE number of
  buckets, then per bucket an int32 LE key (the high 32 bits of the row index) and a 32-bit
  roaring bitmap in the portable serialization (the low 32 bits).
* **DV file**: a version byte ``0x01``, then for each DV: int32 BE payload length, the payload,
  int32 BE CRC-32 of the payload. The first DV of a file is at offset 1.
"""

from __future__ import annotations

import os
import re
import struct
import uuid as _uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deltaport.errors import CorruptLog

__all__ = [
    "BITMAP_MAGIC",
    "DV_FILE_FORMAT_VERSION",
    "DeletionVectorDescriptor",
    "decode_bitmap",
    "decode_uuid",
    "dv_file_bytes",
    "encode_bitmap",
    "encode_uuid",
    "inline_dv",
    "keep_mask",
    "local_read_range",
    "read_dv",
    "write_dv_file",
    "write_dv_file_many",
    "z85_decode",
    "z85_encode",
]

BITMAP_MAGIC = 1681511377
DV_FILE_FORMAT_VERSION = 1
UUID_Z85_LENGTH = 20

ReadRange = Callable[[str, int, int], bytes]

# --- Z85 -------------------------------------------------------------------------------------

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_ENC = np.frombuffer(Z85_ALPHABET.encode("ascii"), dtype=np.uint8)
_Z85_DEC = np.full(256, 255, dtype=np.uint8)
_Z85_DEC[_Z85_ENC] = np.arange(85, dtype=np.uint8)
_POW85 = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)


def z85_encode(data: bytes) -> str:
    """Z85-encode ``data``, zero-padding it to a multiple of 4 bytes (as Delta does)."""
    data = bytes(data)
    pad = -len(data) % 4
    if pad:
        data += b"\x00" * pad
    if not data:
        return ""
    words = np.frombuffer(data, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _POW85[None, :]) % 85
    return _Z85_ENC[digits.astype(np.intp)].tobytes().decode("ascii")


def z85_decode(text: str, length: int | None = None) -> bytes:
    """Decode Z85 ``text`` (a multiple of 5 characters); keep the first ``length`` bytes if given.

    The last group may use the padded-tail form of the Rust ``z85`` crate (which delta-kernel-rs
    reads and some writers emit): ``k`` leading ``#`` characters (k = 1..3), then the remaining
    ``4 - k`` bytes in ``5 - k`` characters; e.g. ``"##093"`` is the two bytes ``03 00``. A
    standard group never starts with ``#`` (it would exceed 32 bits), so the forms cannot be
    confused.

    Raises :class:`CorruptLog` on a bad length, a character outside the alphabet, a group
    larger than 32 bits, or a ``length`` longer than the decoded data.
    """
    try:
        raw = text.encode("ascii")
    except (UnicodeEncodeError, AttributeError):
        raise CorruptLog(f"Z85 string is not ASCII text: {text!r}") from None
    if len(raw) % 5:
        raise CorruptLog(f"Z85 string length {len(raw)} is not a multiple of 5: {text!r}")
    codes = _Z85_DEC[np.frombuffer(raw, dtype=np.uint8)]
    if (codes == 255).any():
        raise CorruptLog(f"Z85 string has a character outside the alphabet: {text!r}")
    groups = codes.reshape(-1, 5)
    tail = b""
    if len(groups) and raw[-5] == ord("#"):
        last = raw[-5:]
        pad = len(last) - len(last.lstrip(b"#"))
        if pad > 3:
            raise CorruptLog(f"Z85 string has a malformed padded last group: {text!r}")
        value = 0
        for code in groups[-1, pad:]:
            value = value * 85 + int(code)
        if value >= 1 << (8 * (4 - pad)):
            raise CorruptLog(f"Z85 string has a malformed padded last group: {text!r}")
        tail = value.to_bytes(4 - pad, "big")
        groups = groups[:-1]
    values = groups.astype(np.uint64) @ _POW85
    if (values > 0xFFFFFFFF).any():
        raise CorruptLog(f"Z85 string has a group larger than 32 bits: {text!r}")
    out = values.astype(">u4").tobytes() + tail
    if length is not None:
        if length < 0 or length > len(out):
            raise CorruptLog(f"Z85 string decodes to {len(out)} bytes, {length} expected: {text!r}")
        out = out[:length]
    return out


def encode_uuid(value: _uuid.UUID) -> str:
    """Delta's UUID encoding: Z85 of the 16 big-endian UUID bytes (20 characters)."""
    return z85_encode(value.bytes)


def decode_uuid(text: str) -> _uuid.UUID:
    """Inverse of :func:`encode_uuid`."""
    if len(text) != UUID_Z85_LENGTH:
        raise CorruptLog(f"an encoded UUID has 20 characters, not {len(text)}: {text!r}")
    return _uuid.UUID(bytes=z85_decode(text))


# --- descriptor ------------------------------------------------------------------------------

_STORAGE_TYPES = ("u", "i", "p")


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """The ``deletionVector`` field of an ``add``/``remove`` action."""

    storage_type: str
    path_or_inline_dv: str
    offset: int | None
    size_in_bytes: int
    cardinality: int
    max_row_index: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, table: str | None = None) -> DeletionVectorDescriptor:
        """Build from the wire form; raises :class:`CorruptLog` when a field is missing or wrong."""
        try:
            storage_type = d["storageType"]
            path_or_inline = d["pathOrInlineDv"]
            size = d["sizeInBytes"]
            cardinality = d["cardinality"]
        except (KeyError, TypeError) as exc:
            raise CorruptLog(f"deletion vector descriptor lacks {exc}: {d!r}", table=table) from None
        offset = d.get("offset")
        max_row_index = d.get("maxRowIndex")
        if storage_type not in _STORAGE_TYPES:
            raise CorruptLog(f"unknown deletion vector storageType {storage_type!r}", table=table)
        if not isinstance(path_or_inline, str) or not path_or_inline:
            raise CorruptLog(f"bad deletion vector pathOrInlineDv: {d!r}", table=table)
        for name, value, optional in (
            ("sizeInBytes", size, False),
            ("cardinality", cardinality, False),
            ("offset", offset, True),
            ("maxRowIndex", max_row_index, True),
        ):
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CorruptLog(f"bad deletion vector {name}: {d!r}", table=table)
        if storage_type == "u" and len(path_or_inline) < UUID_Z85_LENGTH:
            raise CorruptLog(f"deletion vector path {path_or_inline!r} is too short", table=table)
        return cls(storage_type, path_or_inline, offset, size, cardinality, max_row_index)

    def to_dict(self) -> dict[str, Any]:
        """The wire form, fields that are None left out."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        if self.max_row_index is not None:
            out["maxRowIndex"] = self.max_row_index
        return out

    @property
    def unique_id(self) -> str:
        """``storageType + pathOrInlineDv`` (+ ``"@" + offset`` when there is an offset)."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"

    def relative_path(self) -> str:
        """For ``u``: ``[<prefix>/]deletion_vector_<uuid>.bin``, relative to the table root."""
        if self.storage_type != "u":
            raise ValueError(f"relative_path() needs storage type 'u', not {self.storage_type!r}")
        encoded = self.path_or_inline_dv
        prefix, uuid_part = encoded[:-UUID_Z85_LENGTH], encoded[-UUID_Z85_LENGTH:]
        name = f"deletion_vector_{decode_uuid(uuid_part)}.bin"
        return f"{prefix}/{name}" if prefix else name

    def storage_path(self) -> str:
        """The path to hand to a reader: relative for ``u``, absolute for ``p``."""
        if self.storage_type == "u":
            return self.relative_path()
        if self.storage_type == "p":
            return self.path_or_inline_dv
        raise ValueError("an inline deletion vector has no file")


# --- portable roaring bitmaps ----------------------------------------------------------------

_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096


def _roaring():
    try:
        import pyroaring
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("decoding deletion vectors needs the 'pyroaring' package") from exc
    return pyroaring


def _portable_size(buf: bytes, pos: int) -> int:
    """Number of bytes the portable 32-bit roaring bitmap starting at ``pos`` occupies."""
    start = pos
    n = len(buf)

    def need(count: int) -> None:
        if pos + count > n:
            raise CorruptLog("deletion vector bitmap is truncated")

    need(4)
    (cookie,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        containers = (cookie >> 16) + 1
        run_flags_len = (containers + 7) // 8
        need(run_flags_len)
        run_flags = buf[pos : pos + run_flags_len]
        pos += run_flags_len
        has_offsets = containers >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        need(4)
        (containers,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        run_flags = b""
        has_offsets = True
    else:
        raise CorruptLog(f"deletion vector bitmap has an unknown cookie {cookie}")
    if containers > 1 << 16:
        raise CorruptLog(f"deletion vector bitmap claims {containers} containers")
    need(4 * containers)
    header = np.frombuffer(buf, dtype="<u2", count=2 * containers, offset=pos)
    cards = header[1::2].astype(np.int64) + 1
    pos += 4 * containers
    if has_offsets:
        need(4 * containers)
        pos += 4 * containers
    for i in range(containers):
        if run_flags and run_flags[i >> 3] & (1 << (i & 7)):
            need(2)
            (runs,) = struct.unpack_from("<H", buf, pos)
            pos += 2 + 4 * runs
        elif cards[i] > _ARRAY_MAX:
            pos += 8192
        else:
            pos += 2 * int(cards[i])
    if pos > n:
        raise CorruptLog("deletion vector bitmap is truncated")
    return pos - start


def decode_bitmap(payload: bytes) -> np.ndarray:
    """Decode a DV payload into the sorted ``uint64`` array of deleted row indexes."""
    buf = bytes(payload)
    if len(buf) < 12:
        raise CorruptLog(f"deletion vector payload is {len(buf)} bytes, too short")
    magic, buckets = struct.unpack_from("<iq", buf, 0)
    if magic != BITMAP_MAGIC:
        raise CorruptLog(f"deletion vector payload has magic {magic}, expected {BITMAP_MAGIC}")
    if buckets < 0 or buckets > len(buf):
        raise CorruptLog(f"deletion vector payload claims {buckets} buckets")
    bitmap_cls = _roaring().BitMap
    pos = 12
    parts: list[np.ndarray] = []
    last_key = -1
    for _ in range(buckets):
        if pos + 4 > len(buf):
            raise CorruptLog("deletion vector payload is truncated")
        (key,) = struct.unpack_from("<i", buf, pos)
        pos += 4
        if key < 0 or key <= last_key:
            raise CorruptLog(f"deletion vector bucket keys are not ascending ({last_key} then {key})")
        last_key = key
        size = _portable_size(buf, pos)
        try:
            bitmap = bitmap_cls.deserialize(buf[pos : pos + size])
        except ValueError as exc:
            raise CorruptLog(f"deletion vector bitmap cannot be read: {exc}") from None
        pos += size
        low = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.uint64)
        if low.size:
            parts.append(low | np.uint64(key << 32) if key else low)
    if not parts:
        return np.empty(0, dtype=np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def encode_bitmap(rows: Iterable[int] | np.ndarray) -> bytes:
    """Encode row indexes (any order, duplicates allowed) as a DV payload (sparse buckets)."""
    arr = _as_rows(rows)
    bitmap_cls = _roaring().BitMap
    highs = (arr >> np.uint64(32)).astype(np.int64)
    keys, starts = np.unique(highs, return_index=True)
    if keys.size and keys[-1] > 0x7FFFFFFF:
        raise ValueError("row index too large for a deletion vector")
    bounds = [*list(starts), arr.size]
    out = [struct.pack("<iq", BITMAP_MAGIC, int(keys.size))]
    for i, key in enumerate(keys):
        low = (arr[bounds[i] : bounds[i + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bitmap = bitmap_cls(low)
        bitmap.run_optimize()
        out.append(struct.pack("<i", int(key)))
        out.append(bitmap.serialize())
    return b"".join(out)


def _as_rows(rows: Iterable[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows))
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"row indexes must be integers, not {arr.dtype}")
    if arr.dtype.kind == "i" and (arr < 0).any():
        raise ValueError("row indexes must not be negative")
    return np.unique(arr.astype(np.uint64).ravel())


def keep_mask(deleted: np.ndarray, num_rows: int) -> np.ndarray:
    """Boolean mask of ``num_rows`` entries, False at deleted row indexes (those < num_rows)."""
    mask = np.ones(num_rows, dtype=bool)
    idx = deleted[deleted < np.uint64(num_rows)] if deleted.size else deleted
    mask[idx.astype(np.intp)] = False
    return mask


# --- reading ---------------------------------------------------------------------------------


def read_dv(
    descriptor: DeletionVectorDescriptor, read_range: ReadRange | None = None, *, table: str | None = None
) -> np.ndarray:
    """The deleted row indexes (sorted ``uint64``) that ``descriptor`` points at.

    Inline DVs are decoded from the descriptor. For ``u``/``p`` ``read_range(path, offset,
    length)`` is called once with the relative path (``u``) or absolute path (``p``), the DV's
    offset (1 if absent) and ``sizeInBytes + 8`` (length prefix, payload, CRC). A short read, a
    length prefix that disagrees with ``sizeInBytes``, a CRC mismatch or a cardinality that
    disagrees with the descriptor raise :class:`CorruptLog` naming the file.
    """
    d = descriptor
    if d.storage_type == "i":
        where = "inline deletion vector"
        payload = z85_decode(d.path_or_inline_dv, None)
        if len(payload) < d.size_in_bytes:
            raise CorruptLog(f"{where} has {len(payload)} bytes, sizeInBytes is {d.size_in_bytes}", table=table)
        payload = payload[: d.size_in_bytes]
    elif d.storage_type in ("u", "p"):
        if read_range is None:
            raise ValueError("reading an on-disk deletion vector needs read_range")
        path = d.storage_path()
        offset = 1 if d.offset is None else d.offset
        where = f"deletion vector file {path} at offset {offset}"
        want = d.size_in_bytes + 8
        data = bytes(read_range(path, offset, want))
        if len(data) < want:
            raise CorruptLog(f"{where} is truncated: {len(data)} of {want} bytes", table=table)
        (length,) = struct.unpack_from(">i", data, 0)
        if length != d.size_in_bytes:
            raise CorruptLog(f"{where} holds {length} bytes, the log says {d.size_in_bytes}", table=table)
        payload = data[4 : 4 + length]
        (crc,) = struct.unpack_from(">I", data, 4 + length)
        if zlib.crc32(payload) != crc:
            raise CorruptLog(f"{where} fails its CRC-32 check", table=table)
    else:  # pragma: no cover - from_dict refuses these
        raise CorruptLog(f"unknown deletion vector storageType {d.storage_type!r}", table=table)
    try:
        rows = decode_bitmap(payload)
    except CorruptLog as exc:
        raise CorruptLog(f"{where}: {exc.message}", table=table) from None
    if rows.size != d.cardinality:
        raise CorruptLog(f"{where} deletes {rows.size} rows, the log says {d.cardinality}", table=table)
    return rows


def local_read_range(root: str | os.PathLike[str]) -> ReadRange:
    """A ``read_range`` over a local directory (the table root); ``file:`` URLs are also accepted."""
    from urllib.parse import unquote, urlparse

    base = Path(root)

    def read(path: str, offset: int, length: int) -> bytes:
        if path.startswith("file:"):
            full = Path(unquote(urlparse(path).path))
        else:
            full = Path(path) if os.path.isabs(path) else base / path
        with open(full, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    return read


# --- writing (tests, demos, hand-made tables) ------------------------------------------------


def dv_file_bytes(row_sets: Sequence[Iterable[int] | np.ndarray]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """The bytes of a DV file holding ``row_sets``, and ``(offset, size, cardinality)`` of each."""
    chunks = [bytes([DV_FILE_FORMAT_VERSION])]
    pos = 1
    placed = []
    for rows in row_sets:
        arr = _as_rows(rows)
        payload = encode_bitmap(arr)
        chunks.append(struct.pack(">i", len(payload)) + payload + struct.pack(">I", zlib.crc32(payload)))
        placed.append((pos, len(payload), int(arr.size)))
        pos += len(payload) + 8
    return b"".join(chunks), placed


def write_dv_file_many(
    path: str | os.PathLike[str], row_sets: Sequence[Iterable[int] | np.ndarray], *, prefix: str = ""
) -> list[DeletionVectorDescriptor]:
    """Write one DV file holding every row set; one descriptor per set (offsets 1, ...).

    ``path`` is either a directory (the table root): the file is
    ``<path>/[<prefix>/]deletion_vector_<random uuid>.bin`` and the descriptors have storage
    type ``u``; or a file path ending in ``.bin``: that file is written and the descriptors have
    storage type ``p`` with its absolute ``file://`` URL.
    """
    target = Path(path)
    data, placed = dv_file_bytes(row_sets)
    if target.suffix == ".bin" and not target.is_dir():
        if prefix:
            raise ValueError("prefix applies only when path is a table directory")
        storage, encoded = "p", target.resolve().as_uri()
        file_path = target
    else:
        if prefix and (prefix.startswith("/") or re.search(r"[^A-Za-z0-9_.\-]", prefix)):
            raise ValueError(f"unsupported deletion vector prefix {prefix!r}")
        ident = _uuid.uuid4()
        storage, encoded = "u", prefix + encode_uuid(ident)
        file_path = target / prefix / f"deletion_vector_{ident}.bin"
    file_path.parent.mkdir(parents=True, exist_ok=True)
    file_path.write_bytes(data)
    return [DeletionVectorDescriptor(storage, encoded, off, size, card) for off, size, card in placed]


def write_dv_file(
    path: str | os.PathLike[str], rows: Iterable[int] | np.ndarray, *, prefix: str = ""
) -> DeletionVectorDescriptor:
    """Write a DV file holding one DV (at offset 1); see :func:`write_dv_file_many`."""
    return write_dv_file_many(path, [rows], prefix=prefix)[0]


def inline_dv(rows: Iterable[int] | np.ndarray) -> DeletionVectorDescriptor:
    """An inline (``i``) descriptor: Z85 of the payload padded to 4 bytes, unpadded size."""
    arr = _as_rows(rows)
    payload = encode_bitmap(arr)
    return DeletionVectorDescriptor("i", z85_encode(payload), None, len(payload), int(arr.size))
