"""The predicate tree: immutability, visitors, NOT push-down, typed-value parsing."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest

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
    and_all,
    columns_of,
    convert_text,
    decimal_fits,
    describe,
    normalize_type,
    parse_timestamp_literal,
    push_down_not,
    rename_columns,
)

A, B = Column("a", "long"), Column("b", "string")
ONE, X = Literal(1, "long"), Literal("x", "string")
UTC = dt.timezone.utc


def test_nodes_are_frozen_and_hashable() -> None:
    node = Comparison("=", A, ONE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = "<"  # type: ignore[misc]
    assert node == Comparison("=", Column("a", "long"), Literal(1, "long"))
    assert len({node, Comparison("=", A, ONE)}) == 1


def test_unknown_comparison_operator_is_rejected() -> None:
    with pytest.raises(ValueError):
        Comparison("LIKE", A, ONE)  # type: ignore[arg-type]


def test_columns_of() -> None:
    expr = And((Comparison("=", A, ONE), Or((IsNull(B), In(Column("c"), (ONE,)))), Not(Unsupported("f(d)"))))
    assert columns_of(expr) == {"a", "b", "c"}
    assert columns_of(Literal(True, "boolean")) == set()


def test_rename_columns_maps_logical_to_physical_names() -> None:
    expr = Or((Comparison("<", A, ONE), Not(IsNull(B)), In(Column("a"), (ONE,))))
    renamed = rename_columns(expr, {"a": "col-1a2b", "zzz": "unused"})
    assert renamed == Or(
        (
            Comparison("<", Column("col-1a2b", "long"), ONE),
            Not(IsNull(B)),
            In(Column("col-1a2b"), (ONE,)),
        )
    )
    assert expr.children[0] == Comparison("<", A, ONE)  # the original is untouched


@pytest.mark.parametrize(
    ("op", "negated"), [("=", "<>"), ("<>", "="), ("<", ">="), (">=", "<"), (">", "<="), ("<=", ">")]
)
def test_not_of_a_comparison_flips_the_operator(op: str, negated: str) -> None:
    assert push_down_not(Not(Comparison(op, A, ONE))) == Comparison(negated, A, ONE)  # type: ignore[arg-type]


def test_de_morgan_and_double_negation() -> None:
    p, q = Comparison("=", A, ONE), Comparison("<", B, X)
    assert push_down_not(Not(And((p, q)))) == Or((Comparison("<>", A, ONE), Comparison(">=", B, X)))
    assert push_down_not(Not(Or((p, q)))) == And((Comparison("<>", A, ONE), Comparison(">=", B, X)))
    assert push_down_not(Not(Not(p))) == p
    assert push_down_not(And((Not(Not(Not(p))), q))) == And((Comparison("<>", A, ONE), q))


def test_not_is_null_stays_a_leaf() -> None:
    assert push_down_not(Not(IsNull(A))) == Not(IsNull(A))
    assert push_down_not(Not(Not(IsNull(A)))) == IsNull(A)


def test_not_of_null_safe_equal_keeps_the_null_rows() -> None:
    assert push_down_not(Not(Comparison("<=>", A, ONE))) == Or((IsNull(A), Comparison("<>", A, ONE)))
    assert push_down_not(Not(Comparison("<=>", ONE, A))) == Or((IsNull(A), Comparison("<>", A, ONE)))
    assert push_down_not(Not(Comparison("<=>", A, Literal(None, "null")))) == Not(IsNull(A))
    opaque = Comparison("<=>", A, Column("b"))
    assert push_down_not(Not(opaque)) == Not(opaque)


def test_not_of_other_nodes() -> None:
    assert push_down_not(Not(In(A, (ONE, Literal(2, "long"))))) == And(
        (Comparison("<>", A, ONE), Comparison("<>", A, Literal(2, "long")))
    )
    assert push_down_not(Not(In(A, (ONE,)))) == Comparison("<>", A, ONE)
    assert push_down_not(Not(In(A, ()))) == Literal(True, "boolean")
    assert push_down_not(Not(Literal(True, "boolean"))) == Literal(False, "boolean")
    assert push_down_not(Not(Literal(None, "null"))) == Literal(None, "null")
    assert push_down_not(Not(Column("flag"))) == Comparison("=", Column("flag"), Literal(False, "boolean"))
    assert isinstance(push_down_not(Not(Unsupported("f(x)"))), Unsupported)


def test_and_all() -> None:
    p = Comparison("=", A, ONE)
    assert and_all([]) is None
    assert and_all([p]) is p
    assert and_all([p, IsNull(B)]) == And((p, IsNull(B)))


def test_describe() -> None:
    assert describe(And((Comparison("=", A, ONE), Not(IsNull(B))))) == "(a = 1 AND NOT (b IS NULL))"


@pytest.mark.parametrize(
    ("spelling", "delta_type"),
    [
        ("INT", "integer"),
        ("bigint", "long"),
        ("Bool", "boolean"),
        ("TIMESTAMP_LTZ", "timestamp"),
        ("decimal(10, 2)", "decimal(10,2)"),
        ("DECIMAL", "decimal(10,0)"),
        ("varchar", "string"),
        ("decimal(40,2)", None),
        ("geometry", None),
    ],
)
def test_normalize_type(spelling: str, delta_type: str | None) -> None:
    assert normalize_type(spelling) == delta_type


def test_parse_timestamp_forms() -> None:
    expected = dt.datetime(2022, 1, 1, 0, 0, tzinfo=UTC)
    assert parse_timestamp_literal("2022-01-01T00:00:00Z", naive=False) == expected
    assert parse_timestamp_literal("2022-01-01 00:00:00", naive=False) == expected
    assert parse_timestamp_literal("2022-01-01T01:30:00+01:30", naive=False) == expected
    assert parse_timestamp_literal("2021-12-31T19:00:00.000-0500", naive=False) == expected
    assert parse_timestamp_literal("2022-01-01 00:00:00.1234567", naive=True) == dt.datetime(
        2022, 1, 1, 0, 0, 0, 123456
    )
    with pytest.raises(ValueError):
        parse_timestamp_literal("2022-01-01T00:00:00Z", naive=True)
    with pytest.raises(ValueError):
        parse_timestamp_literal("yesterday", naive=False)


def test_convert_text() -> None:
    assert convert_text("TRUE", "boolean") is True
    assert convert_text("-42", "integer") == -42
    assert convert_text("1.5e3", "double") == 1500.0
    assert convert_text("2021-04-29", "date") == dt.date(2021, 4, 29)
    assert convert_text("1.50", "decimal(3,1)") == Decimal("1.50")
    for text, value_type in [
        ("3000000000", "integer"),
        ("1.5", "long"),
        ("yes", "boolean"),
        ("1.55", "decimal(3,1)"),
        ("x", "binary"),
    ]:
        with pytest.raises(ValueError):
            convert_text(text, value_type)


def test_decimal_fits() -> None:
    assert decimal_fits(Decimal("123.45"), 5, 2)
    assert not decimal_fits(Decimal("1234.5"), 5, 2)
    assert not decimal_fits(Decimal("1.234"), 5, 2)
    assert decimal_fits(Decimal("1.200"), 5, 2)
    assert not decimal_fits(Decimal("NaN"), 5, 2)
