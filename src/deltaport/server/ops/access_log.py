"""The access log: method, path, status and time of each request; never a query string, a header or
an activation token."""

from __future__ import annotations

import logging
import time

from deltaport.server import errors
from deltaport.server.admin.activation import ACTIVATION_PAGE

access_log = logging.getLogger("deltaport.access")


#: Paths whose last segment is a secret (an activation token): logged without it.
_SECRET_TAILS = (errors.ACTIVATION_API + "/", ACTIVATION_PAGE + "/")


def logged_path(path: str) -> str:
    """``path`` as the access log shows it: an activation link's token left out."""
    if path.startswith(_SECRET_TAILS):
        return path.rsplit("/", 1)[0] + "/<activation token>"
    return path


_LINE = "%s %s %s %.1fms"


class AccessLog:
    """Pure ASGI access log: method, path, status, time. Never the query string (URL signatures,
    tokens), never headers (bearer tokens), never an activation link's token."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [0]

        async def send_and_note(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            args = (scope["method"], logged_path(scope["path"]), status[0], (time.perf_counter() - start) * 1000)
            # Logger.info's record without its search of the stack for the caller (a fifth of its
            # cost, on every request): the record names this method instead
            access_log.handle(
                access_log.makeRecord(access_log.name, logging.INFO, *_WHERE, _LINE, args, None, "__call__")
            )


_WHERE = (__file__, AccessLog.__call__.__code__.co_firstlineno)
