"""The one way the recipient side fetches shared files: connections, ranges, retries, errors.

Every reader goes through here: the connector (:mod:`deltaport.client.reader` and
:mod:`deltaport.client.fetch`), the staged Spark read (:mod:`deltaport.spark.fetching`, also
inside executors, so nothing heavy is imported here) and the Python data source.

- :class:`ConnectionPool`: keep-alive ``http.client`` connections per (scheme, host, port),
  shared between threads; a kept-alive connection the peer had closed is replaced once.
  :class:`~deltaport.client.transport.FileTransport` puts the httpx API on top of it.
- :func:`download` (a whole file or a ``Range: bytes=a-b`` of it, through an httpx client),
  :func:`copy_url` (a whole file streamed into a writer in large chunks, for the staging cache)
  and :func:`copy_range` (a byte range of a file streamed alike, its ``Content-Range`` checked
  against the file's listed size; a store that ignores ``Range`` sends the whole file, and says
  so by its status), and :func:`copy_ranges` (several ranges in one GET, from a server that
  answers them together: deltaport's own; the pool remembers a host that does not). A range's
  writer that can takes its bytes straight from the socket (:mod:`~deltaport.client.splicing`).
- :func:`retrying`: the :class:`~deltaport.client.retry.RetryPolicy` applied to one file:
  HTTP 429/5xx and connection errors are retried with backoff (``Retry-After`` honoured).
- :func:`status_error`: a storage's HTTP status as the error to raise. A refused URL (401/403,
  or a 400 that says the signature expired) is :class:`UrlExpired`, so that the caller renews it
  (:mod:`deltaport.client.renewal`).

URLs are passed byte for byte (presigned signatures depend on their exact encoding) and never
appear whole in messages or logs: only without their query string.
"""

from __future__ import annotations

import http.client
import io
import ssl
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from deltaport.client.byteranges import RangeParts, boundary_of, changed_size, content_range, splices
from deltaport.client.errors import ConnectionFailed, FileDownloadError, UrlExpired
from deltaport.client.retry import RetryPolicy, announce_retries, is_retryable_status
from deltaport.client.splicing import Move, SocketFailed, mover

__all__ = [
    "DEFAULT_DOWNLOAD_RETRY",
    "ConnectionPool",
    "RangesApart",
    "Transient",
    "copy_range",
    "copy_ranges",
    "copy_url",
    "describe",
    "download",
    "download_into",
    "retrying",
    "status_error",
]

T = TypeVar("T")
B = TypeVar("B")

DEFAULT_DOWNLOAD_RETRY = RetryPolicy(max_retries=5, initial_backoff=0.2, max_backoff=10.0)
#: The streamed bodies' piece: the socket read fills it, then the writer copies it out. At 1 MiB
#: it is still in the core's cache when copied (staging over loopback, both sizes in turn: 1.33 GB
#: in 1.56 s and 1.95 CPU-s of the fetching process, against 1.97 s and 2.72 CPU-s at 8 MiB;
#: 751 MB of column chunks in 0.66 s against 0.71 s). 256 and 512 KiB cost more in calls.
CHUNK = 1 << 20
#: The most a spliced body's ordinary reads take at once: the parts' heads, and what ``http.client``
#: read ahead with them. At least its reader's buffer, so that one read empties it.
_DRAIN = max(1 << 16, io.DEFAULT_BUFFER_SIZE)
_EXPIRED_MARKERS = (b"expired", b"ExpiredToken", b"AuthenticationFailed", b"SignatureDoesNotMatch")
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
Key = tuple[str, str, int]


_buffers = threading.local()


def _chunk_buffer() -> memoryview:
    """This thread's buffer of :data:`CHUNK` bytes for streamed bodies: reused, so a large body
    costs no fresh pages (the kernel zeroes every page of a new large allocation). Writers given
    a slice of it must copy what they keep (files and ``BytesIO`` do)."""
    view = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(CHUNK))
    return view


def describe(url: str) -> str:
    """A URL without its query string (signatures stay out of messages and logs)."""
    return url.split("?", 1)[0]


# --- errors -------------------------------------------------------------------------------------------


def status_error(status: int, body: bytes, *, url: str, file_id: str | None = None) -> FileDownloadError:
    """The error for a storage's answer ``status`` (not 200/206) to a GET of ``url``."""
    name = f"file {file_id}" if file_id else describe(url)
    if status in (401, 403) or (status == 400 and any(m in body for m in _EXPIRED_MARKERS)):
        return UrlExpired(
            f"the storage refused the presigned URL of {name} (HTTP {status}): it expired or was "
            "revoked; the file list must be refreshed",
            http_status=status,
            file_id=file_id,
        )
    if status == 404:
        return FileDownloadError(
            f"{name} was not found in storage (HTTP 404): the table may have been vacuumed after "
            "the file list was made; read the table again",
            http_status=404,
            file_id=file_id,
        )
    text = " ".join(body[:300].decode("utf-8", "replace").split())[:200]
    return FileDownloadError(
        f"downloading {name} failed with HTTP {status}: {text}", http_status=status, file_id=file_id
    )


def network_error(exc: BaseException, where: str) -> httpx.TransportError:
    """A socket or ``http.client`` failure on an open connection as httpx's exception."""
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(f"reading from {where} timed out")
    if isinstance(exc, _STALE):
        return httpx.RemoteProtocolError(f"the server closed the connection: {exc}")
    return httpx.ReadError(f"{type(exc).__name__}: {exc}")


class Transient(Exception):
    """A failure worth another attempt: HTTP 429/5xx (``status``, ``headers``, ``body``) or a
    connection error (``status`` None)."""

    def __init__(self, reason: str, *, status: int | None = None, headers: Any = None, body: bytes = b"") -> None:
        super().__init__(reason)
        self.status = status
        self.headers = headers
        self.body = body


def retrying(fn: Callable[[], T], policy: RetryPolicy, *, what: str, url: str, file_id: str | None = None) -> T:
    """Call ``fn`` until it does not raise :class:`Transient` or ``policy``'s retries run out.

    Out of retries, a status raises its :func:`status_error` and a connection error
    :class:`ConnectionFailed`. The first retry is announced once at INFO (``what`` names the
    file, never its URL's query string).
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Transient as exc:
            if attempt >= policy.max_retries:
                if exc.status is not None:
                    raise status_error(exc.status, exc.body, url=url, file_id=file_id) from None
                raise ConnectionFailed(
                    f"could not download {what} after {attempt + 1} attempts ({exc}): check that the "
                    "sharing server and its storage are reachable"
                ) from None
            response = httpx.Response(exc.status, headers=exc.headers) if exc.status is not None else None
            wait = policy.delay(attempt, response)
            if attempt == 0:
                announce_retries(policy, f"the download of {what}", str(exc), wait)
            policy.sleep(wait)
            attempt += 1


# --- connections ------------------------------------------------------------------------------------


def _ssl_context() -> ssl.SSLContext:
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()


class ConnectionPool:
    """Keep-alive ``http.client`` connections per (scheme, host, port), safe to share between threads.

    :meth:`send` returns a connection with its response headers read; the caller reads the body
    and hands the connection back with :meth:`release` (or closes it on a failure).
    """

    def __init__(
        self,
        *,
        timeout: float = 120.0,
        connect_timeout: float = 30.0,
        max_idle_per_host: int = 32,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle_per_host = max_idle_per_host
        self._ssl = ssl_context
        self._idle: dict[Key, list[http.client.HTTPConnection]] = defaultdict(list)
        self._lock = threading.Lock()
        self._ranges_apart: set[Key] = set()  # hosts that answer several ranges otherwise than together
        self._proxies = urllib.request.getproxies_environment()

    def proxied(self, scheme: str, host: str) -> bool:
        """Whether the environment configures a proxy for this host (the pool then does not apply)."""
        if not self._proxies or (scheme not in self._proxies and "all" not in self._proxies):
            return False
        return not urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]  # in the module, not its stubs
            host, self._proxies
        )

    def serves_ranges_together(self, key: Key) -> bool:
        """Whether several ranges may be asked of ``key`` in one GET (until it answered otherwise)."""
        return key not in self._ranges_apart

    def ranges_apart(self, key: Key) -> None:
        """``key`` answered several ranges otherwise than together: ask it for one range at a time."""
        self._ranges_apart.add(key)

    def _new(self, key: Key) -> http.client.HTTPConnection:
        scheme, host, port = key
        if scheme == "https":
            if self._ssl is None:
                self._ssl = _ssl_context()
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=self.connect_timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        conn.sock.settimeout(self.timeout)
        return conn

    def _take(self, key: Key) -> http.client.HTTPConnection | None:
        with self._lock:
            idle = self._idle[key]
            return idle.pop() if idle else None

    def release(self, key: Key, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Hand back ``conn`` once ``response``'s body was read (closed if the peer closes it)."""
        if response.will_close:
            conn.close()
            return
        with self._lock:
            idle = self._idle[key]
            if len(idle) < self.max_idle_per_host:
                idle.append(conn)
                return
        conn.close()

    def send(
        self, method: str, key: Key, target: str, headers: list[tuple[str, str]], body: bytes | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request to ``key`` = (scheme, host, port) for ``target`` (path and query, as given);
        raises httpx's connection errors."""
        conn = self._take(key)
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._new(key)
            try:
                conn.putrequest(method, target, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                if body is not None:
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                return conn, conn.getresponse()
            except _STALE as exc:
                conn.close()
                if reused:  # a kept-alive connection the server had closed: once more on a new one
                    conn, reused = None, False
                    continue
                raise network_error(exc, f"{key[1]}:{key[2]}") from exc
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                raise network_error(exc, f"{key[1]}:{key[2]}") from exc

    def close(self) -> None:
        with self._lock:
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()


def _key_and_target(url: str) -> tuple[Key, str]:
    parts = urlsplit(url)
    scheme = parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    return (scheme, parts.hostname or "", port), parts.path + (f"?{parts.query}" if parts.query else "")


# --- GETs -------------------------------------------------------------------------------------------


def _transient_status(status: int, headers: Any, body: bytes) -> Transient:
    return Transient(f"HTTP {status}", status=status, headers=headers, body=body)


def download(
    url: str,
    http: httpx.Client,
    *,
    byte_range: tuple[int, int] | None = None,
    retry: RetryPolicy = DEFAULT_DOWNLOAD_RETRY,
    file_id: str | None = None,
) -> bytes:
    """GET ``url`` (or ``byte_range`` = (offset, length) of it, as ``Range: bytes=a-b``) with retries.

    A store that ignores ``Range`` sends the whole file: the range is cut out of it. The URL's
    expiration time is not checked here: the storage decides (the client's clock may differ
    from the server's).
    """
    headers = {}
    if byte_range is not None:
        offset, length = byte_range
        headers["Range"] = f"bytes={offset}-{offset + length - 1}"

    def once() -> bytes:
        try:
            response = http.get(url, headers=headers)
            response.read()
        except httpx.TransportError as exc:
            raise Transient(f"{type(exc).__name__}: {exc or 'connection error'}") from exc
        status = response.status_code
        if status in (200, 206):
            data = response.content
            if byte_range is not None and status == 200:  # the store ignored Range
                data = data[byte_range[0] : byte_range[0] + byte_range[1]]
            return data
        if is_retryable_status(status):
            raise _transient_status(status, response.headers, response.content)
        raise status_error(status, response.content, url=url, file_id=file_id)

    return retrying(once, retry, what=f"file {file_id}" if file_id else describe(url), url=url, file_id=file_id)


def download_into(
    url: str,
    pool: ConnectionPool,
    allocate: Callable[[int], B],
    *,
    retry: RetryPolicy = DEFAULT_DOWNLOAD_RETRY,
    file_id: str | None = None,
) -> B | None:
    """GET the whole file at ``url`` through ``pool`` straight into ``allocate(length)``, a writable
    buffer (Arrow's memory pool hands back memory already paged in, where a new ``bytes`` of each
    file would fault in every page), with :func:`download`'s retries and errors. None when the
    storage redirects: :func:`download` follows redirects."""

    def once() -> B | None:
        response, out, body = _exchange(url, pool, (), (200,), lambda r, _: _read_into(r, allocate))
        if out is not None or 300 <= response.status < 400:
            return out
        raise _refusal(response, body, url, file_id)

    return retrying(once, retry, what=f"file {file_id}" if file_id else describe(url), url=url, file_id=file_id)


def _read_into(response: http.client.HTTPResponse, allocate: Callable[[int], B]) -> B:
    if response.length is None:  # no Content-Length (chunked): read it all, then copy
        body = response.read()
        out = allocate(len(body))
        memoryview(out).cast("B")[:] = body  # type: ignore[arg-type]  # B is a writable buffer
        return out
    out = allocate(response.length)
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    done = 0
    while done < len(view):
        n = response.readinto(view[done:])
        if not n:
            raise http.client.IncompleteRead(b"", len(view) - done)
        done += n
    return out


def _copy_via_proxy(
    url: str, out: Any, file_id: str, timeout: float, span: tuple[int, int, int] | None = None
) -> tuple[int, int]:
    """:func:`copy_url` (or, with ``span`` = (start, end, size), :func:`copy_range`) through httpx,
    which applies the environment's proxy; returns (bytes written, status)."""
    written = 0
    headers = {"Range": f"bytes={span[0]}-{span[1] - 1}"} if span else {}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
            if span and response.status_code == 206:
                _check_content_range(response.headers.get("Content-Range"), *span, file_id)
            elif response.status_code != 200:
                body = response.read()
                if is_retryable_status(response.status_code):
                    raise _transient_status(response.status_code, response.headers, body)
                raise status_error(response.status_code, body, url=url, file_id=file_id)
            for chunk in response.iter_raw(CHUNK):
                out.write(chunk)
                written += len(chunk)
    except httpx.TransportError as exc:
        raise Transient(f"{type(exc).__name__}: {exc}") from exc
    return written, response.status_code


def _exchange(
    url: str,
    pool: ConnectionPool,
    extra: Sequence[tuple[str, str]],
    ok: tuple[int, ...],
    consume: Callable[[http.client.HTTPResponse, Any], T],
) -> tuple[http.client.HTTPResponse, T | None, bytes]:
    """One GET of ``url`` through ``pool`` (with ``extra`` headers): (the response, ``consume`` of it
    when its status is in ``ok``, else None; the body of any other answer). A connection error, or
    one while ``consume`` reads, is :class:`Transient`; the connection goes back to the pool only
    after a whole answer."""
    key, target = _key_and_target(url)
    try:
        conn, response = pool.send("GET", key, target, [("Accept-Encoding", "identity"), *extra])
    except httpx.TransportError as exc:
        raise Transient(f"{type(exc).__name__}: {exc}") from exc
    result: T | None = None
    body = b""
    try:
        if response.status in ok:
            result = consume(response, conn.sock)
        else:
            body = response.read()
    except (http.client.HTTPException, OSError, SocketFailed) as exc:  # the network (the cache raises its own errors)
        conn.close()
        raise Transient(f"{type(exc).__name__}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    pool.release(key, conn, response)
    return response, result, body


def _spliced(response: http.client.HTTPResponse, out: Any, move: Move) -> int:
    """The rest of ``response``'s body into ``out``: the bytes read already (and parts' heads) the
    ordinary way, the rest taken by ``out`` straight from the socket where it can
    (:meth:`RangeParts.splice`); returns the bytes written."""
    written = 0
    while response.length:
        data = response.read1(_DRAIN)  # what the reader holds, or one read: its buffer is empty after
        if not data:
            break
        out.write(data)
        written += len(data)
        while response.length and (moved := out.splice(move, response.length)):
            response.length -= moved
            written += moved
    return written


def _refusal(response: http.client.HTTPResponse, body: bytes, url: str, file_id: str | None) -> Exception:
    """A status that is not the file: :class:`Transient` when it may pass, else its error."""
    if is_retryable_status(response.status):
        return _transient_status(response.status, response.getheaders(), body)
    return status_error(response.status, body, url=url, file_id=file_id)


def _stream_get(
    url: str,
    out: Any,
    *,
    pool: ConnectionPool,
    file_id: str,
    extra: Sequence[tuple[str, str]] = (),
    ok: tuple[int, ...] = (200,),
    check: Callable[[http.client.HTTPResponse], None] | None = None,
) -> tuple[int, int]:
    """One GET of ``url`` through ``pool`` (with ``extra`` headers), its body streamed into ``out``
    when the status is in ``ok`` (after ``check``); returns (bytes written, status). Raises
    :func:`status_error`'s errors, or :class:`Transient` (see :func:`retrying`)."""

    def stream(response: http.client.HTTPResponse, sock: Any) -> int:
        if check is not None:
            check(response)
        move = mover(sock) if response.length and splices(out) else None
        if move is not None:
            written = _spliced(response, out, move)
        else:
            written, view = 0, _chunk_buffer()
            while count := response.readinto(view):
                out.write(view[:count])
                written += count
        if response.length:  # the peer closed before the length it announced
            raise http.client.IncompleteRead(b"", response.length)
        response.close()  # done (http.client closes it itself only when it read the last bytes)
        return written

    response, written, body = _exchange(url, pool, extra, ok, stream)
    if written is None:
        raise _refusal(response, body, url, file_id)
    return written, response.status


def copy_url(url: str, out: Any, *, pool: ConnectionPool, file_id: str) -> int:
    """One GET of ``url`` streamed into ``out`` (``write`` is called with views of up to
    :data:`CHUNK` bytes of a buffer the thread reuses, so ``out`` copies what it keeps; the socket
    read and the write run in C, the GIL released); returns the bytes written. Raises
    :func:`status_error`'s errors, or :class:`Transient` (see :func:`retrying`)."""
    key, _ = _key_and_target(url)
    if pool.proxied(key[0], key[1]):
        return _copy_via_proxy(url, out, file_id, pool.timeout)[0]
    return _stream_get(url, out, pool=pool, file_id=file_id)[0]


def _check_content_range(header: str | None, start: int, end: int, size: int, file_id: str) -> None:
    """``Content-Range: bytes a-b/total`` must be the range asked of a file of ``size`` bytes."""
    unit, _, rest = (header or "").partition(" ")
    span, _, total = rest.partition("/")
    first, _, last = span.partition("-")
    if unit.strip().lower() != "bytes" or total.strip() != str(size):
        raise changed_size(file_id, total.strip() or "unknown", size)
    if first.strip() != str(start) or last.strip() != str(end - 1):
        raise FileDownloadError(
            f"file {file_id}: the storage answered bytes {span.strip()} where {start}-{end - 1} were asked; "
            "read the table again",
            http_status=502,
            file_id=file_id,
        )


def copy_range(
    url: str, out: Any, *, pool: ConnectionPool, file_id: str, start: int, end: int, size: int
) -> tuple[int, bool]:
    """GET bytes ``start``..``end - 1`` of ``url`` (a file of ``size`` bytes, as listed) streamed into
    ``out`` like :func:`copy_url`; returns (bytes written, whether the answer was the range). A
    store that ignores ``Range`` answers 200 with the whole file: it is streamed into ``out`` and
    the second value is False. A ``Content-Range`` whose total is not ``size`` raises (the file
    changed after it was listed); statuses as :func:`copy_url`."""
    key, _ = _key_and_target(url)
    if pool.proxied(key[0], key[1]):
        written, status = _copy_via_proxy(url, out, file_id, pool.timeout, (start, end, size))
        return written, status == 206

    def check(response: http.client.HTTPResponse) -> None:
        if response.status == 206:
            _check_content_range(response.getheader("Content-Range"), start, end, size, file_id)

    range_header = ("Range", f"bytes={start}-{end - 1}")
    written, status = _stream_get(
        url, out, pool=pool, file_id=file_id, extra=[range_header], ok=(200, 206), check=check
    )
    return written, status == 206


class RangesApart(Exception):
    """The store does not answer several ranges together (S3, Azure and GCS answer the whole file,
    or the first range): ask for them one GET each. Raised before the answer's body is read."""


def copy_ranges(
    url: str, parts: Sequence[tuple[int, int, Any]], *, pool: ConnectionPool, file_id: str, size: int
) -> int:
    """GET the byte ranges [start, end) of ``parts`` = [(start, end, writer), …] (ascending and
    apart) of ``url``, a file of ``size`` bytes as listed, in one request; each range's bytes are
    streamed into its writer (see :mod:`~deltaport.client.byteranges`). Returns the bytes the
    answer's body took (the parts' headers too, as :func:`copy_range` counts the bytes between
    the chunks of a run).

    An answer that is neither ``multipart/byteranges`` nor one range spanning them all raises
    :class:`RangesApart` at once (the connection is closed unread), and so does every later
    call for that host. Statuses as :func:`copy_url`."""
    key, _ = _key_and_target(url)
    if pool.proxied(key[0], key[1]) or not pool.serves_ranges_together(key):
        raise RangesApart()
    reader = RangeParts(parts, size, file_id)

    def check(response: http.client.HTTPResponse) -> None:
        boundary = boundary_of(response.getheader("Content-Type") or "")
        span = content_range(response.getheader("Content-Range"))
        whole = span is not None and span[:2] == (parts[0][0], parts[-1][1])
        if response.status != 206 or (boundary is None and not whole):
            pool.ranges_apart(key)
            raise RangesApart()
        if span is not None and span[2] != size:
            raise changed_size(file_id, str(span[2]), size)
        reader.expect(boundary)

    asked = ("Range", "bytes=" + ",".join(f"{start}-{end - 1}" for start, end, _ in parts))
    written, _ = _stream_get(url, reader, pool=pool, file_id=file_id, extra=[asked], ok=(200, 206), check=check)
    reader.finish()
    return written
