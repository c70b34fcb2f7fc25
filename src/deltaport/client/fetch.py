"""Many files, read in parallel, in order, with bounded memory, refreshing URLs that expire.

:class:`FileFetcher` runs :func:`~deltaport.client.reader.read_file` (or
:func:`~deltaport.client.reader.read_change_file`) in a thread pool with at most
``max_in_flight`` files submitted ahead of the consumer, and yields their tables in the
server's file order. When a presigned URL expires mid-read (or is about to, within
``refresh_margin_seconds``; by default a quarter of the URLs' lifetime, at most 30 s) it asks
``refresher`` for a fresh file list once, for every thread waiting on it, and matches files by id.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pyarrow as pa

from deltaport.client.errors import IncompleteResponse, UrlExpired
from deltaport.client.model import FileAction
from deltaport.client.progress import ReadProgress
from deltaport.client.reader import reader_for
from deltaport.client.schema import TableInfo

__all__ = ["FileFetcher", "default_workers"]

Refresher = Callable[[], Sequence[FileAction]]
Key = tuple
AUTO_MARGIN_MS = 30_000


def default_workers() -> int:
    return max(4, min(16, 4 * (os.cpu_count() or 2)))


class FileFetcher:
    """Reads the files of one query; see the module docstring. ``refreshes`` counts refreshes made."""

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
    ) -> None:
        self.table = table
        self.http = http
        self.columns = columns
        self.refresher = refresher
        self.max_workers = max_workers or default_workers()
        self.max_in_flight = max(self.max_workers, max_in_flight or 2 * self.max_workers)
        self.refresh_margin_ms = None if refresh_margin_seconds is None else refresh_margin_seconds * 1000
        self.min_refresh_interval = min_refresh_interval
        self.max_attempts = max_attempts
        self.progress = progress
        self.clock = clock
        self.refreshes = 0
        self._read = reader_for(change, parallel=self.max_workers > 1)
        self._lock = threading.Lock()
        self._latest: dict[Key, FileAction] = {}
        self._last_refresh = float("-inf")
        self._listed_at_ms = clock() * 1000  # when the file list (and its URLs) was made, about

    # --- URL refresh ----------------------------------------------------------------------------

    def _expiring(self, action: FileAction) -> bool:
        exp = action.expiration_timestamp
        if exp is None:
            return False
        margin = self.refresh_margin_ms
        if margin is None:
            margin = min(AUTO_MARGIN_MS, max(0.0, exp - self._listed_at_ms) / 4)
        return exp - self.clock() * 1000 <= margin

    def _fresh(self, action: FileAction, *, refused: bool) -> FileAction:
        """The newest known version of ``action``, refreshing the file list when needed."""
        with self._lock:
            latest = self._latest.get(action.key, action)
            if latest.url != action.url:
                return latest  # another thread refreshed meanwhile
            if not refused and self.clock() - self._last_refresh < self.min_refresh_interval:
                return latest  # refreshed a moment ago: do not loop on a margin longer than URL lifetimes
            if self.refresher is None:
                if refused:
                    raise UrlExpired(
                        f"the presigned URL of file {action.id} was refused and this read has no way to "
                        "refresh it; read the table again",
                        http_status=403,
                        file_id=action.id,
                    )
                return latest
            fresh = list(self.refresher())
            self.refreshes += 1
            self._last_refresh = self.clock()
            self._listed_at_ms = self._last_refresh * 1000
            self._latest = {f.key: f for f in fresh}
            if action.key not in self._latest:
                raise IncompleteResponse(
                    f"file {action.id} is no longer part of the table after refreshing its "
                    "URL: the table changed during the read",
                    error_code="TABLE_CHANGED",
                    hint="read the table again (or pin a version with version=...)",
                )
            return self._latest[action.key]

    def _task(self, action: FileAction) -> pa.Table:
        current = action
        for attempt in range(self.max_attempts):
            if self._expiring(current):
                current = self._fresh(current, refused=False)
            try:
                return self._read(current, self.table, columns=self.columns, http=self.http)
            except UrlExpired as exc:
                if attempt + 1 >= self.max_attempts:
                    raise UrlExpired(
                        f"the storage refused the presigned URL of file {action.id} {self.max_attempts} "
                        "times, fresh URLs included; check that the client's and server's clocks agree "
                        "and that the server may read its storage",
                        http_status=exc.http_status,
                        file_id=action.id,
                    ) from exc
                current = self._fresh(current, refused=True)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- the pipeline ------------------------------------------------------------------------------

    def tables(self, actions: Sequence[FileAction], *, limit: int | None = None) -> Iterator[pa.Table]:
        """Tables of ``actions`` in order; stops once ``limit`` rows were yielded (the last one sliced).

        With a limit, files are submitted only while the rows expected from the files in flight
        (their stats' ``numRecords``) do not cover it yet; files are never skipped.
        """
        if not actions or (limit is not None and limit <= 0):
            return
        source = iter(actions)
        pending: deque[tuple[FileAction, Future, int]] = deque()
        pool = ThreadPoolExecutor(max_workers=min(self.max_workers, len(actions)), thread_name_prefix="deltaport-read")
        state = {"rows": 0, "expected": 0}
        try:

            def fill() -> None:
                while len(pending) < self.max_in_flight:
                    if limit is not None and state["rows"] + state["expected"] >= limit:
                        return
                    action = next(source, None)
                    if action is None:
                        return
                    estimate = (action.num_records or 0) if limit is not None and action.change_type is None else 0
                    state["expected"] += estimate
                    pending.append((action, pool.submit(self._task, action), estimate))

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
