"""Commit timestamps and timestamp ↔ version resolution.

A commit's timestamp is its in-commit timestamp (``commitInfo.inCommitTimestamp``) from the
version in-commit timestamps were enabled, and otherwise the commit file's modification time,
made strictly increasing (a time not after the previous commit's becomes previous + 1 ms).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Callable, Mapping

from deltaport.errors import TimestampOutOfRange
from deltaport.isotime import iso_to_epoch_ms


def monotonic_timestamps(versions: list[int], raw: Mapping[int, int]) -> dict[int, int]:
    """Make ``raw`` (version → ms) strictly increasing in version order."""
    out: dict[int, int] = {}
    prev: int | None = None
    for v in versions:
        ts = raw[v]
        if prev is not None and ts <= prev:
            ts = prev + 1
        out[v] = ts
        prev = ts
    return out


def format_ms(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def format_sql_timestamp(ms: int) -> str:
    """``yyyy-mm-dd hh:mm:ss.f`` in UTC, as the reference server prints timestamps in its errors.

    The fraction keeps its significant digits only (``.0`` for whole seconds). The text parses
    back as a timestamp this server accepts (a timestamp without an offset is UTC).
    """
    d = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    frac = f"{ms % 1000:03d}".rstrip("0") or "0"
    return f"{d:%Y-%m-%d %H:%M:%S}.{frac}"


class CommitHistory:
    """Ascending (version, timestamp ms) pairs for the commits still in the log."""

    def __init__(self, versions: list[int], timestamps: list[int], table: str | None = None) -> None:
        self.versions = versions
        self.timestamps = timestamps
        self.table = table

    @classmethod
    def build(
        cls,
        mtimes: Mapping[int, int],
        *,
        ict_from: int | None = None,
        read_ict: Callable[[int], int | None] | None = None,
        table: str | None = None,
    ) -> CommitHistory:
        versions = sorted(mtimes)
        raw = dict(mtimes)
        if ict_from is not None and read_ict is not None:
            for v in versions:
                if v >= ict_from:
                    ict = read_ict(v)
                    if ict is not None:
                        raw[v] = ict
        ts = monotonic_timestamps(versions, raw)
        return cls(versions, [ts[v] for v in versions], table)

    def timestamp_of(self, version: int) -> int | None:
        i = bisect.bisect_left(self.versions, version)
        if i < len(self.versions) and self.versions[i] == version:
            return self.timestamps[i]
        return None

    def _check_nonempty(self) -> None:
        if not self.versions:
            raise TimestampOutOfRange("the table has no commits to resolve a timestamp against", table=self.table)

    def _before_earliest(self, ts_ms: int) -> TimestampOutOfRange:
        first = format_sql_timestamp(self.timestamps[0])
        return TimestampOutOfRange(
            f"The provided timestamp ({format_sql_timestamp(ts_ms)}) is before the earliest version available to "
            f"this table ({first}). Please use a timestamp greater than or equal to {first}.",
            table=self.table,
        )

    def _after_latest(self, ts_ms: int) -> TimestampOutOfRange:
        last = format_sql_timestamp(self.timestamps[-1])
        return TimestampOutOfRange(
            f"The provided timestamp ({format_sql_timestamp(ts_ms)}) is after the latest version available to "
            f"this table ({last}). Please use a timestamp less than or equal to {last}.",
            table=self.table,
        )

    def version_at_or_before(self, ts_ms: int, *, allow_after_latest: bool = False) -> int:
        """Latest version committed at or before ``ts_ms``."""
        self._check_nonempty()
        if ts_ms < self.timestamps[0]:
            raise self._before_earliest(ts_ms)
        if ts_ms > self.timestamps[-1] and not allow_after_latest:
            raise self._after_latest(ts_ms)
        i = bisect.bisect_right(self.timestamps, ts_ms) - 1
        return self.versions[i]

    def version_at_or_after(self, ts_ms: int, *, allow_before_earliest: bool = True) -> int:
        """First version committed at or after ``ts_ms``."""
        self._check_nonempty()
        if ts_ms > self.timestamps[-1]:
            raise self._after_latest(ts_ms)
        if ts_ms < self.timestamps[0] and not allow_before_earliest:
            raise self._before_earliest(ts_ms)
        i = bisect.bisect_left(self.timestamps, ts_ms)
        return self.versions[i]


def to_epoch_ms(value: str | int | float | dt.datetime) -> int:
    """Milliseconds since the epoch from ISO-8601 (with offset or Z; naive means UTC) or ms."""
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        return iso_to_epoch_ms(value)
    d = value
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return int(d.timestamp() * 1000)
