"""Progress for long reads, on stderr, only when stderr is a terminal (or when forced): a rich bar
for the downloads, and a status line while the server plans an asynchronous query."""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["PlanningProgress", "ReadProgress"]

#: in automatic mode, show a bar only for reads at least this big
AUTO_MIN_BYTES = 32 << 20
AUTO_MIN_FILES = 16


class ReadProgress:
    """``enabled``: True (always), False (never) or None (when stderr is a terminal and the read is big)."""

    def __init__(self, *, total_bytes: int, total_files: int, description: str, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = _stderr_is_terminal() and (total_bytes >= AUTO_MIN_BYTES or total_files >= AUTO_MIN_FILES)
        self.enabled = enabled
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.description = description
        self.files_done = 0
        self.bytes_done = 0
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> ReadProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("{task.fields[files]}"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.description, total=max(self.total_bytes, 1), files=f"0/{self.total_files} files"
            )
        return self

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.files_done += 1
            self.bytes_done += nbytes
            if self._progress is not None:
                self._progress.update(self._task, advance=nbytes, files=f"{self.files_done}/{self.total_files} files")

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class PlanningProgress:
    """ "<table>: waiting for the server to plan the query (12 s)" while an asynchronous query is
    pending (:meth:`update` is the query's ``on_pending``); nothing when the server answers at once.
    ``enabled``: True (always), False (never) or None (when stderr is a terminal). On a terminal
    it is one spinner line, gone when the query is ready; elsewhere one plain line per poll."""

    def __init__(self, table: str, *, enabled: bool | None = None) -> None:
        self.enabled = _stderr_is_terminal() if enabled is None else enabled
        self.table = table
        self._status: Any = None

    def __enter__(self) -> PlanningProgress:
        return self

    def update(self, waited: float) -> None:
        if not self.enabled:
            return
        text = f"{self.table}: waiting for the server to plan the query ({waited:.0f} s)"
        if self._status is not None:
            self._status.update(text)
        elif _stderr_is_terminal():
            from rich.console import Console

            self._status = Console(stderr=True).status(text)
            self._status.start()
        else:
            print(text, file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
