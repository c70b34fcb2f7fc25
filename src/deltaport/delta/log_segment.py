"""The files that make up one version: a complete checkpoint plus the later commits.

Invariants checked: commits after the checkpoint are contiguous and end at the version; a
multi-part checkpoint is used only when every part is present; without a usable checkpoint the
commits must start at 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from deltaport.delta.log_path import LAST_CHECKPOINT, LOG_DIR, LogFile, LogFileKind, parse_log_file
from deltaport.errors import NotADeltaTable, ObjectNotFound, VersionNotFound
from deltaport.storage.base import ObjectStore


@dataclass
class LogListing:
    """Everything recognised in ``_delta_log``, by kind and version."""

    commits: dict[int, LogFile] = field(default_factory=dict)
    checkpoints: dict[int, list[list[LogFile]]] = field(default_factory=dict)  # complete sets only
    compacted: list[LogFile] = field(default_factory=list)
    crcs: dict[int, LogFile] = field(default_factory=dict)
    #: The first version listed: 0 for the whole log; a checkpoint's version when the listing
    #: started at the checkpoint ``_last_checkpoint`` names (enough for that version and later).
    listed_from: int = 0

    @property
    def latest_commit(self) -> int | None:
        return max(self.commits) if self.commits else None

    def earliest_reconstructable(self) -> int | None:
        """Smallest version that a checkpoint alone, or commit 0, rebuilds."""
        candidates = list(self.checkpoints)
        if 0 in self.commits:
            candidates.append(0)
        return min(candidates) if candidates else None


def list_log(
    store: ObjectStore,
    *,
    start_after_version: int | None = None,
    from_version: int | None = None,
    table: str | None = None,
) -> LogListing:
    """List ``_delta_log`` (optionally only versions after one, or from one on) and group complete
    checkpoints."""
    # every file name of version V starts with "<V:020d>.": after "<V:020d>" and before "<V:020d>.~"
    first, start_after = from_version, f"{from_version:020d}" if from_version is not None else None
    if start_after_version is not None:
        first, start_after = start_after_version + 1, f"{start_after_version:020d}.~"
    infos = store.list_dir(LOG_DIR, start_after=start_after)
    listing = LogListing()
    multipart: dict[tuple[int, int], dict[int, LogFile]] = {}
    for info in infos:
        lf = parse_log_file(info)
        if lf is None:
            continue
        if first is not None and lf.version < first:
            continue
        if lf.kind is LogFileKind.COMMIT:
            if info.size == 0:
                continue  # a commit being written by a non-atomic writer; never valid when empty
            listing.commits[lf.version] = lf
        elif lf.kind is LogFileKind.CHECKPOINT_MULTIPART:
            multipart.setdefault((lf.version, lf.num_parts), {})[lf.part] = lf
        elif lf.is_checkpoint:
            listing.checkpoints.setdefault(lf.version, []).append([lf])
        elif lf.kind is LogFileKind.COMPACTED:
            listing.compacted.append(lf)
        elif lf.kind is LogFileKind.CRC:
            listing.crcs[lf.version] = lf
    for (version, num_parts), parts in multipart.items():
        if len(parts) == num_parts:
            listing.checkpoints.setdefault(version, []).append([parts[i] for i in range(1, num_parts + 1)])
    for sets in listing.checkpoints.values():
        # prefer v2 (it may carry sidecars), then classic, then multi-part
        order = {LogFileKind.CHECKPOINT_V2: 0, LogFileKind.CHECKPOINT_CLASSIC: 1, LogFileKind.CHECKPOINT_MULTIPART: 2}
        sets.sort(key=lambda s: order[s[0].kind])
    return listing


def list_log_from_hint(store: ObjectStore, *, table: str | None = None) -> LogListing:
    """The log from the checkpoint ``_last_checkpoint`` names, when that checkpoint (or a later
    one) is complete in the listing; otherwise the whole log (no hint, or a stale or corrupt one).

    On an object store with a long log, this is what makes a cold load cheap: one small read and
    a listing that starts at the checkpoint instead of at version 0."""
    hint = read_last_checkpoint_hint(store)
    if hint:
        listing = list_log(store, start_after_version=hint - 1, table=table)
        if any(v >= hint for v in listing.checkpoints):
            listing.listed_from = hint
            return listing
    return list_log(store, table=table)


def read_last_checkpoint_hint(store: ObjectStore) -> int | None:
    """The version in ``_last_checkpoint``, or None when absent or unreadable (it is only a hint)."""
    try:
        data = store.read(LAST_CHECKPOINT)
        v = orjson.loads(data).get("version")
        return int(v) if isinstance(v, int) and v >= 0 else None
    except (ObjectNotFound, orjson.JSONDecodeError, AttributeError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class LogSegment:
    """Checkpoint parts (possibly none) and the commits after it, up to ``version``."""

    version: int
    checkpoint_version: int | None
    checkpoint_parts: tuple[LogFile, ...]
    commits: tuple[LogFile, ...]  # ascending, checkpoint_version+1 .. version


def build_segment(
    listing: LogListing,
    version: int | None,
    *,
    table: str | None = None,
    exclude_checkpoints: frozenset[int] = frozenset(),
) -> LogSegment:
    """The segment for ``version`` (latest when None). Raises VersionNotFound with the reason."""
    latest = listing.latest_commit
    if latest is None and not listing.checkpoints:
        raise NotADeltaTable("no Delta log found: _delta_log has no commit files", table=table)
    if latest is None:
        latest = max(listing.checkpoints)
    if version is None:
        version = latest
    if version < 0:
        raise VersionNotFound(f"version {version} is invalid: versions start at 0", table=table)
    if version > latest:
        raise VersionNotFound(
            f"Cannot load table version {version} as it does not exist. The latest available version is {latest}.",
            table=table,
        )
    usable = sorted(v for v in listing.checkpoints if v <= version and v not in exclude_checkpoints)
    for cp in reversed(usable):
        needed = range(cp + 1, version + 1)
        if all(v in listing.commits for v in needed):
            return LogSegment(version, cp, tuple(listing.checkpoints[cp][0]), tuple(listing.commits[v] for v in needed))
    if all(v in listing.commits for v in range(0, version + 1)):
        return LogSegment(version, None, (), tuple(listing.commits[v] for v in range(0, version + 1)))
    missing = [v for v in range(0, version + 1) if v not in listing.commits]
    earliest = listing.earliest_reconstructable()
    detail = f"commit {missing[-1] if missing else '?'} is missing from _delta_log and no checkpoint covers it"
    if earliest is not None and version < earliest:
        raise VersionNotFound(
            f"Cannot load table version {version} as the transaction log has been truncated due to manual deletion "
            f"or the log/checkpoint retention policy. The earliest available version is {earliest}.",
            table=table,
            detail=detail,
        )
    raise VersionNotFound(
        f"Cannot load table version {version}: {detail}. Ask the data provider to restore the missing "
        "commit or to write a checkpoint after it.",
        table=table,
    )
