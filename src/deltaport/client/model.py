"""What the sharing server sends, as small frozen dataclasses: names, protocol, metadata, files.

Both response formats parse into the same objects: a parquet-format ``file``/``add``/``remove``/
``cdf`` line and a delta-format ``file`` line wrapping ``deltaSingleAction.add``/``remove``/``cdc``
all become a :class:`FileAction`. Unknown fields are ignored; a missing required field raises
:class:`~deltaport.client.errors.IncompleteResponse` naming the line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from deltaport.client.errors import IncompleteResponse

__all__ = [
    "EndStreamAction",
    "FileAction",
    "Format",
    "Metadata",
    "Protocol",
    "Schema",
    "Share",
    "Table",
    "TemporaryCredentials",
    "pair_deletion_vector_changes",
    "placement",
]


# --- names -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    name: str
    id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Schema:
    name: str
    share: str


URL, DIR = "url", "dir"


def placement(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A table item's or metaData line's ``location``, ``auxiliaryLocations`` and ``accessModes``
    (as keyword arguments of :class:`Table` and :class:`Metadata`); ``accessModes`` absent means
    ``url`` only, as the protocol says for servers that predate directory access."""
    location = obj.get("location")
    auxiliary = obj.get("auxiliaryLocations")
    modes = obj.get("accessModes")
    if location is not None and not isinstance(location, str):
        raise IncompleteResponse(f"{where}: 'location' is not a string", error_code="MALFORMED_RESPONSE")
    if auxiliary is not None and not (isinstance(auxiliary, list) and all(isinstance(a, str) for a in auxiliary)):
        raise IncompleteResponse(
            f"{where}: 'auxiliaryLocations' is not an array of strings", error_code="MALFORMED_RESPONSE"
        )
    if modes is not None and not (isinstance(modes, list) and all(isinstance(m, str) for m in modes)):
        raise IncompleteResponse(f"{where}: 'accessModes' is not an array of strings", error_code="MALFORMED_RESPONSE")
    return {
        "location": location,
        "auxiliary_locations": tuple(auxiliary or ()),
        "access_modes": (URL,) if modes is None else tuple(modes),
    }


@dataclass(frozen=True)
class Table:
    """A shared table; ``access_modes`` (``url``, ``dir``), ``location`` and ``auxiliary_locations``
    as the listing said (``location`` only for tables offered for directory access)."""

    name: str
    share: str
    schema: str
    id: str | None = field(default=None, compare=False)
    share_id: str | None = field(default=None, compare=False)
    location: str | None = field(default=None, compare=False)
    auxiliary_locations: tuple[str, ...] = field(default=(), compare=False)
    access_modes: tuple[str, ...] = field(default=(URL,), compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.share}.{self.schema}.{self.name}"


# --- protocol and metadata ------------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    provider: str = "parquet"
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol:
    """The table's protocol. In the parquet format only ``min_reader_version`` is known."""

    min_reader_version: int
    min_writer_version: int | None = None
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def from_line(cls, obj: Mapping[str, Any]) -> Protocol:
        raw = obj.get("deltaProtocol", obj)
        try:
            reader = raw.get("readerFeatures")
            writer = raw.get("writerFeatures")
            return cls(
                int(raw["minReaderVersion"]),
                int(raw["minWriterVersion"]) if raw.get("minWriterVersion") is not None else None,
                tuple(reader) if reader is not None else None,
                tuple(writer) if writer is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IncompleteResponse(
                f"the protocol line lacks a valid minReaderVersion ({exc})", error_code="MALFORMED_RESPONSE"
            ) from None


@dataclass(frozen=True)
class Metadata:
    """The table's metadata (attribute names as in the official connector)."""

    id: str | None = None
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format)
    schema_string: str | None = None
    configuration: Mapping[str, str] = field(default_factory=dict)
    partition_columns: Sequence[str] = field(default_factory=tuple)
    version: int | None = None
    size: int | None = None
    num_files: int | None = None
    created_time: int | None = None
    location: str | None = None
    auxiliary_locations: tuple[str, ...] = ()
    access_modes: tuple[str, ...] = (URL,)

    @classmethod
    def from_line(cls, obj: Mapping[str, Any]) -> Metadata:
        raw = obj.get("deltaMetadata", obj)
        try:
            fmt = raw.get("format") or {}
            schema_string = raw["schemaString"]
            if not isinstance(schema_string, str):
                raise TypeError("schemaString is not a string")
            return cls(
                id=raw.get("id"),
                name=raw.get("name"),
                description=raw.get("description"),
                format=Format(fmt.get("provider", "parquet"), dict(fmt.get("options") or {})),
                schema_string=schema_string,
                configuration=dict(raw.get("configuration") or {}),
                partition_columns=tuple(raw.get("partitionColumns") or ()),
                version=obj.get("version"),
                size=obj.get("size"),
                num_files=obj.get("numFiles"),
                created_time=raw.get("createdTime"),
                **placement(obj, "the metaData line"),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise IncompleteResponse(
                f"the metaData line lacks a valid schemaString ({exc})", error_code="MALFORMED_RESPONSE"
            ) from None


# --- directory access ----------------------------------------------------------------------------

#: the protocol's name of each kind of cloud credential
CLOUD_FIELDS = {"awsTempCredentials": "aws", "azureUserDelegationSas": "azure", "gcpOauthToken": "gcp"}
#: the fields each kind requires (extension fields such as ``endpoint`` are kept as well)
REQUIRED_VALUES = {
    "aws": ("accessKeyId", "secretAccessKey", "sessionToken"),
    "azure": ("sasToken",),
    "gcp": ("oauthToken",),
}


@dataclass(frozen=True)
class TemporaryCredentials:
    """The answer to ``POST .../temporary-table-credentials``: credentials of ``kind`` (``aws``,
    ``azure`` or ``gcp``) that read ``location`` until ``expiration_time`` (epoch ms). ``values``
    are the cloud object's string fields; ``repr`` never shows them."""

    location: str
    kind: str
    values: Mapping[str, str] = field(repr=False)
    expiration_time: int

    @classmethod
    def from_answer(cls, body: Any, what: str) -> TemporaryCredentials:
        def fail(problem: str) -> IncompleteResponse:
            return IncompleteResponse(
                f"the answer to {what} is malformed: {problem}", error_code="MALFORMED_RESPONSE", request=what
            )

        creds = body.get("credentials") if isinstance(body, dict) else None
        if not isinstance(creds, dict):
            raise fail("it has no 'credentials' object")
        location, expiration = creds.get("location"), creds.get("expirationTime")
        if not isinstance(location, str) or not location:
            raise fail("'credentials' has no string 'location'")
        if not isinstance(expiration, int) or isinstance(expiration, bool):
            raise fail("'credentials' has no integer 'expirationTime'")
        kinds = [key for key in CLOUD_FIELDS if creds.get(key) is not None]
        if len(kinds) != 1:
            raise fail(f"it must hold exactly one of {', '.join(CLOUD_FIELDS)}, not {kinds or 'none'}")
        kind, raw = CLOUD_FIELDS[kinds[0]], creds[kinds[0]]
        if not isinstance(raw, dict):
            raise fail(f"'{kinds[0]}' is not an object")
        missing = [k for k in REQUIRED_VALUES[kind] if not isinstance(raw.get(k), str)]
        if missing:
            raise fail(f"'{kinds[0]}' lacks the string field(s) {', '.join(missing)}")
        values = {k: v for k, v in raw.items() if isinstance(v, str)}
        return cls(location, kind, values, expiration)


# --- files ---------------------------------------------------------------------------------------

_CHANGE_TYPES = {"add": "insert", "remove": "delete", "cdf": "cdf", "cdc": "cdf"}


@dataclass(frozen=True)
class FileAction:
    """One data file to read, in either response format.

    ``change_type`` is None for snapshot files, and ``"insert"`` (add), ``"delete"`` (remove) or
    ``"cdf"`` (a change-data file that carries its own ``_change_type`` column) in change feeds.
    ``paired`` marks a change-feed add/remove whose file is also removed/added in the same commit
    with a different deletion vector; only the rows whose deletion state differs between the two
    are changes (``paired_deletion_vector`` is the other action's DV, or None).
    """

    url: str
    id: str
    size: int
    partition_values: Mapping[str, str | None] = field(default_factory=dict)
    stats: str | None = None
    deletion_vector: Mapping[str, Any] | None = None
    version: int | None = None
    timestamp: int | None = None
    change_type: str | None = None
    expiration_timestamp: int | None = None
    paired: bool = False
    paired_deletion_vector: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[str, int | None, str | None]:
        """Identity of this action across responses (URLs change, ids do not)."""
        return (self.id, self.version, self.change_type)

    @property
    def num_records(self) -> int | None:
        """Rows in the file net of its deletion vector, from stats (None when unknown)."""
        if not self.stats:
            return None
        try:
            n = orjson.loads(self.stats).get("numRecords")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        if not isinstance(n, int):
            return None
        dv = self.deletion_vector
        return n - int(dv.get("cardinality", 0)) if dv else n

    @classmethod
    def from_parquet_line(cls, kind: str, obj: Mapping[str, Any], *, changes: bool) -> FileAction:
        try:
            return cls(
                url=obj["url"],
                id=obj["id"],
                size=int(obj["size"]),
                partition_values=obj.get("partitionValues") or {},
                stats=obj.get("stats"),
                version=obj.get("version"),
                timestamp=obj.get("timestamp"),
                change_type=_CHANGE_TYPES.get(kind),
                expiration_timestamp=obj.get("expirationTimestamp"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IncompleteResponse(f"a '{kind}' line lacks {exc}", error_code="MALFORMED_RESPONSE") from None

    @classmethod
    def from_delta_line(cls, obj: Mapping[str, Any], *, changes: bool) -> FileAction:
        try:
            single = obj["deltaSingleAction"]
            kind = next(k for k in ("add", "remove", "cdc") if k in single)
            action = single[kind]
            return cls(
                url=action["path"],
                id=obj["id"],
                size=int(action.get("size") or 0),
                partition_values=action.get("partitionValues") or {},
                stats=action.get("stats"),
                deletion_vector=action.get("deletionVector") or None,
                version=obj.get("version"),
                timestamp=obj.get("timestamp"),
                change_type=_CHANGE_TYPES[kind] if changes or kind != "add" else None,
                expiration_timestamp=obj.get("expirationTimestamp"),
            )
        except (KeyError, TypeError, ValueError, StopIteration) as exc:
            raise IncompleteResponse(
                f"a delta-format file line lacks {exc or 'an add, remove or cdc action'}",
                error_code="MALFORMED_RESPONSE",
            ) from None


@dataclass(frozen=True)
class EndStreamAction:
    refresh_token: str | None = None
    next_page_token: str | None = None
    min_url_expiration_timestamp: int | None = None
    error_message: str | None = None

    @classmethod
    def from_line(cls, obj: Mapping[str, Any]) -> EndStreamAction:
        return cls(
            obj.get("refreshToken") or None,
            obj.get("nextPageToken") or None,
            obj.get("minUrlExpirationTimestamp"),
            obj.get("errorMessage") or None,
        )


def pair_deletion_vector_changes(files: Sequence[FileAction]) -> list[FileAction]:
    """Mark change-feed add/remove pairs of one file in one commit that differ by deletion vector.

    A DELETE or UPDATE that writes a deletion vector removes the file with its old DV and adds it
    back with the new one, and records no change-data file: the rows deleted (or restored) are
    those whose deletion state differs between the two DVs. Each action of such a pair gets
    ``paired=True`` and the other's DV in ``paired_deletion_vector``.
    """
    from dataclasses import replace

    groups: dict[tuple[str, int | None], list[int]] = {}
    for i, f in enumerate(files):
        if f.change_type in ("insert", "delete"):
            groups.setdefault((f.id, f.version), []).append(i)
    out = list(files)
    for indexes in groups.values():
        if len(indexes) != 2:
            continue
        a, b = (out[i] for i in indexes)
        if a.change_type == b.change_type or not (a.deletion_vector or b.deletion_vector):
            continue
        out[indexes[0]] = replace(a, paired=True, paired_deletion_vector=b.deletion_vector)
        out[indexes[1]] = replace(b, paired=True, paired_deletion_vector=a.deletion_vector)
    return out
