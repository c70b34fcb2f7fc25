"""A table's latest version and snapshot for the polled calls, worked out off the event loop with
one refresh in flight per table.

Clients poll /version and /metadata. Each answer must reflect every commit that landed before the
request arrived, so each needs a fresh listing of the table's log, and listing (and replaying new
commits) is table-state work that never runs on the event loop. Handing every request to a thread
costs more than the answer itself, so requests share refreshes: a request waits for a refresh that
starts after it arrived, and all requests that arrive before the next refresh starts share it (those
that arrive while one runs, and those that arrive until it starts). A refresh starts once the one
before is done, and no sooner than ``SPACING_S`` after that one started: under load that is one
thread hand-over for many requests instead of one per request, and no answer is older than its
request.

Fast form of: listing the log and replaying it in the framework's thread pool for every request
(``DeltaTable.latest_version``, ``DeltaTable.streamed``). Held equal by:
tests/server/fast/test_freshness.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from deltaport.delta import DeltaTable, Snapshot
from deltaport.delta.streamed import StreamedSnapshot

#: Least seconds between the starts of two refreshes of one table's state (of one kind). Under load
#: it sets how many requests share a refresh (a thread hand-over costs a busy server more than the
#: listing): with 16 polls of a cached table in flight, one refresh per ~16 polls instead of ~6.
#: A request waits for it at most this long, and only when the last refresh started that recently.
SPACING_S = 0.0005


class _Refreshes:
    """The refresh running for one (table, kind), the one queued behind it, and when the last one
    started (loop time)."""

    __slots__ = ("queued", "running", "started")

    def __init__(self) -> None:
        self.running: asyncio.Future[Any] | None = None
        self.queued: asyncio.Future[Any] | None = None
        self.started = float("-inf")


class LatestState:
    """Latest versions and snapshots of tables, refreshed in ``pool``."""

    def __init__(self, pool: Executor) -> None:
        self.pool = pool
        self._refreshes: dict[tuple[DeltaTable, str], _Refreshes] = {}

    async def version(self, table: DeltaTable) -> int:
        """The table's latest version (a listing of its log)."""
        return await self._fresh(table, "version", table.latest_version)

    async def snapshot(self, table: DeltaTable, stream_above: int) -> Snapshot | StreamedSnapshot:
        """The table's latest snapshot (a listing, and a replay of what changed); streamed when
        its checkpoint holds ``stream_above`` files or more (``DeltaTable.streamed``)."""

        def load() -> Snapshot | StreamedSnapshot:
            snap = table.streamed(above=stream_above)
            snap.config.schema  # noqa: B018  # parsed here, not on the loop
            return snap

        return await self._fresh(table, "snapshot", load)

    async def _fresh(self, table: DeltaTable, kind: str, work: Callable[[], Any]) -> Any:
        state = self._refreshes.get((table, kind))
        if state is None:
            state = self._refreshes[(table, kind)] = _Refreshes()
        if state.queued is None:  # none waiting to start (the running one may predate this request)
            state.queued = asyncio.ensure_future(self._next(state, work))
        return await asyncio.shield(state.queued)

    async def _next(self, state: _Refreshes, work: Callable[[], Any]) -> Any:
        """Once the running refresh is done and SPACING_S after it started, this one starts: from
        then on, requests wait for the next."""
        running = state.running
        if running is not None and not running.done():
            await asyncio.wait([running])  # its outcome is its own requests'
        loop = asyncio.get_running_loop()
        wait = state.started + SPACING_S - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        state.running, state.queued = state.queued, None
        state.started = loop.time()
        return await loop.run_in_executor(self.pool, work)
