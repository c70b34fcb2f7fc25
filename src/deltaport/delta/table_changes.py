"""A table's changes over a range of versions, for change data feed and streaming reads.

:class:`TableChanges` is the range as a value: validated once (its versions against the table,
its commits present in the log, the change data feed recorded at its start and end), then read
lazily, commit by commit, from any version in it (a reader's position). Parsed commits are shared
by every reader through a bounded :class:`CommitCache`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaport.delta.actions import CommitInfo, Metadata, Protocol, row_to_action
from deltaport.delta.commit_json import parse_actions, peek_protocol_metadata
from deltaport.delta.history import CommitHistory
from deltaport.delta.log_segment import LogListing
from deltaport.delta.table_config import TableConfig
from deltaport.errors import (
    ChangeDataNotRecorded,
    ChangesPositionGone,
    DeltaportError,
    InvalidVersionRange,
    ObjectNotFound,
    TableFilesMissing,
    VersionNotFound,
)

if TYPE_CHECKING:
    from deltaport.delta.table import DeltaTable

#: The row counts a MERGE reports; all zero means it changed no row.
_MERGE_ROW_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


@dataclass(frozen=True, eq=False)
class CommitChanges:
    """The actions of one commit. ``config`` is the protocol + metadata in effect after it."""

    version: int
    timestamp: int | None
    adds: pa.Table
    removes: pa.Table
    cdcs: pa.Table
    protocol: Protocol | None
    metadata: Metadata | None
    commit_info: CommitInfo | None
    config: TableConfig

    @property
    def has_cdc(self) -> bool:
        return bool(self.cdcs.num_rows > 0)

    def actions(self, kind: str, *, data_change_only: bool = False) -> Iterator[dict[str, Any]]:
        """File actions of one kind ("add", "remove", "cdc") as dicts in log form."""
        table = {"add": self.adds, "remove": self.removes, "cdc": self.cdcs}[kind]
        if not table.num_rows:
            return
        for row in table.to_pylist():
            if data_change_only and kind != "cdc" and row.get("dataChange") is False:
                continue
            yield row_to_action(row)

    def data_changes(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The commit's adds then removes that change data (``dataChange`` not false), as
        (kind, action): what a streaming read of the commit sees."""
        for kind in ("add", "remove"):
            for action in self.actions(kind, data_change_only=True):
                yield kind, action

    def change_feed(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The commit's change data, as (kind, action): its ``cdc`` files when it wrote any, else
        its data-changing adds and removes (each row of an added file an insert, of a removed one a
        delete), and nothing for a MERGE that changed no row (its file actions are bookkeeping)."""
        if self.has_cdc:
            yield from (("cdc", action) for action in self.actions("cdc"))
        elif not self.is_empty_merge:
            yield from self.data_changes()

    @property
    def is_empty_merge(self) -> bool:
        info = self.commit_info
        if info is None or (info.operation or "").upper() != "MERGE":
            return False
        metrics = info.operation_metrics or {}
        return all(str(metrics.get(key, "")) == "0" for key in _MERGE_ROW_METRICS)


#: A parsed commit's identity: table URI, commit file path, its size, and its version.
CommitKey = tuple[str, str, int, int, int]


class CommitCache:
    """LRU of parsed commits (timestamps left out), bounded by entry count and by Arrow bytes.

    Keyed by the table and the commit file's path, size and version: a commit file never changes
    once written, so an entry stays right for as long as the file is there. Shared by every table
    and every reader of a process, so concurrent readers of one change feed parse each commit once.
    """

    def __init__(self, max_entries: int = 1024, max_bytes: int = 256 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[CommitKey, tuple[CommitChanges, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: CommitKey) -> CommitChanges | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: CommitKey, change: CommitChanges) -> None:
        size = change.adds.nbytes + change.removes.nbytes + change.cdcs.nbytes
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes += size - (old[1] if old else 0)
            self._items[key] = (change, size)
            while len(self._items) > 1 and (len(self._items) > self.max_entries or self._bytes > self.max_bytes):
                _, (_, evicted) = self._items.popitem(last=False)  # the newest stays, even over budget
                self._bytes -= evicted

    def __len__(self) -> int:
        return len(self._items)


_default_commits: CommitCache | None = None
_default_commits_lock = threading.Lock()


def default_commit_cache() -> CommitCache:
    """The process-wide cache of parsed commits, created on first use."""
    global _default_commits
    with _default_commits_lock:
        if _default_commits is None:
            _default_commits = CommitCache()
        return _default_commits


@dataclass(frozen=True, eq=False)
class TableChanges:
    """The commits of one table in [start, end], made only by :meth:`try_new`, which checks:

    - ``start`` is not after the table's ``latest`` version and ``end`` not before ``start``;
      an ``end`` after ``latest`` is clamped to it for the change data feed, refused otherwise;
    - every commit from where the reader begins (``start``, or the version it resumes at) to
      ``end`` is in the log;
    - for the change data feed, that it was recorded at ``start`` and at ``end``; each commit in
      between is checked as :meth:`commits` reads it, before it is returned.

    ``start_config`` is the protocol and metadata in effect at ``start``.
    """

    table: DeltaTable
    listing: LogListing
    history: CommitHistory
    start: int
    end: int
    latest: int
    start_config: TableConfig
    change_data: bool

    @classmethod
    def try_new(
        cls,
        table: DeltaTable,
        start: int,
        end: int | None = None,
        *,
        change_data: bool = False,
        resume: int | None = None,
    ) -> TableChanges:
        """The validated range; ``resume``: the version a reader continues from (a page token's),
        in a range whose ``end`` an earlier read pinned."""
        listing = _listed_for_resume(table, resume, end) if resume is not None and end is not None else None
        checked = listing is not None
        if listing is None:
            listing = table.refresh_listing(covering=0)
        latest = listing.latest_commit if listing.latest_commit is not None else max(listing.checkpoints)
        end = _checked_end(start, end, latest, clamp=change_data, table=table.uri)
        first = start if resume is None else resume
        _check_present(listing, first, end, resumed=resume is not None, table=table.uri)
        if resume is not None and not checked:
            _check_still_there(table, listing, resume)
        start_config = _start_config(table, listing, start, resumed=resume is not None)
        changes = cls(table, listing, table.history(listing), start, end, latest, start_config, change_data)
        if change_data:
            changes._check_recorded_at_ends()
        return changes

    def _not_recorded(self, version: int) -> ChangeDataNotRecorded:
        return ChangeDataNotRecorded(
            f"Error getting change data for range [{self.start}, {self.end}] as change data was not "
            f"recorded for version [{version}]",
            table=self.table.uri,
        )

    def _check_recorded_at_ends(self) -> None:
        if not self.start_config.change_data_feed_enabled:
            raise self._not_recorded(self.start)
        if not self.table.config_at(self.end, listing=self.listing).change_data_feed_enabled:
            for _ in self.commits():  # name the first version without it, as a full read would
                pass

    def commits(self, first: int | None = None) -> Iterator[CommitChanges]:
        """The commits from ``first`` (default ``start``) to ``end``, each read when it is asked for."""
        config: TableConfig | None = None
        for version in range(self.start if first is None else first, self.end + 1):
            change = self._commit(version, config, resumed=first is not None and version == first > self.start)
            if self.change_data and not change.config.change_data_feed_enabled:
                raise self._not_recorded(version)
            config = change.config
            change = _with_remove_sizes(self.table, change)
            yield dataclasses.replace(change, timestamp=self.history.timestamp_of(version))

    def _commit(self, version: int, before: TableConfig | None, *, resumed: bool) -> CommitChanges:
        return _read_commit(self.table, self.listing, version, before, resumed=resumed)


def _read_commit(
    table: DeltaTable, listing: LogListing, version: int, before: TableConfig | None, *, resumed: bool = False
) -> CommitChanges:
    """Commit ``version`` parsed (from the cache when another reader parsed it); ``before``: the
    config after the previous commit, None when it is not known yet."""
    lf = listing.commits[version]
    key = (table.uri, lf.path, lf.info.size, lf.info.mtime_ms, version)  # a rewritten commit is another
    cached = table.commit_cache.get(key)
    if cached is not None:
        return cached
    try:
        if before is None and version > 0:
            before = table.config_at(version - 1, listing=listing)
        data = table.read_commit(lf)
    except VersionNotFound:  # TableFilesMissing too: the commit, or one before it, is gone
        if resumed:
            raise _position_gone(version, table.uri) from None
        raise
    change = _parse_commit(data, version, before, where=lf.path, table=table.uri)
    table.commit_cache.put(key, change)
    table.note_config(version, change.config)
    return change


def _with_remove_sizes(table: DeltaTable, change: CommitChanges) -> CommitChanges:
    """``change`` with a size for each remove the log wrote without one (the field is optional in
    the log; old writers leave it out): the size of the file it removes, from that file's add in
    the table as the commit before left it. A file not found there keeps no size."""
    sizes = change.removes.column("size")
    if not sizes.null_count or change.version == 0:
        return change
    try:
        live = table.snapshot(change.version - 1).live
    except DeltaportError:  # the version before is gone with log cleanup, or cannot be read
        return change
    at = pc.index_in(change.removes.column("path"), value_set=live.column("path").combine_chunks())
    filled = pc.coalesce(sizes, pc.take(live.column("size"), at))
    removes = change.removes.set_column(change.removes.schema.get_field_index("size"), "size", filled)
    return dataclasses.replace(change, removes=removes)


def _checked_end(start: int, end: int | None, latest: int, *, clamp: bool, table: str) -> int:
    """The range's end, once ``start`` and ``end`` are checked against the ``latest`` version."""
    if start < 0:
        raise InvalidVersionRange(f"Provided Start version({start}) for reading change data is invalid.", table=table)
    if start > latest:
        raise InvalidVersionRange(
            f"Provided Start version({start}) for reading change data is invalid. Start "
            f"version cannot be greater than the latest version of the table({latest}).",
            table=table,
        )
    if end is not None and end > latest:
        if not clamp:
            raise InvalidVersionRange(
                f"Provided end version({end}) is invalid. End version cannot be greater "
                f"than the latest version of the table({latest}).",
                table=table,
            )
        end = latest
    if end is not None and end < start:
        raise InvalidVersionRange(
            f"CDF range from start {start} to end {end} was invalid. End cannot be before start.", table=table
        )
    return latest if end is None else end


def _check_present(listing: LogListing, first: int, end: int, *, resumed: bool, table: str) -> None:
    missing = next((v for v in range(first, end + 1) if v not in listing.commits), None)
    if missing is None:
        return
    if resumed and missing == first:
        raise _position_gone(first, table)
    raise TableFilesMissing(
        f"changes for versions {first}..{end} cannot be read: commit {missing} is no longer in the log", table=table
    )


def _listed_for_resume(table: DeltaTable, resume: int, end: int) -> LogListing | None:
    """The table's last listing of its log, when a reader resuming at ``resume`` in a range ending
    at ``end`` can read from it without listing the log again: it lists the whole log, commits
    ``resume`` and ``end`` among them, and both are still the files it lists (same size and
    modification time). Two small reads instead of a listing: a commit removed by log cleanup
    fails the first (the reader's position is gone), a log rewritten or replaced since fails the
    second. None when any of that does not hold: the log is listed again (see ``refresh_listing``)."""
    listing = table.listed
    if listing is None or listing.listed_from != 0 or resume not in listing.commits or end not in listing.commits:
        return None
    for version in dict.fromkeys((resume, end)):
        lf = listing.commits[version]
        try:
            info = table.store.head(lf.path)
        except ObjectNotFound:
            if version == resume:
                raise _position_gone(resume, table.uri) from None
            return None
        if (info.size, info.mtime_ms) != (lf.info.size, lf.info.mtime_ms):
            return None
    return listing


def _check_still_there(table: DeltaTable, listing: LogListing, version: int) -> None:
    """Refuse to resume at a commit log cleanup removed since the log was listed (a parsed copy in
    the cache would otherwise hide it for a while)."""
    try:
        table.store.head(listing.commits[version].path)
    except ObjectNotFound:
        raise _position_gone(version, table.uri) from None


def _start_config(table: DeltaTable, listing: LogListing, start: int, *, resumed: bool) -> TableConfig:
    """The config at ``start``: from its commit, which the feed reads first (and the cache keeps),
    or, for a reader resuming later in the range, as the log says (known when this process read it)."""
    if not resumed:
        return _read_commit(table, listing, start, None).config
    try:
        return table.config_at(start, listing=listing)
    except VersionNotFound:  # the range's first commits are gone, and what they set with them
        raise _position_gone(start, table.uri) from None


def _position_gone(version: int, table: str) -> ChangesPositionGone:
    return ChangesPositionGone(
        f"The change feed cannot continue from version {version}: log cleanup has removed that "
        f"commit from the table's log. Restart the feed from a later version (a startingVersion "
        f"after {version}).",
        table=table,
    )


def _parse_commit(data: bytes, version: int, before: TableConfig | None, *, where: str, table: str) -> CommitChanges:
    """One commit's actions, and the config in effect after it (``before`` and what it changes)."""
    protocol, metadata = peek_protocol_metadata(data, where=where, table=table)
    config = before
    if protocol is not None or metadata is not None or config is None:
        config = TableConfig.build(
            protocol or (config.protocol if config else None),
            metadata or (config.metadata if config else None),
            table=table,
        )
    af = parse_actions(data, config.physical_partition_columns, where=where, table=table)
    return CommitChanges(version, None, af.adds, af.removes, af.cdcs, af.protocol, af.metadata, af.commit_info, config)
