"""Fresh presigned URLs for the files of one read, for every recipient-side reader.

A :class:`UrlRenewer` holds a ``refresher`` (asks the sharing server for the read's file list
again) and renews a file's URL when the storage refused it (:class:`UrlExpired`) or, with
``preemptive``, when it expires within ``margin_seconds`` (by default a quarter of the URLs'
lifetime, at most 30 s). One refresh serves every thread waiting at the same time; a fresh
action is found by the file's identity (id, version, change type; the id alone when unique,
since a reader may have set the version or change type itself), and only its URLs and expiry
are taken: what the reader set on the action stays.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from deltaport.client.errors import IncompleteResponse, UrlExpired
from deltaport.client.model import FileAction

__all__ = ["MAX_ATTEMPTS", "Refresher", "UrlRenewer"]

Refresher = Callable[[], Sequence[FileAction]]
T = TypeVar("T")
AUTO_MARGIN_MS = 30_000
MAX_ATTEMPTS = 4


def _match(action: FileAction, fresh: dict[tuple, FileAction], by_id: dict[str, list[FileAction]]) -> FileAction | None:
    found = fresh.get(action.key)
    if found is None:
        same_id = by_id.get(action.id, [])
        found = same_id[0] if len(same_id) == 1 else None
    return found


class _Fresh:
    """A refreshed file list. An action is looked for at its position in the read's list first (a
    query asked again lists the same files in the same order), so a compact list stays compact;
    the index of every file is built only when that guess misses."""

    def __init__(self, files: Sequence[FileAction]) -> None:
        self.files = files
        self._index: tuple[dict[tuple, FileAction], dict[str, list[FileAction]]] | None = None

    def find(self, action: FileAction, position: int | None) -> FileAction | None:
        if position is not None and position < len(self.files):
            candidate = self.files[position]
            if candidate.key == action.key:
                return candidate
        if self._index is None:
            by_key: dict[tuple, FileAction] = {}
            by_id: dict[str, list[FileAction]] = {}
            for f in self.files:
                by_key[f.key] = f
                by_id.setdefault(f.id, []).append(f)
            self._index = (by_key, by_id)
        return _match(action, *self._index)


class UrlRenewer:
    """See the module docstring. ``refreshes`` counts the refreshes made."""

    def __init__(
        self,
        refresher: Refresher | None,
        *,
        preemptive: bool = True,
        margin_seconds: float | None = None,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        hint: str = "read the table again (or pin a version with version=...)",
    ) -> None:
        self.refresher = refresher
        self.preemptive = preemptive
        self.margin_ms = None if margin_seconds is None else margin_seconds * 1000
        self.min_interval = min_interval
        self.clock = clock
        self.hint = hint
        self.refreshes = 0
        self._lock = threading.Lock()
        self._fresh = _Fresh(())
        self._last_refresh = float("-inf")
        self._listed_at_ms = clock() * 1000  # when the file list (and its URLs) was made, about

    def expiring(self, action: FileAction) -> bool:
        """Whether ``action``'s URL expires within the margin (never without ``preemptive``)."""
        exp = action.expiration_timestamp
        if exp is None or not self.preemptive:
            return False
        margin = self.margin_ms
        if margin is None:
            margin = min(AUTO_MARGIN_MS, max(0.0, exp - self._listed_at_ms) / 4)
        return exp - self.clock() * 1000 <= margin

    def renew(self, action: FileAction, *, refused: bool, position: int | None = None) -> FileAction:
        """``action`` with the newest known URLs, asking the server again when needed; ``position``
        (the action's index in the read's file list) speeds up finding it in the fresh list."""
        with self._lock:
            latest = self._known(action, position)
            if latest.url != action.url:
                return latest  # another thread refreshed meanwhile
            if not refused and self.clock() - self._last_refresh < self.min_interval:
                return latest  # refreshed a moment ago: do not loop on a margin longer than URL lifetimes
            if self.refresher is None:
                if refused:
                    raise UrlExpired(
                        f"the presigned URL of file {action.id} was refused (it expired or was revoked) "
                        "and cannot be renewed; read the table again",
                        http_status=403,
                        file_id=action.id,
                    )
                return latest
            self._fresh = _Fresh(self.refresher())
            self.refreshes += 1
            self._last_refresh = self.clock()
            self._listed_at_ms = self._last_refresh * 1000
            if self._fresh.find(action, position) is None:
                raise IncompleteResponse(
                    f"file {action.id} is no longer part of the table after refreshing its "
                    "URL: the table changed during the read",
                    error_code="TABLE_CHANGED",
                    hint=self.hint,
                )
            return self._known(action, position)

    def _known(self, action: FileAction, position: int | None) -> FileAction:
        found = self._fresh.find(action, position)
        if found is None or found.url == action.url:
            return action
        return dataclasses.replace(
            action,
            url=found.url,
            deletion_vector=found.deletion_vector,
            paired_deletion_vector=found.paired_deletion_vector,
            expiration_timestamp=found.expiration_timestamp,
        )

    def read(
        self,
        action: FileAction,
        fn: Callable[[FileAction], T],
        *,
        max_attempts: int = MAX_ATTEMPTS,
        position: int | None = None,
    ) -> T:
        """``fn(action)``, renewing the action's URLs when they expire (before the call) or are
        refused (then calling again), at most ``max_attempts`` calls. ``position``: see :meth:`renew`."""
        current = action
        for attempt in range(max_attempts):
            if self.expiring(current):
                current = self.renew(current, refused=False, position=position)
            try:
                return fn(current)
            except UrlExpired as exc:
                if attempt + 1 >= max_attempts:
                    raise UrlExpired(
                        f"the storage refused the presigned URL of file {action.id} {max_attempts} "
                        "times, fresh URLs included; check that the client's and server's clocks agree "
                        "and that the server may read its storage",
                        http_status=exc.http_status,
                        file_id=action.id,
                    ) from exc
                current = self.renew(current, refused=True, position=position)
        raise AssertionError("unreachable")  # pragma: no cover
