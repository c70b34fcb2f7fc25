"""File bodies sent by ``sendfile(2)``: the ASGI ``http.response.zerocopysend`` extension on uvicorn.

A file answer sent as ``http.response.body`` messages costs the server two copies of every byte
(page cache to a buffer, buffer to the socket) and zeroing the buffer. ``sendfile`` hands the
socket the page cache's pages instead. uvicorn does not offer the extension, so the class
:func:`protocol_class` makes is its httptools protocol with it added: on Linux, for plain HTTP (TLS
encrypts in the process, so it cannot), each request for a file URL gets in its scope
``scope["extensions"]["http.response.zerocopysend"]``, and its ``send`` (:class:`ZeroCopySend`)
takes the extension's message (the ASGI spec's fields: ``file``, an fd or an object with
``fileno()``; ``offset``; ``count``; ``more_body``) besides the others.

How a response's body goes out once it has sent a file range this way:

- the transport's own buffer is emptied first (the response's head went through it); from then on
  every body byte of the response goes to the socket here, so that a multipart answer's part
  heads never queue behind the transport again;
- ``sendfile`` runs on the event loop when the page cache holds the whole range (``cachestat(2)``,
  Linux 6.5+), else in a worker thread: the loop never waits for the disk;
- the response sends on its own duplicate of the socket's descriptor, taken on the event loop when
  its body first goes direct and closed when the response ends: the transport closes its own
  descriptor when the client goes away, and the kernel may give that number to the next
  connection at once, so a send still pending (in a thread, or after a wait) must never use it;
  the duplicate keeps the socket this response was for;
- the socket is non-blocking: each call sends what it takes, and while it is full the loop waits
  for it to be writable;
- a client gone mid-answer ends the body quietly, as uvicorn's own ``send`` does; the bytes are
  counted against the response's ``Content-Length`` as uvicorn counts its own bodies.

The extension leans on uvicorn's request cycle (:data:`_CYCLE_FIELDS`): where the cycle lacks one,
no request is offered it. Other requests (the API's) are not offered it, so that they pay nothing
for it: wrapping every request's ``send`` cost /version about 5 % of its requests/s.

Fast form of: file bodies sent as ``http.response.body`` pieces (file_reads.py's own, on any
server). Held equal by: tests/server/fast/test_file_reads.py.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import platform
import sys
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

#: The ASGI extension's name (scope key) and message type.
EXTENSION = "http.response.zerocopysend"
#: What a request cycle must have for the extension to count its body (uvicorn's httptools cycle).
_CYCLE_FIELDS = (
    "transport",
    "flow",
    "scope",
    "disconnected",
    "expected_content_length",
    "response_started",
    "response_complete",
    "chunked_encoding",
)
#: How long one wait for the socket lasts before the client's presence is checked again.
_WAIT = 1.0
#: ``cachestat``'s number where the architecture uses the common table (x86_64, arm64).
_CACHESTAT = 451 if platform.machine() in ("x86_64", "aarch64", "arm64") else None
_PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096


def protocol_class(readers: Executor, offered: Callable[[str], bool]) -> type | None:
    """uvicorn's httptools protocol offering the extension to requests whose path ``offered`` takes
    (the others pay nothing for it); ``sendfile`` calls that may read the disk run in ``readers``.
    None where it cannot be offered: not Linux, or no httptools."""
    if not sys.platform.startswith("linux") or not hasattr(os, "sendfile"):
        return None
    try:
        from uvicorn.protocols.http import httptools_impl
    except ImportError:  # uvicorn without httptools: its h11 protocol, without the extension
        return None

    class ZeroCopyProtocol(httptools_impl.HttpToolsProtocol):
        """uvicorn's httptools protocol; each plain-HTTP request's ``send`` also takes
        ``http.response.zerocopysend``."""

        #: Whether uvicorn's request cycle has what the extension counts on (known from the first).
        fits: bool | None = None

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            if offered(cycle.scope["path"]) and self.transport.get_extra_info("sslcontext") is None:
                if self.fits is None:
                    type(self).fits = all(hasattr(cycle, name) for name in _CYCLE_FIELDS)
                if self.fits:
                    cycle.scope.setdefault("extensions", {})[EXTENSION] = {}
                    cycle.send = ZeroCopySend(cycle, cycle.send, readers)
            super()._start_asgi_task(cycle, app)

    return ZeroCopyProtocol


class ZeroCopySend:
    """A request cycle's ``send``, taking the extension's messages as well as the others."""

    def __init__(self, cycle: Any, send: Callable[[dict[str, Any]], Awaitable[None]], readers: Executor) -> None:
        self.cycle, self.send, self.readers = cycle, send, readers
        self.direct = False  # the body goes to the socket here (since a file range did)
        self.sock: int | None = None  # this response's own descriptor of its socket, while direct
        self._release: Callable[[], Any] = lambda: None

    async def __call__(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == EXTENSION:
            if not self.cycle.response_started or self.cycle.response_complete or self.cycle.chunked_encoding:
                raise RuntimeError(f"'{EXTENSION}' is only sent after the start of a response with a Content-Length")
            file = message["file"]
            fd = file if isinstance(file, int) else file.fileno()
            offset, count = message.get("offset", 0), message["count"]
            await self._body(count, lambda sock: self._sendfile(sock, fd, offset, count), message)
        elif kind == "http.response.body" and self.direct and not self.cycle.response_complete:
            body = memoryview(message.get("body", b"")).cast("B")
            await self._body(len(body), lambda sock: self._write(sock, body), message)
        else:
            await self.send(message)

    async def _body(self, count: int, write: Callable[[int], Awaitable[None]], message: dict[str, Any]) -> None:
        """Write ``count`` body bytes with ``write``(the socket's fd), then let uvicorn close the
        message (``more_body``) as it would its own."""
        cycle, more = self.cycle, message.get("more_body", False)
        try:
            if count and cycle.scope["method"] != "HEAD" and not cycle.disconnected:
                if count > cycle.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                if not self.direct:
                    await self._drained()
                    self.direct = True
                sock = self._socket()
                if sock is not None:
                    await write(sock)
                cycle.expected_content_length -= count
            await self.send({"type": "http.response.body", "body": b"", "more_body": more})
        except BaseException:
            self._close_socket()
            raise
        if not more:
            self._close_socket()

    def _close_socket(self) -> None:
        """Close this response's descriptor (a later send, if any, takes a new one)."""
        self._release()
        self.sock = None

    def _socket(self) -> int | None:
        """This response's own descriptor of its socket (taken now, on the loop, while the transport
        still holds the socket); None once the client went away."""
        if self.sock is None:
            transport = self.cycle.transport
            if self.cycle.disconnected or transport.is_closing():
                return None
            self.sock = os.dup(transport.get_extra_info("socket").fileno())
            self._release = weakref.finalize(self, os.close, self.sock)  # once, at the end or when dropped
        return None if self.cycle.disconnected else self.sock

    async def _sendfile(self, sock: int, fd: int, offset: int, count: int) -> None:
        cached = resident(fd, offset, count)
        loop = asyncio.get_running_loop()

        async def send(done: int) -> int:
            if cached:  # no wait for the disk: on the loop
                return os.sendfile(sock, fd, offset + done, count - done)
            call = loop.run_in_executor(self.readers, os.sendfile, sock, fd, offset + done, count - done)
            return await _finished(call)

        await self._pump(sock, send, count)

    async def _write(self, sock: int, body: memoryview) -> None:
        async def write(done: int) -> int:
            return os.write(sock, body[done:])

        await self._pump(sock, write, len(body))

    async def _pump(self, sock: int, step: Callable[[int], Awaitable[int]], count: int) -> None:
        """Await ``step``(bytes sent so far), which sends some of the rest on the non-blocking
        socket ``sock``, until ``count`` bytes went or the client did."""
        done = 0
        while done < count and not self.cycle.disconnected:
            try:
                sent = await step(done)
            except BlockingIOError:
                await _writable(sock)
                continue
            except (BrokenPipeError, ConnectionResetError):
                return
            if not sent:
                raise RuntimeError("the file is shorter than its size when it was opened")
            done += sent

    async def _drained(self) -> None:
        """Returns once the transport has written all it holds (or the client went away): with no
        room above nothing, the transport pauses the protocol until its buffer is empty."""
        cycle = self.cycle
        transport = cycle.transport
        if not transport.get_write_buffer_size():
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0)
        try:
            while transport.get_write_buffer_size() and not cycle.disconnected:
                if cycle.flow.write_paused:
                    await cycle.flow.drain()
                else:  # a transport that did not pause (a set event returns at once): look again soon
                    await asyncio.sleep(0.001)
        finally:
            transport.set_write_buffer_limits(high, low)


async def _writable(sock: int) -> None:
    """Returns once the socket ``sock`` is writable, or after :data:`_WAIT` seconds."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(sock, wake)
    try:
        await asyncio.wait_for(ready, _WAIT)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_writer(sock)


async def _finished(call: asyncio.Future[int]) -> int:
    """The result of a call running in a thread; a task cancelled meanwhile still waits for the call
    to end (it uses descriptors the caller then closes)."""
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        await asyncio.wait([call])
        raise


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


_syscall: Any = None


def resident(fd: int, offset: int, count: int) -> bool:
    """Whether the page cache holds every byte of ``fd`` in [offset, offset + count); False where
    that cannot be told (no ``cachestat``: before Linux 6.5, or another architecture)."""
    global _syscall
    if _CACHESTAT is None or _syscall is False:
        return False
    if _syscall is None:
        _syscall = ctypes.CDLL(None, use_errno=True).syscall
    stat = _CacheStat()
    if _syscall(_CACHESTAT, fd, ctypes.byref(_Range(offset, count)), ctypes.byref(stat), 0) != 0:
        if ctypes.get_errno() == errno.ENOSYS:  # not this kernel
            _syscall = False
        return False
    pages = (offset + count + _PAGE - 1) // _PAGE - offset // _PAGE
    return stat.cache >= pages
