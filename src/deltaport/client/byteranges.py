"""The body of one answer to several byte ranges asked in one GET, written to each range's writer.

A server that serves several ranges at once answers ``206`` with ``multipart/byteranges``: each
part a delimiter line, headers (its ``Content-Range`` among them), a blank line and the range's
bytes, then a closing delimiter (RFC 9110, 14.6). A server may also answer the ranges as one
range that spans them all. :class:`RangeParts` takes the body as it comes, in pieces of any size,
and passes each asked range's bytes to its writer: the bytes of the body itself, without holding
more than one part's headers (at most :data:`HEAD_MAX` bytes) in memory.

Each part must be the range asked, in the order asked, of a file of the listed size; anything
else is a :class:`~deltaport.client.errors.FileDownloadError` that says to read the table again
(the file changed, or the storage answered other bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from deltaport.client.errors import FileDownloadError

__all__ = ["HEAD_MAX", "RangeParts", "boundary_of", "changed_size", "content_range", "overlaps", "span_at", "splices"]

T = TypeVar("T")

#: The most bytes one part's delimiter and headers may take.
HEAD_MAX = 4096


def changed_size(file_id: str, got: str, size: int) -> FileDownloadError:
    """The error for a range of a file of ``got`` bytes where the listing said ``size``."""
    return FileDownloadError(
        f"file {file_id}: the storage answered a range of a file of {got} bytes where the server's "
        f"answer says {size}: the file changed after it was listed; read the table again",
        http_status=400,
        file_id=file_id,
    )


def overlaps(view: memoryview, pos: int, spans: Iterable[tuple[int, int, T]]) -> Iterator[tuple[T, int, memoryview]]:
    """(item, file offset, bytes) of each of ``spans`` = [(start, end, item), …] that ``view``,
    the file's bytes from ``pos``, overlaps: the part of ``view`` inside the span."""
    end = pos + len(view)
    for start, stop, item in spans:
        lo, hi = max(start, pos), min(stop, end)
        if lo < hi:
            yield item, lo, view[lo - pos : hi - pos]


def boundary_of(content_type: str) -> bytes | None:
    """The boundary of a ``multipart/byteranges`` content type; None for any other type."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/byteranges":
        return None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            return value.strip().strip('"').encode("latin-1")
    return None


def content_range(header: str | None) -> tuple[int, int, int] | None:
    """``bytes FIRST-LAST/TOTAL`` as (start, end, total) with ``end`` exclusive; None otherwise."""
    unit, _, rest = (header or "").strip().partition(" ")
    span, _, total = rest.partition("/")
    first, _, last = span.partition("-")
    try:
        start, end, size = int(first), int(last) + 1, int(total)
    except ValueError:
        return None
    return (start, end, size) if unit.lower() == "bytes" and 0 <= start < end else None


def span_at(spans: Iterable[tuple[int, int, T]], pos: int) -> tuple[int, int, T] | None:
    """The one of ``spans`` = [(start, end, item), …] that holds the file offset ``pos``, if any."""
    return next((span for span in spans if span[0] <= pos < span[1]), None)


def _splice_into(out: Any, move: Any, limit: int) -> int:
    return out.splice(move, limit) if splices(out) else 0


def splices(out: Any) -> bool:
    """Whether ``out`` can take bytes straight from a socket: it says so by a ``splices()``."""
    offers = getattr(out, "splices", None)
    return bool(offers is not None and offers())


class RangeParts:
    """A writer for the body of one GET of ``parts`` = [(start, end, writer), …] (ascending and
    apart) of a file of ``size`` bytes, once :meth:`expect` said what the answer's headers promise."""

    def __init__(self, parts: Sequence[tuple[int, int, Any]], size: int, file_id: str) -> None:
        self.parts, self.size, self.file_id = list(parts), size, file_id
        self.delimiter: bytes | None = None
        self.head = bytearray()  # the delimiter and headers of the part to come, as they arrive
        self.index = 0  # the part being written (multipart)
        self.left = 0  # its bytes still to come
        self.pos = self.parts[0][0]  # the file offset of the next byte (one range)

    def expect(self, boundary: bytes | None) -> None:
        """The body is ``multipart/byteranges`` with ``boundary``; else (None) one range from the
        first part's start to the last one's end."""
        self.delimiter = None if boundary is None else b"--" + boundary

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self.delimiter is None:
            self._spread(view)
            return len(view)
        while len(view):
            if self.left:
                n = min(self.left, len(view))
                self.parts[self.index][2].write(view[:n])
                self.left, view = self.left - n, view[n:]
                self.index += 0 if self.left else 1
            elif self.index < len(self.parts):
                view = self._headers(view)
            else:  # the closing delimiter, and what may follow it
                self.head += view[: HEAD_MAX - len(self.head)]
                break
        return len(data)

    def splices(self) -> bool:
        """Whether a range's writer can take its bytes straight from the socket (see :meth:`splice`)."""
        return any(splices(out) for _, _, out in self.parts)

    def splice(self, move: Any, limit: int) -> int:
        """Let the writer of the range the body's next bytes belong to take up to ``limit`` of them
        with ``move`` (straight from the socket: :mod:`~deltaport.client.splicing`), if its
        ``splices()`` says it can; returns how many it took, 0 where they must be written (a
        part's head, the bytes between ranges, a writer that cannot)."""
        if self.delimiter is None:
            return self._splice_spanning(move, limit)
        if not self.left:
            return 0
        moved = _splice_into(self.parts[self.index][2], move, min(limit, self.left))
        self.left -= moved
        self.index += 0 if self.left else 1
        return moved

    def _splice_spanning(self, move: Any, limit: int) -> int:
        span = span_at(self.parts, self.pos)
        if span is None:  # between ranges: written, and dropped
            return 0
        moved = _splice_into(span[2], move, min(limit, span[1] - self.pos))
        self.pos += moved
        return moved

    def _spread(self, view: memoryview) -> None:
        """One range spanning the parts: each part's share of ``view`` to its writer."""
        for out, _, piece in overlaps(view, self.pos, self.parts):
            out.write(piece)
        self.pos += len(view)

    def _headers(self, view: memoryview) -> memoryview:
        """Take a part's delimiter and headers from the start of ``view``; the rest is its bytes."""
        had = len(self.head)
        self.head += view[: HEAD_MAX - had]
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) >= HEAD_MAX:
                raise self._error("a part's headers are longer than any server writes them")
            return view[len(view) :]
        head, self.head = bytes(self.head[:end]), bytearray()
        start, stop, _ = self.parts[self.index]
        self._check(head, start, stop)
        self.left = stop - start
        return view[end + 4 - had :]

    def _check(self, head: bytes, start: int, stop: int) -> None:
        assert self.delimiter is not None
        lines = head.split(b"\r\n")
        at = next((i for i, line in enumerate(lines) if line.rstrip() == self.delimiter), None)
        if at is None or (self.index and any(lines[:at])):  # only the first part may follow a preamble
            raise self._error("a part does not start with the answer's boundary")
        found = None
        for line in lines[at + 1 :]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-range":
                found = content_range(value.decode("latin-1"))
        if found is not None and found[2] != self.size:
            raise changed_size(self.file_id, str(found[2]), self.size)
        if found is None or found[:2] != (start, stop):
            raise self._error(f"a part is not bytes {start}-{stop - 1}, the range asked next")

    def finish(self) -> None:
        """Raises unless every part came whole (and a multipart answer closed)."""
        if self.delimiter is None:
            if self.pos != self.parts[-1][1]:
                raise self._error("the answer ended before the last range")
        elif self.index < len(self.parts):
            raise self._error("the answer ended before its last part")
        elif not bytes(self.head).lstrip(b"\r\n").startswith(self.delimiter + b"--"):
            raise self._error("the answer has more parts than were asked, or no closing boundary")

    def _error(self, what: str) -> FileDownloadError:
        return FileDownloadError(
            f"file {self.file_id}: the storage's answer to several ranges is not what was asked: {what}; "
            "read the table again",
            http_status=502,
            file_id=self.file_id,
        )
