"""An httpx transport for presigned data-file URLs, on the standard library's ``http.client``.

Downloading whole parquet files is the hot path of a read. httpx's default transport parses
every 64 KiB of a body in Python (about 1.5 CPU-seconds per GB here); ``http.client`` reads a
body of known length in one C-level loop (about 0.4 CPU-seconds per GB). On a machine whose
cores also decode parquet, that difference is wall-clock time. This transport keeps the httpx
API (``httpx.Client(transport=FileTransport())``), keeps connections alive per host, and maps
socket failures to httpx's exceptions so retries work unchanged.

It sends no credentials of its own, asks for no compression, and passes the URL's path and
query byte for byte (presigned signatures depend on their exact encoding). When a proxy is
configured in the environment for a URL's host it defers to httpx's own transport. The
connections are :class:`~deltaport.client.download.ConnectionPool`'s, the one pool of the
recipient side.
"""

from __future__ import annotations

import http.client

import httpx

from deltaport.client.download import ConnectionPool, network_error

__all__ = ["FileTransport", "direct_pool", "file_http_client"]

_SKIP_HEADERS = frozenset({"host", "accept-encoding", "connection", "content-length", "transfer-encoding"})


class FileTransport(httpx.BaseTransport):
    """Keep-alive ``http.client`` connections per (scheme, host, port), safe to share between threads.

    ``pool`` may be shared with other users of the same connections (the staged Spark read)."""

    def __init__(
        self,
        *,
        timeout: float = 120.0,
        connect_timeout: float = 30.0,
        max_idle_per_host: int = 32,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.pool = pool or ConnectionPool(
            timeout=timeout, connect_timeout=connect_timeout, max_idle_per_host=max_idle_per_host
        )
        self._fallback: httpx.HTTPTransport | None = None

    def _proxied(self, request: httpx.Request) -> bool:
        return self.pool.proxied(request.url.scheme, request.url.host)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https") or self._proxied(request):
            if self._fallback is None:
                self._fallback = httpx.HTTPTransport()
            return self._fallback.handle_request(request)
        scheme = request.url.scheme
        key = (scheme, request.url.host, request.url.port or (443 if scheme == "https" else 80))
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in _SKIP_HEADERS
        ]
        body = request.read() if request.method not in ("GET", "HEAD") else None
        conn, response = self.pool.send(request.method, key, request.url.raw_path.decode("ascii"), headers, body)
        try:
            content = response.read() if request.method != "HEAD" else b""
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            raise network_error(exc, f"{key[1]}:{key[2]}") from exc
        self.pool.release(key, conn, response)
        return httpx.Response(
            response.status,
            headers=response.getheaders(),
            stream=httpx.ByteStream(content),
            request=request,
            extensions={
                "reason_phrase": (response.reason or "").encode("latin-1", "replace"),
                "http_version": b"HTTP/1.1",
            },
        )

    def close(self) -> None:
        self.pool.close()
        if self._fallback is not None:
            self._fallback.close()


def file_http_client(
    *,
    transport: httpx.BaseTransport | None = None,
    timeout: float = 120.0,
    max_connections: int = 32,
    pool: ConnectionPool | None = None,
) -> httpx.Client:
    """An httpx client for presigned file URLs: never carries sharing credentials, follows
    redirects, and uses :class:`FileTransport` (on ``pool`` when given) unless another
    ``transport`` is given."""
    return httpx.Client(
        transport=transport or FileTransport(timeout=timeout, max_idle_per_host=max_connections, pool=pool),
        timeout=httpx.Timeout(timeout, connect=30.0),
        follow_redirects=True,
    )


def direct_pool(http: httpx.Client, url: str) -> ConnectionPool | None:
    """The connections ``http`` would fetch ``url`` on when they can be used directly: its transport
    is a :class:`FileTransport` and no proxy applies to the URL; else None (use ``http`` itself)."""
    transport = getattr(http, "_transport", None)  # httpx keeps the transport it was given there
    if not isinstance(transport, FileTransport):
        return None
    parts = httpx.URL(url)
    if parts.scheme not in ("http", "https") or transport.pool.proxied(parts.scheme, parts.host):
        return None
    return transport.pool
