"""The server's own file URLs answered without the framework: GET and HEAD of ``/files/{key}/{path}``.

Recipients fetch data files in many requests (whole files, and column chunks as ``Range`` reads of
0.5–2 MiB): through the framework's routing, the sync route's thread hop and the file response's
per-chunk thread hops, each cost the server ~1.3 ms of CPU beyond its bytes, most of it in the
handing over between threads. This middleware takes the requests it reads exactly as the route
would and answers them on the event loop: :class:`~deltaport.server.sharing.files.FileAccess`
decides the file (every check of the route: signature, expiry, recipient, slice, IP access list,
the table's root; the download noted for the metrics and audit log), then the file goes out in
pieces of up to :data:`PIECE` bytes, each read on the loop when the page cache holds it
(``RWF_NOWAIT``: a read that would wait for the disk fails at once) and in a worker thread when
not. The checks' few ``stat`` calls of the table's directory run on the loop too: cheap once the
table's directory entries are cached, as they are for a table being read.

It takes: GET or HEAD, no root path, no ``If-Range``, and no ``Range`` header or a single one of
the form ``bytes=START-END``, ``bytes=START-`` or ``bytes=-SUFFIX``; the route answers anything
else (multiple ranges, malformed ranges, ``If-Range``). What it answers is what the route answers
(status, headers, body, errors as the protocol's JSON, 416 with ``Content-Range: bytes */size``),
and a request it answers gets the scope's ``route`` and ``path_params`` as routing would set them,
for the middleware outside it (access log, metrics, audit).

Fast form of: the ``GET``/``HEAD /files/{key}/{path}`` routes (sharing/files.py). Held equal by:
tests/server/fast/test_file_reads.py.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from deltaport.errors import DeltaportError
from deltaport.server import errors
from deltaport.server.sharing.files import range_error

#: The scope key of a request :meth:`FileReads.take` has read already (the app's front, app.py).
TAKEN = "deltaport.file_read"
#: The most one read (and one ``send``) carries: fewer, larger pieces cost less per byte.
PIECE = 4 << 20
#: A request's byte range: None for the whole file, else (first, last) as given (either may be None).
Span = tuple[int | None, int | None] | None
#: Decides the file a request of an ASGI scope reads (``FileAccess.file_for``), or raises.
Decide = Callable[[Mapping[str, Any]], tuple[Path, os.stat_result]]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
#: The threads that decide, open and read files (started as needed; shared by the apps of a process).
_READERS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="deltaport-file-read")
#: Reads that fail rather than wait for the disk (Linux 4.14+), else None.
_NOWAIT = getattr(os, "RWF_NOWAIT", None) if hasattr(os, "preadv") else None


class FileReads:
    """Pure ASGI middleware answering GET and HEAD of the server's own file URLs directly."""

    def __init__(self, app, *, prefix: str, decide: Decide, routes: Mapping[str, object] | None = None) -> None:
        self.app = app
        self.decide = decide
        self.routes = dict(routes or {})  # method -> the route it stands in for
        self.pattern = re.compile(re.escape(prefix) + r"/files/([^/]+)/(.*)", re.DOTALL)

    def take(self, scope) -> tuple[Span] | None:
        """The byte range asked for (in a 1-tuple) when this middleware answers ``scope``, else None."""
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope.get("root_path"):
            return None
        match = self.pattern.fullmatch(scope["path"])
        if match is None:
            return None
        span = _span(scope["headers"])
        if span is not None:
            scope["path_params"] = {"key": match.group(1), "path": match.group(2)}
        return span

    async def __call__(self, scope, receive, send):
        taken = scope.pop(TAKEN, None) or self.take(scope)
        if taken is None:
            return await self.app(scope, receive, send)
        route = self.routes.get(scope["method"])
        if route is not None:
            scope["route"] = route
        try:
            opened = self._open(scope, taken[0])
        except DeltaportError as exc:
            opened = await errors.deltaport_error(Request(scope), exc)
        if isinstance(opened, Response):
            return await opened(scope, receive, send)
        head, fd, start, end = opened
        if fd is None:
            await send(head)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await _send_pieces(head, fd, start, end, receive, send)

    def _open(self, scope, span: Span) -> Response | tuple[dict[str, Any], int | None, int, int]:
        """The file decided; its answer's start message, and for a GET the open file and the bytes
        [start, end) of it to send. An error response when ``span`` asks for none of its bytes."""
        full, info = self.decide(scope)
        size = info.st_size
        headers = file_headers(info)
        status, start, end = 200, 0, size
        if span is not None:
            bounds = _bounds(span, size)
            if isinstance(bounds, int):
                return range_error(scope, bounds, size)
            status, (start, end) = 206, bounds
            headers[2] = (b"content-length", str(end - start).encode())
            headers.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
        head = {"type": "http.response.start", "status": status, "headers": headers}
        if scope["method"] == "HEAD":
            return head, None, start, end
        return head, os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), start, end


async def _send_pieces(head: dict[str, Any], fd: int, start: int, end: int, receive, send) -> None:
    """Send the response's ``head``, then the bytes [start, end) of the open file ``fd`` in pieces of
    up to :data:`PIECE` bytes (read by :func:`_cached`, else in a worker thread); stop early when the
    client goes away. Closes ``fd`` once no read of it is pending."""
    offset = start
    gone: asyncio.Future[None] | None = None
    reading: Future[bytes] | None = None
    try:
        while True:
            size = min(PIECE, end - offset)
            piece = _cached(fd, size, offset)
            if piece is None:
                reading = _READERS.submit(os.pread, fd, size, offset)
                piece = await asyncio.wrap_future(reading)
                reading = None
            if len(piece) < size:
                raise RuntimeError("the file is shorter than its size when it was opened")
            if head:
                await send(head)
                head = {}
            offset += size
            more = offset < end
            await send({"type": "http.response.body", "body": piece, "more_body": more})
            if not more:
                return
            if gone is None:
                gone = asyncio.ensure_future(_disconnect(receive))
            elif gone.done():
                return
    finally:
        if gone is not None:
            gone.cancel()
        if reading is None or reading.done():
            os.close(fd)
        else:  # a read still runs in its thread: the file is closed after it
            reading.add_done_callback(lambda _: os.close(fd))


def _cached(fd: int, size: int, offset: int) -> bytes | bytearray | None:
    """``size`` bytes of ``fd`` at ``offset`` read on the event loop when the page cache holds them
    all (``RWF_NOWAIT``: no wait for the disk), else None (a worker thread reads them)."""
    if not size:
        return b""
    if _NOWAIT is None:
        return None
    piece = bytearray(size)
    try:
        got = os.preadv(fd, [piece], offset, _NOWAIT)
    except OSError:  # not cached (EAGAIN), or no RWF_NOWAIT on this file system: the thread reads
        return None
    return piece if got == size else None


async def _disconnect(receive) -> None:
    """Returns once the client went away (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def file_headers(info: os.stat_result) -> list[tuple[bytes, bytes]]:
    """The headers of a whole file's answer, as the route's file response sends them."""
    return list(_file_headers(info.st_mtime, info.st_size))


@functools.lru_cache(maxsize=4096)
def _file_headers(mtime: float, size: int) -> tuple[tuple[bytes, bytes], ...]:
    etag = hashlib.md5(f"{mtime}-{size}".encode(), usedforsecurity=False).hexdigest()
    return (
        (b"content-type", b"application/octet-stream"),
        (b"accept-ranges", b"bytes"),
        (b"content-length", str(size).encode()),
        (b"last-modified", formatdate(mtime, usegmt=True).encode()),
        (b"etag", f'"{etag}"'.encode()),
    )


def _span(headers) -> tuple[Span] | None:
    """The ``Range`` of a request's headers (in a 1-tuple; None in it when none is asked), or None
    when the route should read them (an ``If-Range``, several ``Range`` headers, or one this module
    does not parse)."""
    found: Span = None
    seen = False
    for name, value in headers:
        if name == b"range":
            match = _RANGE.fullmatch(value.decode("latin-1"))
            if seen or match is None or match.group(1) == match.group(2) == "":
                return None
            seen = True
            first, last = match.groups()
            found = (int(first) if first else None, int(last) if last else None)
        elif name == b"if-range":
            return None
    return (found,)


def _bounds(span: tuple[int | None, int | None], size: int) -> tuple[int, int] | int:
    """[start, end) of a file of ``size`` bytes that ``span`` asks for, read as the route's file
    response reads it (an END past the file is the file's end); else the status of the refusal:
    416 when it starts outside the file, 400 when it ends before it starts."""
    first, last = span
    if first is None:
        assert last is not None
        start, end = max(size - last, 0), size
    else:
        start, end = first, (last + 1 if last is not None and last < size else size)
    if not 0 <= start < size:
        return 416
    return (start, end) if start < end else 400
