"""Shared by the vending tests: the table they serve and a small HTTP server standing in for a
cloud's token endpoints, which records every request it is sent."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SHARED = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared"))
TABLE = SHARED / "delta-tables" / "basic_partitioned"
BUCKET = "vend-bucket"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


#: (status, content type, body) for a request
Answer = tuple[int, str, bytes]


class StubServer:
    """Answers each request with ``answer(seen)``; ``seen`` lists the requests in order."""

    def __init__(self, answer: Callable[[Seen], Answer]) -> None:
        self.seen: list[Seen] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
                )
                stub.seen.append(seen)
                status, kind, body = answer(seen)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
