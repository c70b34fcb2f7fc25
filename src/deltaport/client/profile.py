"""Profile files (recipient credentials) and ``<profile>#<share>.<schema>.<table>`` URLs.

A profile is JSON:

* version 1: ``{"shareCredentialsVersion": 1, "endpoint", "bearerToken", "expirationTime"?}``
* version 2: ``"type": "bearer_token"`` (the version-1 fields), ``"oauth_client_credentials"``
  (``tokenEndpoint``, ``clientId``, ``clientSecret``, ``scope``?) or ``"basic"``
  (``username``, ``password``).

It may be given as a path (``str`` or :class:`~pathlib.Path`), a ``file://`` URI, any fsspec URL
when fsspec is installed, an open file, a ``dict``, a JSON string, or a
:class:`DeltaSharingProfile`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Union
from urllib.parse import unquote, urlparse

import orjson

from deltaport.client.errors import InvalidTableUrl, ProfileError
from deltaport.isotime import iso_to_epoch_ms

__all__ = [
    "DeltaSharingProfile",
    "ProfileSource",
    "parse_iso_timestamp",
    "parse_table_name",
    "parse_url",
    "read_profile",
]

CURRENT_VERSION = 2
BEARER = "bearer_token"
OAUTH = "oauth_client_credentials"
BASIC = "basic"
_TYPES = (BEARER, OAUTH, BASIC)


@dataclass(frozen=True)
class DeltaSharingProfile:
    """Credentials of one recipient for one sharing server."""

    share_credentials_version: int
    endpoint: str
    bearer_token: str | None = field(default=None, repr=False)
    expiration_time: str | None = None
    type: str | None = None
    token_endpoint: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    scope: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def auth_type(self) -> str:
        return self.type or BEARER

    def expiration_ms(self) -> int | None:
        """``expirationTime`` in ms since the epoch, or None when the profile has none."""
        if not self.expiration_time:
            return None
        try:
            return parse_iso_timestamp(self.expiration_time)
        except ValueError:
            raise ProfileError(
                f"'expirationTime' in the profile is not an ISO-8601 time: {self.expiration_time!r}; "
                "use e.g. 2030-01-01T00:00:00Z"
            ) from None

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> DeltaSharingProfile:
        if isinstance(data, (str, bytes, bytearray)):
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise ProfileError(
                    f"the profile is not valid JSON ({exc}); a profile file looks like "
                    '{"shareCredentialsVersion": 1, "endpoint": "...", "bearerToken": "..."}'
                ) from None
        if not isinstance(data, Mapping):
            raise ProfileError(
                "the profile must be a JSON object with shareCredentialsVersion, endpoint and credentials"
            )
        return _from_mapping(data)


def _required(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(
            f"the profile lacks '{key}' ({where}); add it to the profile file or ask the data "
            "provider for a complete one"
        )
    return value.strip()


def _optional(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProfileError(f"'{key}' in the profile must be a string, not {type(value).__name__}")
    return value


def _from_mapping(data: Mapping[str, Any]) -> DeltaSharingProfile:
    raw_version = data.get("shareCredentialsVersion")
    if raw_version is None:
        raise ProfileError("the profile lacks 'shareCredentialsVersion' (1 or 2)")
    try:
        version = int(raw_version)
    except (TypeError, ValueError):
        raise ProfileError(f"'shareCredentialsVersion' in the profile must be 1 or 2, not {raw_version!r}") from None
    if version > CURRENT_VERSION:
        raise ProfileError(
            f"'shareCredentialsVersion' in the profile is {version} which is too new. The current "
            f"release supports version {CURRENT_VERSION} and below. Please upgrade to a newer release."
        )
    if version < 1:
        raise ProfileError(f"'shareCredentialsVersion' in the profile must be 1 or 2, not {version}")
    endpoint = _required(data, "endpoint", "the sharing server URL").rstrip("/")
    scheme = urlparse(endpoint).scheme
    if scheme not in ("http", "https"):
        raise ProfileError(f"'endpoint' in the profile must be an http(s) URL, not {endpoint!r}")
    if version == 1:
        kind = _optional(data, "type") or BEARER
        if kind != BEARER:
            raise ProfileError(f"a version 1 profile has a bearer token; type {kind!r} needs shareCredentialsVersion 2")
    else:
        kind = data.get("type")  # type: ignore[assignment]  # checked just below
        if kind is None:
            raise ProfileError(f"a version 2 profile needs 'type': one of {', '.join(_TYPES)}")
        if kind not in _TYPES:
            raise ProfileError(
                f"The current release does not supports {kind} type. Please check type: supported "
                f"types are {', '.join(_TYPES)}"
            )
    if kind == BEARER:
        profile = DeltaSharingProfile(
            version,
            endpoint,
            bearer_token=_required(data, "bearerToken", "the token"),
            expiration_time=_optional(data, "expirationTime"),
            type=None if version == 1 else BEARER,
        )
        profile.expiration_ms()  # validates the format now, not on the first request
        return profile
    if kind == OAUTH:
        return DeltaSharingProfile(
            version,
            endpoint,
            type=OAUTH,
            token_endpoint=_required(data, "tokenEndpoint", "the OAuth token URL").rstrip("/"),
            client_id=_required(data, "clientId", "the OAuth client id"),
            client_secret=_required(data, "clientSecret", "the OAuth client secret"),
            scope=_optional(data, "scope"),
        )
    return DeltaSharingProfile(
        version,
        endpoint,
        type=BASIC,
        username=_required(data, "username", "basic auth"),
        password=_required(data, "password", "basic auth"),
    )


ProfileSource = Union[str, os.PathLike, IO, Mapping[str, Any], DeltaSharingProfile, bytes]


def read_profile(source: ProfileSource) -> DeltaSharingProfile:
    """Read a profile from a path, URI, open file, mapping, JSON text or profile object."""
    if isinstance(source, DeltaSharingProfile):
        return source
    if isinstance(source, Mapping):
        return _from_mapping(source)
    if isinstance(source, (bytes, bytearray)):
        return DeltaSharingProfile.from_json(source)
    if isinstance(source, os.PathLike):
        return DeltaSharingProfile.from_json(_read_path(Path(source)))
    if isinstance(source, str):
        text = source.strip()
        if text.startswith("{"):
            return DeltaSharingProfile.from_json(text)
        return DeltaSharingProfile.from_json(_read_location(source))
    if hasattr(source, "read"):
        return DeltaSharingProfile.from_json(source.read())
    if hasattr(source, "share_credentials_version") and hasattr(source, "endpoint"):  # the official connector's
        return _from_attributes(source)
    raise ProfileError(f"a profile must be a path, an open file, a dict or a JSON string, not {type(source).__name__}")


def _read_path(path: Path) -> bytes:
    try:
        return path.expanduser().read_bytes()
    except FileNotFoundError:
        raise ProfileError(
            f"profile file not found: {path}; pass the path of the .share file the data provider gave you"
        ) from None
    except OSError as exc:
        raise ProfileError(f"cannot read the profile file {path}: {exc.strerror or exc}") from None


def _read_location(location: str) -> bytes:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return _read_path(Path(unquote(parsed.path)))
    if len(parsed.scheme) > 1 and parsed.netloc + parsed.path:  # s3://, https://, ... (one letter: a drive)
        try:
            import fsspec
        except ImportError:
            raise ProfileError(
                f"reading the profile from {parsed.scheme}:// needs the 'fsspec' package; or copy "
                "the profile to a local file"
            ) from None
        try:
            with fsspec.open(location, "rb") as fh:
                return fh.read()
        except Exception as exc:
            raise ProfileError(f"cannot read the profile from {location}: {exc}") from None
    return _read_path(Path(location))


def _from_attributes(obj: Any) -> DeltaSharingProfile:
    version = obj.share_credentials_version
    body: dict[str, Any] = {"shareCredentialsVersion": version, "endpoint": obj.endpoint}
    for attr, key in (
        ("type", "type"),
        ("bearer_token", "bearerToken"),
        ("expiration_time", "expirationTime"),
        ("token_endpoint", "tokenEndpoint"),
        ("client_id", "clientId"),
        ("client_secret", "clientSecret"),
        ("scope", "scope"),
        ("username", "username"),
        ("password", "password"),
    ):
        value = getattr(obj, attr, None)
        if value is not None:
            body[key] = value
    return _from_mapping(body)


# --- table URLs ---------------------------------------------------------------------------------


def parse_url(url: str) -> tuple[str, str, str, str]:
    """Split ``<profile>#<share>.<schema>.<table>`` at the LAST ``#``: (profile, share, schema, table)."""
    if not isinstance(url, str):
        raise InvalidTableUrl(f"Invalid 'url': {url!r}; expected a string '<profile-file>#<share>.<schema>.<table>'")
    cut = url.rfind("#")
    if cut < 0:
        raise InvalidTableUrl(
            f"Invalid 'url': {url}; expected '<profile-file>#<share>.<schema>.<table>' (the '#' is missing)"
        )
    profile = url[:cut]
    share, schema, table = _three_parts(url[cut + 1 :], url)
    if not profile:
        raise InvalidTableUrl(
            f"Invalid 'url': {url}; the profile file path before '#' is empty, expected "
            "'<profile-file>#<share>.<schema>.<table>'"
        )
    return profile, share, schema, table


def parse_table_name(name: str) -> tuple[str, str, str]:
    """``share.schema.table`` → (share, schema, table)."""
    return _three_parts(name, name)


def _three_parts(fragment: str, url: str) -> tuple[str, str, str]:
    parts = fragment.split(".")
    if len(parts) != 3 or not all(parts):
        raise InvalidTableUrl(
            f"Invalid 'url': {url}; the table must be named '<share>.<schema>.<table>' with three "
            "non-empty parts (names cannot contain '.')"
        )
    return parts[0], parts[1], parts[2]


# --- time ----------------------------------------------------------------------------------------


def parse_iso_timestamp(text: str) -> int:
    """An ISO-8601 time (``Z`` or an offset; naive means UTC) → ms since the epoch."""
    return iso_to_epoch_ms(text)
