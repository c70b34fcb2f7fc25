"""Deletion-vector codec: Z85, descriptors, roaring payloads, DV files, real Spark-written DVs."""

from __future__ import annotations

import ast
import json
import os
import struct
import uuid
import zlib
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

import deltaport.dv as dvmod
from deltaport.dv import (
    BITMAP_MAGIC,
    DeletionVectorDescriptor,
    decode_bitmap,
    decode_uuid,
    encode_bitmap,
    encode_uuid,
    inline_dv,
    keep_mask,
    local_read_range,
    read_dv,
    write_dv_file,
    write_dv_file_many,
    z85_decode,
    z85_encode,
)
from deltaport.errors import CorruptLog

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"

needs_tables = pytest.mark.skipif(not TABLES.is_dir(), reason="shared Delta tables not present")


# --- Z85 ------------------------------------------------------------------------------------


def test_z85_reference_vector():
    # The example of the ZeroMQ Z85 specification (RFC 32).
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 7, 8, 16, 33, 1000])
def test_z85_round_trip_with_padding(length):
    rng = np.random.default_rng(length)
    raw = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
    text = z85_encode(raw)
    assert len(text) == 5 * ((length + 3) // 4)
    decoded = z85_decode(text)
    assert decoded[:length] == raw
    assert decoded[length:] == b"\x00" * (len(decoded) - length)
    assert z85_decode(text, length) == raw


def test_z85_extremes():
    assert z85_encode(b"\x00\x00\x00\x00") == "00000"
    assert z85_encode(b"\xff\xff\xff\xff") == "%nSc0"
    assert z85_decode("%nSc0") == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("bad", ["abcd", 'abc"d', "abc~d", "é0000", "000000", "$0000", "%nSc1"])
def test_z85_rejects_bad_input(bad):
    with pytest.raises(CorruptLog):
        z85_decode(bad)


def test_z85_hash_padded_last_group():
    # A real inline DV (cdf-table-with-dv, v5; sizeInBytes 34) ends in "##093": two padding
    # marks, then the two bytes 03 00 as "093" (9 * 85 + 3 = 0x0300).
    assert z85_decode("##093") == b"\x03\x00"
    assert z85_decode("00000##093") == b"\x00\x00\x00\x00\x03\x00"
    assert z85_decode("#0000") == b"\x00\x00\x00"
    assert z85_decode("###2J") == bytes([2 * 85 + 45])
    with pytest.raises(CorruptLog):
        z85_decode("#####")
    with pytest.raises(CorruptLog):
        z85_decode("###%%")  # 82 * 85 + 82 does not fit one byte
    with pytest.raises(CorruptLog):
        z85_decode("##093HelloWorld")  # only the last group may be padded


def test_z85_rejects_length_beyond_data():
    with pytest.raises(CorruptLog):
        z85_decode("00000", 5)


def test_uuid_encoding_matches_real_file_name():
    # table-with-dv-small: pathOrInlineDv "vBn[lx{q8@P<9BNH/isA" names this file.
    ident = uuid.UUID("61d16c75-6994-46b7-a15b-8b538852e50e")
    assert encode_uuid(ident) == "vBn[lx{q8@P<9BNH/isA"
    assert decode_uuid("vBn[lx{q8@P<9BNH/isA") == ident
    for _ in range(50):
        u = uuid.uuid4()
        assert len(encode_uuid(u)) == 20
        assert decode_uuid(encode_uuid(u)) == u


# --- descriptor -----------------------------------------------------------------------------


def test_descriptor_wire_round_trip_and_unique_id():
    wire = {
        "storageType": "u",
        "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    d = DeletionVectorDescriptor.from_dict(wire)
    assert d == DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 1, 36, 2)
    assert d.to_dict() == wire
    assert list(d.to_dict()) == ["storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality"]
    assert d.unique_id == "uvBn[lx{q8@P<9BNH/isA@1"
    assert d.relative_path() == "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin"
    assert d.storage_path() == d.relative_path()

    inline = {
        "storageType": "i",
        "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093",
        "offset": None,
        "sizeInBytes": 34,
        "cardinality": 1,
        "maxRowIndex": 3,
    }
    di = DeletionVectorDescriptor.from_dict(inline)
    assert di.offset is None and di.max_row_index == 3
    assert di.to_dict() == {k: v for k, v in inline.items() if v is not None}
    assert di.unique_id == "i^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093"
    with pytest.raises(ValueError):
        di.relative_path()
    hash(di)  # frozen dataclass: usable as a cache key


def test_relative_path_with_prefix():
    ident = uuid.UUID("61d16c75-6994-46b7-a15b-8b538852e50e")
    d = DeletionVectorDescriptor("u", "ab" + encode_uuid(ident), 9, 40, 3)
    assert d.relative_path() == f"ab/deletion_vector_{ident}.bin"
    assert d.unique_id == "uab" + encode_uuid(ident) + "@9"


def test_absolute_path_descriptor():
    d = DeletionVectorDescriptor.from_dict(
        {"storageType": "p", "pathOrInlineDv": "s3://b/t/dv.bin", "offset": 5, "sizeInBytes": 36, "cardinality": 2}
    )
    assert d.storage_path() == "s3://b/t/dv.bin"
    with pytest.raises(ValueError):
        d.relative_path()


@pytest.mark.parametrize(
    "wire",
    [
        {"pathOrInlineDv": "x" * 20, "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "x" * 20, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "x" * 20, "sizeInBytes": 1},
        {"storageType": "z", "pathOrInlineDv": "x" * 20, "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "short", "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "x" * 20, "sizeInBytes": -1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "x" * 20, "sizeInBytes": "1", "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "x" * 20, "sizeInBytes": 1, "cardinality": 1, "offset": 1.5},
    ],
)
def test_descriptor_rejects_malformed(wire):
    with pytest.raises(CorruptLog):
        DeletionVectorDescriptor.from_dict(wire, table="s3://bucket/t")


# --- bitmaps --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [0],
        [0, 9],
        list(range(1, 9)),
        [5, 2**32 - 1, 2**32, 2**32 + 7, 2**33, 3 * 2**32 + 1, 2**40, 2**62],
        list(range(0, 200_000, 3)),
        list(range(70_000, 80_000)),
    ],
)
def test_bitmap_round_trip(rows):
    payload = encode_bitmap(rows)
    assert struct.unpack_from("<i", payload)[0] == BITMAP_MAGIC
    out = decode_bitmap(payload)
    assert out.dtype == np.uint64
    assert out.tolist() == sorted(set(rows))


def test_bitmap_round_trip_random_large():
    rng = np.random.default_rng(7)
    rows = np.unique(rng.integers(0, 2**34, 50_000, dtype=np.uint64))
    assert np.array_equal(decode_bitmap(encode_bitmap(rows)), rows)
    # Unsorted input with duplicates is accepted.
    shuffled = np.concatenate([rows, rows[:100]])
    rng.shuffle(shuffled)
    assert np.array_equal(decode_bitmap(encode_bitmap(shuffled)), rows)


def _payload(buckets: dict[int, BitMap]) -> bytes:
    out = [struct.pack("<iq", BITMAP_MAGIC, len(buckets))]
    for key, bm in sorted(buckets.items()):
        out.append(struct.pack("<i", key) + bm.serialize())
    return b"".join(out)


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("containers", [1, 3, 6])
def test_multi_bucket_payload_with_every_container_kind(optimize, containers):
    """The size of each bucket's bitmap is computed from its header (arrays, bitsets, runs;
    with and without the offset header), so later buckets decode correctly."""
    buckets = {}
    expected = []
    for key in (0, 2, 5):
        bm = BitMap()
        for c in range(containers):
            base = c << 16
            kind = (c + key) % 3
            if kind == 0:
                values = range(base + 1, base + 4000, 7)  # array
            elif kind == 1:
                values = range(base, base + 10_000, 2)  # bitset (5000 values)
            else:
                values = range(base + 100, base + 30_000)  # run-friendly
            bm.update(values)
        if optimize:
            bm.run_optimize()
        buckets[key] = bm
        expected.extend((key << 32) | v for v in bm)
    out = decode_bitmap(_payload(buckets))
    assert out.tolist() == sorted(expected)


def test_sparse_and_dense_bucket_keys_both_decode():
    dense = {0: BitMap([1]), 1: BitMap(), 2: BitMap([3])}
    assert decode_bitmap(_payload(dense)).tolist() == [1, (2 << 32) | 3]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        struct.pack("<iq", 1234, 0),
        struct.pack("<iq", BITMAP_MAGIC, 1),
        struct.pack("<iq", BITMAP_MAGIC, 1) + struct.pack("<i", 0) + BitMap([1, 2, 3]).serialize()[:-2],
        struct.pack("<iq", BITMAP_MAGIC, 1) + struct.pack("<i", 0) + b"\x00\x00\x00\x00",
        struct.pack("<iq", BITMAP_MAGIC, 2)
        + struct.pack("<i", 1)
        + BitMap([1]).serialize()
        + struct.pack("<i", 0)
        + BitMap([1]).serialize(),
        struct.pack("<iq", BITMAP_MAGIC, -1),
    ],
)
def test_decode_bitmap_rejects_corrupt_payloads(payload):
    with pytest.raises(CorruptLog):
        decode_bitmap(payload)


def test_encode_bitmap_rejects_bad_rows():
    with pytest.raises(ValueError):
        encode_bitmap([-1])
    with pytest.raises(ValueError):
        encode_bitmap([1.5])


def test_keep_mask():
    mask = keep_mask(np.array([0, 3, 9, 50], dtype=np.uint64), 10)
    assert mask.tolist() == [False, True, True, False, True, True, True, True, True, False]
    assert keep_mask(np.empty(0, dtype=np.uint64), 3).tolist() == [True] * 3


# --- DV files and inline DVs ----------------------------------------------------------------


def test_write_and_read_dv_file(tmp_path):
    d = write_dv_file(tmp_path, [0, 9, 2**32 + 1])
    assert d.storage_type == "u" and d.offset == 1 and d.cardinality == 3
    file = tmp_path / d.relative_path()
    data = file.read_bytes()
    assert data[0] == 1
    assert struct.unpack_from(">i", data, 1)[0] == d.size_in_bytes
    payload = data[5 : 5 + d.size_in_bytes]
    assert struct.unpack_from(">I", data, 5 + d.size_in_bytes)[0] == zlib.crc32(payload)
    assert len(data) == 1 + 4 + d.size_in_bytes + 4
    assert read_dv(d, local_read_range(tmp_path)).tolist() == [0, 9, 2**32 + 1]


def test_several_dvs_in_one_file_and_prefix(tmp_path):
    sets = [[1, 2], list(range(100, 5000)), [7]]
    descs = write_dv_file_many(tmp_path, sets, prefix="xy")
    assert descs[0].offset == 1
    assert descs[1].offset == 1 + descs[0].size_in_bytes + 8
    assert descs[2].offset == descs[1].offset + descs[1].size_in_bytes + 8
    assert len({d.path_or_inline_dv for d in descs}) == 1
    assert descs[0].relative_path().startswith("xy/deletion_vector_")
    calls = []
    base = local_read_range(tmp_path)

    def read_range(path, offset, length):
        calls.append((path, offset, length))
        return base(path, offset, length)

    for d, rows in zip(descs, sets):
        assert read_dv(d, read_range).tolist() == rows
    assert calls == [(d.relative_path(), d.offset, d.size_in_bytes + 8) for d in descs]


def test_absolute_path_dv_file(tmp_path):
    d = write_dv_file(tmp_path / "abs" / "dv.bin", [3, 4])
    assert d.storage_type == "p"
    assert d.path_or_inline_dv == (tmp_path / "abs" / "dv.bin").resolve().as_uri()
    seen = []

    def read_range(path, offset, length):
        seen.append(path)
        return local_read_range("/nonexistent")(path, offset, length)

    assert read_dv(d, read_range).tolist() == [3, 4]
    assert seen == [d.path_or_inline_dv]


def test_crc_mismatch_is_corrupt_log(tmp_path):
    d = write_dv_file(tmp_path, [0, 9])
    file = tmp_path / d.relative_path()
    data = bytearray(file.read_bytes())
    data[5 + 13] ^= 0xFF  # a payload byte
    file.write_bytes(bytes(data))
    with pytest.raises(CorruptLog) as err:
        read_dv(d, local_read_range(tmp_path), table="file:///t")
    assert d.relative_path() in str(err.value)
    assert "CRC" in str(err.value)
    assert err.value.table == "file:///t"


def test_truncated_file_is_corrupt_log(tmp_path):
    d = write_dv_file(tmp_path, [0, 9])
    file = tmp_path / d.relative_path()
    file.write_bytes(file.read_bytes()[:-3])
    with pytest.raises(CorruptLog, match="truncated"):
        read_dv(d, local_read_range(tmp_path))


def test_size_and_cardinality_mismatch_are_corrupt_log(tmp_path):
    d = write_dv_file(tmp_path, [0, 9])
    wrong_size = DeletionVectorDescriptor(d.storage_type, d.path_or_inline_dv, d.offset, d.size_in_bytes - 4, 2)
    with pytest.raises(CorruptLog, match="holds"):
        read_dv(wrong_size, local_read_range(tmp_path))
    wrong_card = DeletionVectorDescriptor(d.storage_type, d.path_or_inline_dv, d.offset, d.size_in_bytes, 3)
    with pytest.raises(CorruptLog, match="says 3"):
        read_dv(wrong_card, local_read_range(tmp_path))


def test_on_disk_dv_needs_a_reader():
    d = DeletionVectorDescriptor("u", "vBn[lx{q8@P<9BNH/isA", 1, 36, 2)
    with pytest.raises(ValueError):
        read_dv(d, None)


@pytest.mark.parametrize("rows", [[], [0], [1, 2, 3], [0, 9, 2**32, 2**35 + 5], list(range(0, 10_000, 2))])
def test_inline_dv_round_trip(rows):
    d = inline_dv(rows)
    assert d.storage_type == "i" and d.offset is None
    assert d.cardinality == len(rows)
    assert len(d.path_or_inline_dv) == 5 * ((d.size_in_bytes + 3) // 4)
    again = DeletionVectorDescriptor.from_dict(json.loads(json.dumps(d.to_dict())))
    assert read_dv(again).tolist() == rows


def test_inline_dv_shorter_than_size_is_corrupt():
    d = inline_dv([1, 2])
    bad = DeletionVectorDescriptor("i", d.path_or_inline_dv, None, d.size_in_bytes + 8, 2)
    with pytest.raises(CorruptLog):
        read_dv(bad)


# --- real tables ----------------------------------------------------------------------------


def _replay(table: Path, version: int) -> dict[str, dict]:
    live: dict[str, dict] = {}
    for v in range(version + 1):
        for line in (table / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return live


def _our_deleted_rows(table: Path, version: int) -> dict[str, list[int]]:
    out = {}
    for path, add in _replay(table, version).items():
        if add.get("deletionVector"):
            d = DeletionVectorDescriptor.from_dict(add["deletionVector"])
            out[unquote(path)] = read_dv(d, local_read_range(table)).tolist()
    return out


def _deltalake_deleted_rows(table: Path, version: int) -> dict[str, list[int]]:
    from deltalake import DeltaTable

    dvs = pa.table(DeltaTable(str(table), version=version).deletion_vectors())
    out = {}
    prefix = table.resolve().as_uri() + "/"
    for uri, selection in zip(dvs.column("filepath").to_pylist(), dvs.column("selection_vector").to_pylist()):
        assert uri.startswith(prefix)
        out[unquote(uri[len(prefix) :])] = [i for i, keep in enumerate(selection) if not keep]
    return out


@needs_tables
def test_table_with_dv_small():
    table = TABLES / "table-with-dv-small"
    ours = _our_deleted_rows(table, 1)
    assert list(ours.values()) == [[0, 9]]  # DELETE ... WHERE value IN (0, 9)
    assert ours == _deltalake_deleted_rows(table, 1)


@needs_tables
def test_with_short_dv():
    table = TABLES / "with-short-dv"
    ours = _our_deleted_rows(table, 0)
    assert list(ours.values()) == [[0, 1, 2]]
    assert ours == _deltalake_deleted_rows(table, 0)


@needs_tables
@pytest.mark.parametrize(("name", "last"), [("cdf-table-with-dv", 6), ("cdf-table-with-cdc-and-dvs", 25)])
def test_every_dv_of_cdf_tables_matches_deltalake(name, last):
    table = TABLES / name
    log = table / "_delta_log"
    compared = 0
    # Every descriptor in every commit (adds and removes) decodes with the right cardinality.
    for v in range(last + 1):
        for line in (log / f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action and action[kind].get("deletionVector"):
                    d = DeletionVectorDescriptor.from_dict(action[kind]["deletionVector"])
                    assert read_dv(d, local_read_range(table)).size == d.cardinality
        ours = _our_deleted_rows(table, v)
        assert ours == _deltalake_deleted_rows(table, v), f"version {v}"
        compared += len(ours)
    assert compared > 0


@needs_tables
def test_real_inline_dvs_decode():
    table = TABLES / "cdf-table-with-dv"
    expected = {3: [0, 1, 4, 5], 4: [0, 5], 5: [3]}
    for version, rows in expected.items():
        assert list(_our_deleted_rows(table, version).values()) == [rows]


# --- layering -------------------------------------------------------------------------------


def test_dv_module_imports_only_allowed_modules():
    tree = ast.parse(Path(dvmod.__file__).read_text())
    allowed_third_party = {"numpy", "pyroaring", "deltaport"}
    import sys

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "deltaport":
                assert name == "deltaport.errors", name
            elif top != "__future__":
                assert top in sys.stdlib_module_names or top in allowed_third_party, name
