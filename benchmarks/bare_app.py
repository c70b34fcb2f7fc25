"""A bare uvicorn app answering every request with one constant JSON body: the peer that
server_workers.py (``--peer bare``) loads beside deltaport, so that the machine's load of the
moment falls on both figures.

    python benchmarks/bare_app.py PORT

Served as `deltaport serve` serves (uvicorn's own loop and HTTP parser picks, uvloop and httptools
where installed; no access log), so the gap between the two figures is deltaport's own work.
"""

from __future__ import annotations

import sys

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_level="warning")
