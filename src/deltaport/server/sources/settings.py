"""The server's top-level settings, each declared once, on its :class:`ServerConfig` field.

A :func:`setting` declares the YAML key, the default, how a value is read and checked (type,
minimum, range), whether an edit of the config file applies without a restart, the ``deltaport
serve`` flag and the environment variable it has, if any, and one line of doc. The config loader
(config.py) reads each key through its declaration, the unknown-key check and the restart notice
(config_file.py) take the key list from them, and tests hold README.md and ``deltaport serve
--help`` to them.

The readers here are the config's value checks; every error names the key and what it must be.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from deltaport.errors import DeltaportError

T = TypeVar("T")

#: How a present value is read: ``(value, key, base)`` → the attribute's value, ConfigError if it
#: is not valid. ``base`` is the config file's folder (relative paths are taken from it).
Reader = Callable[[Any, str, "Path | None"], Any]


class ConfigError(DeltaportError):
    """The configuration file is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class Setting:
    """One top-level key of the server config and the :class:`ServerConfig` attribute it sets."""

    key: str
    default: Any
    #: None: parsed by config.py's own code (nested structures, or a value that depends on others)
    read: Reader | None
    doc: str
    #: True: an edit of the config file applies without a restart; else it waits for one (and the log says so)
    reload: bool = False
    #: the ``deltaport serve`` options that set or add to it
    flags: tuple[str, ...] = ()
    #: the environment variable that sets or adds to it
    env: str | None = None
    attr: str = ""  # filled in from the field by :func:`declared`


def setting(
    key: str,
    default: T,
    read: Reader | None,
    doc: str,
    *,
    reload: bool = False,
    flags: tuple[str, ...] = (),
    env: str | None = None,
) -> T:
    """A dataclass field declaring the setting ``key`` (typed as its default for the checkers)."""
    declared_ = Setting(key, default, read, doc, reload, flags, env)
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata={"setting": declared_})  # type: ignore[return-value]
    return dataclasses.field(default=default, metadata={"setting": declared_})


def declared(cls: type) -> tuple[Setting, ...]:
    """The settings declared on the dataclass ``cls``, in field order, each knowing its attribute."""
    fields = [f for f in dataclasses.fields(cls) if "setting" in f.metadata]
    return tuple(dataclasses.replace(f.metadata["setting"], attr=f.name) for f in fields)


def check_keys(d: Any, known: tuple[str, ...], where: str) -> Mapping[str, Any]:
    """``d`` as a mapping with only the ``known`` keys: a misspelt key is refused with the nearest
    valid one, never silently ignored."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where} must be a mapping of keys to values, not {d!r}")
    for key in d:
        if key not in known:
            close = [k for k in known if k.lower() == str(key).lower()] or difflib.get_close_matches(
                str(key), known, n=1
            )
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"unknown key '{key}' in {where}: {hint}")
    return d


# --- value checks ------------------------------------------------------------------------------


def boolean(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"'{key}' must be true or false, not {value!r}")


def whole(value: Any, key: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"'{key}' must be a whole number, not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"'{key}' must be a whole number, not {value!r}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"'{key}' must be at least {minimum}, not {number}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"'{key}' must be at most {maximum}, not {number}")
    return number


@dataclass(frozen=True)
class Whole:
    """A whole number of at least ``minimum`` (and at most ``maximum``, if given)."""

    minimum: int
    maximum: int | None = None

    def __call__(self, value: Any, key: str, base: Path | None = None) -> int:
        return whole(value, key, minimum=self.minimum, maximum=self.maximum)


@dataclass(frozen=True)
class Seconds:
    """A number of seconds between ``low`` and ``high`` (whole or not)."""

    low: float
    high: float

    def __call__(self, value: Any, key: str, base: Path | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value <= self.high:
            between = f"between {self.low:g} and {self.high:g}"
            raise ConfigError(f"'{key}' must be a number of seconds {between}, not {value!r}")
        return float(value)


def read_bool(value: Any, key: str, base: Path | None = None) -> bool:
    return boolean(value, key)


def read_text(value: Any, key: str, base: Path | None = None) -> str:
    return str(value)


def read_optional_text(value: Any, key: str, base: Path | None = None) -> str | None:
    """A string; empty means unset."""
    return str(value) if value != "" else None


def read_endpoint(value: Any, key: str, base: Path | None = None) -> str:
    return "/" + str(value).strip("/")


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def read_bucket(value: Any, key: str, base: Path | None = None) -> str:
    """An S3 bucket name (3-63 of a-z 0-9 . -, a letter or digit at each end, no '..', not an IP)."""
    name = str(value)
    if (
        not _BUCKET.fullmatch(name)
        or ".." in name
        or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)
        or name.startswith(("xn--", "sthree-"))
        or name.endswith(("-s3alias", "--ol-s3"))
    ):
        raise ConfigError(
            f"'{key}' must be a valid S3 bucket name (3-63 characters of a-z, 0-9, '.' and '-', starting "
            f"and ending with a letter or digit), not {name!r}"
        )
    return name


def read_url(value: Any, key: str, base: Path | None = None) -> str | None:
    return str(value).rstrip("/") if value != "" else None


def read_secret(value: Any, key: str, base: Path | None = None) -> bytes | None:
    return str(value).encode() if value != "" else None


def read_mapping(value: Any, key: str, base: Path | None = None) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"'{key}' must be a mapping of option names to values, not {value!r}")
    return dict(value)


def read_path(value: Any, key: str, base: Path | None = None) -> str | None:
    """A file's path, relative to the config file's folder; empty means unset."""
    if value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"'{key}' must be the path of a file to append audit events to, not {value!r}")
    path = Path(value).expanduser()
    return str(path if path.is_absolute() or base is None else base / path)


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def token_digest(token: Any, whose: str) -> bytes:
    """A token as its SHA-256 digest: a plain token is hashed, ``sha256:<64 hex>`` is taken as is."""
    token = str(token)
    if not token.startswith("sha256:"):
        return hash_token(token)
    digest = token[len("sha256:") :]
    if not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
        raise ConfigError(f"{whose} starting 'sha256:' must be 64 hex digits")
    return bytes.fromhex(digest)


def read_token(value: Any, key: str, base: Path | None = None) -> bytes | None:
    """The digest of one token (plain, or ``sha256:<hex>``)."""
    if value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"'{key}' must be one token (plain, or 'sha256:<64 hex digits>'), not a list")
    return token_digest(value, f"'{key}'")


def read_tokens(value: Any, key: str, base: Path | None = None) -> tuple[bytes, ...]:
    """The digests of a list of tokens (each plain, or ``sha256:<hex>``)."""
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' must be a list of tokens (plain, or 'sha256:<64 hex digits>')")
    return tuple(token_digest(t, "an admin token") for t in value)


def ip_list(value: Any, what: str) -> tuple[str, ...]:
    """A list of IP addresses and CIDR blocks (IPv4 or IPv6), e.g. ['10.0.0.0/8', '2001:db8::1']."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of IP addresses or CIDRs, e.g. ['10.0.0.0/8']")
    for entry in value:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ConfigError(f"{what} entry {entry!r} is not an IP address or CIDR") from None
    return tuple(value)


def read_ip_list(value: Any, key: str, base: Path | None = None) -> tuple[str, ...]:
    return ip_list(value, f"'{key}'")
