"""A progress bar for long reads: rich, on stderr, only when stderr is a terminal (or when forced)."""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["ReadProgress"]

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


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
