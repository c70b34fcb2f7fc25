"""Spark filter objects → jsonPredicateHints (no SparkSession needed)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from deltaport.protocol.hints import expr_to_json, parse_json_predicate
from deltaport.spark.filters import filters_to_expression, filters_to_json_hint

TYPES = {
    "id": "long",
    "n": "integer",
    "name": "string",
    "d": "date",
    "ts": "timestamp",
    "ok": "boolean",
    "x": "double",
    "dec": "decimal(10,2)",
    "ntz": "timestamp_ntz",
    "st": {"type": "struct", "fields": []},
}


def hint(*filters):
    text = filters_to_json_hint(list(filters), TYPES)
    return None if text is None else json.loads(text)


def col(name, value_type):
    return {"op": "column", "name": name, "valueType": value_type}


def lit(value, value_type):
    return {"op": "literal", "value": value, "valueType": value_type}


def test_comparisons_take_the_column_type():
    assert hint(EqualTo(("id",), 5)) == {"op": "equal", "children": [col("id", "long"), lit("5", "long")]}
    assert hint(GreaterThan(("n",), 1))["children"][0] == col("n", "int")
    assert hint(LessThan(("d",), dt.date(2024, 1, 2)))["children"][1] == lit("2024-01-02", "date")
    assert hint(GreaterThanOrEqual(("x",), 2))["children"][1] == lit("2.0", "double")
    assert hint(LessThanOrEqual(("name",), "m"))["op"] == "lessThanOrEqual"
    stamp = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert hint(EqualTo(("ts",), stamp))["children"][1] == lit("2024-01-01T10:00:00.000000Z", "timestamp")
    assert hint(EqualTo(("ok",), True))["children"][1] == lit("true", "bool")


def test_filters_are_anded_and_unsupported_ones_dropped():
    tree = hint(EqualTo(("id",), 1), StringStartsWith(("name",), "a"), IsNotNull(("name",)))
    assert tree["op"] == "and" and len(tree["children"]) == 2
    assert tree["children"][1] == {"op": "not", "children": [{"op": "isNull", "children": [col("name", "string")]}]}
    # nested fields, unknown columns, decimal / ntz / struct columns and mistyped literals are left out
    assert hint(EqualTo(("st", "a"), 1)) is None
    assert hint(EqualTo(("_change_type",), "insert")) is None
    assert hint(EqualTo(("dec",), Decimal("1.00"))) is None
    assert hint(EqualTo(("ntz",), dt.datetime(2024, 1, 1))) is None
    assert hint(EqualTo(("id",), "five")) is None
    assert hint(EqualTo(("id",), None)) is None
    assert hint(StringStartsWith(("name",), "a")) is None


def test_not_in_and_null_safe_equality():
    assert hint(Not(EqualTo(("id",), 1))) == {"op": "not", "children": [hint(EqualTo(("id",), 1))]}
    assert hint(Not(StringStartsWith(("name",), "a"))) is None  # NOT of an unknown cannot be dropped into
    assert hint(In(("id",), (1, 2, None)))["op"] == "or"
    assert hint(In(("id",), (7,))) == hint(EqualTo(("id",), 7))
    assert hint(In(("id",), (None,))) is None
    assert hint(EqualNullSafe(("id",), None)) == {"op": "isNull", "children": [col("id", "long")]}
    assert hint(EqualNullSafe(("id",), 3))["op"] == "and"
    assert hint(IsNull(("ID",))) == {"op": "isNull", "children": [col("id", "long")]}  # case-insensitive


def test_hints_parse_back_on_the_server_side():
    filters = [In(("name",), ("a", "b")), Not(LessThan(("n",), 0)), IsNotNull(("ts",))]
    text = filters_to_json_hint(filters, TYPES)
    parsed = parse_json_predicate(text)
    assert parsed is not None and expr_to_json(parsed) == text
    assert filters_to_expression(filters, TYPES) is not None
