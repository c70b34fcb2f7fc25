"""Spark's pushed filters as a ``jsonPredicateHints`` string.

Hints are best effort on both ends: the server may ignore them, and filters this module cannot
express are left out of the hint (an AND may drop any of its children and still select a
superset of rows). The data source returns every filter to Spark, which evaluates them again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql import datasource as sds

from deltaport.errors import DeltaportError
from deltaport.expressions import And, Column, Comparison, Expr, In, IsNull, Literal, Not, Or, and_all
from deltaport.protocol.hints import expr_to_json

__all__ = ["filters_to_expression", "filters_to_json_hint"]

_INTEGER_TYPES = {"byte": 8, "short": 16, "integer": 32, "long": 64}
# Delta types a hint can carry (the wire knows bool, int, long, string, date, float, double, timestamp).
_HINTABLE = frozenset({"boolean", "byte", "short", "integer", "long", "string", "date", "float", "double", "timestamp"})
_COMPARISONS: Mapping[type, str] = {
    sds.EqualTo: "=",
    sds.GreaterThan: ">",
    sds.GreaterThanOrEqual: ">=",
    sds.LessThan: "<",
    sds.LessThanOrEqual: "<=",
    sds.EqualNullSafe: "<=>",
}


class _Skip(Exception):
    """The filter (or a part that cannot be dropped) cannot be expressed as a hint."""


def filters_to_expression(filters: Iterable[Any], column_types: Mapping[str, Any]) -> Expr | None:
    """AND of every filter that can be expressed; None when none can.

    ``column_types`` maps top-level logical column names to Delta types (strings for
    primitives). Columns are matched case-insensitively, as Spark resolves them.
    """
    lowered = {name.lower(): (name, t) for name, t in column_types.items()}
    parts = []
    for f in filters:
        try:
            parts.append(_convert(f, lowered))
        except _Skip:
            continue
    return and_all(parts)


def filters_to_json_hint(filters: Sequence[Any], column_types: Mapping[str, Any]) -> str | None:
    """The ``jsonPredicateHints`` string for ``filters``, or None if nothing can be hinted."""
    expr = filters_to_expression(filters, column_types)
    if expr is None:
        return None
    try:
        return expr_to_json(expr)
    except DeltaportError:
        return None


def _convert(f: Any, columns: Mapping[str, tuple[str, Any]]) -> Expr:
    kind = type(f)
    if kind in _COMPARISONS:
        column, value_type = _column(f.attribute, columns)
        op = _COMPARISONS[kind]
        if f.value is None:
            if op == "<=>":
                return IsNull(column)
            raise _Skip()  # comparing with NULL selects nothing; leave it to Spark
        return Comparison(op, column, _literal(f.value, value_type))  # type: ignore[arg-type]
    if kind is sds.In:
        column, value_type = _column(f.attribute, columns)
        values = tuple(_literal(v, value_type) for v in f.value if v is not None)
        if not values:
            raise _Skip()
        return Comparison("=", column, values[0]) if len(values) == 1 else In(column, values)
    if kind is sds.IsNull:
        return IsNull(_column(f.attribute, columns)[0])
    if kind is sds.IsNotNull:
        return Not(IsNull(_column(f.attribute, columns)[0]))
    if kind is sds.Not:
        return Not(_convert(f.child, columns))  # NOT of something unknown cannot be dropped safely
    name = kind.__name__
    if name in ("And", "Or"):  # not produced by PySpark 4.3, accepted if a later version sends them
        children = [getattr(f, side) for side in ("left", "right")]
        if name == "And":
            parts = []
            for child in children:
                try:
                    parts.append(_convert(child, columns))
                except _Skip:
                    continue
            if not parts:
                raise _Skip()
            return parts[0] if len(parts) == 1 else And(tuple(parts))
        return Or(tuple(_convert(child, columns) for child in children))
    raise _Skip()  # StringStartsWith and friends have no wire form


def _column(attribute: Sequence[str], columns: Mapping[str, tuple[str, Any]]) -> tuple[Column, str]:
    if len(attribute) != 1:
        raise _Skip()  # nested fields are not hinted
    found = columns.get(attribute[0].lower())
    if found is None:
        raise _Skip()  # e.g. the change data feed's _change_type
    name, value_type = found
    if not isinstance(value_type, str) or value_type not in _HINTABLE:
        raise _Skip()
    return Column(name, value_type), value_type


def _literal(value: Any, value_type: str) -> Literal:
    if value_type == "boolean":
        if isinstance(value, bool):
            return Literal(value, value_type)
    elif value_type in _INTEGER_TYPES:
        if isinstance(value, int) and not isinstance(value, bool):
            bits = _INTEGER_TYPES[value_type]
            if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                return Literal(value, value_type)
    elif value_type in ("float", "double"):
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            number = float(value)
            if number == number:  # NaN ordering differs between engines; leave it to Spark
                return Literal(number, value_type)
    elif value_type == "string":
        if isinstance(value, str):
            return Literal(value, value_type)
    elif value_type == "date":
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return Literal(value, value_type)
    elif value_type == "timestamp" and isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return Literal(aware.astimezone(dt.timezone.utc), value_type)
    raise _Skip()
