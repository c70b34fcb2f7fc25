"""Structured Streaming from a shared table: offsets, admission control, remove handling.

An offset is ``{"version": v, "index": i, "isStartingVersion": b}`` and means "everything up to
here has been read":

* ``isStartingVersion: true`` — inside the initial snapshot at version ``v``; ``index`` is the
  last snapshot file read (files ordered by id), -1 for none.
* ``isStartingVersion: false`` — every commit before ``v`` has been read, and of commit ``v``
  the files up to ``index`` (ordered by id), -1 for none.

Without a starting option the stream begins with the latest snapshot, then follows new commits
(``POST /query`` with ``startingVersion``/``endingVersion``, or ``GET /changes`` for the change
data feed). Offsets depend only on what the server returns for a version, so a query restarted
from its checkpoint re-plans the same files: nothing is lost or read twice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from deltaport.errors import DeltaportError, UnsupportedOperation
from deltaport.spark import planning
from deltaport.spark.options import DEFAULT_MAX_FILES_PER_TRIGGER, ReadOptions
from deltaport.spark.remote import Refresh
from deltaport.spark.types import arrow_schema, delta_to_spark

__all__ = ["DeltaSharingStreamReader"]

# Cached presigned URLs are fetched again when they expire sooner than this.
URL_REFRESH_MARGIN_MS = 10 * 60 * 1000
_UNLIMITED = 1 << 62


def _offset(version: int, index: int, starting: bool) -> dict:
    return {"version": int(version), "index": int(index), "isStartingVersion": bool(starting)}


def _parse_offset(offset: dict) -> tuple[int, int, bool]:
    try:
        return int(offset["version"]), int(offset["index"]), bool(offset["isStartingVersion"])
    except (KeyError, TypeError, ValueError):
        raise DeltaportError(
            f"not a deltaSharing stream offset: {offset!r}; was the checkpoint written by another source?"
        ) from None


@dataclass
class _Budget:
    """What one micro-batch may still admit. The first file (or commit) is always admitted."""

    max_files: int
    max_bytes: int
    files: int = 0
    bytes: int = 0

    @property
    def full(self) -> bool:
        return bool(self.files) and (self.files >= self.max_files or self.bytes >= self.max_bytes)

    def take(self, entries: Sequence[Any]) -> bool:
        if self.files and (self.files + len(entries) > self.max_files or self.bytes >= self.max_bytes):
            return False
        self.files += len(entries)
        self.bytes += sum(int(f.size) for f in entries)
        return True


@dataclass
class _Version:
    """The admitted file actions of one commit (after the remove policy), and the table info to read them."""

    files: list[Any]
    table: Any
    refresh: Refresh
    error: str | None = None  # raised when the stream reaches this commit


class DeltaSharingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over a shared table's snapshot and commits (or its change data feed)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.target = arrow_schema(schema)
        self.change_feed = options.read_change_feed
        self.remote = options.remote
        self._latest: int | None = None
        self._latest_at = 0.0
        self._frozen: int | None = None
        self._snapshots: dict[int, _Version] = {}
        self._versions: dict[int, _Version] = {}

    # --- offsets ------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        o = self.options
        if o.starting_version is not None:
            return _offset(o.starting_version, -1, False)
        with self.remote.open() as session:
            if o.starting_timestamp is not None:
                return _offset(session.version(o.starting_timestamp), -1, False)
            latest = session.version()
        self._note_latest(latest)
        if o.starting_latest:
            return _offset(latest + 1, -1, False)
        return _offset(latest, -1, True)

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_files_per_trigger is None and o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadMaxFiles(o.max_files_per_trigger or DEFAULT_MAX_FILES_PER_TRIGGER)

    def prepareForTriggerAvailableNow(self) -> None:
        with self.remote.open() as session:
            self._frozen = session.version()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        version, index, starting = _parse_offset(start)
        budget = self._budget(limit)
        upper = self._upper_version()
        if starting:
            files = self._snapshot(version).files
            for i in range(index + 1, len(files)):
                if not budget.take(files[i : i + 1]):
                    return _offset(version, i - 1, True)
            version, index = version + 1, -1
        while version <= upper:
            if budget.full:  # stop before looking at the next commit (it may be one that fails the stream)
                break
            entry = self._version(version, upper)
            if self.change_feed:  # whole commits only: pre- and post-images stay together
                if entry.files and not budget.take(entry.files):
                    return _offset(version, -1, False)
            else:
                for i in range(index + 1, len(entry.files)):
                    if not budget.take(entry.files[i : i + 1]):
                        return _offset(version, i - 1, False)
            version, index = version + 1, -1
        end = _offset(version, index, False)
        return start if end == start else end

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else _offset(self._latest + 1, -1, False)

    # --- planning and reading -----------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        groups = self._files_between(start, end)
        if any(self._stale(files) for _, files in groups):
            self._snapshots.clear()
            self._versions.clear()
            groups = self._files_between(start, end)
        # commits fetched together (same table info, same refresh call) are planned together
        merged: list[tuple[_Version, list[Any]]] = []
        for entry, files in groups:
            if merged and merged[-1][0].table is entry.table and merged[-1][0].refresh is entry.refresh:
                merged[-1][1].extend(files)
            else:
                merged.append((entry, list(files)))
        out: list[InputPartition] = []
        for entry, files in merged:
            out += planning.plan_partitions(
                files,
                entry.table,
                max_partition_bytes=self.options.max_partition_bytes,
                open_cost_bytes=self.options.open_cost_bytes,
                refresh=entry.refresh,
                first_index=len(out),
            )
        return out

    def read(self, partition: InputPartition):
        assert isinstance(partition, planning.FilesPartition)
        return planning.read_partition(partition, self.target, change_feed=self.change_feed)

    def commit(self, end: dict) -> None:
        version, _, starting = _parse_offset(end)
        for v in [v for v in self._versions if v < version]:
            del self._versions[v]
        if not starting:
            self._snapshots.clear()

    def stop(self) -> None:
        self._snapshots.clear()
        self._versions.clear()

    # --- internals ----------------------------------------------------------------------------

    def _budget(self, limit: ReadLimit) -> _Budget:
        if isinstance(limit, ReadAllAvailable):
            return _Budget(_UNLIMITED, _UNLIMITED)
        o = self.options
        default_files = _UNLIMITED if o.max_bytes_per_trigger else DEFAULT_MAX_FILES_PER_TRIGGER
        max_files = o.max_files_per_trigger or default_files
        max_bytes = o.max_bytes_per_trigger or _UNLIMITED
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        return _Budget(max_files, max_bytes)

    def _note_latest(self, latest: int) -> None:
        self._latest, self._latest_at = latest, time.monotonic()
        if not self.remote.answered:  # later micro-batches wait for a restarting server
            self.remote = dataclasses.replace(self.remote, answered=True)

    def _upper_version(self) -> int:
        if self._frozen is not None:
            return self._frozen
        if self._latest is None or time.monotonic() - self._latest_at >= self.options.version_poll_seconds:
            with self.remote.open() as session:
                self._note_latest(session.version())
        assert self._latest is not None
        return self._latest

    def _files_between(self, start: dict, end: dict) -> list[tuple[_Version, list[Any]]]:
        """(commit or snapshot, files) groups of everything after ``start`` up to and including ``end``."""
        version, index, starting = _parse_offset(start)
        end_version, end_index, end_starting = _parse_offset(end)
        groups: list[tuple[_Version, list[Any]]] = []
        if starting:
            snap = self._snapshot(version)
            stop = end_index + 1 if end_starting else len(snap.files)
            groups.append((snap, snap.files[index + 1 : stop]))
            if end_starting:
                return [g for g in groups if g[1]]
            version, index = version + 1, -1
        upper = max(end_version, version)
        while version < end_version or (version == end_version and end_index >= 0):
            entry = self._version(version, upper)
            stop = end_index + 1 if version == end_version else len(entry.files)
            groups.append((entry, entry.files[index + 1 : stop]))
            version, index = version + 1, -1
        return [g for g in groups if g[1]]

    def _stale(self, files: Sequence[Any]) -> bool:
        horizon = time.time() * 1000 + URL_REFRESH_MARGIN_MS
        return any(f.expiration_timestamp is not None and f.expiration_timestamp < horizon for f in files)

    def _snapshot(self, version: int) -> _Version:
        cached = self._snapshots.get(version)
        if cached is not None:
            return cached
        with self.remote.open() as session:
            result = session.snapshot(version=version)
            files = sorted(result.files, key=lambda f: f.id)
            if self.change_feed:
                stamp = self._commit_timestamp(session, version)
                files = [dataclasses.replace(f, change_type="insert", version=version, timestamp=stamp) for f in files]
        entry = _Version(files, result.table, Refresh(self.remote, "snapshot", {"version": version}))
        self._snapshots = {version: entry}
        return entry

    def _commit_timestamp(self, session: Any, version: int) -> int | None:
        try:
            stamps = [f.timestamp for f in session.commits(version, version).files if f.timestamp is not None]
        except DeltaportError:
            return None
        return stamps[0] if stamps else None

    def _version(self, version: int, upper: int) -> _Version:
        entry = self._versions.get(version)
        if entry is None:
            self._fetch(version, max(version, min(upper, version + self.options.max_versions_per_rpc - 1)))
            entry = self._versions[version]
        if entry.error:
            raise UnsupportedOperation(entry.error)
        return entry

    def _fetch(self, first: int, last: int) -> None:
        with self.remote.open() as session:
            if self.change_feed:
                result = session.changes(starting_version=first, ending_version=last)
            else:
                result = session.commits(first, last)
        by_version: dict[int, list[Any]] = {v: [] for v in range(first, last + 1)}
        for f in result.files:
            if f.version is not None and first <= f.version <= last:
                by_version[f.version].append(f)
        changed = {v: info for v, info in result.metadata_changes if first <= v <= last}
        table = result.table
        refresh = Refresh(
            self.remote,
            "changes" if self.change_feed else "commits",
            {"starting_version": first, "ending_version": last},
        )
        for v in range(first, last + 1):
            if v in changed:
                table = changed[v]
            files = sorted(by_version[v], key=lambda f: (f.id, f.change_type or ""))
            error = self._schema_error(changed[v], v) if v in changed else None
            if error is None and not self.change_feed:
                files, error = self._apply_remove_policy(files, v)
            self._versions[v] = _Version(files, table, refresh, error)

    def _apply_remove_policy(self, files: list[Any], version: int) -> tuple[list[Any], str | None]:
        o = self.options
        adds = [f for f in files if f.change_type != "delete"]
        removes = [f for f in files if f.change_type == "delete"]
        if not removes:
            return adds, None
        if adds:
            if o.skip_change_commits:
                return [], None
            if o.ignore_changes:
                return adds, None
            return [], (
                f"Detected a data update (for example file id {removes[0].id}) in the source table "
                f"{self.remote.name} at version {version}. This is currently not supported. If you'd like "
                "to skip commits that update data, set the option 'skipChangeCommits' to 'true' (or "
                "'ignoreChanges' to 'true' to re-read rewritten files)."
            )
        if o.ignore_deletes or o.ignore_changes or o.skip_change_commits:
            return [], None
        return [], (
            f"Detected deleted data (for example file id {removes[0].id}) from streaming source "
            f"{self.remote.name} at version {version}. This is currently not supported. If you'd like to "
            "ignore deletes, set the option 'ignoreDeletes' to 'true'."
        )

    def _declared(self) -> StructType:
        if not self.change_feed:
            return self.schema
        return StructType(self.schema.fields[:-3])

    def _schema_error(self, table: Any, version: int) -> str | None:
        if delta_to_spark(table.schema_json) == self._declared():
            return None
        return (
            f"Detected incompatible schema change in {self.remote.name} at version {version}: the table schema "
            "is no longer the schema this stream was started with. Please restart the query (with a new "
            "checkpoint if the change is not additive)."
        )
