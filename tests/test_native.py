"""The compiled per-file loops (deltaport._native) against their definitions: hashlib's MD5 and
keyed BLAKE2b, orjson's string escaping, and Arrow's join of the same pieces."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import orjson
import pyarrow as pa
import pytest

from deltaport import native

loops = native.loops


# With DELTAPORT_NO_SKIPS=1 (the test script sets it) a skip fails the run: a missing build is seen.
pytestmark = pytest.mark.skipif(
    loops is None, reason="deltaport._native is not built (reinstall with a C compiler: pip install -e .)"
)


def _packed(values: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(values), np.cumsum([0, *map(len, values)]).astype(np.int64)


def _random_bytes(rng: random.Random, count: int, longest: int) -> list[bytes]:
    return [rng.randbytes(rng.randrange(longest)) for _ in range(count)]


def test_md5_of_every_length_across_block_boundaries():
    rng = random.Random(1)
    values = [rng.randbytes(n) for n in range(300)] + _random_bytes(rng, 500, 2000)
    digests = loops.md5_each(*_packed(values))
    assert digests == b"".join(hashlib.md5(v).digest() for v in values)


@pytest.mark.parametrize("key_bytes", [0, 1, 32, 64])
@pytest.mark.parametrize("size", [1, 18, 32, 64])
def test_keyed_blake2b_after_a_head(key_bytes, size):
    rng = random.Random(key_bytes * 100 + size)
    values = [rng.randbytes(n) for n in range(260)] + [b"a=b/c==d", b"=", b""]
    key, head = rng.randbytes(key_bytes), rng.randbytes(rng.randrange(300))
    data, offsets = _packed(values)
    plain = loops.mac_each(data, offsets, key, head, size, False)
    assert plain == b"".join(hashlib.blake2b(head + v, key=key, digest_size=size).digest() for v in values)
    encoded = loops.mac_each(data, offsets, key, head, size, True)
    expected = [hashlib.blake2b(head + v.replace(b"=", b"%3D"), key=key, digest_size=size).digest() for v in values]
    assert encoded == b"".join(expected)


def test_only():
    assert loops.only(b"abc/=._~-09", b"abcdefghijklmnopqrstuvwxyz0123456789/=._~-")
    assert not loops.only(b"abc d", b"abcd")
    assert loops.only(b"", b"")


def _strings(rng: random.Random, count: int) -> list[str]:
    """Text with every kind of character JSON escapes, UTF-8 of every width, and U+2028."""
    alphabet = [*map(chr, range(0x20)), '"', "\\", "/", "a", "Z", "\x7f", "é", "\u2028", "\u4e2d", "\U0001f600"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(70))) for _ in range(count)]


def test_quoted_values_are_orjson_strings_and_raw_values_are_as_they_are():
    rng = random.Random(3)
    strings = _strings(rng, 3000)
    data, offsets = _packed([s.encode() for s in strings])
    column = (offsets, data, None, 0, loops.QUOTED, None)
    raw = (offsets, data, None, 0, loops.RAW, None)
    lines = loops.join(len(strings), [b"[", column, b",", raw, b"]\n"])
    expected = b"".join(b"[" + orjson.dumps(s) + b"," + s.encode() + b"]\n" for s in strings)
    assert bytes(memoryview(lines)) == expected and len(lines) == len(expected)


def test_nulls_write_null_as_or_leave_out_their_group():
    values = pa.array(["a", None, "c", None, "e", "f", None, "h", "i"], pa.string()).slice(1)  # a bit offset
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset :].astype(np.int64)
    validity, data = values.buffers()[0], values.buffers()[2]
    n = len(values)
    required = (offsets, data, validity, values.offset, loops.QUOTED, b"null")
    optional = [b',"v":', (offsets, data, validity, values.offset, loops.QUOTED, None)]
    lines = bytes(memoryview(loops.join(n, [b"{", required, *[optional], b"}\n"])))
    expected = "".join(
        "{" + orjson.dumps(v).decode() + ("" if v is None else "," + '"v":' + orjson.dumps(v).decode()) + "}\n"
        for v in values.to_pylist()
    )
    assert lines.decode() == expected


def test_a_required_null_without_null_as_is_an_error():
    values = pa.array(["a", None], pa.string())
    offsets = np.frombuffer(values.buffers()[1], np.int32).astype(np.int64)
    with pytest.raises(ValueError, match="required value is null"):
        loops.join(2, [(offsets, values.buffers()[2], values.buffers()[0], 0, loops.RAW, None)])


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ([0, 2, 1], "outside"),  # decreasing
        ([0, 2, 9], "outside"),  # past the data
        ([-1, 2, 3], "outside"),
        ([0, 1], "fewer than"),  # one offset short of two values
    ],
)
def test_bad_offsets_are_refused_before_any_byte_is_read(offsets, message):
    column = (np.array(offsets, np.int64), b"abc", None, 0, loops.RAW, None)
    with pytest.raises(ValueError, match=message):
        loops.join(2, [column])
    if message == "outside":  # md5_each counts its values by its offsets
        with pytest.raises(ValueError, match=message):
            loops.md5_each(b"abc", np.array(offsets, np.int64))


def test_bad_pieces_are_refused():
    offsets = np.array([0, 1], np.int64)
    with pytest.raises(ValueError, match="mode"):
        loops.join(1, [(offsets, b"a", None, 0, 7, None)])
    with pytest.raises(ValueError, match="validity"):
        loops.join(1, [(offsets, b"a", b"", 0, loops.RAW, None)])
    with pytest.raises(TypeError, match="a piece is"):
        loops.join(1, ["text"])
    with pytest.raises(TypeError, match="a piece is"):
        loops.join(1, [[[b"nested"]]])  # groups do not nest
    with pytest.raises(ValueError, match="at most 64"):
        loops.mac_each(b"a", offsets, b"k" * 65, b"", 18, False)


def test_buffers_are_reused_and_each_result_keeps_its_own_bytes():
    """A freed result's buffer serves a later join; a live one is never handed out again."""
    data, offsets = _packed([b"x" * 100] * 1000)
    first = loops.join(1000, [(offsets, data, None, 0, loops.RAW, None), b"\n"])
    other_data, _ = _packed([b"y" * 100] * 1000)
    second = loops.join(1000, [(offsets, other_data, None, 0, loops.RAW, None), b"\n"])
    assert bytes(memoryview(first)) == (b"x" * 100 + b"\n") * 1000
    assert bytes(memoryview(second)) == (b"y" * 100 + b"\n") * 1000
    del first
    for size in (10, 2000):  # smaller, then larger than the freed buffer (grown in place)
        third = loops.join(1000, [(offsets, data, None, 0, loops.RAW, None), b"z" * size])
        assert bytes(memoryview(third)) == (b"x" * 100 + b"z" * size) * 1000
        assert bytes(memoryview(second)) == (b"y" * 100 + b"\n") * 1000
        del third


def test_the_line_program_speaks_the_joins_modes():
    from deltaport.server.fast import columnar_lines

    assert (columnar_lines.RAW, columnar_lines.QUOTED) == (loops.RAW, loops.QUOTED)
