"""What a staged read needs of each file, from the columns the caller names and its ``where``.

The columns fetched are the named ones and every column the ``where`` may mention: a name
counts as mentioned when it appears in the condition as a word (or, for names that are not one
word, anywhere in its text), which can only fetch too much, never too little.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from deltaport.client.schema import TableInfo
from deltaport.errors import DeltaportError
from deltaport.spark.chunks import Need
from deltaport.spark.pruning import column_kind

__all__ = ["UnknownColumn", "checked_columns", "need_of"]

_WORD = re.compile(r"`((?:[^`]|``)*)`|(\w+)")


class UnknownColumn(DeltaportError, ValueError):
    http_status = 400
    error_code = "INVALID_PARAMETER_VALUE"


def checked_columns(columns: Sequence[str] | None, available: Sequence[str]) -> list[str] | None:
    """``columns`` spelt as the table spells them (Spark matches names case-insensitively); one
    line naming the table's columns for a name it does not have."""
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise UnknownColumn("columns= takes a list of column names, e.g. columns=['id', 'value']")
    by_lower = {name.lower(): name for name in available}
    unknown = [c for c in columns if c.lower() not in by_lower]
    if unknown:
        raise UnknownColumn(
            f"the table has no column {', '.join(map(repr, unknown))}; its columns are: {', '.join(available)}"
        )
    return [by_lower[c.lower()] for c in columns]


def _mentioned(where: str, names: Sequence[str]) -> set[str]:
    words = {(m.group(1) or m.group(2) or "").replace("``", "`").lower() for m in _WORD.finditer(where)}
    words |= {w.split(".")[0] for w in words}
    text = where.lower()
    return {
        name for name in names if name.lower() in words or (not re.fullmatch(r"\w+", name) and name.lower() in text)
    }


def need_of(table: TableInfo, columns: Sequence[str] | None, where: str | None) -> Need | None:
    """The :class:`Need` of a snapshot read, None when it needs whole files (no columns, no where)."""
    if columns is None and where is None:
        return None
    data = [spec for spec in table.columns if not spec.is_partition]
    wanted = {spec.name for spec in data} if columns is None else set(columns)
    mentioned = _mentioned(where, [spec.name for spec in table.columns]) if where else set()
    fetch = tuple(spec.physical_name for spec in data if spec.name in wanted | mentioned)
    kinds = tuple(
        (spec.name, spec.physical_name, kind)
        for spec in data
        if spec.name in mentioned
        and (kind := column_kind(spec.type)) is not None
        and spec.physical_type.equals(spec.type)
    )
    return Need(fetch, where, kinds)
