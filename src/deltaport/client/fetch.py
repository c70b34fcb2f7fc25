"""Many files, read in parallel, in order, with bounded memory, refreshing URLs that expire.

:class:`FileFetcher` runs :func:`~deltaport.client.reader.read_file` (or
:func:`~deltaport.client.reader.read_change_file`) in a thread pool with at most
``max_in_flight`` files submitted ahead of the consumer, and yields their tables in the
server's file order. When a presigned URL expires mid-read (or is about to, within
``refresh_margin_seconds``; by default a quarter of the URLs' lifetime, at most 30 s) it asks
``refresher`` for a fresh file list once, for every thread waiting on it
(:class:`~deltaport.client.renewal.UrlRenewer`).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pyarrow as pa

from deltaport.client.model import FileAction
from deltaport.client.progress import ReadProgress
from deltaport.client.reader import reader_for
from deltaport.client.renewal import Refresher, UrlRenewer
from deltaport.client.schema import TableInfo

__all__ = ["FileFetcher", "default_workers"]


def default_workers() -> int:
    return max(4, min(16, 4 * (os.cpu_count() or 2)))


class FileFetcher:
    """Reads the files of one query; see the module docstring. ``refreshes`` counts refreshes made.
    ``dictionaries``: string columns as dictionary arrays (see :func:`~deltaport.client.reader.reader_for`)."""

    def __init__(
        self,
        table: TableInfo,
        *,
        http: httpx.Client,
        change: bool = False,
        columns: list[str] | None = None,
        refresher: Refresher | None = None,
        max_workers: int | None = None,
        max_in_flight: int | None = None,
        refresh_margin_seconds: float | None = None,
        min_refresh_interval: float = 1.0,
        max_attempts: int = 4,
        progress: ReadProgress | None = None,
        clock: Callable[[], float] = time.time,
        dictionaries: bool = False,
    ) -> None:
        self.table = table
        self.http = http
        self.columns = columns
        self.max_workers = max_workers or default_workers()
        self.max_in_flight = max(self.max_workers, max_in_flight or 2 * self.max_workers)
        self.max_attempts = max_attempts
        self.progress = progress
        self.renewer = UrlRenewer(
            refresher, margin_seconds=refresh_margin_seconds, min_interval=min_refresh_interval, clock=clock
        )
        self._read = reader_for(change, parallel=self.max_workers > 1, dictionaries=dictionaries)

    @property
    def refreshes(self) -> int:
        return self.renewer.refreshes

    def _task(self, action: FileAction, position: int) -> pa.Table:
        return self.renewer.read(
            action,
            lambda current: self._read(current, self.table, columns=self.columns, http=self.http),
            max_attempts=self.max_attempts,
            position=position,
        )

    # --- the pipeline ------------------------------------------------------------------------------

    def tables(self, actions: Sequence[FileAction], *, limit: int | None = None) -> Iterator[pa.Table]:
        """Tables of ``actions`` in order; stops once ``limit`` rows were yielded (the last one sliced).

        With a limit, files are submitted only while the rows expected from the files in flight
        (their stats' ``numRecords``) do not cover it yet; files are never skipped.
        """
        if not actions or (limit is not None and limit <= 0):
            return
        source = enumerate(actions)
        pending: deque[tuple[FileAction, Future, int]] = deque()
        pool = ThreadPoolExecutor(max_workers=min(self.max_workers, len(actions)), thread_name_prefix="deltaport-read")
        state = {"rows": 0, "expected": 0}
        try:

            def fill() -> None:
                while len(pending) < self.max_in_flight:
                    if limit is not None and state["rows"] + state["expected"] >= limit:
                        return
                    position, action = next(source, (0, None))
                    if action is None:
                        return
                    estimate = (action.num_records or 0) if limit is not None and action.change_type is None else 0
                    state["expected"] += estimate
                    pending.append((action, pool.submit(self._task, action, position), estimate))

            fill()
            while pending:
                action, future, estimate = pending.popleft()
                table = future.result()
                state["expected"] -= estimate
                if self.progress is not None:
                    self.progress.advance(action.size)
                if limit is not None and state["rows"] + table.num_rows >= limit:
                    yield table.slice(0, limit - state["rows"])
                    return
                state["rows"] += table.num_rows
                fill()
                yield table
        finally:
            for _, future, _ in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
