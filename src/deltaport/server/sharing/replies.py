"""A service :class:`~deltaport.server.sharing.service.Reply` as the HTTP response it becomes: the
one place replies meet the framework."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from starlette.concurrency import iterate_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from deltaport.server.ops.request_info import current_request
from deltaport.server.sharing.answers import Reply

#: Largest piece handed to the server at once: the socket takes it whole, where a bigger one would be
#: copied into the transport's buffer first (a pass over the response, with the GIL held).
_PIECE = 1 << 20


def reply_response(reply: Reply, head: bool = False) -> Response:
    """The response for ``reply``; notes what it serves for the request's metrics and audit event."""
    seen = current_request()
    if seen is not None:
        seen.served = reply.served
        seen.streaming = reply.stream is not None and reply.content is None and not head
    if reply.stream is not None or reply.content is not None:
        if head:
            return Response(status_code=reply.status, headers=reply.headers)
        media = reply.headers.pop("Content-Type", "application/x-ndjson; charset=utf-8")
        if reply.content is not None:  # small and complete (e.g. /metadata): no streaming machinery
            return Response(reply.content, status_code=reply.status, headers=reply.headers, media_type=media)
        assert reply.stream is not None
        return StreamingResponse(
            _pieces(reply.stream), status_code=reply.status, headers=reply.headers, media_type=media
        )
    if reply.json is not None:
        return JSONResponse(
            reply.json, status_code=reply.status, headers=reply.headers, media_type="application/json; charset=utf-8"
        )
    return Response(status_code=reply.status, headers=reply.headers)


async def _pieces(stream: Iterator[bytes | memoryview]) -> AsyncIterator[bytes | memoryview]:
    """The stream's chunks, built in the thread pool, sent in pieces of at most ``_PIECE`` bytes."""
    async for chunk in iterate_in_threadpool(stream):
        if len(chunk) <= _PIECE:
            yield chunk
            continue
        view = memoryview(chunk)
        for start in range(0, len(view), _PIECE):
            yield view[start : start + _PIECE]
