"""A table's latest version and snapshot for the polled calls, worked out off the event loop with
one refresh in flight per table.

Clients poll /version and /metadata. Each answer must reflect every commit that landed before the
request arrived, so each needs a fresh listing of the table's log, and listing (and replaying new
commits) is table-state work that never runs on the event loop. Handing every request to a thread
costs more than the answer itself, so requests share refreshes: a request waits for a refresh that
starts after it arrived, and all requests that arrive while one refresh runs share the next one.
Under load that is one thread hand-over per refresh instead of one per request, and no answer is
older than its request.

Fast form of: listing the log and replaying it in the framework's thread pool for every request
(``DeltaTable.latest_version``, ``DeltaTable.snapshot``). Held equal by:
tests/server/fast/test_freshness.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from deltaport.delta import DeltaTable, Snapshot


class _Refreshes:
    """The refresh running for one (table, kind) and the one queued behind it."""

    __slots__ = ("queued", "running")

    def __init__(self) -> None:
        self.running: asyncio.Future[Any] | None = None
        self.queued: asyncio.Future[Any] | None = None


class LatestState:
    """Latest versions and snapshots of tables, refreshed in ``pool``."""

    def __init__(self, pool: Executor) -> None:
        self.pool = pool
        self._refreshes: dict[tuple[DeltaTable, str], _Refreshes] = {}

    async def version(self, table: DeltaTable) -> int:
        """The table's latest version (a listing of its log)."""
        return await self._fresh(table, "version", table.latest_version)

    async def snapshot(self, table: DeltaTable) -> Snapshot:
        """The table's latest snapshot (a listing, and a replay of what changed)."""

        def load() -> Snapshot:
            snap = table.snapshot()
            snap.config.schema  # noqa: B018  # parsed here, not on the loop
            return snap

        return await self._fresh(table, "snapshot", load)

    async def _fresh(self, table: DeltaTable, kind: str, work: Callable[[], Any]) -> Any:
        state = self._refreshes.setdefault((table, kind), _Refreshes())
        if state.running is None or state.running.done():
            state.running = asyncio.ensure_future(self._run(work))
            return await asyncio.shield(state.running)
        if state.queued is None:  # the running refresh may predate this request: wait for the next
            state.queued = asyncio.ensure_future(self._after(state, work))
        return await asyncio.shield(state.queued)

    async def _run(self, work: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, work)

    async def _after(self, state: _Refreshes, work: Callable[[], Any]) -> Any:
        running = state.running
        assert running is not None
        await asyncio.wait([running])  # its outcome is its own requests'
        state.running, state.queued = state.queued, None
        return await self._run(work)
