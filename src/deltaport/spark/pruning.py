"""Which row groups of a parquet file a ``where`` cannot rule out, by the row groups' statistics.

Sound, never clever: a row group is dropped only when the condition is certainly not true for
every row of it. Understood: AND, OR, NOT (pushed down), comparisons of a column with a literal,
IN, IS [NOT] NULL, on integer, date, boolean and string columns whose parquet type is the one
Spark writes for them (signed INT32/INT64, DATE, BOOLEAN, BYTE_ARRAY compared as bytes, which is
Spark's order for strings). No floats or doubles (NaN sorts above everything in Spark), no
timestamps, decimals or INT96. A row group without min/max for a column, a literal of another
type, a CAST, a NULL literal or anything else is "maybe": the row group is kept.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from deltaport.expressions.tree import (
    INTEGER_TYPES,
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    push_down_not,
)

__all__ = ["column_kind", "row_group_filter"]

#: parquet physical type and logical type (pyarrow's names) each kind of column must have
_PARQUET = {
    "integer": ({"INT32", "INT64"}, {"None", "Int"}),
    "date": ({"INT32"}, {"Date"}),
    "boolean": ({"BOOLEAN"}, {"None"}),
    "string": ({"BYTE_ARRAY"}, {"String"}),
}


def column_kind(arrow_type: pa.DataType) -> str | None:
    """The kind of a table column whose statistics can rule row groups out, else None."""
    if pa.types.is_integer(arrow_type) and pa.types.is_signed_integer(arrow_type):
        return "integer"
    if pa.types.is_date32(arrow_type):
        return "date"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


def _literal(kind: str, literal: Literal) -> Any:
    """The literal as comparable with ``kind``'s statistics, or None when its type does not match."""
    value = literal.value
    if value is None:
        return None
    if kind == "integer" and literal.value_type in INTEGER_TYPES and type(value) is int:
        return value
    if kind == "date" and literal.value_type == "date" and type(value) is dt.date:
        return value
    if kind == "boolean" and literal.value_type == "boolean" and type(value) is bool:
        return value
    if kind == "string" and literal.value_type == "string" and isinstance(value, str):
        return value.encode("utf-8")
    return None


class _Stats:
    """One column's statistics in one row group: ``low``/``high`` (None unless usable), ``nulls``
    (None when unknown) and the row group's row count."""

    def __init__(self, kind: str, column: Any, logical: str, rows: int) -> None:
        self.rows = rows
        self.low = self.high = None
        self.nulls: int | None = None
        stats = column.statistics
        if stats is None:
            return
        if stats.has_null_count:
            self.nulls = stats.null_count
        physical, logicals = _PARQUET[kind]
        if not stats.has_min_max or column.physical_type not in physical or logical not in logicals:
            return
        try:
            low, high = stats.min, stats.max
        except (ValueError, UnicodeDecodeError, pa.ArrowException):
            return
        if kind == "string":
            low, high = (v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in (low, high))
        self.low, self.high = low, high


def _comparison(op: str, stats: _Stats, value: Any) -> bool:
    """Whether ``column op value`` is certainly not true in the row group."""
    low, high = stats.low, stats.high
    if low is None or high is None:
        return False
    if op in ("=", "<=>"):
        return bool(value < low or value > high)
    if op == "<":
        return bool(low >= value)
    if op == "<=":
        return bool(low > value)
    if op == ">":
        return bool(high <= value)
    if op == ">=":
        return bool(high < value)
    if op == "<>":
        return bool(low == high == value)
    return False


_FLIP = {"=": "=", "<=>": "<=>", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _Evaluator:
    def __init__(self, stats: Mapping[str, tuple[str, _Stats]]) -> None:
        self.stats = stats  # lower-cased logical name -> (kind, statistics)

    def column(self, expr: Expr) -> tuple[str, _Stats] | None:
        if not isinstance(expr, Column) or expr.value_type is not None:  # a CAST: maybe
            return None
        return self.stats.get(expr.name.lower())

    def not_true(self, expr: Expr) -> bool:
        if isinstance(expr, And):
            return any(self.not_true(c) for c in expr.children)
        if isinstance(expr, Or):
            return all(self.not_true(c) for c in expr.children)
        if isinstance(expr, Comparison):
            return self._compare(expr)
        if isinstance(expr, In):
            return self._in(expr)
        if isinstance(expr, IsNull):
            found = self.column(expr.child)
            return found is not None and found[1].nulls == 0
        if isinstance(expr, Not) and isinstance(expr.child, IsNull):
            found = self.column(expr.child.child)
            return found is not None and found[1].nulls is not None and found[1].nulls >= found[1].rows
        return False

    def _compare(self, expr: Comparison) -> bool:
        op: str = expr.op
        left, right = expr.left, expr.right
        if isinstance(left, Literal) and isinstance(right, Column):
            op, left, right = _FLIP[op], right, left
        found = self.column(left)
        if found is None or not isinstance(right, Literal):
            return False
        value = _literal(found[0], right)
        return value is not None and _comparison(op, found[1], value)

    def _in(self, expr: In) -> bool:
        found = self.column(expr.column)
        if found is None:
            return False
        values = [_literal(found[0], v) for v in expr.values]
        return all(v is not None and _comparison("=", found[1], v) for v in values)


def _leaf_index(metadata: Any) -> dict[str, int]:
    """Top-level primitive columns of a parquet schema: name -> leaf index."""
    out = {}
    for i in range(metadata.num_columns):
        column = metadata.schema.column(i)
        if column.path == column.name and "." not in column.path:
            out[column.name] = i
    return out


def _logical_name(column: Any) -> str:
    """pyarrow's name of a column's logical type; unsigned integers are ``UInt`` (not Spark's order)."""
    try:
        logical = json.loads(column.logical_type.to_json())
    except (ValueError, AttributeError):
        return "?"
    name = str(logical.get("Type", "None"))
    return "UInt" if name == "Int" and logical.get("isSigned") is False else name


def row_group_filter(
    where: str | None, kinds: tuple[tuple[str, str, str], ...], metadata: Any
) -> Callable[[int], bool]:
    """``keep(i)``: whether row group ``i`` of the file ``metadata`` (pyarrow's FileMetaData) may
    hold rows where ``where`` is true. ``kinds``: (logical name, physical name, kind) of the
    columns the statistics may rule on."""
    from deltaport.protocol.hints import parse_sql_predicates

    expr = parse_sql_predicates(where) if where else None
    if expr is None or not kinds:
        return lambda i: True
    expr = push_down_not(expr)
    leaves = _leaf_index(metadata)
    usable = [(name, leaves[physical], kind) for name, physical, kind in kinds if physical in leaves]
    logical = {index: _logical_name(metadata.schema.column(index)) for _, index, _ in usable}

    def keep(i: int) -> bool:
        group = metadata.row_group(i)
        stats = {
            name.lower(): (kind, _Stats(kind, group.column(index), logical[index], group.num_rows))
            for name, index, kind in usable
        }
        return not _Evaluator(stats).not_true(expr)

    return keep
