"""What the server notes about the request it is serving, where code that has no request object
can reach it.

The observing middleware (observe.py) makes one :class:`RequestInfo` per HTTP request and holds it
in :data:`current_info` for the request's task; threads the request runs code in copy the context,
so they see (and fill) the same object. Each piece of knowledge has one owner that writes it:

- the middleware: the request id, the client's address (access.py), the user agent, the status,
  the table version the response declares, the bytes a download sent;
- the service, when it authenticates a request (``SharingService.admit``): the principal;
- the app's reply maker, from the service's reply: whether the response streams, and the files it
  hands out (:class:`FilesServed`); the file route: the table a download reads.

Nothing here holds a token or a URL's query string.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class FilesServed:
    """The data files a /query or /changes response hands out: how many, the sum of the sizes it
    declares for them, and the share they belong to (as the provider spells it)."""

    share: str
    files: int
    bytes: int


@dataclass(slots=True)
class RequestInfo:
    """One request as the server saw it; filled while it is served (see the module's docstring).

    ``time_ms`` is when it arrived (epoch ms); ``started`` the ``perf_counter`` then. ``share``,
    ``schema``, ``table`` are set only where the path does not name them as the client spelt them
    (downloads, and the share of the files served)."""

    request_id: str
    client_ip: str | None
    user_agent: str | None
    time_ms: int
    started: float
    principal: str | None = None
    share: str | None = None
    schema: str | None = None
    table: str | None = None
    served: FilesServed | None = None
    streaming: bool = False
    download: bool = False
    bytes_sent: int = 0
    status: int = 0
    version: int | None = None
    target: str | None = None  # what an admin write creates, when its path does not name it


#: The request being served; set and reset by the observing middleware only.
current_info: ContextVar[RequestInfo | None] = ContextVar("deltaport_request", default=None)


def current_request() -> RequestInfo | None:
    """The request being served by the calling code (its task or a thread it runs code in); None
    outside a request."""
    return current_info.get()
