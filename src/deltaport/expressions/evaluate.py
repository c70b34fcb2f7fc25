"""Conservative three-valued file pruning, columnar over many files at once.

A file is dropped only when its partition values or statistics prove that no row in it can make
the predicate TRUE (SQL semantics: a comparison with NULL is not TRUE). NOT is pushed to the
leaves first, so every node answers one question per file: "could some row make this TRUE?".
AND keeps a file only if every child could; OR keeps it if any child could. Anything unknown —
missing or null stats, a type that cannot be coerced safely, an unsupported node — keeps it.

Partition values are point ranges ``[v, v]``; other columns use ``[min, max]`` plus null counts.
Two stats quirks are handled: string max values may be truncated prefixes (a value can only be
above such a max if the max is not a prefix of it), and timestamp stats may be truncated to
milliseconds (the max is widened by 1 ms).

Deliberately unknown (the file is kept): a declared column type narrower than the real one (a
JSON ``int`` on a ``long`` column), DECIMAL against a floating-point literal, NaN literals,
aware timestamps against ``timestamp_ntz`` columns, binary columns. Floating-point values follow
IEEE ordering (NaN matches no comparison), as Arrow and pandas filter them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaport.expressions.tree import (
    FLIPPED_OPS,
    FLOAT_TYPES,
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
    convert_text,
    decimal_precision_scale,
    parse_date,
    parse_timestamp_literal,
    push_down_not,
    split_column_literal,
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_STRING_PREFIX_CAP = 1024  # longer literals are clipped for the prefix test (clipping only keeps more)
_LEAF_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError, ArithmeticError, InvalidOperation)


@dataclass(frozen=True)
class FileColumns:
    """What pruning needs about ``num_rows`` files, one array entry per file."""

    num_rows: int
    column_types: Mapping[str, str]
    partition_values: Mapping[str, pa.Array] = field(default_factory=dict)
    min_values: Mapping[str, pa.Array] = field(default_factory=dict)
    max_values: Mapping[str, pa.Array] = field(default_factory=dict)
    null_counts: Mapping[str, pa.Array] = field(default_factory=dict)
    num_records: pa.Array | None = None
    timestamp_stats_truncated_to_ms: bool = True

    def __post_init__(self) -> None:
        arrays = [self.num_records] if self.num_records is not None else []
        for mapping in (self.partition_values, self.min_values, self.max_values, self.null_counts):
            arrays.extend(mapping.values())
        for array in arrays:
            if len(array) != self.num_rows:
                raise ValueError(f"FileColumns array of length {len(array)}, expected {self.num_rows}")


def prune_mask(expr: Expr, files: FileColumns) -> pa.BooleanArray:
    """One boolean per file: True = keep (could match), False = certainly no matching row."""
    keep = _Pruner(files).keep(push_down_not(expr))
    return pa.array(keep, type=pa.bool_())


# --- per-column value ranges ------------------------------------------------------------------


@dataclass
class _Range:
    """Per-file bounds of one column, in the column type's canonical Arrow type."""

    value_type: str
    lower: pa.Array | None  # null entry = unknown
    upper: pa.Array | None
    upper_is_prefix: bool  # string stats: the max may be a truncated prefix
    all_null: np.ndarray  # certainly every row is null
    none_null: np.ndarray  # certainly no row is null
    _casts: dict[pa.DataType, tuple[pa.Array, pa.Array]] = field(default_factory=dict)

    def bounds_as(self, arrow_type: pa.DataType) -> tuple[pa.Array, pa.Array] | None:
        if self.lower is None or self.upper is None:
            return None
        if arrow_type not in self._casts:
            # every cast used here is monotonic, so bounds stay bounds (float rounding included)
            self._casts[arrow_type] = (
                self.lower.cast(arrow_type, safe=not _is_float(arrow_type)),
                self.upper.cast(arrow_type, safe=not _is_float(arrow_type)),
            )
        return self._casts[arrow_type]


def _canonical_type(value_type: str) -> pa.DataType | None:
    if value_type in INTEGER_TYPES:
        return pa.int64()
    if value_type in FLOAT_TYPES:
        return pa.float64()
    if value_type == "string":
        return pa.binary()
    if value_type == "boolean":
        return pa.bool_()
    if value_type == "date":
        return pa.date32()
    if value_type == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if value_type == "timestamp_ntz":
        return pa.timestamp("us")
    precision_scale = decimal_precision_scale(value_type)
    if precision_scale is not None:
        return pa.decimal128(*precision_scale)
    return None  # binary and anything else: no ordering we prune on


def _is_float(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_floating(arrow_type))


def _as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values


def _to_numpy(mask: pa.Array | pa.ChunkedArray, *, null_as: bool) -> np.ndarray:
    return np.asarray(_as_array(mask).fill_null(null_as).to_numpy(zero_copy_only=False), dtype=bool)


def _cast_stats(values: pa.Array | None, value_type: str) -> pa.Array | None:
    target = _canonical_type(value_type)
    if values is None or target is None:
        return None
    values = _as_array(values)
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), target)
    if value_type == "timestamp" and pa.types.is_timestamp(values.type) and values.type.tz is None:
        values = values.cast(pa.timestamp(values.type.unit, tz="UTC"))
    try:
        return values.cast(target)
    except _LEAF_ERRORS:
        return None  # a type mismatch that cannot be coerced safely: unknown


def _strings_to_type(strings: pa.Array, value_type: str) -> pa.Array:
    """Typed values for partition strings (non-null); entries that do not parse become null."""
    target = _canonical_type(value_type)
    assert target is not None
    try:
        if value_type == "timestamp":
            return strings.cast(pa.timestamp("us")).cast(target)
        if value_type in INTEGER_TYPES or value_type in FLOAT_TYPES or value_type == "boolean":
            return strings.cast(target)
        if value_type in ("date", "timestamp_ntz") or decimal_precision_scale(value_type):
            return strings.cast(target)
    except _LEAF_ERRORS:
        pass
    converted: list[Any] = []
    for text in strings.to_pylist():
        try:
            converted.append(convert_text(text, value_type))
        except ValueError:
            converted.append(None)
    return pa.array(converted, type=target)


def _partition_range(raw: pa.Array, value_type: str | None) -> _Range:
    raw = _as_array(raw)
    if not pa.types.is_string(raw.type):
        raw = raw.cast(pa.string())
    is_null = _to_numpy(pc.or_kleene(pc.is_null(raw), pc.equal(raw, "")), null_as=True)
    present = pc.if_else(pa.array(is_null), pa.nulls(len(raw), pa.string()), raw)
    typed: pa.Array | None = None
    if value_type == "string":
        typed = present.cast(pa.binary())
    elif value_type is not None and _canonical_type(value_type) is not None:
        try:
            encoded = pc.dictionary_encode(present)
            typed = _strings_to_type(encoded.dictionary, value_type).take(encoded.indices)
        except _LEAF_ERRORS:
            typed = None
    return _Range(
        value_type=value_type or "unknown",
        lower=typed,
        upper=typed,
        upper_is_prefix=False,
        all_null=is_null,
        none_null=~is_null,
    )


def _stats_range(files: FileColumns, name: str, value_type: str) -> _Range:
    n = files.num_rows
    lower = _cast_stats(files.min_values.get(name), value_type)
    upper = _cast_stats(files.max_values.get(name), value_type)
    if upper is not None and value_type in ("timestamp", "timestamp_ntz") and files.timestamp_stats_truncated_to_ms:
        upper = pc.add(upper, pa.scalar(dt.timedelta(milliseconds=1)))
    all_null = np.zeros(n, dtype=bool)
    none_null = np.zeros(n, dtype=bool)
    null_count = files.null_counts.get(name)
    if null_count is not None:
        counts = _as_array(null_count).cast(pa.int64())
        none_null = _to_numpy(pc.equal(counts, 0), null_as=False)
        if files.num_records is not None:
            records = _as_array(files.num_records).cast(pa.int64())
            all_null = _to_numpy(pc.equal(counts, records), null_as=False)
    return _Range(value_type, lower, upper, value_type == "string", all_null, none_null)


# --- literals in a comparison domain ----------------------------------------------------------

_Domain = tuple[pa.DataType, pa.Scalar]


def _effective_type(real: str, declared: str | None) -> str | None:
    """The type the comparison happens in: the real type, or a declared type that widens it."""
    if declared is None or declared == real:
        return real
    if real in INTEGER_TYPES and declared in INTEGER_TYPES:
        return real if INTEGER_TYPES[declared] >= INTEGER_TYPES[real] else None
    if real in INTEGER_TYPES and declared in FLOAT_TYPES:
        return declared
    if real == "float" and declared == "double":
        return "double"
    precision_scale = decimal_precision_scale(declared)
    if real in INTEGER_TYPES and precision_scale is not None:
        digits = len(str(2 ** (INTEGER_TYPES[real] - 1)))
        return declared if precision_scale[0] - precision_scale[1] >= digits else None
    if real == "timestamp_ntz" and declared == "timestamp":
        return real  # JSON hints have no timestamp_ntz spelling; literal rules decide
    return None


def _number(value: Any) -> int | float | Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, Decimal)):
        return value
    if isinstance(value, str):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            return None
        if not number.is_finite():
            return None
        return int(number) if number == number.to_integral_value() else number
    return None


def _float_domains(value: float, single: bool) -> list[_Domain] | None:
    if value != value:  # NaN: ordering semantics differ between engines
        return None
    domains: list[_Domain] = [(pa.float64(), pa.scalar(value, pa.float64()))]
    if single:  # a FLOAT comparison happens in float32; rounding is monotonic, try both
        single_value = pa.array([value], pa.float64()).cast(pa.float32(), safe=False)[0]
        domains.append((pa.float32(), single_value))
    return domains


def _decimal_domain(value: Decimal, integer_digits: int, scale: int) -> list[_Domain] | None:
    _sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    value_scale = max(0, -exponent)
    value_integer_digits = max(0, len(digits) + exponent)
    target_scale = max(scale, value_scale)
    precision = max(integer_digits, value_integer_digits, 1) + target_scale
    if precision > 38:
        return None
    arrow_type = pa.decimal128(precision, target_scale)
    return [(arrow_type, pa.scalar(value, arrow_type))]


def _domains(value_type: str, literal: Literal) -> list[_Domain] | None:
    """The Arrow type(s) to compare in and the literal converted to each; None = unknown."""
    value = literal.value
    if value is None:
        return None
    if value_type in INTEGER_TYPES:
        number = _number(value)
        if isinstance(number, int):
            return [(pa.int64(), pa.scalar(number, pa.int64()))] if _INT64_MIN <= number <= _INT64_MAX else None
        if isinstance(number, float):
            return _float_domains(number, literal.value_type == "float")
        if isinstance(number, Decimal):
            return _decimal_domain(number, 19, 0)
        return None
    if value_type in FLOAT_TYPES:
        number = _number(value)
        if number is None and isinstance(value, str):
            number = float(value)  # "NaN", "Infinity"
        if number is None:
            return None
        return _float_domains(float(number), "float" in (value_type, literal.value_type))
    precision_scale = decimal_precision_scale(value_type)
    if precision_scale is not None:
        number = _number(value)
        if number is None or isinstance(number, float):
            return None  # DECIMAL vs DOUBLE compares in double: not exact, so unknown
        precision, scale = precision_scale
        return _decimal_domain(Decimal(number), precision - scale, scale)
    if value_type == "string":
        return [(pa.binary(), pa.scalar(value.encode(), pa.binary()))] if isinstance(value, str) else None
    if value_type == "boolean":
        if isinstance(value, str):
            value = convert_text(value, "boolean")
        return [(pa.bool_(), pa.scalar(value, pa.bool_()))] if isinstance(value, bool) else None
    if value_type == "date":
        if isinstance(value, str):
            value = parse_date(value)
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            return None
        return [(pa.date32(), pa.scalar(value, pa.date32()))]
    if value_type in ("timestamp", "timestamp_ntz"):
        naive = value_type == "timestamp_ntz"
        if isinstance(value, str):
            value = parse_timestamp_literal(value, naive=naive)
        if not isinstance(value, dt.datetime) or (value.tzinfo is None) != naive:
            return None
        arrow_type = _canonical_type(value_type)
        return [(arrow_type, pa.scalar(value, arrow_type))]
    return None


def _exceeds_prefix_bound(value: bytes, upper: pa.Array) -> pa.Array:
    """Per file: is ``value`` above every string that starts with ``upper``?

    That holds iff ``value[:len(upper)] > upper``. The literal's prefixes are built once and
    picked per file with ``take``, so this stays columnar.
    """
    lengths = pc.binary_length(upper)
    longest = pc.max(lengths).as_py() or 0
    cap = min(len(value), _STRING_PREFIX_CAP, longest)
    prefixes = pa.array([value[:k] for k in range(cap + 1)], pa.binary())
    clipped = pc.min_element_wise(lengths, pa.scalar(cap, lengths.type))
    return pc.greater(prefixes.take(clipped), upper)


# --- the evaluator ----------------------------------------------------------------------------


class _Pruner:
    def __init__(self, files: FileColumns) -> None:
        self.files = files
        self.n = files.num_rows
        self._ranges: dict[str, _Range | None] = {}
        self._lower_names = {name.lower(): name for name in files.column_types}

    def all(self, value: bool) -> np.ndarray:
        return np.full(self.n, value, dtype=bool)

    def keep(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, And):
            keep = self.all(True)
            for child in expr.children:
                keep &= self.keep(child)
            return keep
        if isinstance(expr, Or):
            keep = self.all(False)
            for child in expr.children:
                keep |= self.keep(child)
            return keep
        try:
            return self._leaf(expr)
        except _LEAF_ERRORS:
            return self.all(True)

    def _leaf(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, Comparison):
            column, literal = split_column_literal(expr)
            if column is None or literal is None:
                return self.all(True)
            op = expr.op if expr.left is column else FLIPPED_OPS[expr.op]
            return self._compare(op, column, literal)
        if isinstance(expr, In):
            keep = self.all(False)
            for value in expr.values:
                if value.value is not None:  # x = NULL is never TRUE
                    keep |= self._compare("=", expr.column, value)
            return keep
        if isinstance(expr, IsNull) and isinstance(expr.child, Column):
            value_range = self._range(expr.child)
            return self.all(True) if value_range is None else ~value_range.none_null
        if isinstance(expr, Not) and isinstance(expr.child, IsNull) and isinstance(expr.child.child, Column):
            value_range = self._range(expr.child.child)
            return self.all(True) if value_range is None else ~value_range.all_null
        if isinstance(expr, Column):  # a bare boolean column
            return self._compare("=", expr, Literal(True, "boolean"))
        if isinstance(expr, Literal) and (expr.value is None or isinstance(expr.value, bool)):
            return self.all(bool(expr.value))
        return self.all(True)  # Unsupported, NOT of something opaque, a non-boolean literal

    def _compare(self, op: str, column: Column, literal: Literal) -> np.ndarray:
        if op == "<=>":
            if literal.value is None:
                return self._leaf(IsNull(column))
            op = "="
        value_range = self._range(column)
        if value_range is None or literal.value is None:
            return self.all(True)
        value_type = _effective_type(value_range.value_type, column.value_type)
        domains = _domains(value_type, literal) if value_type else None
        if not domains:
            return self.all(True)
        keep = self.all(False)
        for arrow_type, scalar in domains:
            keep |= self._compare_in(op, value_range, arrow_type, scalar)
        return keep

    def _compare_in(self, op: str, value_range: _Range, arrow_type: pa.DataType, value: pa.Scalar) -> np.ndarray:
        bounds = value_range.bounds_as(arrow_type)
        if bounds is None:
            return ~value_range.all_null
        lower, upper = bounds
        prefix = value_range.upper_is_prefix

        def drop_where(mask: pa.Array) -> np.ndarray:
            return _to_numpy(mask, null_as=False)

        def above_upper() -> np.ndarray:  # value > every possible row value
            if prefix:
                return drop_where(_exceeds_prefix_bound(value.as_py(), upper))
            return drop_where(pc.greater(value, upper))

        drop = value_range.all_null.copy()
        if op == "=":
            drop |= drop_where(pc.less(value, lower)) | above_upper()
        elif op == "<":
            drop |= drop_where(pc.greater_equal(lower, value))
        elif op == "<=":
            drop |= drop_where(pc.greater(lower, value))
        elif op == ">":
            drop |= above_upper() if prefix else drop_where(pc.less_equal(upper, value))
        elif op == ">=":
            drop |= above_upper()
        elif op == "<>":
            if not prefix:
                drop |= drop_where(pc.and_(pc.equal(lower, value), pc.equal(upper, value)))
        else:
            return self.all(True)
        kept: np.ndarray = ~drop
        return kept

    def _range(self, column: Column) -> _Range | None:
        name = column.name
        if name not in self._ranges:
            self._ranges[name] = self._build_range(name)
        return self._ranges[name]

    def _build_range(self, name: str) -> _Range | None:
        files = self.files
        if name not in files.column_types and name not in files.partition_values:
            resolved = self._lower_names.get(name.lower())
            if resolved is None:
                return None
            name = resolved
        value_type = files.column_types.get(name)
        if name in files.partition_values:
            return _partition_range(files.partition_values[name], value_type)
        if value_type is None:
            return None
        return _stats_range(files, name, value_type)
