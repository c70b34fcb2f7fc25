"""GET /version (and its HEAD) and /metadata from their parameters and headers: what their routes
and the hot paths (fast/hot_paths.py) both call.

The table work runs in threads, never on the event loop: the latest state, which clients poll, in
a pool of its own through :class:`~deltaport.server.fast.freshness.LatestState` (one refresh per
table at a time, shared by the requests that wait for it); every other table call, the routes'
/query, /changes and the rest too (:meth:`TableCalls.off_loop`), in the framework's pool through
the table's gate (gates.py), so that a table whose store hangs cannot take every thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from deltaport.server.fast.freshness import LatestState
from deltaport.server.sharing.gates import TableGates
from deltaport.server.sharing.registry import Principal
from deltaport.server.sharing.replies import reply_response
from deltaport.server.sharing.service import SharingService

#: Threads refreshing the latest state for /version and /metadata: enough to wait on several slow
#: object-store listings at once, few enough that warm calls do not fight over the GIL.
THREADS = 8


class TableCalls:
    def __init__(self, service: SharingService) -> None:
        self.service = service
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="deltaport-table-call")
        self.latest = LatestState(self.pool)
        self.gates = TableGates()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def off_loop(
        self, fn: Callable[..., Any], who: Principal, share: str, schema: str, table: str, *args: Any
    ) -> Any:
        """``fn(who, share, schema, table, *args)`` in the framework's thread pool, once the
        table's gate lets it through."""
        call = functools.partial(run_in_threadpool, fn, who, share, schema, table, *args)
        return await self.gates.run(share, schema, table, call)

    async def version(
        self,
        share: str,
        schema: str,
        table: str,
        query: Mapping[str, str | None],
        headers: Mapping[str, str | None],
        head: bool = False,
    ) -> Response:
        service = self.service
        who = service.principal(headers.get("authorization"))
        since = query.get("startingTimestamp")
        if since is None:
            reply = await service.latest_table_version(who, share, schema, table, self.latest)
        else:
            reply = await self.off_loop(service.table_version, who, share, schema, table, since)
        return reply_response(reply, head=head)

    async def metadata(
        self, share: str, schema: str, table: str, query: Mapping[str, str | None], headers: Mapping[str, str | None]
    ) -> Response:
        service = self.service
        who = service.principal(headers.get("authorization"))
        version, timestamp = query.get("version"), query.get("timestamp")
        capabilities = headers.get("delta-sharing-capabilities")
        if version is None and timestamp is None:
            reply = await service.latest_metadata(who, share, schema, table, capabilities, self.latest)
        else:
            reply = await self.off_loop(service.metadata, who, share, schema, table, version, timestamp, capabilities)
        return reply_response(reply)
