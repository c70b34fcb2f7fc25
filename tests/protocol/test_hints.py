"""Parsing jsonPredicateHints and predicateHints, and rendering trees back to the JSON wire form."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from deltaport.errors import UnsupportedOperation
from deltaport.expressions.tree import (
    And,
    Column,
    Comparison,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    Unsupported,
)
from deltaport.protocol.hints import (
    MAX_JSON_PREDICATE_BYTES,
    expr_to_json,
    parse_json_predicate,
    parse_sql_predicates,
)

UTC = dt.timezone.utc


def column(name: str, value_type: str) -> dict[str, Any]:
    return {"op": "column", "name": name, "valueType": value_type}


def literal(value: str, value_type: str) -> dict[str, Any]:
    return {"op": "literal", "value": value, "valueType": value_type}


def op(name: str, *children: dict[str, Any]) -> dict[str, Any]:
    return {"op": name, "children": list(children)}


def parse(tree: Any) -> Any:
    return parse_json_predicate(json.dumps(tree))


# --- jsonPredicateHints -------------------------------------------------------------------------


def test_spec_example_compound_and() -> None:
    tree = op(
        "and",
        op("equal", column("hireDate", "date"), literal("2021-04-29", "date")),
        op("lessThan", column("id", "int"), literal("25", "int")),
    )
    assert parse(tree) == And(
        (
            Comparison("=", Column("hireDate", "date"), Literal(dt.date(2021, 4, 29), "date")),
            Comparison("<", Column("id", "integer"), Literal(25, "integer")),
        )
    )


@pytest.mark.parametrize(
    ("wire_type", "text", "value_type", "value"),
    [
        ("bool", "true", "boolean", True),
        ("BOOL", "False", "boolean", False),
        ("int", "42", "integer", 42),
        ("Long", "1234567890123", "long", 1234567890123),
        ("string", "US", "string", "US"),
        ("date", "2021-04-29", "date", dt.date(2021, 4, 29)),
        ("float", "3.14", "float", 3.14),
        ("DOUBLE", "-2.5e3", "double", -2500.0),
        ("timestamp", "2022-01-01T00:00:00Z", "timestamp", dt.datetime(2022, 1, 1, tzinfo=UTC)),
        ("timestamp", "2022-01-01T02:00:00.5+02:00", "timestamp", dt.datetime(2022, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_literal_value_types(wire_type: str, text: str, value_type: str, value: Any) -> None:
    expr = parse(op("equal", column("c", wire_type), literal(text, wire_type)))
    assert expr == Comparison("=", Column("c", value_type), Literal(value, value_type))


def test_all_comparison_ops_is_null_and_not() -> None:
    c, v = column("c", "long"), literal("1", "long")
    for name, symbol in [
        ("equal", "="),
        ("lessThan", "<"),
        ("lessThanOrEqual", "<="),
        ("greaterThan", ">"),
        ("greaterThanOrEqual", ">="),
    ]:
        assert parse(op(name, c, v)) == Comparison(symbol, Column("c", "long"), Literal(1, "long"))
    assert parse(op("not", op("isNull", column("id", "int")))) == Not(IsNull(Column("id", "integer")))
    assert parse(op("or", op("isNull", c), op("equal", c, v))) == Or(
        (IsNull(Column("c", "long")), Comparison("=", Column("c", "long"), Literal(1, "long")))
    )


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "{not json",
        "[]",
        '"equal"',
        json.dumps({"children": []}),
        json.dumps(op("like", column("c", "string"), literal("x", "string"))),
        json.dumps(op("equal", column("c", "int"))),
        json.dumps(op("not", op("isNull", column("c", "int")), op("isNull", column("c", "int")))),
        json.dumps(op("and", op("isNull", column("c", "int")))),
        json.dumps(op("or")),
        json.dumps(op("equal", column("c", "int"), literal("abc", "int"))),
        json.dumps(op("equal", column("c", "decimal"), literal("1", "decimal"))),
        json.dumps(op("equal", column("c", "int"), {"op": "literal", "valueType": "int"})),
        json.dumps(op("equal", {"op": "column", "valueType": "int"}, literal("1", "int"))),
        json.dumps(op("and", op("like"), op("like"))),
    ],
)
def test_unusable_hints_mean_no_filtering(text: str | None) -> None:
    assert parse_json_predicate(text) is None


def test_unknown_op_inside_and_or_becomes_unsupported() -> None:
    good = op("equal", column("c", "int"), literal("1", "int"))
    expr = parse(op("and", good, op("like", column("c", "string"), literal("x%", "string"))))
    assert isinstance(expr, And)
    assert expr.children[0] == Comparison("=", Column("c", "integer"), Literal(1, "integer"))
    assert isinstance(expr.children[1], Unsupported)
    nested = parse(op("or", good, op("not", op("equal", column("c", "int"), literal("x", "int")))))
    assert isinstance(nested, Or) and isinstance(nested.children[1], Unsupported)


def test_size_and_depth_limits() -> None:
    leaf = op("isNull", column("c", "int"))
    deep = leaf
    for _ in range(98):
        deep = op("not", deep)
    assert parse(deep) is not None  # depth 100 (the column leaf included)
    assert parse(op("not", deep)) is None
    padding = "x" * MAX_JSON_PREDICATE_BYTES
    big = op("or", op("equal", column("c", "string"), literal(padding, "string")), leaf)
    assert parse(big) is None
    assert parse_json_predicate(("\n" * (MAX_JSON_PREDICATE_BYTES - 100)) + json.dumps(leaf)) is not None


def test_json_literal_values_given_as_json_numbers_or_booleans() -> None:
    assert parse(op("equal", column("c", "int"), {"op": "literal", "value": 5, "valueType": "int"})) == Comparison(
        "=", Column("c", "integer"), Literal(5, "integer")
    )
    assert parse(op("equal", column("c", "bool"), {"op": "literal", "value": True, "valueType": "bool"})) == Comparison(
        "=", Column("c", "boolean"), Literal(True, "boolean")
    )


@pytest.mark.parametrize(
    "tree",
    [
        op("equal", column("hireDate", "date"), literal("2021-04-29", "date")),
        op(
            "or",
            op(
                "and",
                op("greaterThanOrEqual", column("d", "date"), literal("2021-01-01", "date")),
                op("lessThan", column("d", "date"), literal("2021-04-01", "date")),
            ),
            op("not", op("isNull", column("id", "long"))),
            op("lessThanOrEqual", column("x", "double"), literal("0.1", "double")),
            op("greaterThan", column("f", "float"), literal("-1.5", "float")),
            op("equal", column("b", "bool"), literal("false", "bool")),
            op("equal", column("t", "timestamp"), literal("2022-01-01T00:00:00.123456Z", "timestamp")),
            op("equal", column("s", "string"), literal('it\'s "quoted" \u00e9', "string")),
        ),
    ],
)
def test_json_round_trip(tree: dict[str, Any]) -> None:
    expr = parse(tree)
    assert expr is not None
    assert parse_json_predicate(expr_to_json(expr)) == expr


def test_expr_to_json_rewrites_sql_only_operators() -> None:
    c, one = Column("c", "long"), Literal(1, "long")
    assert json.loads(expr_to_json(Comparison("<>", c, one))) == op(
        "not", op("equal", column("c", "long"), literal("1", "long"))
    )
    assert json.loads(expr_to_json(Comparison("<=>", c, one))) == op(
        "and", op("not", op("isNull", column("c", "long"))), op("equal", column("c", "long"), literal("1", "long"))
    )
    assert json.loads(expr_to_json(Comparison("<=>", c, Literal(None, "null")))) == op("isNull", column("c", "long"))
    assert json.loads(expr_to_json(In(c, (one, Literal(2, "long"))))) == op(
        "or",
        op("equal", column("c", "long"), literal("1", "long")),
        op("equal", column("c", "long"), literal("2", "long")),
    )
    untyped = json.loads(expr_to_json(Comparison(">", Column("age"), Literal(3, "integer"))))
    assert untyped == op("greaterThan", column("age", "int"), literal("3", "int"))


def test_expr_to_json_round_trips_sql_hints() -> None:
    expr = parse_sql_predicates(["a <> 3", "b IN ('x', 'y')", "NOT (c <=> 1.5D)", "d IS NOT NULL"])
    assert expr is not None
    rendered = parse_json_predicate(expr_to_json(expr))
    assert rendered is not None
    assert parse_json_predicate(expr_to_json(rendered)) == rendered


@pytest.mark.parametrize(
    "expr",
    [
        Unsupported("f(x)"),
        Comparison("=", Column("c"), Literal(None, "null")),
        Comparison("=", Column("c"), Literal(Decimal("1.5"), "decimal(2,1)")),
        Comparison("=", Column("c"), Literal(dt.datetime(2021, 1, 1), "timestamp_ntz")),
        And((Comparison("=", Column("c"), Literal(1, "long")), Unsupported("f(x)"))),
    ],
)
def test_expr_to_json_refuses_what_the_wire_cannot_say(expr: Any) -> None:
    with pytest.raises(UnsupportedOperation):
        expr_to_json(expr)


# --- predicateHints -----------------------------------------------------------------------------


def sql(*hints: str) -> Any:
    return parse_sql_predicates(list(hints))


def test_sql_spec_examples() -> None:
    c = Column("col")
    assert sql("col = 123") == Comparison("=", c, Literal(123, "integer"))
    assert sql("col <> 'foo'") == Comparison("<>", c, Literal("foo", "string"))
    assert sql("col > 'foo'") == Comparison(">", c, Literal("foo", "string"))
    assert sql("'foo' < col") == Comparison(">", c, Literal("foo", "string"))
    assert sql("col >= 123") == Comparison(">=", c, Literal(123, "integer"))
    assert sql("123 <= col") == Comparison(">=", c, Literal(123, "integer"))
    assert sql("col IS NULL") == IsNull(c)
    assert sql("col is not null") == Not(IsNull(c))


def test_sql_hints_are_anded_and_bad_entries_skipped() -> None:
    expr = sql("date >= '2021-01-01'", "date <= '2021-01-31'", "country LIKE 'U%'", "", "= 3", "country = 'US'")
    assert expr == And(
        (
            Comparison(">=", Column("date"), Literal("2021-01-01", "string")),
            Comparison("<=", Column("date"), Literal("2021-01-31", "string")),
            Comparison("=", Column("country"), Literal("US", "string")),
        )
    )
    assert parse_sql_predicates(None) is None
    assert parse_sql_predicates([]) is None
    assert parse_sql_predicates(["nonsense ((("]) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 'it''s'", Literal("it's", "string")),
        ("x = 'it\\'s'", Literal("it's", "string")),
        ('x = "dq"', Literal("dq", "string")),
        ("x = -5", Literal(-5, "integer")),
        ("x = 3000000000", Literal(3000000000, "long")),
        ("x = 10L", Literal(10, "long")),
        ("x = 7S", Literal(7, "short")),
        ("x = 7Y", Literal(7, "byte")),
        ("x = 1.5", Literal(Decimal("1.5"), "decimal(2,1)")),
        ("x = 1.50BD", Literal(Decimal("1.50"), "decimal(3,2)")),
        ("x = 2.5D", Literal(2.5, "double")),
        ("x = 2.5F", Literal(2.5, "float")),
        ("x = 1e3", Literal(1000.0, "double")),
        ("x = true", Literal(True, "boolean")),
        ("x = DATE '2021-01-01'", Literal(dt.date(2021, 1, 1), "date")),
        ("x = TIMESTAMP '2021-01-01 10:00:00'", Literal(dt.datetime(2021, 1, 1, 10, tzinfo=UTC), "timestamp")),
        ("x = TIMESTAMP_NTZ '2021-01-01 10:00:00'", Literal(dt.datetime(2021, 1, 1, 10), "timestamp_ntz")),
        ("x = CAST('2021-01-01' AS DATE)", Literal(dt.date(2021, 1, 1), "date")),
        ("x = CAST(5 AS BIGINT)", Literal(5, "long")),
    ],
)
def test_sql_literals(text: str, expected: Literal) -> None:
    assert sql(text) == Comparison("=", Column("x"), expected)


def test_sql_columns_casts_and_operators() -> None:
    assert sql("`my col` = 1") == Comparison("=", Column("my col"), Literal(1, "integer"))
    assert sql("`a``b` = 1") == Comparison("=", Column("a`b"), Literal(1, "integer"))
    assert sql("CAST(id AS BIGINT) > 10L") == Comparison(">", Column("id", "long"), Literal(10, "long"))
    assert sql("cast(price as decimal(10, 2)) < 1") == Comparison(
        "<", Column("price", "decimal(10,2)"), Literal(1, "integer")
    )
    assert sql("a != 1") == Comparison("<>", Column("a"), Literal(1, "integer"))
    assert sql("a == 1") == Comparison("=", Column("a"), Literal(1, "integer"))
    assert sql("a <=> NULL") == Comparison("<=>", Column("a"), Literal(None, "null"))
    assert sql("5 <=> a") == Comparison("<=>", Column("a"), Literal(5, "integer"))
    assert sql("flag") == Column("flag")
    assert sql("CAST(CAST(a AS INT) AS BIGINT) = 1") is None


def test_sql_boolean_structure() -> None:
    a1 = Comparison("=", Column("a"), Literal(1, "integer"))
    b2 = Comparison("=", Column("b"), Literal(2, "integer"))
    c3 = Comparison("=", Column("c"), Literal(3, "integer"))
    assert sql("a = 1 OR b = 2 AND c = 3") == Or((a1, And((b2, c3))))
    assert sql("(a = 1 OR b = 2) AND c = 3") == And((Or((a1, b2)), c3))
    assert sql("NOT (a = 1)") == Not(a1)
    assert sql("((a = 1) AND (NOT (b = 2)))") == And((a1, Not(b2)))
    assert sql("a IN (1, 2)") == In(Column("a"), (Literal(1, "integer"), Literal(2, "integer")))
    assert sql("a NOT IN (1)") == Not(In(Column("a"), (Literal(1, "integer"),)))
    assert sql("a BETWEEN 1 AND 3") == And(
        (Comparison(">=", Column("a"), Literal(1, "integer")), Comparison("<=", Column("a"), Literal(3, "integer")))
    )
    assert sql("a IN (b)") is None
    assert sql("(" * 150 + "a = 1" + ")" * 150) is None


def test_sql_literals_that_do_not_convert_skip_the_entry() -> None:
    assert sql("x = DATE 'not a date'") is None
    assert sql("x = 1.5L") is None
    assert sql("x = CAST('abc' AS INT)") is None
