"""File pruning: specific cases, then a randomized check that no file with a matching row is dropped."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from deltaport.expressions.evaluate import FileColumns, prune_mask
from deltaport.expressions.tree import (
    FLIPPED_OPS,
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    Unsupported,
    parse_date,
    parse_timestamp_literal,
)
from deltaport.protocol.hints import parse_json_predicate, parse_sql_predicates

UTC = dt.timezone.utc


def col(name: str, value_type: str | None = None) -> Column:
    return Column(name, value_type)


def lit(value: Any, value_type: str) -> Literal:
    return Literal(value, value_type)


def keep(expr: Expr | None, files: FileColumns) -> list[bool]:
    if expr is None:  # an unusable hint means no filtering
        return [True] * files.num_rows
    return prune_mask(expr, files).to_pylist()


# --- REFERENCE-BEHAVIOUR §6.3 item 11: cdf_table_with_partition -------------------------------


@pytest.fixture
def birthday_table() -> FileColumns:
    return FileColumns(
        num_rows=2,
        column_types={"name": "string", "age": "integer", "birthday": "date"},
        partition_values={"birthday": pa.array(["2020-01-01", "2020-02-02"])},
        min_values={"age": pa.array([1, 2], pa.int32()), "name": pa.array(["1", "2"])},
        max_values={"age": pa.array([1, 2], pa.int32()), "name": pa.array(["1", "2"])},
        null_counts={"age": pa.array([0, 0]), "name": pa.array([0, 0])},
        num_records=pa.array([1, 1]),
    )


def _json_cmp(op: str, name: str, value_type: str, value: str) -> str:
    return (
        f'{{"op":"{op}","children":[{{"op":"column","name":"{name}","valueType":"{value_type}"}},'
        f'{{"op":"literal","value":"{value}","valueType":"{value_type}"}}]}}'
    )


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (_json_cmp("equal", "birthday", "date", "2020-01-01"), [True, False]),
        (_json_cmp("greaterThan", "birthday", "date", "2020-01-01"), [False, True]),
        (
            '{"op":"and","children":['
            + _json_cmp("greaterThanOrEqual", "birthday", "date", "2020-01-01")
            + ","
            + _json_cmp("lessThanOrEqual", "birthday", "date", "2020-02-03")
            + "]}",
            [True, True],
        ),
        (_json_cmp("equal", "age", "int", "2"), [False, True]),
        (_json_cmp("lessThan", "age", "int", "3"), [True, True]),
        (
            '{"op":"and","children":['
            + _json_cmp("equal", "birthday", "date", "2020-02-02")
            + ","
            + _json_cmp("greaterThan", "age", "int", "1")
            + "]}",
            [False, True],
        ),
        ("", [True, True]),
        ("{not json", [True, True]),
    ],
)
def test_reference_json_predicates(birthday_table: FileColumns, hint: str, expected: list[bool]) -> None:
    assert keep(parse_json_predicate(hint), birthday_table) == expected


def test_sql_hints_on_partition_column(birthday_table: FileColumns) -> None:
    assert keep(parse_sql_predicates(["birthday = '2020-01-01'"]), birthday_table) == [True, False]
    assert keep(parse_sql_predicates(["birthday > DATE '2020-01-01'"]), birthday_table) == [False, True]
    assert keep(parse_sql_predicates(["birthday < '2020-01-01'"]), birthday_table) == [False, False]


# --- partition values --------------------------------------------------------------------------


def _partitioned(value_type: str, raw: list[str | None]) -> FileColumns:
    return FileColumns(
        num_rows=len(raw), column_types={"p": value_type}, partition_values={"p": pa.array(raw, pa.string())}
    )


def test_partition_null_and_empty_string_are_null() -> None:
    files = _partitioned("long", ["1", "", None])
    assert keep(IsNull(col("p")), files) == [False, True, True]
    assert keep(Not(IsNull(col("p"))), files) == [True, False, False]
    assert keep(Comparison("=", col("p"), lit(1, "long")), files) == [True, False, False]
    assert keep(Comparison("<>", col("p"), lit(1, "long")), files) == [False, False, False]
    assert keep(Comparison("<=>", col("p"), lit(None, "null")), files) == [False, True, True]
    assert keep(Not(Comparison("<=>", col("p"), lit(1, "long"))), files) == [False, True, True]


def test_partition_value_that_does_not_parse_is_unknown() -> None:
    files = _partitioned("integer", ["1", "oops", "3"])
    assert keep(Comparison("=", col("p"), lit(3, "integer")), files) == [False, True, True]
    assert keep(IsNull(col("p")), files) == [False, False, False]


def test_partition_timestamps_in_both_serializations() -> None:
    files = _partitioned("timestamp", ["2021-01-01 00:00:00", "2021-01-01T10:00:00.000000Z", "2021-01-01 10:00:00.5"])
    ten = dt.datetime(2021, 1, 1, 10, tzinfo=UTC)
    assert keep(Comparison("=", col("p"), lit(ten, "timestamp")), files) == [False, True, False]
    assert keep(Comparison(">", col("p"), lit(ten, "timestamp")), files) == [False, False, True]
    ntz = _partitioned("timestamp_ntz", ["2021-01-01 00:00:00", "2021-01-02 00:00:00"])
    assert keep(Comparison("<", col("p"), lit("2021-01-01 12:00:00", "string")), ntz) == [True, False]
    aware = lit(dt.datetime(2021, 1, 1, 12, tzinfo=UTC), "timestamp")
    assert keep(Comparison("<", col("p"), aware), ntz) == [True, True]  # zone semantics unknown: keep


def test_partition_decimal_boolean_and_string_values() -> None:
    dec = _partitioned("decimal(12,5)", ["-2342342.23423", "0.00004", "234.00000"])
    assert keep(Comparison(">", col("p"), lit(Decimal("0.00003"), "decimal(6,5)")), dec) == [False, True, True]
    assert keep(Comparison("=", col("p"), lit(234, "integer")), dec) == [False, False, True]
    flags = _partitioned("boolean", ["true", "false"])
    assert keep(col("p"), flags) == [True, False]
    assert keep(Not(col("p")), flags) == [False, True]
    words = _partitioned("string", ["a", "b", "__x"])
    assert keep(In(col("p"), (lit("b", "string"), lit("__x", "string"))), words) == [False, True, True]
    assert keep(Not(In(col("p"), (lit("b", "string"),))), words) == [True, False, True]


def test_string_literal_is_coerced_to_the_column_type() -> None:
    files = _partitioned("date", ["2021-04-28", "2021-04-29"])
    assert keep(Comparison(">=", col("p"), lit("2021-04-29", "string")), files) == [False, True]
    assert keep(Comparison(">=", col("p"), lit("not a date", "string")), files) == [True, True]
    numbers = _partitioned("long", ["5", "50"])
    assert keep(Comparison("<", col("p"), lit("10", "string")), numbers) == [True, False]


# --- stats ------------------------------------------------------------------------------------


def _stats(value_type: str, mins: list[Any], maxs: list[Any], arrow_type: pa.DataType, **extra: Any) -> FileColumns:
    n = len(mins)
    return FileColumns(
        num_rows=n,
        column_types={"c": value_type},
        min_values={"c": pa.array(mins, arrow_type)},
        max_values={"c": pa.array(maxs, arrow_type)},
        null_counts={"c": pa.array(extra.get("nulls", [0] * n), pa.int64())},
        num_records=pa.array(extra.get("records", [10] * n), pa.int64()),
        **{k: v for k, v in extra.items() if k not in ("nulls", "records")},
    )


def test_missing_or_null_stats_keep_the_file() -> None:
    files = FileColumns(
        num_rows=3,
        column_types={"c": "long", "d": "long"},
        min_values={"c": pa.array([None, 5, 5])},
        max_values={"c": pa.array([None, None, 6])},
        num_records=pa.array([1, 1, 1]),
    )
    assert keep(Comparison("=", col("c"), lit(1, "long")), files) == [True, False, False]
    assert keep(Comparison(">", col("c"), lit(100, "long")), files) == [True, True, False]
    assert keep(Comparison("=", col("d"), lit(1, "long")), files) == [True, True, True]
    assert keep(Comparison("=", col("unknown"), lit(1, "long")), files) == [True, True, True]
    assert keep(IsNull(col("c")), files) == [True, True, True]


def test_stats_that_cannot_be_coerced_keep_the_file() -> None:
    files = _stats("long", ["x", "1"], ["y", "2"], pa.string())
    assert keep(Comparison("=", col("c"), lit(7, "long")), files) == [True, True]


def test_null_counts() -> None:
    files = _stats("long", [1, None, 1], [5, None, 5], pa.int64(), nulls=[0, 10, 3])
    assert keep(IsNull(col("c")), files) == [False, True, True]
    assert keep(Not(IsNull(col("c"))), files) == [True, False, True]
    assert keep(Comparison("<>", col("c"), lit(3, "long")), files) == [True, False, True]


def test_not_equal_drops_only_single_valued_files() -> None:
    files = _stats("long", [3, 3, 1], [3, 4, 3], pa.int64(), nulls=[2, 0, 0])
    assert keep(Comparison("<>", col("c"), lit(3, "long")), files) == [False, True, True]
    assert keep(Not(Comparison("=", col("c"), lit(3, "long"))), files) == [False, True, True]


def test_mixed_numeric_types() -> None:
    ints = _stats("integer", [1, 3], [2, 3], pa.int32())
    assert keep(Comparison("<", col("c"), lit(2.5, "double")), ints) == [True, False]
    assert keep(Comparison("=", col("c"), lit(2.5, "double")), ints) == [False, False]
    assert keep(Comparison(">", col("c"), lit(Decimal("2.9"), "decimal(2,1)")), ints) == [False, True]
    assert keep(Comparison(">=", col("c"), lit(3, "long")), ints) == [False, True]
    doubles = _stats("double", [0.5, 2.0], [1.5, 2.0], pa.float64())
    assert keep(Comparison("=", col("c"), lit(2, "integer")), doubles) == [False, True]
    big = 2**53
    longs = _stats("long", [big + 1], [big + 1], pa.int64())
    assert keep(Comparison("=", col("c"), lit(float(big), "double")), longs) == [True]  # SQL compares in double
    assert keep(Comparison("=", col("c"), lit(big, "long")), longs) == [False]
    floats = _stats("float", [0.1], [0.1], pa.float32())
    assert keep(Comparison("=", col("c"), lit(0.1, "double")), floats) == [True]
    assert keep(Comparison("=", col("c"), lit(0.1, "float")), floats) == [True]
    # a FLOAT literal makes SQL compare in float32, where 2**24 + 1 rounds to 2**24
    odd = _stats("long", [2**24 + 1], [2**24 + 1], pa.int64())
    assert keep(Comparison("=", col("c"), lit(float(2**24), "float")), odd) == [True]
    assert keep(Comparison("=", col("c"), lit(float(2**24), "double")), odd) == [False]


def test_declared_column_type_narrower_than_the_real_type_is_unknown() -> None:
    files = _stats("long", [1], [2], pa.int64())
    assert keep(Comparison("=", col("c", "integer"), lit(7, "integer")), files) == [True]
    assert keep(Comparison("=", col("c", "long"), lit(7, "long")), files) == [False]
    assert keep(Comparison("=", col("c", "double"), lit(7.0, "double")), files) == [False]
    assert keep(Comparison("=", col("c", "string"), lit("7", "string")), files) == [True]


def test_decimal_stats() -> None:
    files = _stats(
        "decimal(5,2)", [Decimal("1.25"), Decimal("-3.10")], [Decimal("2.00"), Decimal("0.00")], pa.decimal128(5, 2)
    )
    assert keep(Comparison(">", col("c"), lit(Decimal("1.999"), "decimal(4,3)")), files) == [True, False]
    assert keep(Comparison("<", col("c"), lit(-3, "integer")), files) == [False, True]
    assert keep(Comparison("<", col("c"), lit(-3.0, "double")), files) == [True, True]  # double vs decimal: unknown


def test_truncated_string_max_is_a_prefix_bound() -> None:
    files = _stats("string", ["abc", "b"], ["abc", "bcd"], pa.string())
    assert keep(Comparison("=", col("c"), lit("abcz", "string")), files) == [True, False]
    assert keep(Comparison(">", col("c"), lit("abc", "string")), files) == [True, True]
    assert keep(Comparison(">", col("c"), lit("abcz", "string")), files) == [True, True]
    assert keep(Comparison(">", col("c"), lit("abd", "string")), files) == [False, True]
    assert keep(Comparison(">=", col("c"), lit("bcdzzz", "string")), files) == [False, True]
    assert keep(Comparison(">=", col("c"), lit("bce", "string")), files) == [False, False]
    assert keep(Comparison("<", col("c"), lit("abc", "string")), files) == [False, False]
    assert keep(Comparison("<>", col("c"), lit("abc", "string")), files) == [True, True]


def test_strings_compare_by_utf8_bytes() -> None:
    files = _stats("string", ["\uffff"], ["\uffff"], pa.string())  # U+FFFF sorts below U+1F600 in UTF-8
    assert keep(Comparison("<", col("c"), lit("\U0001f600", "string")), files) == [True]
    assert keep(Comparison(">", col("c"), lit("\U0001f600", "string")), files) == [False]


def test_timestamp_max_is_widened_by_a_millisecond() -> None:
    noon = dt.datetime(2021, 1, 1, 12, tzinfo=UTC)
    inside = noon + dt.timedelta(microseconds=500)
    files = _stats("timestamp", [noon], [noon], pa.timestamp("us", tz="UTC"))
    assert keep(Comparison("=", col("c"), lit(inside, "timestamp")), files) == [True]
    assert keep(Comparison("<>", col("c"), lit(noon, "timestamp")), files) == [True]
    exact = _stats("timestamp", [noon], [noon], pa.timestamp("us", tz="UTC"), timestamp_stats_truncated_to_ms=False)
    assert keep(Comparison("=", col("c"), lit(inside, "timestamp")), exact) == [False]
    assert keep(Comparison("=", col("c"), lit("2021-01-01T13:00:00+01:00", "string")), exact) == [True]


def test_unsupported_nodes_and_logic() -> None:
    files = _stats("long", [1, 10], [5, 20], pa.int64())
    low = Comparison("<", col("c"), lit(3, "long"))
    assert keep(Unsupported("x"), files) == [True, True]
    assert keep(And((Unsupported("x"), low)), files) == [True, False]
    assert keep(Or((Unsupported("x"), low)), files) == [True, True]
    assert keep(Not(Or((Unsupported("x"), low))), files) == [True, True]
    assert keep(Not(And((Unsupported("x"), low))), files) == [True, True]
    assert keep(Not(low), files) == [True, True]
    assert keep(Or((low, Comparison(">", col("c"), lit(15, "long")))), files) == [True, True]
    assert keep(Or((low, Comparison(">", col("c"), lit(25, "long")))), files) == [True, False]
    assert keep(lit(False, "boolean"), files) == [False, False]
    assert keep(Comparison("=", col("c"), col("c")), files) == [True, True]
    assert keep(Comparison(">", lit(3, "long"), col("c")), files) == [True, False]


def test_empty_files_and_empty_input() -> None:
    files = _stats("long", [None], [None], pa.int64(), records=[0])
    assert keep(Comparison("=", col("c"), lit(1, "long")), files) == [False]
    empty = FileColumns(num_rows=0, column_types={"c": "long"})
    assert keep(Comparison("=", col("c"), lit(1, "long")), empty) == []


def test_array_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError):
        FileColumns(num_rows=2, column_types={}, num_records=pa.array([1]))


def test_many_files_columnar() -> None:
    n = 200_000
    files = FileColumns(
        num_rows=n,
        column_types={"id": "long", "part": "date"},
        partition_values={"part": pa.array([f"2021-01-{1 + i % 28:02d}" for i in range(n)])},
        min_values={"id": pa.array(range(0, 10 * n, 10), pa.int64())},
        max_values={"id": pa.array(range(9, 10 * n, 10), pa.int64())},
        null_counts={"id": pa.array([0] * n, pa.int64())},
        num_records=pa.array([10] * n, pa.int64()),
    )
    expr = And(
        (Comparison(">=", col("id"), lit(1000, "long")), Comparison("=", col("part"), lit("2021-01-05", "string")))
    )
    mask = prune_mask(expr, files).to_pylist()
    assert sum(mask) == len([i for i in range(n) if i >= 100 and i % 28 == 4])


# --- randomized: never drop a file with a matching row -----------------------------------------

_POOLS: dict[str, list[Any]] = {
    "l": [-3, 0, 1, 2, 7, 2**53, 2**53 + 1],
    "i": [-2, 0, 1, 5, 100],
    "d": [-1.5, 0.0, 0.1, 1.0, 2.5, 1e16],
    "f": [float(np.float32(v)) for v in (0.1, 0.5, 1.25, 3.0)],  # float32 values
    "s": ["", "a", "ab", "abc", "abd", "b", "ba", "é", "éa", "\uffff", "\U0001f600", "zz"],
    "dt": [dt.date(2020, 1, 1), dt.date(2020, 1, 2), dt.date(2021, 6, 30)],
    "ts": [
        dt.datetime(2021, 1, 1, 0, 0, 0, 0, UTC),
        dt.datetime(2021, 1, 1, 0, 0, 0, 400, UTC),
        dt.datetime(2021, 1, 1, 0, 0, 0, 1500, UTC),
        dt.datetime(2021, 1, 1, 0, 0, 1, 0, UTC),
    ],
    "b": [True, False],
    "dec": [Decimal("-3.10"), Decimal("0.00"), Decimal("1.25"), Decimal("2.50")],
    "pl": [1, 2, 30],
    "ps": ["x", "y", "xy"],
    "pd": [dt.date(2020, 1, 1), dt.date(2020, 2, 2)],
}
_TYPES = {
    "l": "long",
    "i": "integer",
    "d": "double",
    "f": "float",
    "s": "string",
    "dt": "date",
    "ts": "timestamp",
    "b": "boolean",
    "dec": "decimal(5,2)",
    "pl": "long",
    "ps": "string",
    "pd": "date",
}
_ARROW = {
    "long": pa.int64(),
    "integer": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "boolean": pa.bool_(),
    "decimal(5,2)": pa.decimal128(5, 2),
}
_PARTITIONS = ("pl", "ps", "pd")
_STRING_STATS_PREFIX = 2


def _floor_ms(value: dt.datetime) -> dt.datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _partition_text(value: Any, rng: random.Random) -> str | None:
    if value is None:
        return rng.choice([None, ""])
    return value.isoformat() if isinstance(value, dt.date) else str(value)


def _random_files(rng: random.Random, n_files: int) -> tuple[FileColumns, list[list[dict[str, Any]]]]:
    files_rows: list[list[dict[str, Any]]] = []
    partitions: dict[str, list[str | None]] = {p: [] for p in _PARTITIONS}
    mins: dict[str, list[Any]] = {c: [] for c in _TYPES if c not in _PARTITIONS}
    maxs: dict[str, list[Any]] = {c: [] for c in mins}
    nulls: dict[str, list[Any]] = {c: [] for c in mins}
    records: list[int | None] = []
    for _ in range(n_files):
        part = {p: rng.choice(_POOLS[p] + [None]) for p in _PARTITIONS}
        for p in _PARTITIONS:
            partitions[p].append(_partition_text(part[p], rng))
        rows = []
        for _ in range(rng.randint(0, 4)):
            row = dict(part)
            for c in mins:
                row[c] = None if rng.random() < 0.2 else rng.choice(_POOLS[c])
            rows.append(row)
        files_rows.append(rows)
        records.append(None if rng.random() < 0.1 else len(rows))
        for c in mins:
            present = [r[c] for r in rows if r[c] is not None]
            if c == "s":
                key = lambda v: v.encode()  # noqa: E731
                lo = min(present, key=key)[:_STRING_STATS_PREFIX] if present else None
                hi = max(present, key=key)[:_STRING_STATS_PREFIX] if present else None  # truncated, no tie-breaker
            else:
                lo, hi = (min(present), max(present)) if present else (None, None)
            if c == "ts" and present:
                lo, hi = _floor_ms(lo), _floor_ms(hi)
            missing = rng.random() < 0.1
            mins[c].append(None if missing else lo)
            maxs[c].append(None if missing else hi)
            nulls[c].append(None if rng.random() < 0.1 else sum(1 for r in rows if r[c] is None))
    files = FileColumns(
        num_rows=n_files,
        column_types={c: _TYPES[c] for c in _TYPES},
        partition_values={p: pa.array(v, pa.string()) for p, v in partitions.items()},
        min_values={c: pa.array(v, _ARROW[_TYPES[c]]) for c, v in mins.items()},
        max_values={c: pa.array(v, _ARROW[_TYPES[c]]) for c, v in maxs.items()},
        null_counts={c: pa.array(v, pa.int64()) for c, v in nulls.items()},
        num_records=pa.array(records, pa.int64()),
    )
    return files, files_rows


def _random_literal(rng: random.Random, column: str) -> Literal:
    value_type = _TYPES[column]
    value = rng.choice(_POOLS[column])
    roll = rng.random()
    if roll < 0.15 and value_type in ("long", "integer", "double", "float", "decimal(5,2)"):
        other = rng.choice(
            [2, -3, 0, 2.5, 1.25, 0.1, 2**53, float(2**53), Decimal("1.3"), Decimal("-3.1"), "2", "1.25"]
        )
        other_type = {int: "long", float: rng.choice(["double", "float"]), Decimal: "decimal(3,1)", str: "string"}[
            type(other)
        ]
        return Literal(other, other_type)
    if roll < 0.3 and value_type in ("date", "timestamp"):
        text = value.isoformat() if value_type == "date" else value.strftime("%Y-%m-%d %H:%M:%S.%f")
        return Literal(text, "string")
    if roll < 0.4 and value_type == "string":
        return Literal(rng.choice(["a", "ab", "abcd", "b\x00", "é\uffff", "ba"]), "string")
    if roll < 0.45:
        return Literal(None, "null")
    if column in _PARTITIONS:
        value_type = {"pl": "long", "ps": "string", "pd": "date"}[column]
    return Literal(value, value_type)


def _random_expr(rng: random.Random, depth: int = 0) -> Expr:
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        children = tuple(_random_expr(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        return And(children) if rng.random() < 0.5 else Or(children)
    if depth < 3 and roll < 0.4:
        return Not(_random_expr(rng, depth + 1))
    column = rng.choice(list(_TYPES))
    if roll < 0.5:
        return IsNull(Column(column))
    if roll < 0.55:
        return Unsupported("random")
    if roll < 0.62:
        return In(Column(column), tuple(_random_literal(rng, column) for _ in range(rng.randint(1, 3))))
    op = rng.choice(["=", "<", "<=", ">", ">=", "<>", "<=>"])
    literal = _random_literal(rng, column)
    if rng.random() < 0.3:
        return Comparison(FLIPPED_OPS[op], literal, Column(column))  # type: ignore[arg-type]
    return Comparison(op, Column(column), literal)  # type: ignore[arg-type]


def _sql_compare(op: str, x: Any, v: Any, column: str, literal_type: str, single: bool) -> bool | None:
    """SQL semantics of ``x op v`` for the column's type (None = NULL); ``single``: FLOAT math."""
    if op == "<=>":
        if x is None or v is None:
            return x is None and v is None
        op = "="
    if x is None or v is None:
        return None
    value_type = _TYPES[column]
    if value_type in ("date",) and isinstance(v, str):
        v = parse_date(v)
    elif value_type == "timestamp" and isinstance(v, str):
        v = parse_timestamp_literal(v, naive=False)
    elif value_type in ("long", "integer", "double", "float", "decimal(5,2)"):
        if isinstance(v, str):
            v = Decimal(v)
        if single and "float" in (value_type, literal_type):
            x, v = np.float32(x), np.float32(v)  # a FLOAT comparison (Spark widens to float32)
        elif isinstance(v, float) or isinstance(x, float):
            x, v = float(x), float(v)  # a DOUBLE comparison
    elif value_type == "string":
        x, v = x.encode(), v.encode()
    return {"=": x == v, "<": x < v, "<=": x <= v, ">": x > v, ">=": x >= v, "<>": x != v}[op]


def _sql_eval(expr: Expr, row: dict[str, Any], single: bool, opaque: bool | None) -> bool | None:
    """Row-level SQL three-valued logic; ``opaque`` is what every Unsupported node evaluates to."""
    if isinstance(expr, Comparison):
        left, right, op = expr.left, expr.right, expr.op
        if isinstance(left, Literal):
            left, right, op = right, left, FLIPPED_OPS[op]
        assert isinstance(left, Column) and isinstance(right, Literal)
        return _sql_compare(op, row[left.name], right.value, left.name, right.value_type, single)
    if isinstance(expr, IsNull):
        assert isinstance(expr.child, Column)
        return row[expr.child.name] is None
    if isinstance(expr, Not):
        inner = _sql_eval(expr.child, row, single, opaque)
        return None if inner is None else not inner
    if isinstance(expr, And):
        results = [_sql_eval(c, row, single, opaque) for c in expr.children]
        return False if False in results else (None if None in results else True)
    if isinstance(expr, Or):
        results = [_sql_eval(c, row, single, opaque) for c in expr.children]
        return True if True in results else (None if None in results else False)
    if isinstance(expr, In):
        return _sql_eval(Or(tuple(Comparison("=", expr.column, v) for v in expr.values)), row, single, opaque)
    if isinstance(expr, Unsupported):
        return opaque
    raise AssertionError(expr)


def test_randomized_pruning_never_drops_a_matching_file() -> None:
    rng = random.Random(20240611)
    dropped = checked = 0
    for _ in range(60):
        files, rows = _random_files(rng, 40)
        for _ in range(40):
            expr = _random_expr(rng)
            mask = prune_mask(expr, files).to_pylist()
            for index, file_rows in enumerate(rows):
                checked += 1
                if not mask[index]:
                    dropped += 1
                    matching = [
                        row
                        for row in file_rows
                        for single in (False, True)
                        for opaque in (True, False, None)
                        if _sql_eval(expr, row, single, opaque) is True
                    ]
                    assert not matching, f"dropped file {index} for {expr}: rows {matching}"
    assert dropped > checked * 0.2  # the property is not vacuous: pruning does happen
