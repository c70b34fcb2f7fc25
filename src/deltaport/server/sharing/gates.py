"""At most :data:`WIDTH` requests of one table hold server threads at once; the rest wait on the
event loop, where waiting costs nothing.

Table calls run in thread pools shared by every table. When a table's store hangs, each request for
it blocks a thread on the table's lock until the store's timeout: without a gate, enough of them
take every thread, and requests for other tables (and the sync routes, which need a thread too)
wait for that timeout as well. With it, a hung table holds ``WIDTH`` threads of a pool at most.

A request that waited at the gate while a holder's storage failed fails the same way at once
(:class:`~deltaport.errors.QueuedFailures`), as requests queued on the table's lock do: otherwise
the requests waiting here would try the hung store again, ``WIDTH`` at a time, one timeout after
another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from deltaport.errors import QueuedFailures, StorageUnavailable

T = TypeVar("T")

#: Threads one table's requests may hold at once: enough to keep both cores busy on one hot
#: table, a fifth of the framework's pool of 40.
WIDTH = 8


class _Gate:
    __slots__ = ("failures", "slots", "users")

    def __init__(self, width: int) -> None:
        self.slots = asyncio.Semaphore(width)
        self.failures = QueuedFailures()
        self.users = 0  # requests holding or waiting: the gate is dropped when none are left


class TableGates:
    """One gate per table, by the names a request gives (any case); used on the event loop only."""

    def __init__(self, width: int = WIDTH) -> None:
        self.width = width
        self._gates: dict[tuple[str, str, str], _Gate] = {}

    async def run(self, share: str, schema: str, table: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` (which hands table work to a thread) once the table has a free slot."""
        key = (share.lower(), schema.lower(), table.lower())
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(self.width)
        mark = gate.failures.mark()
        gate.users += 1
        try:
            async with gate.slots:
                gate.failures.check(mark)
                try:
                    return await call()
                except StorageUnavailable as exc:
                    gate.failures.failed(exc)
                    raise
        finally:
            gate.users -= 1
            if not gate.users:
                del self._gates[key]

    def __len__(self) -> int:
        """Tables with requests holding or waiting."""
        return len(self._gates)
