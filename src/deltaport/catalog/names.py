"""The naming rules for everything a provider names: shares, schemas, tables, catalogs, recipients.

One rule, used by the YAML config (server.sources.config, which raises its ConfigError) and the catalog
database (catalog.store, which raises InvalidParameter): a name is a non-empty string of at most
255 characters, lower-cased too (some characters grow when lower-cased: 'İ' becomes two), with no
whitespace, no '/', no control character and no unpaired surrogate (which no database can store);
where it is one part of a dotted name ("catalog.schema.table", "schema.table") it has no '.'
either. Names keep the spelling the provider gave and are matched without regard to case
(:func:`name_key`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from deltaport.errors import InvalidParameter

__all__ = ["MAX_NAME_LENGTH", "check_name", "name_key", "split_name"]

MAX_NAME_LENGTH = 255
_FORBIDDEN = re.compile(r"[\s/\x00-\x1f\x7f\ud800-\udfff]")


def check_name(
    name: object,
    what: str,
    *,
    allow_dot: bool,
    error: Callable[[str], Exception] = InvalidParameter,
) -> str:
    """``name`` itself when it follows the rule, else ``error(message)`` raised; the message names
    the kind of object (``what``, e.g. "share") and what a valid name looks like."""
    if not isinstance(name, str):
        raise error(f"the name of a {what} must be a string, not {name!r}")
    if not name:
        raise error(f"the name of a {what} must not be empty")
    too_long = len(name) > MAX_NAME_LENGTH or len(name_key(name)) > MAX_NAME_LENGTH
    if too_long or _FORBIDDEN.search(name) or (not allow_dot and "." in name):
        extra = "" if allow_dot else ", or '.'"
        raise error(
            f"{what} name {name!r} is invalid: at most {MAX_NAME_LENGTH} characters (lower-cased too), no "
            f"unpaired surrogates, no spaces, '/', or control characters{extra}"
        )
    return name


def name_key(name: str) -> str:
    """The form names are compared and kept unique in: lower case (Unicode-aware, unlike SQL's
    ``lower()`` in SQLite, so it is computed here and stored)."""
    return name.lower()


def split_name(full_name: object, parts: tuple[str, ...]) -> tuple[str, ...]:
    """``full_name`` ("a.b" or "a.b.c") split into exactly ``len(parts)`` valid names; ``parts``
    names each level for the message (e.g. ("catalog", "schema", "table")). InvalidParameter when
    the count is wrong or a part is invalid."""
    if not isinstance(full_name, str):
        raise InvalidParameter(f"a {parts[-1]}'s full name must be a string, not {full_name!r}")
    pieces = full_name.split(".")
    if len(pieces) != len(parts):
        shape = ".".join(parts)
        raise InvalidParameter(f"{parts[-1]} full name {full_name!r} is invalid: write it as '{shape}'")
    return tuple(check_name(piece, what, allow_dot=False) for piece, what in zip(pieces, parts))
