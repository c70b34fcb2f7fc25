"""The entry point of the Delta log engine: one table, its snapshots, history and changes.

Snapshots are cached (see cache.py) and brought up to date incrementally: a request for the
latest version lists only the log files after the newest cached version and replays just those
commits on top of the cached live files.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from deltaport.delta.actions import Metadata, Protocol
from deltaport.delta.cache import LruMemo, SnapshotCache
from deltaport.delta.checkpoint import checkpoint_metadata_only, read_checkpoint
from deltaport.delta.commit_json import (
    empty_file_table,
    parse_actions,
    peek_in_commit_timestamp,
    peek_protocol_metadata,
)
from deltaport.delta.history import CommitHistory, to_epoch_ms
from deltaport.delta.log_path import LogFile, LogFileKind
from deltaport.delta.log_segment import LogListing, LogSegment, build_segment, list_log, list_log_from_hint
from deltaport.delta.replay import replay, touched_keys, with_keys
from deltaport.delta.snapshot import Snapshot
from deltaport.delta.streamed import StreamedSnapshot, checkpoint_sources
from deltaport.delta.table_changes import CommitCache, CommitChanges, TableChanges, default_commit_cache
from deltaport.delta.table_config import TableConfig
from deltaport.errors import (
    CorruptLog,
    NotADeltaTable,
    ObjectNotFound,
    QueuedFailures,
    StorageUnavailable,
    TableFilesMissing,
    VersionNotFound,
)
from deltaport.storage import store_for
from deltaport.storage.base import ObjectStore

log = logging.getLogger("deltaport.delta")

#: Configs a table remembers by version (see ``DeltaTable._configs``).
CONFIG_MEMO_ENTRIES = 1024

_default_cache: SnapshotCache | None = None
_default_cache_lock = threading.Lock()


def default_cache() -> SnapshotCache:
    """The process-wide snapshot cache, created on first use."""
    global _default_cache
    with _default_cache_lock:
        if _default_cache is None:
            _default_cache = SnapshotCache()
        return _default_cache


class DeltaTable:
    """A Delta table at a location (path, ``file://`` URI or object-store URL)."""

    def __init__(
        self,
        location: str,
        *,
        store: ObjectStore | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache: SnapshotCache | None = None,
        commit_cache: CommitCache | None = None,
        config_memo_entries: int = CONFIG_MEMO_ENTRIES,
    ) -> None:
        self.location = str(location)
        self.store = store if store is not None else store_for(self.location, storage_options)
        self.uri = self.store.root_uri
        self.cache = cache if cache is not None else default_cache()
        self.commit_cache = commit_cache if commit_cache is not None else default_commit_cache()
        self._lock = threading.RLock()
        self._failures = QueuedFailures()  # storage failures of the lock's holders (see _turn)
        self._listing: LogListing | None = None
        self._ict: dict[int, int | None] = {}
        # the config in effect at a version, as snapshots and change feeds worked it out (bounded:
        # a feed notes one for each commit it reads; resuming needs the ones near where it stops)
        self._configs: LruMemo[int, TableConfig] = LruMemo(config_memo_entries)
        self._unchecked_configs: LruMemo[int, TableConfig] = LruMemo(config_memo_entries)  # for history: not checked
        self._history: tuple[LogListing, int, int | None, CommitHistory] | None = None  # see history()

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r})"

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """Hold the table's lock. If storage failed for a holder while this call waited for the lock,
        fail the same way at once (a 503) instead of trying again: when a store hangs, requests
        queue here, and each would otherwise wait out its own timeout in turn, holding a server
        thread all the while (45 queued requests took the thread pool for minutes)."""
        mark = self._failures.mark()
        with self._lock:
            self._failures.check(mark)
            try:
                yield
            except StorageUnavailable as exc:
                self._failures.failed(exc)
                raise

    # --- the log ----------------------------------------------------------------------------

    @property
    def listed(self) -> LogListing | None:
        """The last listing of the log, without listing again."""
        return self._listing

    def refresh_listing(self, *, covering: int | None = None) -> LogListing:
        """List the log: the first time from the checkpoint ``_last_checkpoint`` names, later only
        after the newest known version. ``covering=0`` (or any version before where the listing
        started) lists the whole log: time travel, history and change ranges need it."""
        with self._turn():
            if self._listing is not None and self._listing.latest_commit is not None:
                self._list_newer(self._listing)
            if self._listing is None or self._listing.latest_commit is None:
                whole = covering == 0  # the hint would only be read to be listed past
                self._listing = (
                    list_log(self.store, table=self.uri) if whole else list_log_from_hint(self.store, table=self.uri)
                )
            if covering is not None and covering < self._listing.listed_from:
                self._listing = list_log(self.store, table=self.uri)
            if self._listing.latest_commit is None and not self._listing.checkpoints:
                raise NotADeltaTable(
                    "not a Delta table: no _delta_log directory, or it holds no commit files", table=self.uri
                )
            return self._listing

    def _list_newer(self, listing: LogListing) -> None:
        """Add what was written after ``listing``'s newest commit, listed from that commit on: the
        same listing tells whether the log is still the one cached. When that commit is gone or is
        another file now (the table was deleted, rewritten from an older version, or replaced by
        another table in the same place), everything known of the log is dropped (see ``forget``)."""
        known = listing.commits[max(listing.commits)]
        newer = list_log(self.store, from_version=known.version, table=self.uri)
        seen = newer.commits.pop(known.version, None)
        if seen is None or (seen.info.size, seen.info.mtime_ms) != (known.info.size, known.info.mtime_ms):
            self.forget(f"its commit {known.version} is gone or was rewritten")
            return
        listing.commits.update(newer.commits)
        for v, sets in newer.checkpoints.items():
            have = {tuple(lf.path for lf in s) for s in listing.checkpoints.get(v, [])}
            listing.checkpoints.setdefault(v, []).extend(s for s in sets if tuple(lf.path for lf in s) not in have)
        paths = {lf.path for lf in listing.compacted}
        listing.compacted.extend(lf for lf in newer.compacted if lf.path not in paths)
        listing.crcs.update(newer.crcs)

    def forget(self, why: str) -> None:
        """Drop the listing, the configs, the commit timestamps and the cached snapshots of this table:
        its log changed in a way no writer of the same table changes it. Logged once per change."""
        log.warning("table %s: %s; its cached state is dropped and it is read again from storage", self.uri, why)
        self._listing = None
        self._configs.clear()
        self._unchecked_configs.clear()
        self._ict.clear()
        self._history = None
        self.cache.invalidate(self.uri)

    def latest_version(self) -> int:
        listing = self.refresh_listing()
        latest = listing.latest_commit
        return latest if latest is not None else max(listing.checkpoints)

    def earliest_version(self) -> int:
        """The first version that can still be reconstructed from the log."""
        listing = self.refresh_listing(covering=0)
        earliest = listing.earliest_reconstructable()
        if earliest is None:
            raise VersionNotFound(
                "no version of this table can be reconstructed: commit 0 and every checkpoint are missing",
                table=self.uri,
            )
        return earliest

    def read_commit(self, lf: LogFile) -> bytes:
        """The bytes of commit file ``lf``; TableFilesMissing when it is gone from storage."""
        try:
            return self.store.read(lf.path)
        except ObjectNotFound as exc:
            raise TableFilesMissing(f"commit file {lf.path} disappeared from the log", table=self.uri) from exc

    # --- configuration (protocol + metadata) ------------------------------------------------

    def config_at(self, version: int, *, check: bool = True, listing: LogListing | None = None) -> TableConfig:
        """Protocol and metadata in effect at ``version``, without reading file actions (from
        ``listing`` when given, else from the log listed anew)."""
        cached = self._configs.get(version)
        if cached is not None:
            return cached
        return self._config_in(listing or self.refresh_listing(covering=version), version, check=check)

    @property
    def configs_remembered(self) -> int:
        """How many versions' configs the table remembers (at most ``config_memo_entries``)."""
        return len(self._configs)

    def note_config(self, version: int, config: TableConfig) -> None:
        """Remember the config in effect at ``version``, worked out by a reader of the log
        (a change feed), so that resuming after it needs no reading back."""
        self._configs.put(version, config, replace=False)

    def _config_in(self, listing: LogListing, version: int, *, check: bool = True) -> TableConfig:
        cached = self._configs.get(version)
        if cached is not None:
            return cached
        unchecked = self._unchecked_configs.get(version)
        if unchecked is not None and not check:
            return unchecked
        protocol: Protocol | None
        metadata: Metadata | None
        if unchecked is not None:
            protocol, metadata = unchecked.protocol, unchecked.metadata
        else:
            protocol, metadata = self._newest_protocol_metadata(build_segment(listing, version, table=self.uri), {})
        cfg = TableConfig.build(protocol, metadata, table=self.uri, check=check)
        (self._configs if check else self._unchecked_configs).put(version, cfg)
        return cfg

    def _newest_protocol_metadata(
        self, segment: LogSegment, commit_bytes: dict[int, bytes]
    ) -> tuple[Protocol | None, Metadata | None]:
        protocol = metadata = None
        for lf in reversed(segment.commits):
            data = commit_bytes.get(lf.version)
            if data is None:
                data = self.read_commit(lf)
            p, m = peek_protocol_metadata(data, where=lf.path, table=self.uri)
            protocol = protocol or p
            metadata = metadata or m
            if protocol and metadata:
                return protocol, metadata
        if segment.checkpoint_parts:
            cp = checkpoint_metadata_only(self.store, list(segment.checkpoint_parts), table=self.uri)
            protocol = protocol or cp.protocol
            metadata = metadata or cp.metadata
        return protocol, metadata

    # --- snapshots --------------------------------------------------------------------------

    def snapshot(self, version: int | None = None, *, timestamp: str | int | None = None) -> Snapshot:
        """The table at ``version`` (or at the latest commit at or before ``timestamp``; else latest)."""
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        with self._turn():
            listing, version = self._version_of(version, timestamp)
            cached = self.cache.get(self.uri, version)
            if cached is not None:
                return cached
            base = self.cache.best_base(self.uri, version)
            snap = None
            # a checkpoint in between is what other readers use: prefer it over the cached base
            if (
                base is not None
                and all(v in listing.commits for v in range(base.version + 1, version + 1))
                and not any(base.version < cp <= version for cp in listing.checkpoints)
            ):
                snap = self._apply_commits(base, [listing.commits[v] for v in range(base.version + 1, version + 1)])
            if snap is None:
                snap = self._load(listing, version)
            self.cache.put(snap)
            return snap

    def _version_of(self, version: int | None, timestamp: str | int | None) -> tuple[LogListing, int]:
        """The log listed far enough for the version asked for (by number, by ``timestamp``, else
        the latest), and that version."""
        listing = self.refresh_listing(covering=0 if timestamp is not None else version)
        if timestamp is not None:
            version = self.history(listing).version_at_or_before(to_epoch_ms(timestamp))
        if version is None:
            version = listing.latest_commit if listing.latest_commit is not None else max(listing.checkpoints)
        return listing, version

    def streamed(
        self, version: int | None = None, *, timestamp: str | int | None = None, above: int, cached: bool = True
    ) -> Snapshot | StreamedSnapshot:
        """The table at the version :meth:`snapshot` would read: streamed (streamed.py) when its
        checkpoint has at least ``above`` rows, unless that version is cached (and ``cached``
        allows taking it), else the snapshot."""
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        with self._turn():
            listing, version = self._version_of(version, timestamp)
            if not cached or self.cache.get(self.uri, version) is None:
                streamed = self._streamed(build_segment(listing, version, table=self.uri), above)
                if streamed is not None:
                    return streamed
        return self.snapshot(version)

    def _streamed(self, segment: LogSegment, above: int) -> StreamedSnapshot | None:
        """``segment`` as a streamed snapshot, when its checkpoint (parquet files, or a v2 one in JSON)
        holds at least ``above`` rows and its footers read; else None (a whole snapshot, which also
        falls back from a corrupt checkpoint)."""
        parts = segment.checkpoint_parts
        if not parts or any(p.fmt != "parquet" and p.kind is not LogFileKind.CHECKPOINT_V2 for p in parts):
            return None
        try:
            sources, rows = checkpoint_sources(self.store, tuple(p.path for p in parts))
        except CorruptLog:
            return None
        if rows < above:
            return None
        config, pairs = self._segment_commits(segment)
        later = replay(empty_live(config.physical_partition_columns), pairs, self.uri)
        version = segment.version
        touched = touched_keys(pairs, self.uri)
        timestamp = self._timestamp_of(version)
        return StreamedSnapshot(self.uri, version, config, timestamp, self.store, sources, later, touched)

    def _apply_commits(self, base: Snapshot, commits: list[LogFile]) -> Snapshot | None:
        """``base`` brought forward by ``commits``; None when partitioning or the table's id changed
        (a full load, which for a new id is another table's: nothing cached is kept)."""
        datas = {lf.version: self.read_commit(lf) for lf in commits}
        protocol, metadata = base.protocol, base.metadata
        for lf in commits:
            p, m = peek_protocol_metadata(datas[lf.version], where=lf.path, table=self.uri)
            protocol, metadata = p or protocol, m or metadata
        if metadata is not None and base.metadata is not None and metadata.id != base.metadata.id:
            self.forget(f"its table id changed from {base.metadata.id} to {metadata.id} at commit {lf.version}")
            return None
        config = TableConfig.build(protocol, metadata, table=self.uri)
        self._configs.put(commits[-1].version, config)
        pv = config.physical_partition_columns
        if pv != base.config.physical_partition_columns:
            return None
        parsed = [parse_actions(datas[lf.version], pv, where=lf.path, table=self.uri) for lf in commits]
        live = replay(base.live, [(a.adds, a.removes) for a in parsed], self.uri)
        version = commits[-1].version
        return Snapshot(self.uri, version, config, live, self._timestamp_of(version))

    def _load(self, listing: LogListing, version: int) -> Snapshot:
        excluded: set[int] = set()
        while True:
            segment = build_segment(listing, version, table=self.uri, exclude_checkpoints=frozenset(excluded))
            try:
                return self._load_segment(segment)
            except CorruptLog:
                # a broken checkpoint: fall back to an older one (or commit 0) when the log allows
                if segment.checkpoint_version is None:
                    raise
                listing = self.refresh_listing(covering=0)  # what is before it, when it was listed from it
                excluded.add(segment.checkpoint_version)
                try:
                    build_segment(listing, version, table=self.uri, exclude_checkpoints=frozenset(excluded))
                except VersionNotFound:
                    excluded.discard(segment.checkpoint_version)
                    return self._load_segment(segment)  # re-raise the checkpoint's own error

    def _segment_commits(self, segment: LogSegment) -> tuple[TableConfig, list[tuple[pa.Table, pa.Table]]]:
        """The config at ``segment``'s version (remembered) and the (adds, removes) of each of its
        commits after the checkpoint, in order."""
        datas = {lf.version: self.read_commit(lf) for lf in segment.commits}
        protocol, metadata = self._newest_protocol_metadata(segment, datas)
        config = TableConfig.build(protocol, metadata, table=self.uri)
        self._configs.put(segment.version, config)
        pv = config.physical_partition_columns
        pairs = []
        for lf in segment.commits:
            actions = parse_actions(datas.pop(lf.version), pv, where=lf.path, table=self.uri)
            pairs.append((actions.adds, actions.removes))
        return config, pairs

    def _load_segment(self, segment: LogSegment) -> Snapshot:
        config, pairs = self._segment_commits(segment)
        pv = config.physical_partition_columns
        base = None
        if segment.checkpoint_parts:
            base = read_checkpoint(self.store, list(segment.checkpoint_parts), pv, table=self.uri).adds
        live = replay(base, pairs, self.uri)
        if live is None:
            live = empty_live(pv)
        return Snapshot(self.uri, segment.version, config, live, self._timestamp_of(segment.version))

    # --- history ----------------------------------------------------------------------------

    def history(self, listing: LogListing | None = None) -> CommitHistory:
        """Commit timestamps of every commit in ``listing`` (default: the whole log), built once per
        state of the listing: kept until the listing is replaced or gains commits (a listing only
        ever gains commits; a log that changed otherwise is listed anew, see ``forget``)."""
        listing = listing or self.refresh_listing(covering=0)
        latest = listing.latest_commit
        kept = self._history
        if kept is not None and kept[0] is listing and kept[1:3] == (len(listing.commits), latest):
            return kept[3]
        history = self._build_history(listing)
        self._history = (listing, len(listing.commits), latest, history)
        return history

    def _build_history(self, listing: LogListing) -> CommitHistory:
        mtimes = {v: lf.info.mtime_ms for v, lf in listing.commits.items()}
        ict_from = None
        if listing.latest_commit is not None:
            try:
                cfg = self._config_in(listing, listing.latest_commit, check=False)
            except (VersionNotFound, CorruptLog):
                cfg = None
            if cfg is not None and cfg.in_commit_timestamps_enabled:
                ict_from = cfg.in_commit_timestamp_enablement_version or 0
        return CommitHistory.build(mtimes, ict_from=ict_from, read_ict=self._read_ict, table=self.uri)

    def _read_ict(self, version: int) -> int | None:
        if version not in self._ict:
            lf = self._listing.commits.get(version) if self._listing else None
            self._ict[version] = peek_in_commit_timestamp(self.read_commit(lf)) if lf else None
        return self._ict[version]

    def _timestamp_of(self, version: int) -> int | None:
        try:
            return self.history(self._listing).timestamp_of(version)
        except (VersionNotFound, CorruptLog):
            return None

    def version_at_or_before(self, timestamp: str | int) -> int:
        return self.history().version_at_or_before(to_epoch_ms(timestamp))

    def version_at_or_after(self, timestamp: str | int) -> int:
        return self.history().version_at_or_after(to_epoch_ms(timestamp))

    # --- changes ----------------------------------------------------------------------------

    def changes(self, start: int, end: int | None = None) -> list[CommitChanges]:
        """Every commit in [start, end] (end defaults to latest), with its file actions."""
        return list(TableChanges.try_new(self, start, end).commits())


def empty_live(pv: list[str]) -> pa.Table:
    """The live-file table of a snapshot without files."""
    return with_keys(empty_file_table("add", pv))
