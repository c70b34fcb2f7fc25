"""The body of an answer to several ranges, taken in pieces of any size (deltaport.client.byteranges)."""

from __future__ import annotations

import io
import random

import pytest

from deltaport.client.byteranges import HEAD_MAX, RangeParts, boundary_of, content_range
from deltaport.client.errors import FileDownloadError

DATA = bytes(random.Random(5).randrange(256) for _ in range(5000))
SIZE = len(DATA)
ASKED = [(10, 20), (100, 1100), (4000, 5000)]


def multipart(ranges=ASKED, boundary="b0undary", size=SIZE, preamble=b"", close=True, kind="application/x") -> bytes:
    """An answer as RFC 9110 writes it (and as Starlette and deltaport's fast path do)."""
    out = [preamble]
    for i, (start, end) in enumerate(ranges):
        out.append(f"{chr(13) + chr(10) if i else ''}--{boundary}\r\nContent-Type: {kind}\r\n".encode())
        out.append(f"Content-Range: bytes {start}-{end - 1}/{size}\r\n\r\n".encode() + DATA[start:end])
    out.append(f"\r\n--{boundary}--".encode() if close else b"")
    return b"".join(out)


def take(body: bytes, boundary: bytes | None, pieces: int | None, asked=ASKED) -> list[bytes]:
    outs = [io.BytesIO() for _ in asked]
    reader = RangeParts([(s, e, o) for (s, e), o in zip(asked, outs, strict=True)], SIZE, "f1")
    reader.expect(boundary)
    step = pieces or len(body)
    for i in range(0, len(body), step):
        reader.write(memoryview(body)[i : i + step])
    reader.finish()
    return [o.getvalue() for o in outs]


@pytest.mark.parametrize("pieces", [1, 2, 3, 7, 64, 1000, None])
def test_each_part_goes_to_its_writer_whatever_the_pieces(pieces):
    assert take(multipart(), b"b0undary", pieces) == [DATA[s:e] for s, e in ASKED]


def test_a_preamble_padding_and_an_epilogue_are_passed_over():
    body = multipart(preamble=b"ignored preamble\r\n") + b"\r\nepilogue"
    body = body.replace(b"--b0undary\r\nContent-Type", b"--b0undary  \r\nContent-Type", 1)
    assert take(body, b"b0undary", 5) == [DATA[s:e] for s, e in ASKED]


@pytest.mark.parametrize("pieces", [1, 100, None])
def test_one_range_spanning_the_parts_is_spread_over_them(pieces):
    body = DATA[ASKED[0][0] : ASKED[-1][1]]
    assert take(body, None, pieces) == [DATA[s:e] for s, e in ASKED]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (multipart(boundary="other"), "boundary"),
        (multipart(ranges=[(10, 20), (4000, 5000), (100, 1100)]), "bytes 100-1099"),
        (multipart(ranges=[(10, 21), (100, 1100), (4000, 5000)]), "bytes 10-19"),
        (multipart(ranges=ASKED[:2]), "before its last part"),
        (multipart()[:-400], "before its last part"),
        (multipart(close=False), "closing boundary"),
        (multipart(ranges=[*ASKED, (4900, 4950)]), "more parts"),
        (multipart(kind="x" * HEAD_MAX), "headers are longer"),
    ],
    ids=[
        "another boundary",
        "out of order",
        "another range",
        "a part short",
        "cut",
        "not closed",
        "a part more",
        "huge",
    ],
)
def test_any_other_answer_is_one_line_saying_to_read_again(body, needle):
    with pytest.raises(FileDownloadError) as caught:
        take(body, b"b0undary", 13)
    message = str(caught.value)
    assert needle in message and "read the table again" in message and "\n" not in message
    assert caught.value.http_status == 502


def test_a_part_of_a_file_of_another_size_says_the_file_changed():
    with pytest.raises(FileDownloadError, match="changed after it was listed") as caught:
        take(multipart(size=SIZE + 1), b"b0undary", 50)
    assert caught.value.http_status == 400


def test_one_range_that_ends_early_is_an_error():
    with pytest.raises(FileDownloadError, match="before the last range"):
        take(DATA[10:4500], None, 100)


def test_the_boundary_and_a_content_range_are_read_as_servers_write_them():
    assert boundary_of("multipart/byteranges; boundary=abc") == b"abc"
    assert boundary_of('Multipart/ByteRanges;charset=x; BOUNDARY="a b"') == b"a b"
    assert boundary_of("multipart/byteranges") is None and boundary_of("application/octet-stream; boundary=x") is None
    assert content_range("bytes 0-9/100") == (0, 10, 100) and content_range(" BYTES 5-5/6") == (5, 6, 6)
    assert (
        content_range("bytes */100") is None and content_range("bytes 9-3/100") is None and content_range(None) is None
    )
