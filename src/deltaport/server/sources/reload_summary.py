"""One log line saying what a reload of the catalog or the config file changed in what is served.

Operators read it to confirm that an edit or an admin write took: shares, tables, recipients and
grants added, removed or changed, and the global bearer token. Names only, never a token or a digest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from deltaport.catalog.served import RecipientConfig, ShareConfig

#: Names shown per kind of change before the rest is only counted.
_SHOWN = 5


def _shares(shares: Iterable[ShareConfig]) -> dict[str, ShareConfig]:
    """Shares by name, with their own fields only (id, comment, display name, properties): their
    tables are told apart as tables."""
    return {s.name: dataclasses.replace(s, schemas=()) for s in shares}


def _tables(shares: Iterable[ShareConfig]) -> dict[str, Any]:
    return {f"{sh.name}.{sc.name}.{t.name}": t for sh in shares for sc in sh.schemas for t in sc.tables}


def _recipients(recipients: Iterable[RecipientConfig]) -> dict[str, RecipientConfig]:
    """Recipients by name, their grants left out (those are told apart as grants)."""
    return {r.name: dataclasses.replace(r, shares=()) for r in recipients}


def _grants(recipients: Iterable[RecipientConfig]) -> set[str]:
    return {f"{r.name}→{share}" for r in recipients for share in r.shares}


def _names(what: Iterable[str]) -> str:
    names = sorted(what)
    shown = ", ".join(names[:_SHOWN])
    return f"{len(names)} ({shown}{', …' if len(names) > _SHOWN else ''})"


def _diff(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    parts = []
    added, removed = new.keys() - old.keys(), old.keys() - new.keys()
    changed = {name for name in new.keys() & old.keys() if new[name] != old[name]}
    for sign, names in (("+", added), ("-", removed), ("~", changed)):
        if names:
            parts.append(f"{kind} {sign}{_names(names)}")
    return parts


def describe_reload(
    old: tuple[tuple[ShareConfig, ...], tuple[RecipientConfig, ...], bytes | None],
    new: tuple[tuple[ShareConfig, ...], tuple[RecipientConfig, ...], bytes | None],
) -> str | None:
    """What changed from ``old`` to ``new`` (each: shares, recipients, the bearer token's digest), as
    ``shares +1 (sales); grants -1 (acme→sales)`` (``+`` added, ``-`` removed, ``~`` changed); None
    when what is served did not change."""
    (old_shares, old_recipients, old_bearer), (new_shares, new_recipients, new_bearer) = old, new
    parts = [
        *_diff("shares", _shares(old_shares), _shares(new_shares)),
        *_diff("tables", _tables(old_shares), _tables(new_shares)),
        *_diff("recipients", _recipients(old_recipients), _recipients(new_recipients)),
        *_diff("grants", dict.fromkeys(_grants(old_recipients)), dict.fromkeys(_grants(new_recipients))),
    ]
    if old_bearer != new_bearer:
        parts.append("authorization bearer token " + ("removed" if new_bearer is None else "changed"))
    return "; ".join(parts) or None
