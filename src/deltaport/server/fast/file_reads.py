"""The server's own file URLs answered without the framework: GET and HEAD of ``/files/{key}/{path}``.

Recipients fetch data files in many requests (whole files, and column chunks as ``Range`` reads of
0.5–2 MiB): through the framework's routing, the sync route's thread hop and the file response's
per-chunk thread hops, each cost the server ~1.3 ms of CPU beyond its bytes, most of it in the
handing over between threads. This middleware takes the requests it reads exactly as the route
would and answers them on the event loop: :class:`~deltaport.server.sharing.files.FileAccess`
decides the file (every check of the route: signature, expiry, recipient, slice, IP access list,
the table's root; the download noted for the metrics and audit log), then the file goes out by
``sendfile`` where the server offers ASGI's ``http.response.zerocopysend``
(:mod:`~deltaport.server.fast.zerocopy`: ``deltaport serve`` on plain HTTP), else in pieces of up
to :data:`PIECE` bytes, each read on the loop when the page cache holds it (``RWF_NOWAIT``: a read
that would wait for the disk fails at once) and in a worker thread when not. The checks' few
``stat`` calls of the table's directory run on the loop too: cheap once the table's directory
entries are cached, as they are for a table being read.

It takes: GET or HEAD, no root path, no ``If-Range``, and no ``Range`` header or one of up to
:data:`MAX_RANGES` ranges, each of the form ``START-END``, ``START-`` or ``-SUFFIX``; several are
answered as ``multipart/byteranges`` (ranges that overlap or touch merged, as the route merges
them). The route answers anything else (a malformed range, ``If-Range``, more ranges). What it
answers is what the route answers (status, headers, body but for a multipart answer's random
boundary, errors as the protocol's JSON, 416 with ``Content-Range: bytes */size``), and a request it
answers gets the scope's ``route`` and ``path_params`` as routing would set them, for the middleware
outside it (access log, metrics, audit).

Fast form of: the ``GET``/``HEAD /files/{key}/{path}`` routes (sharing/files.py). Held equal by:
tests/server/fast/test_file_reads.py.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import secrets
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from deltaport.errors import DeltaportError
from deltaport.server import errors
from deltaport.server.fast.zerocopy import EXTENSION
from deltaport.server.sharing.files import range_error

#: The scope key of a request :meth:`FileReads.take` has read already (the app's front, app.py).
TAKEN = "deltaport.file_read"
#: The most one read (and one ``send``) carries: fewer, larger pieces cost less per byte.
PIECE = 4 << 20
#: A request's byte ranges: None for the whole file, else each (first, last) as given (either may be None).
Span = tuple[tuple[int | None, int | None], ...] | None
#: A piece of an answer's body: bytes as they are, or the bytes [start, end) of the file.
Segment = bytes | tuple[int, int]
#: The most ranges one request may ask for (the route's limit; it answers more with the whole file).
MAX_RANGES = 100
#: The boundary of this process's ``multipart/byteranges`` answers: random, drawn once. Python
#: clients (``http.client``, so urllib3 and requests too) compile a regular expression of each
#: answer's boundary while parsing its headers, about 0.7 ms of CPU under the GIL, and cache it by
#: pattern: one boundary a process makes that a cache hit after its first answer. Parts are sent
#: with their ``Content-Range``, and a boundary fixed per process is as common (nginx counts them).
BOUNDARY = secrets.token_hex(13)
#: Decides the file a request of an ASGI scope reads (``FileAccess.file_for``), or raises.
Decide = Callable[[Mapping[str, Any]], tuple[Path, os.stat_result]]

_RANGE = re.compile(r"\s*(\d*)\s*-\s*(\d*)\s*")
#: The threads that decide, open and read files (started as needed; shared by the apps of a process).
READERS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="deltaport-file-read")
#: Reads that fail rather than wait for the disk (Linux 4.14+), else None.
_NOWAIT = getattr(os, "RWF_NOWAIT", None) if hasattr(os, "preadv") else None


class FileReads:
    """Pure ASGI middleware answering GET and HEAD of the server's own file URLs directly."""

    def __init__(self, app, *, prefix: str, decide: Decide, routes: Mapping[str, object] | None = None) -> None:
        self.app = app
        self.decide = decide
        self.routes = dict(routes or {})  # method -> the route it stands in for
        self.pattern = re.compile(re.escape(prefix) + r"/files/([^/]+)/(.*)", re.DOTALL)

    def serves(self, path: str) -> bool:
        """Whether ``path`` is one of the server's file URLs (answered here when :meth:`take` says so)."""
        return self.pattern.fullmatch(path) is not None

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
        head, fd, body = opened
        if fd is None:
            await send(head)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif EXTENSION in (scope.get("extensions") or ()):
            await _send_zero_copy(head, fd, body, send)
        else:
            await _send_pieces(head, fd, body, receive, send)

    def _open(self, scope, span: Span) -> Response | tuple[dict[str, Any], int | None, list[Segment]]:
        """The file decided; its answer's start message, and for a GET the open file and the body
        to send. An error response when ``span`` asks for no byte of it, or not for bytes."""
        full, info = self.decide(scope)
        size = info.st_size
        headers = file_headers(info)
        status, body = 200, list[Segment]([(0, size)])
        if span is not None:
            bounds = _all_bounds(span, size)
            if isinstance(bounds, int):
                return range_error(scope, bounds, size)
            status, body = 206, _ranged(headers, bounds, size)
        head = {"type": "http.response.start", "status": status, "headers": headers}
        if scope["method"] == "HEAD":
            return head, None, body
        return head, os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), body


def _ranged(headers: list[tuple[bytes, bytes]], bounds: list[tuple[int, int]], size: int) -> list[Segment]:
    """The body of a 206 answer of ``bounds`` (changing ``headers`` to match): the one range, or
    each range in a part of ``multipart/byteranges`` as the route writes them."""
    if len(bounds) == 1:
        (start, end) = bounds[0]
        headers[2] = (b"content-length", str(end - start).encode())
        headers.append((b"content-range", f"bytes {start}-{end - 1}/{size}".encode()))
        return [(start, end)]
    boundary = BOUNDARY
    kind = headers[0][1].decode("latin-1")
    body: list[Segment] = []
    for i, (start, end) in enumerate(bounds):
        before = "\r\n" if i else ""  # the end of the part before
        part = f"{before}--{boundary}\r\nContent-Type: {kind}\r\nContent-Range: bytes {start}-{end - 1}/{size}\r\n\r\n"
        body += [part.encode("latin-1"), (start, end)]
    body.append(f"\r\n--{boundary}--".encode("latin-1"))
    headers[0] = (b"content-type", f"multipart/byteranges; boundary={boundary}".encode())
    length = sum(len(b) if isinstance(b, bytes) else b[1] - b[0] for b in body)
    headers[2] = (b"content-length", str(length).encode())
    return body


async def _send_pieces(head: dict[str, Any], fd: int, body: list[Segment], receive, send) -> None:
    """Send the response's ``head``, then ``body``: its bytes as they are and its file ranges from
    the open file ``fd`` in pieces of up to :data:`PIECE` bytes (read by :func:`_cached`, else in a
    worker thread); stop early when the client goes away. Closes ``fd`` once no read of it is
    pending."""
    gone: asyncio.Future[None] | None = None
    reading: Future[bytes] | None = None
    rest = body[::-1]  # popped from the end
    try:
        while rest:
            segment = rest.pop()
            if isinstance(segment, bytes):
                piece: bytes | bytearray = segment
            else:
                offset, end = segment
                size = min(PIECE, end - offset)
                cached = _cached(fd, size, offset)
                if cached is None:
                    reading = READERS.submit(os.pread, fd, size, offset)
                    cached = await asyncio.wrap_future(reading)
                    reading = None
                if len(cached) < size:
                    raise RuntimeError("the file is shorter than its size when it was opened")
                piece = cached
                if offset + size < end:
                    rest.append((offset + size, end))
            if head:
                await send(head)
                head = {}
            more = bool(rest)
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


async def _send_zero_copy(head: dict[str, Any], fd: int, body: list[Segment], send) -> None:
    """Send the response's ``head``, then ``body``: its bytes as they are and its file ranges by the
    server's ``sendfile`` (:mod:`~deltaport.server.fast.zerocopy`). Closes ``fd``."""
    try:
        await send(head)
        for i, segment in enumerate(body, 1):
            more = i < len(body)
            if isinstance(segment, bytes):
                await send({"type": "http.response.body", "body": segment, "more_body": more})
            else:
                start, end = segment
                await send({"type": EXTENSION, "file": fd, "offset": start, "count": end - start, "more_body": more})
    finally:
        os.close(fd)


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
            if seen:
                return None
            found, seen = _ranges(value.decode("latin-1")), True
            if found is None:
                return None
        elif name == b"if-range":
            return None
    return (found,)


def _ranges(value: str) -> Span:
    """The ranges of a ``Range`` header's value; None when one is not ``START-END``, ``START-`` or
    ``-SUFFIX`` of bytes, or when it asks for more than :data:`MAX_RANGES`."""
    if not value.startswith("bytes="):
        return None
    parts = value[6:].split(",")
    if len(parts) > MAX_RANGES:
        return None
    found = []
    for part in parts:
        match = _RANGE.fullmatch(part)
        if match is None or match.group(1) == match.group(2) == "":
            return None
        first, last = match.groups()
        found.append((int(first) if first else None, int(last) if last else None))
    return tuple(found)


def _all_bounds(span: tuple[tuple[int | None, int | None], ...], size: int) -> list[tuple[int, int]] | int:
    """[start, end) of each range ``span`` asks for, in order, those that overlap or touch merged
    (as the route reads several); else the status of the refusal (see :func:`_bounds`): 416 when
    one starts outside the file, else 400 when one ends before it starts."""
    bounds = [_bounds(one, size) for one in span]
    refusals = [b for b in bounds if isinstance(b, int)]
    if refusals:
        return 416 if 416 in refusals else 400
    ordered = sorted(b for b in bounds if not isinstance(b, int))
    merged = ordered[:1]
    for start, end in ordered[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


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
