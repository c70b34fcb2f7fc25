"""An immutable predicate tree, its visitors, and typed-value parsing shared by the hint parsers.

Types are Delta type names (``"long"``, ``"integer"``, ``"decimal(10,2)"``, ``"timestamp"``, ...).
Literal values are Python values: ``bool``, ``int``, ``float``, ``str``, ``datetime.date``,
``datetime.datetime`` (UTC-aware for ``timestamp``, naive for ``timestamp_ntz``), ``Decimal``, or
``None`` for a SQL NULL.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Union
from typing import Literal as TypingLiteral

ComparisonOp = TypingLiteral["=", "<", "<=", ">", ">=", "<>", "<=>"]

COMPARISON_OPS: frozenset[str] = frozenset({"=", "<", "<=", ">", ">=", "<>", "<=>"})
# a OP b  <=>  b FLIPPED[OP] a
FLIPPED_OPS: Mapping[str, str] = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<>": "<>", "<=>": "<=>"}
# NOT (a OP b)  <=>  a NEGATED[OP] b, also under SQL three-valued logic
NEGATED_OPS: Mapping[str, str] = {"=": "<>", "<>": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}


@dataclass(frozen=True)
class Column:
    """A top-level column. ``value_type`` is the declared (or cast-to) type, None if not stated."""

    name: str
    value_type: str | None = None


@dataclass(frozen=True)
class Literal:
    """A constant, already converted to a Python value of ``value_type``."""

    value: Any
    value_type: str


@dataclass(frozen=True)
class Comparison:
    op: ComparisonOp
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in COMPARISON_OPS:
            raise ValueError(f"unknown comparison operator {self.op!r}")


@dataclass(frozen=True)
class IsNull:
    child: Expr


@dataclass(frozen=True)
class Not:
    child: Expr


@dataclass(frozen=True)
class And:
    children: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Expr, ...]


@dataclass(frozen=True)
class In:
    column: Column
    values: tuple[Literal, ...]


@dataclass(frozen=True)
class Unsupported:
    """Something a parser could not express; evaluation treats it as unknown (keep the file)."""

    description: str


Expr = Union[Column, Literal, Comparison, IsNull, Not, And, Or, In, Unsupported]


# --- helpers ---------------------------------------------------------------------------------


def and_all(exprs: Iterable[Expr]) -> Expr | None:
    """AND the expressions together; None for none, the expression itself for one."""
    items = tuple(exprs)
    if not items:
        return None
    return items[0] if len(items) == 1 else And(items)


def columns_of(expr: Expr) -> set[str]:
    """The names of every column the expression mentions."""
    if isinstance(expr, Column):
        return {expr.name}
    if isinstance(expr, In):
        return {expr.column.name}
    names: set[str] = set()
    for child in _children(expr):
        names |= columns_of(child)
    return names


def rename_columns(expr: Expr, mapping: Mapping[str, str]) -> Expr:
    """A copy of ``expr`` with column names replaced by ``mapping`` (names not in it are kept)."""
    if isinstance(expr, Column):
        return Column(mapping.get(expr.name, expr.name), expr.value_type)
    if isinstance(expr, In):
        return In(Column(mapping.get(expr.column.name, expr.column.name), expr.column.value_type), expr.values)
    if isinstance(expr, Comparison):
        return Comparison(expr.op, rename_columns(expr.left, mapping), rename_columns(expr.right, mapping))
    if isinstance(expr, IsNull):
        return IsNull(rename_columns(expr.child, mapping))
    if isinstance(expr, Not):
        return Not(rename_columns(expr.child, mapping))
    if isinstance(expr, And):
        return And(tuple(rename_columns(c, mapping) for c in expr.children))
    if isinstance(expr, Or):
        return Or(tuple(rename_columns(c, mapping) for c in expr.children))
    return expr


def push_down_not(expr: Expr) -> Expr:
    """Push every NOT down to the leaves (De Morgan; NOT of a comparison flips its operator).

    What is left of NOT afterwards is ``Not(IsNull(...))`` and NOTs of leaves that have no
    negated form (a null-safe comparison between two columns), which evaluate as unknown.
    """
    if isinstance(expr, Not):
        return _negate(expr.child)
    if isinstance(expr, And):
        return And(tuple(push_down_not(c) for c in expr.children))
    if isinstance(expr, Or):
        return Or(tuple(push_down_not(c) for c in expr.children))
    return expr


def _negate(expr: Expr) -> Expr:
    if isinstance(expr, Not):
        return push_down_not(expr.child)
    if isinstance(expr, And):
        return Or(tuple(_negate(c) for c in expr.children))
    if isinstance(expr, Or):
        return And(tuple(_negate(c) for c in expr.children))
    if isinstance(expr, Comparison):
        if expr.op in NEGATED_OPS:
            return Comparison(NEGATED_OPS[expr.op], expr.left, expr.right)  # type: ignore[arg-type]
        return _negate_null_safe_equal(expr)
    if isinstance(expr, IsNull):
        return Not(expr)
    if isinstance(expr, In):
        return and_all(Comparison("<>", expr.column, v) for v in expr.values) or Literal(True, "boolean")
    if isinstance(expr, Literal):
        return Literal(None if expr.value is None else not expr.value, expr.value_type)
    if isinstance(expr, Column):  # a bare boolean column used as a predicate
        return Comparison("=", expr, Literal(False, "boolean"))
    return Unsupported(f"NOT ({describe(expr)})")


def _negate_null_safe_equal(expr: Comparison) -> Expr:
    column, literal = split_column_literal(expr)
    if column is None or literal is None:
        return Not(expr)
    if literal.value is None:  # NOT (c <=> NULL)  ==  c IS NOT NULL
        return Not(IsNull(column))
    return Or((IsNull(column), Comparison("<>", column, literal)))


def split_column_literal(expr: Comparison) -> tuple[Column | None, Literal | None]:
    """The (column, literal) of a column-vs-literal comparison in either order, else Nones."""
    left, right = expr.left, expr.right
    if isinstance(left, Column) and isinstance(right, Literal):
        return left, right
    if isinstance(left, Literal) and isinstance(right, Column):
        return right, left
    return None, None


def describe(expr: Expr) -> str:
    """A short human-readable rendering, for messages and ``Unsupported`` descriptions."""
    if isinstance(expr, Column):
        return expr.name
    if isinstance(expr, Literal):
        return "NULL" if expr.value is None else repr(expr.value)
    if isinstance(expr, Comparison):
        return f"{describe(expr.left)} {expr.op} {describe(expr.right)}"
    if isinstance(expr, IsNull):
        return f"{describe(expr.child)} IS NULL"
    if isinstance(expr, Not):
        return f"NOT ({describe(expr.child)})"
    if isinstance(expr, (And, Or)):
        word = " AND " if isinstance(expr, And) else " OR "
        return "(" + word.join(describe(c) for c in expr.children) + ")"
    if isinstance(expr, In):
        return f"{expr.column.name} IN ({', '.join(describe(v) for v in expr.values)})"
    return f"<{expr.description}>"


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Comparison):
        return (expr.left, expr.right)
    if isinstance(expr, (IsNull, Not)):
        return (expr.child,)
    if isinstance(expr, (And, Or)):
        return expr.children
    return ()


# --- types and typed values -----------------------------------------------------------------

INTEGER_TYPES: Mapping[str, int] = {"byte": 8, "short": 16, "integer": 32, "long": 64}
FLOAT_TYPES: frozenset[str] = frozenset({"float", "double"})

_TYPE_ALIASES: Mapping[str, str] = {
    "bool": "boolean",
    "boolean": "boolean",
    "byte": "byte",
    "tinyint": "byte",
    "short": "short",
    "smallint": "short",
    "int": "integer",
    "integer": "integer",
    "long": "long",
    "bigint": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "string": "string",
    "varchar": "string",
    "char": "string",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
    "decimal": "decimal(10,0)",
    "dec": "decimal(10,0)",
    "numeric": "decimal(10,0)",
}
_DECIMAL_TYPE = re.compile(r"^\s*(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(-?\d+)\s*)?\)\s*$", re.I)


def normalize_type(name: str) -> str | None:
    """The Delta type name for a wire or SQL spelling (case-insensitive), or None if unknown."""
    lowered = name.strip().lower()
    match = _DECIMAL_TYPE.match(lowered)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2) or 0)
        if 1 <= precision <= 38 and 0 <= scale <= precision:
            return f"decimal({precision},{scale})"
        return None
    return _TYPE_ALIASES.get(lowered)


def decimal_precision_scale(value_type: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``decimal(p,s)`` type name, else None."""
    match = _DECIMAL_TYPE.match(value_type)
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


_TIMESTAMP = re.compile(
    r"^\s*(\d{4,})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{2}(?::?\d{2})?)?\s*$",
    re.I,
)
_DATE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$")
_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")


def parse_timestamp_literal(text: str, *, naive: bool) -> dt.datetime:
    """Parse ``yyyy-mm-dd[( |T)hh:mm[:ss[.fffffffff]]][Z|±hh[:mm]]``.

    ``naive=False``: a UTC-aware datetime (no offset means UTC). ``naive=True``
    (``timestamp_ntz``): a naive datetime; an offset is an error. Digits past microseconds
    are dropped.
    """
    match = _TIMESTAMP.match(text)
    if not match:
        raise ValueError(f"not a timestamp: {text!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    value = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micros)
    if naive:
        if zone:
            raise ValueError(f"timestamp_ntz value with a zone offset: {text!r}")
        return value
    offset = dt.timedelta(0)
    if zone and zone.upper() not in ("Z", "UTC"):
        digits = zone[1:].replace(":", "")
        offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        if zone[0] == "-":
            offset = -offset
    return (value - offset).replace(tzinfo=dt.timezone.utc)


def parse_date(text: str) -> dt.date:
    """Parse ``yyyy-mm-dd``."""
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"not a date: {text!r}")
    return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def convert_text(text: str, value_type: str) -> Any:
    """Convert the text form of a value (wire literal, partition value) to ``value_type``.

    Raises ValueError when the text is not a value of that type (or the type is unknown).
    """
    if value_type == "string":
        return text
    if value_type == "boolean":
        lowered = text.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError(f"not a boolean: {text!r}")
    if value_type in INTEGER_TYPES:
        if not _INTEGER.match(text):
            raise ValueError(f"not an integer: {text!r}")
        number = int(text)
        bits = INTEGER_TYPES[value_type]
        if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            raise ValueError(f"{text!r} is out of range for {value_type}")
        return number
    if value_type in FLOAT_TYPES:
        return float(text.strip())
    if value_type == "date":
        return parse_date(text)
    if value_type in ("timestamp", "timestamp_ntz"):
        return parse_timestamp_literal(text, naive=value_type == "timestamp_ntz")
    precision_scale = decimal_precision_scale(value_type)
    if precision_scale is not None:
        try:
            amount = Decimal(text.strip())
        except InvalidOperation:
            raise ValueError(f"not a decimal: {text!r}") from None
        if not decimal_fits(amount, *precision_scale):
            raise ValueError(f"{text!r} does not fit {value_type}")
        return amount
    raise ValueError(f"cannot convert text to {value_type!r}")


def decimal_fits(number: Decimal, precision: int, scale: int) -> bool:
    """True if ``number`` is finite and exactly representable as ``decimal(precision, scale)``."""
    if not number.is_finite():
        return False
    _sign, _digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    fraction_digits = max(0, -exponent)
    if fraction_digits > scale:
        # trailing zeros beyond the scale are harmless: 1.50 fits decimal(3,1)
        trimmed = number.normalize()
        fraction_digits = max(0, -int(trimmed.as_tuple().exponent))
        if fraction_digits > scale:
            return False
    integer_digits = len(str(abs(int(number)))) if abs(number) >= 1 else 0
    return integer_digits <= precision - scale
