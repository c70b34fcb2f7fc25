"""What the server serves: shares of schemas of tables, and recipients with their token digests and
grants. Built from the YAML config (server.sources.config) or from the catalog database (catalog.store);
the server's registry reads only these values.

The rules for a share's metadata (the protocol's limits on ``displayName``, ``comment`` and
``properties``) and for a table's access modes and auxiliary locations live here, once, for both
sources: each ``check_*`` function returns the value as kept or raises ``error(message)``, the
message naming the field, the limit and the fix. :func:`dir_access_refusal` says why the server
cannot vend credentials for a table's directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from deltaport.catalog.model import PartitionValue
from deltaport.errors import InvalidParameter
from deltaport.storage import is_local
from deltaport.storage.locations import Location, LocationError

#: The protocol's access modes, in the order they are kept and shown: by file URLs (/query), by
#: directory (temporary-table-credentials).
URL, DIR = "url", "dir"
ACCESS_MODES = (URL, DIR)
#: The protocol's limits on a share's metadata (characters; pairs).
MAX_DISPLAY_NAME = 255
MAX_COMMENT = 65_536
MAX_PROPERTIES = 50
MAX_PROPERTY_KEY = 255
MAX_PROPERTY_VALUE = 1000
#: Storage the server can vend temporary credentials for (besides local disk): S3, Azure, GCS.
VENDABLE_SCHEMES = frozenset({"s3", "s3a", "s3n", "az", "abfs", "abfss", "wasb", "wasbs", "adl", "azure", "gs", "gcs"})

Error = Callable[[str], Exception]


@dataclass(frozen=True)
class SharedTableConfig:
    """One shared table as the server config declares it (the Delta table's own protocol and
    metadata are :class:`deltaport.delta.TableConfig`).

    ``partitions``: the rows a recipient may read, OR over partitions of AND over values (a value
    may be a recipient property); empty means the whole table."""

    name: str
    location: str
    id: str = ""
    history_shared: bool = False
    start_version: int = 0
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    partitions: tuple[tuple[PartitionValue, ...], ...] = ()
    comment: str | None = None
    #: how recipients may read it: "url" (the server lists files, /query) and/or "dir" (the server
    #: vends credentials scoped to ``location``, temporary-table-credentials)
    access_modes: tuple[str, ...] = ("url",)
    #: other roots the table's log names files under (absolute paths), readable with credentials too
    auxiliary_locations: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchemaConfig:
    name: str
    tables: tuple[SharedTableConfig, ...]


@dataclass(frozen=True)
class ShareConfig:
    name: str
    schemas: tuple[SchemaConfig, ...]
    id: str = ""
    comment: str | None = None
    display_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenHash:
    """A bearer token's SHA-256 digest and the time (epoch ms) it stops working, if any."""

    digest: bytes
    expiration_ms: int | None = None


@dataclass(frozen=True)
class RecipientConfig:
    name: str
    tokens: tuple[TokenHash, ...]
    shares: tuple[str, ...]  # lower-cased share names
    allowed_ip_addresses: tuple[str, ...] = ()  # IPs and CIDRs; empty: from anywhere
    properties: Mapping[str, str] = field(default_factory=dict)


# --- the rules ------------------------------------------------------------------------------------


def _vendable(location: str) -> bool:
    return is_local(location) or urlsplit(location).scheme.lower() in VENDABLE_SCHEMES


def dir_access_refusal(table: SharedTableConfig) -> str | None:
    """Why the server cannot give recipients directory access (``dir``) to ``table``, or None when
    it can. A directory holds every row and every version, so a table shared with partitions (a
    recipient's slice cannot be enforced) or without its history cannot have it; nor a table with
    a location (its own or an auxiliary one) on storage no credentials can be vended for (anything
    but local disk, S3, Azure and GCS). The message names the fix."""
    if table.partitions:
        return (
            "it is shared with partitions, and a recipient's slice cannot be enforced on a directory: "
            "remove 'dir' from its access modes, or share the whole table"
        )
    if not table.history_shared:
        return (
            "a directory holds every version of the table, and its history is not shared: share its history "
            "(historyShared: true; history_data_sharing_status ENABLED in the admin API), or remove 'dir'"
        )
    for location in (table.location, *table.auxiliary_locations):
        if not _vendable(location):
            scheme = urlsplit(location).scheme
            return (
                f"its location {location!r} is on '{scheme}' storage, for which the server cannot vend "
                "credentials (only local disk, s3, Azure and gs): remove 'dir' from its access modes"
            )
    return None


def check_access_modes(value: object, where: str, key: str, error: Error = InvalidParameter) -> tuple[str, ...]:
    """``value`` (a list of "url" and/or "dir", each once) as kept: in :data:`ACCESS_MODES` order."""
    shape = "a list of 'url' and/or 'dir', e.g. [url], [url, dir] or [dir]"
    if not isinstance(value, (list, tuple)) or not value:
        raise error(f"{key} of {where} must be {shape}, not {value!r}")
    unknown = [mode for mode in value if mode not in ACCESS_MODES]
    if unknown:
        raise error(f"{key} of {where} has unknown access mode(s) {unknown!r}: give {shape}")
    if len(set(value)) != len(value):
        raise error(f"{key} of {where} names an access mode twice ({list(value)!r}): give each once")
    return tuple(mode for mode in ACCESS_MODES if mode in value)


def check_auxiliary_locations(
    value: object, table_location: str, where: str, key: str, error: Error = InvalidParameter
) -> tuple[str, ...]:
    """``value`` (storage URLs of directories outside the table's own location, each once) as given."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise error(f"{key} of {where} must be a list of storage URLs, e.g. [s3://bucket/other-root]")
    try:
        root = None if is_local(table_location) else Location.parse(table_location)
    except LocationError:
        root = None  # the table's location is checked where it is read
    seen: set[Location] = set()
    for url in value:
        try:
            location = Location.parse(url)
        except LocationError as exc:
            raise error(f"{key} of {where}: {exc}") from None
        if root is not None and location.within(root):
            raise error(
                f"{key} of {where}: {url!r} is inside the table's own location {table_location!r}, which "
                "directory access covers already: remove it"
            )
        if location in seen:
            raise error(f"{key} of {where} names {url!r} twice: give each location once")
        seen.add(location)
    return tuple(value)


def _check_text(value: object, limit: int, where: str, key: str, error: Error) -> str:
    if not isinstance(value, str):
        raise error(f"{key} of {where} must be a string, not {value!r} (in a YAML file, quote it)")
    if len(value) > limit:
        raise error(
            f"{key} of {where} is {len(value)} characters, more than the {limit} the protocol allows: shorten it"
        )
    return value


def check_display_name(value: object, where: str, key: str, error: Error = InvalidParameter) -> str | None:
    """A share's display name, at most :data:`MAX_DISPLAY_NAME` characters; None or "": none."""
    return None if value in (None, "") else _check_text(value, MAX_DISPLAY_NAME, where, key, error)


def check_comment(value: object, where: str, key: str, error: Error = InvalidParameter) -> str | None:
    """A share's comment, at most :data:`MAX_COMMENT` characters; None: none."""
    return None if value is None else _check_text(value, MAX_COMMENT, where, key, error)


def check_properties(value: object, where: str, key: str, error: Error = InvalidParameter) -> dict[str, str]:
    """A share's properties: string keys (1 to :data:`MAX_PROPERTY_KEY` characters) to string
    values (at most :data:`MAX_PROPERTY_VALUE`), at most :data:`MAX_PROPERTIES` pairs."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(f"{key} of {where} must be a mapping of string keys to string values, e.g. {{owner: sales}}")
    if len(value) > MAX_PROPERTIES:
        raise error(
            f"{key} of {where} has {len(value)} pairs, more than the {MAX_PROPERTIES} the protocol allows: remove some"
        )
    for name, text in value.items():
        if not isinstance(name, str) or not name:
            raise error(f"{key} of {where} has the key {name!r}: keys must be non-empty strings")
        if len(name) > MAX_PROPERTY_KEY:
            raise error(
                f"{key} of {where} has a key of {len(name)} characters ({name[:20]!r}…), more than the "
                f"{MAX_PROPERTY_KEY} the protocol allows: shorten it"
            )
        _check_text(text, MAX_PROPERTY_VALUE, where, f"{key} {name!r}", error)
    return dict(value)
