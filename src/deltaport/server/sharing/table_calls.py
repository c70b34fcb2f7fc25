"""GET /version (and its HEAD) and /metadata from their parameters and headers: what their routes
and the hot paths (fast/hot_paths.py) both call.

The table work runs in a pool of its own, never on the event loop; the latest state, which clients
poll, through :class:`~deltaport.server.fast.freshness.LatestState` (one refresh per table at a
time, shared by the requests that wait for it).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.responses import Response

from deltaport.server.fast.freshness import LatestState
from deltaport.server.sharing.replies import reply_response
from deltaport.server.sharing.service import SharingService

#: Threads answering /version and /metadata: enough to wait on several slow object-store listings
#: at once, few enough that warm calls do not fight over the GIL.
THREADS = 8


class TableCalls:
    def __init__(self, service: SharingService) -> None:
        self.service = service
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="deltaport-table-call")
        self.latest = LatestState(self.pool)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args))

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
            reply = await self._off_loop(service.table_version, who, share, schema, table, since)
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
            reply = await self._off_loop(service.metadata, who, share, schema, table, version, timestamp, capabilities)
        return reply_response(reply)
