"""An httpx transport for presigned data-file URLs, on the standard library's ``http.client``.

Downloading whole parquet files is the hot path of a read. httpx's default transport parses
every 64 KiB of a body in Python (about 1.5 CPU-seconds per GB here); ``http.client`` reads a
body of known length in one C-level loop (about 0.4 CPU-seconds per GB). On a machine whose
cores also decode parquet, that difference is wall-clock time. This transport keeps the httpx
API (``httpx.Client(transport=FileTransport())``), keeps connections alive per host, and maps
socket failures to httpx's exceptions so retries work unchanged.

It sends no credentials of its own, asks for no compression, and passes the URL's path and
query byte for byte (presigned signatures depend on their exact encoding). When a proxy is
configured in the environment for a URL's host it defers to httpx's own transport.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.request
from collections import defaultdict

import httpx

__all__ = ["FileTransport", "file_http_client"]

_SKIP_HEADERS = frozenset({"host", "accept-encoding", "connection", "content-length", "transfer-encoding"})
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _ssl_context() -> ssl.SSLContext:
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()


class FileTransport(httpx.BaseTransport):
    """Keep-alive ``http.client`` connections per (scheme, host, port), safe to share between threads."""

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
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = defaultdict(list)
        self._lock = threading.Lock()
        self._fallback: httpx.HTTPTransport | None = None
        self._proxies = urllib.request.getproxies_environment()

    # --- connections -------------------------------------------------------------------------------

    def _new(self, key: tuple[str, str, int]) -> http.client.HTTPConnection:
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

    def _take(self, key: tuple[str, str, int]) -> http.client.HTTPConnection | None:
        with self._lock:
            idle = self._idle[key]
            return idle.pop() if idle else None

    def _give(self, key: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle[key]
            if len(idle) < self.max_idle_per_host:
                idle.append(conn)
                return
        conn.close()

    def _proxied(self, request: httpx.Request) -> bool:
        if not self._proxies:
            return False
        scheme = request.url.scheme
        if scheme not in self._proxies and "all" not in self._proxies:
            return False
        return not urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]  # in the module, not its stubs
            request.url.host, self._proxies
        )

    # --- httpx -------------------------------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https") or self._proxied(request):
            if self._fallback is None:
                self._fallback = httpx.HTTPTransport()
            return self._fallback.handle_request(request)
        scheme = request.url.scheme
        port = request.url.port or (443 if scheme == "https" else 80)
        key = (scheme, request.url.host, port)
        target = request.url.raw_path.decode("ascii")
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in _SKIP_HEADERS
        ]
        body = request.read() if request.method not in ("GET", "HEAD") else None
        conn = self._take(key)
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._new(key)
            try:
                status, reason, response_headers, content, will_close = self._exchange(
                    conn, request.method, target, headers, body
                )
                break
            except _STALE as exc:
                conn.close()
                if reused:  # a kept-alive connection the server had closed: once more on a new one
                    conn, reused = None, False
                    continue
                raise httpx.RemoteProtocolError(f"the server closed the connection: {exc}") from exc
            except TimeoutError as exc:
                conn.close()
                raise httpx.ReadTimeout(f"reading from {key[1]}:{key[2]} timed out") from exc
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
        if will_close:
            conn.close()
        else:
            self._give(key, conn)
        return httpx.Response(
            status,
            headers=response_headers,
            stream=httpx.ByteStream(content),
            request=request,
            extensions={"reason_phrase": reason.encode("latin-1", "replace"), "http_version": b"HTTP/1.1"},
        )

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
    ):
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        content = response.read() if method != "HEAD" else b""
        return response.status, response.reason or "", response.getheaders(), content, response.will_close

    def close(self) -> None:
        with self._lock:
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()
        if self._fallback is not None:
            self._fallback.close()


def file_http_client(
    *, transport: httpx.BaseTransport | None = None, timeout: float = 120.0, max_connections: int = 32
) -> httpx.Client:
    """An httpx client for presigned file URLs: never carries sharing credentials, follows
    redirects, and uses :class:`FileTransport` unless another ``transport`` is given."""
    return httpx.Client(
        transport=transport or FileTransport(timeout=timeout, max_idle_per_host=max_connections),
        timeout=httpx.Timeout(timeout, connect=30.0),
        follow_redirects=True,
    )
