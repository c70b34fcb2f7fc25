"""Options of the ``deltaSharing`` data source: parsed once, validated, frozen.

Option names are the Scala connector's (``versionAsOf``, ``readChangeFeed``,
``maxFilesPerTrigger``, ...). Spark hands them over lower-cased, so they are looked up
case-insensitively. Invalid values raise :class:`deltaport.errors.InvalidParameter` with the
connector's messages; so does a name the entry point does not read (a typo would otherwise be
ignored and read, say, the latest version instead of ``versionAsOf``), naming the nearest valid
one. :meth:`ReadOptions.parse` is the one parser every entry point goes through: the data source
(batch and streaming) with :data:`DATA_SOURCE`, :func:`deltaport.spark.read_table` (and the
official connector's ``load_as_spark`` and ``load_table_changes_as_spark``) with
:data:`READ_TABLE`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltaport.errors import InvalidParameter

if TYPE_CHECKING:
    from deltaport.spark.remote import RemoteTable

__all__ = [
    "DATA_SOURCE",
    "READ_TABLE",
    "OptionSet",
    "ReadOptions",
    "StagingOptions",
    "TableUrl",
    "check_option_names",
    "parse_duration",
    "parse_size",
    "parse_table_url",
    "to_utc_instant",
]

DEFAULT_MAX_FILES_PER_TRIGGER = 1000
DEFAULT_MAX_VERSIONS_PER_RPC = 100
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 4 * 1024 * 1024
DEFAULT_VERSION_POLL_SECONDS = 10.0

# Credentials that may stand in for a profile file when the path is just "share.schema.table".
CREDENTIAL_OPTIONS = (
    "shareCredentialsVersion",
    "type",
    "endpoint",
    "tokenEndpoint",
    "clientId",
    "clientSecret",
    "scope",
    "bearerToken",
    "expirationTime",
)

#: what a snapshot or change-feed read understands, whichever way it is asked for
READ_OPTIONS = (
    "versionAsOf",
    "timestampAsOf",
    "readChangeFeed",
    "readChangeData",
    "startingVersion",
    "endingVersion",
    "startingTimestamp",
    "endingTimestamp",
    "responseFormat",
    "asyncQuery",
    "asyncQueryTimeout",
)
#: options only a stream reads (accepted by a batch read of the data source too, as Spark's
#: own sources do, so one set of options can define both)
STREAM_OPTIONS = (
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "maxVersionsPerRpc",
    "ignoreDeletes",
    "ignoreChanges",
    "skipChangeCommits",
    "queryTableVersionIntervalSeconds",
)
#: what Spark itself puts among a data source's options (measured on pyspark 4.3): ``path`` from
#: ``load(path)``, ``paths`` from ``load([...])``, and for a catalog table (``CREATE TABLE ...
#: USING deltaSharing OPTIONS (...)``) its properties, with each option repeated as
#: ``option.<name>``. ``checkpointLocation`` belongs to ``writeStream``; Spark does not pass it
#: on, but a copy set on the reader is harmless and tolerated.
SPARK_OPTIONS = (
    "path",
    "paths",
    "checkpointLocation",
    "location",
    "owner",
    "provider",
    "comment",
    "external",
    "is_managed_location",
)
SPARK_OPTION_PREFIX = "option."


@dataclass(frozen=True)
class OptionSet:
    """The option names one entry point reads, and how messages name that entry point."""

    entry: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class TableUrl:
    """``<profile>#<share>.<schema>.<table>``; ``profile`` is None when credentials come as options."""

    profile: str | None
    share: str
    schema: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.share}.{self.schema}.{self.table}"


def parse_table_url(path: str | None) -> TableUrl:
    """Split at the last ``#``; the fragment must be three non-empty dot-separated names."""
    if not path:
        raise InvalidParameter("the deltaSharing data source needs a path: '<profile-file>#<share>.<schema>.<table>'")
    profile, sep, fragment = path.rpartition("#")
    parts = fragment.split(".")
    if len(parts) != 3 or not all(p.strip() for p in parts) or (sep and not profile):
        raise InvalidParameter(f"path {path} is not valid: expected '<profile-file>#<share>.<schema>.<table>'")
    return TableUrl(profile if sep else None, *parts)


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)(i?b)?\s*$", re.I)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(text: str, option: str) -> int:
    """A byte size like Spark's: ``1048576``, ``10k``, ``10m``, ``10g``, ``1gb``, ``1GiB``."""
    match = _SIZE.match(str(text))
    if not match:
        raise InvalidParameter(f"Invalid value '{text}' for option '{option}', must be a size like 10g")
    value = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value <= 0:
        raise InvalidParameter(f"Invalid value '{text}' for option '{option}', must be a positive size")
    return value


_TIMESTAMP = re.compile(
    r"^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})"
    r"(?:[T ](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?)?)?)?"
    r"\s*(Z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?|[A-Za-z]+/[A-Za-z_+\-/0-9]+)?\s*$"
)


def _response_format(options: Mapping[str, Any]) -> str:
    response_format = (_get(options, "responseFormat") or "auto").strip().lower()
    if response_format not in ("parquet", "delta", "auto"):
        raise InvalidParameter(
            f"The user input responseFormat ({response_format}) is not supported. "
            "Supported values are: parquet, delta, auto."
        )
    return response_format


def _poll_seconds(options: Mapping[str, Any]) -> float:
    poll = _get(options, "queryTableVersionIntervalSeconds")
    try:
        seconds = DEFAULT_VERSION_POLL_SECONDS if poll is None else float(poll)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise InvalidParameter(f"Invalid value '{poll}' for option 'queryTableVersionIntervalSeconds'")
    return seconds


def to_utc_instant(text: str, time_zone: str = "UTC") -> str:
    """A flexible timestamp (``2022``, ``2022-01-01``, ``2022-01-01 00:00:00``, ISO with offset)
    as an ISO-8601 UTC instant (``2022-01-01T00:00:00Z``). Values without a zone are read in
    ``time_zone`` (the Spark session time zone), as Spark's timestamp cast does."""
    match = _TIMESTAMP.match(str(text))
    if not match:
        raise InvalidParameter(f"The provided timestamp ({text}) cannot be converted to a valid timestamp.")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        value = dt.datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
        )
        value = value.replace(tzinfo=_zone(zone or time_zone))
    except (ValueError, KeyError):
        raise InvalidParameter(f"The provided timestamp ({text}) cannot be converted to a valid timestamp.") from None
    utc = value.astimezone(dt.timezone.utc)
    text_utc = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text_utc += f".{utc.microsecond:06d}".rstrip("0")
    return text_utc + "Z"


def _zone(name: str) -> dt.tzinfo:
    if name.upper() in ("Z", "UTC", "GMT"):
        return dt.timezone.utc
    if name[0] in "+-":
        digits = name[1:].replace(":", "")
        hours, minutes = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
        offset = dt.timedelta(hours=hours, minutes=minutes)
        return dt.timezone(-offset if name[0] == "-" else offset)
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def _get(options: Mapping[str, Any], name: str) -> str | None:
    """Case-insensitive lookup (Spark lower-cases option keys)."""
    if name in options:
        value = options[name]
    else:
        lowered = name.lower()
        value = next((v for k, v in options.items() if k.lower() == lowered), None)
    return None if value is None else str(value)


def _async_query(options: Mapping[str, Any]) -> tuple[bool, float | None]:
    """``asyncQuery`` (query with ``asyncquery=true`` and poll while the server plans) and
    ``asyncQueryTimeout`` (the most to wait for it: ``600``, ``90s``, ``10m``; unset: no limit)."""
    asynchronous = _bool(options, "asyncQuery")
    text = _get(options, "asyncQueryTimeout")
    if text is None:
        return asynchronous, None
    seconds = parse_duration(text, "asyncQueryTimeout")
    if seconds <= 0:
        raise InvalidParameter(f"Invalid value '{text}' for option 'asyncQueryTimeout': a positive duration")
    if not asynchronous:
        raise InvalidParameter(
            "asyncQueryTimeout limits the wait for an asynchronous query: set asyncQuery=true with it"
        )
    return asynchronous, seconds


def _bool(options: Mapping[str, Any], name: str) -> bool:
    value = _get(options, name)
    if value is None:
        return False
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidParameter(f"Invalid value '{value}' for option '{name}', must be 'true' or 'false'")


def _int_at_least(options: Mapping[str, Any], name: str, least: int, kind: str) -> int | None:
    """An integer option no smaller than ``least``; anything else names the option and ``kind``."""
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or number < least:
        raise InvalidParameter(f"Invalid value '{value}' for option '{name}', must be {kind}")
    return number


def _non_negative_long(options: Mapping[str, Any], name: str) -> int | None:
    return _int_at_least(options, name, 0, "a non-negative long")


def _positive_int(options: Mapping[str, Any], name: str) -> int | None:
    return _int_at_least(options, name, 1, "a positive integer")


def _table_and_credentials(options: Mapping[str, Any]) -> tuple[TableUrl, dict[str, str]]:
    """The one table a read names: a profile file's URL, or a name with share credentials as options."""
    if _get(options, "paths") is not None:
        raise InvalidParameter(
            "the deltaSharing data source reads one table: give load() one "
            "'<profile-file>#<share>.<schema>.<table>' path, and union the DataFrames"
        )
    url = parse_table_url(_get(options, "path"))
    credentials = {name: value for name in CREDENTIAL_OPTIONS if (value := _get(options, name)) is not None}
    if url.profile is not None and credentials:
        raise InvalidParameter("cannot specify both share credentials options and a profile file path")
    if url.profile is None and not credentials:
        raise InvalidParameter(
            f"path {url.name} is not valid: expected '<profile-file>#<share>.<schema>.<table>' "
            "or share credentials given as options"
        )
    return url, credentials


@dataclass(frozen=True)
class ReadOptions:
    """Every option the data source understands, validated."""

    path: TableUrl
    credentials: Mapping[str, str]
    version_as_of: int | None = None
    timestamp_as_of: str | None = None  # ISO UTC
    read_change_feed: bool = False
    starting_version: int | None = None
    starting_latest: bool = False
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    response_format: str = "auto"  # "auto": the server chooses (delta for deletion vectors, column mapping)
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    max_versions_per_rpc: int = DEFAULT_MAX_VERSIONS_PER_RPC
    ignore_deletes: bool = False
    ignore_changes: bool = False
    skip_change_commits: bool = False
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES
    version_poll_seconds: float = DEFAULT_VERSION_POLL_SECONDS
    async_query: bool = False  # ask with asyncquery=true, poll the queryId while the server plans
    async_query_timeout: float | None = None  # seconds; None: no limit

    @classmethod
    def parse(
        cls, options: Mapping[str, Any], *, time_zone: str = "UTC", accepted: OptionSet | None = None
    ) -> ReadOptions:
        """Every option of one read, validated before any request. ``accepted`` is the entry
        point's set of option names (default :data:`DATA_SOURCE`); any other name is refused."""
        check_option_names(options, accepted or DATA_SOURCE)
        url, credentials = _table_and_credentials(options)
        version_as_of = _non_negative_long(options, "versionAsOf")
        timestamp_text = _get(options, "timestampAsOf")
        if version_as_of is not None and timestamp_text is not None:
            raise InvalidParameter("Please either provide 'versionAsOf' or 'timestampAsOf'.")
        read_cdf = _bool(options, "readChangeFeed") or _bool(options, "readChangeData")
        starting_text = _get(options, "startingVersion")
        starting_latest = starting_text is not None and starting_text.strip().lower() == "latest"
        starting_version = None if starting_latest else _non_negative_long(options, "startingVersion")
        starting_ts = _get(options, "startingTimestamp")
        if starting_text is not None and starting_ts is not None:
            raise InvalidParameter("Please either provide 'startingVersion' or 'startingTimestamp'.")
        ending_version = _non_negative_long(options, "endingVersion")
        ending_ts = _get(options, "endingTimestamp")
        if ending_version is not None and ending_ts is not None:
            raise InvalidParameter("Please either provide 'endingVersion' or 'endingTimestamp'.")
        response_format = _response_format(options)
        max_bytes_text = _get(options, "maxBytesPerTrigger")
        poll_seconds = _poll_seconds(options)
        partition_bytes = _get(options, "maxPartitionBytes")
        async_query, async_timeout = _async_query(options)
        return cls(
            path=url,
            credentials=credentials,
            version_as_of=version_as_of,
            timestamp_as_of=None if timestamp_text is None else to_utc_instant(timestamp_text, time_zone),
            read_change_feed=read_cdf,
            starting_version=starting_version,
            starting_latest=starting_latest,
            ending_version=ending_version,
            starting_timestamp=None if starting_ts is None else to_utc_instant(starting_ts, time_zone),
            ending_timestamp=None if ending_ts is None else to_utc_instant(ending_ts, time_zone),
            response_format=response_format,
            max_files_per_trigger=_positive_int(options, "maxFilesPerTrigger"),
            max_bytes_per_trigger=None if max_bytes_text is None else parse_size(max_bytes_text, "maxBytesPerTrigger"),
            max_versions_per_rpc=_positive_int(options, "maxVersionsPerRpc") or DEFAULT_MAX_VERSIONS_PER_RPC,
            ignore_deletes=_bool(options, "ignoreDeletes"),
            ignore_changes=_bool(options, "ignoreChanges"),
            skip_change_commits=_bool(options, "skipChangeCommits"),
            max_partition_bytes=(
                DEFAULT_MAX_PARTITION_BYTES
                if partition_bytes is None
                else parse_size(partition_bytes, "maxPartitionBytes")
            ),
            version_poll_seconds=poll_seconds,
            async_query=async_query,
            async_query_timeout=async_timeout,
        )

    @property
    def remote(self) -> RemoteTable:
        from deltaport.spark.remote import RemoteTable

        return RemoteTable(
            self.path,
            self.credentials,
            self.response_format,
            async_query=self.async_query,
            async_query_timeout=self.async_query_timeout,
        )

    @property
    def time_travel(self) -> bool:
        return self.version_as_of is not None or self.timestamp_as_of is not None

    def check_batch(self) -> None:
        """Rules that apply to ``spark.read``."""
        if self.read_change_feed:
            if self.time_travel:
                raise InvalidParameter(
                    "Cannot time travel a change data feed read: use startingVersion/endingVersion "
                    "or startingTimestamp/endingTimestamp instead of versionAsOf/timestampAsOf."
                )
            if self.starting_version is None and self.starting_timestamp is None and not self.starting_latest:
                raise InvalidParameter("No startingVersion or startingTimestamp provided for CDF read.")
            if self.starting_latest:
                raise InvalidParameter("startingVersion 'latest' is only supported for streaming reads.")
            if (
                self.starting_version is not None
                and self.ending_version is not None
                and self.ending_version < self.starting_version
            ):
                raise InvalidParameter(
                    f"CDF range from start {self.starting_version} to end {self.ending_version} "
                    "was invalid. End cannot be before start."
                )

    def check_stream(self) -> None:
        """Rules that apply to ``spark.readStream``."""
        if self.time_travel:
            raise InvalidParameter("Cannot time travel streams.")
        if self.ending_version is not None or self.ending_timestamp is not None:
            raise InvalidParameter("endingVersion and endingTimestamp are not supported for streaming reads.")


# --- the native (staged) read ---------------------------------------------------------------------

DEFAULT_CACHE_MAX_BYTES = 64 << 30
DEFAULT_CACHE_MAX_AGE_SECONDS = 7 * 86400.0
DEFAULT_CACHE_GRACE_SECONDS = 3600.0
FETCH_MODES = ("auto", "driver", "spark")

#: options of a batch read through :func:`deltaport.spark.read_table`
BATCH_OPTIONS = (*READ_OPTIONS, "jsonPredicateHints")
STAGING_OPTIONS = (
    "stagingLocation",
    "stagingCacheSize",
    "stagingCacheMaxAge",
    "stagingCacheGrace",
    "stagingFetch",
    "stagingThreads",
)

#: ``spark.read.format("deltaSharing")`` and ``spark.readStream.format("deltaSharing")``
DATA_SOURCE = OptionSet(
    "the deltaSharing data source",
    (*READ_OPTIONS, "maxPartitionBytes", *STREAM_OPTIONS, *CREDENTIAL_OPTIONS),
)
#: :func:`deltaport.spark.read_table`, ``stage``, ``load_as_spark`` and ``load_table_changes_as_spark``
READ_TABLE = OptionSet(
    "deltaport.spark.read_table",
    (*BATCH_OPTIONS, *STAGING_OPTIONS, *CREDENTIAL_OPTIONS, "accessMode"),
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.I)
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, option: str) -> float:
    """Seconds from ``3600``, ``90s``, ``30m``, ``12h`` or ``7d``."""
    match = _DURATION.match(str(text))
    if not match:
        raise InvalidParameter(f"Invalid value '{text}' for option '{option}', must be a duration like 12h or 7d")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]


def check_option_names(options: Mapping[str, Any], accepted: OptionSet) -> None:
    """Refuse an option ``accepted`` does not read, in one line naming the nearest valid option
    (or, for an option of another entry point, where it belongs). Spark's own keys pass."""
    import difflib

    by_lower = {name.lower(): name for name in accepted.names}
    spark_own = {name.lower() for name in SPARK_OPTIONS}
    for key in options:
        lowered = key.lower()
        if lowered in by_lower or lowered in spark_own or lowered.startswith(SPARK_OPTION_PREFIX):
            continue
        elsewhere = next((s for s in (DATA_SOURCE, READ_TABLE) if lowered in {n.lower() for n in s.names}), None)
        if elsewhere is not None:
            raise InvalidParameter(f"option '{key}' is read by {elsewhere.entry}, not by {accepted.entry}")
        close = difflib.get_close_matches(lowered, list(by_lower), n=1, cutoff=0.6)
        hint = (
            f"did you mean '{by_lower[close[0]]}'?"
            if close
            else f"the options of {accepted.entry} are {', '.join(accepted.names)}"
        )
        raise InvalidParameter(f"unknown option '{key}'; {hint}")


@dataclass(frozen=True)
class StagingOptions:
    """Where and how shared files are staged for Spark's own parquet reader."""

    location: str | None = None  # None: default_location() (a private local folder)
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    cache_max_age_seconds: float = DEFAULT_CACHE_MAX_AGE_SECONDS
    cache_grace_seconds: float = DEFAULT_CACHE_GRACE_SECONDS
    fetch: str = "auto"  # "driver": threads on the driver; "spark": a Spark job; "auto": spark on a cluster
    threads: int = 4

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StagingOptions:
        size = _get(options, "stagingCacheSize")
        age = _get(options, "stagingCacheMaxAge")
        grace = _get(options, "stagingCacheGrace")
        fetch = (_get(options, "stagingFetch") or "auto").strip().lower()
        if fetch not in FETCH_MODES:
            raise InvalidParameter(
                f"Invalid value '{fetch}' for option 'stagingFetch', must be one of {', '.join(FETCH_MODES)}"
            )
        return cls(
            location=_get(options, "stagingLocation"),
            cache_max_bytes=DEFAULT_CACHE_MAX_BYTES if size is None else parse_size(size, "stagingCacheSize"),
            cache_max_age_seconds=(
                DEFAULT_CACHE_MAX_AGE_SECONDS if age is None else parse_duration(age, "stagingCacheMaxAge")
            ),
            cache_grace_seconds=(
                DEFAULT_CACHE_GRACE_SECONDS if grace is None else parse_duration(grace, "stagingCacheGrace")
            ),
            fetch=fetch,
            threads=_positive_int(options, "stagingThreads") or 4,
        )
