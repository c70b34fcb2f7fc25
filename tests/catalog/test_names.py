"""The one naming rule, shared by the YAML config and the catalog database."""

from __future__ import annotations

import pytest

from deltaport.catalog.names import check_name, name_key, split_name
from deltaport.errors import InvalidParameter
from deltaport.server.sources.config import ConfigError, _check_name


@pytest.mark.parametrize("name", ["sales", "Sales_2024", "a-b", "ünïcødé", "x" * 255, "a:b", "é.t"])
def test_valid_names_come_back_unchanged(name):
    allow_dot = "." in name
    assert check_name(name, "share", allow_dot=allow_dot) == name


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("", "must not be empty"),
        ("bad name", "share name 'bad name' is invalid"),
        ("a/b", "no spaces, '/', or control characters"),
        ("tab\there", "is invalid"),
        ("nul\x00", "is invalid"),
        ("del\x7f", "is invalid"),
        ("x" * 256, "at most 255 characters"),
        (42, "must be a string, not 42"),
        (None, "must be a string"),
    ],
)
def test_invalid_names_are_refused_with_the_rule(name, needle):
    with pytest.raises(InvalidParameter) as info:
        check_name(name, "share", allow_dot=True)
    assert needle in info.value.message


def test_a_dot_is_refused_only_where_names_are_dotted():
    assert check_name("a.b", "share", allow_dot=True) == "a.b"
    with pytest.raises(InvalidParameter) as info:
        check_name("a.b", "schema", allow_dot=False)
    assert info.value.message.endswith("or control characters, or '.'")


def test_the_error_type_is_the_callers():
    with pytest.raises(ConfigError, match="table name 'a b' is invalid"):
        check_name("a b", "table", allow_dot=False, error=ConfigError)


def test_the_config_uses_the_same_rule():
    assert _check_name("Sales.EU", "share", allow_dot=True) == "Sales.EU"
    for bad in ("a b", "a/b", "x" * 256):
        with pytest.raises(ConfigError) as from_config:
            _check_name(bad, "schema", allow_dot=False)
        with pytest.raises(InvalidParameter) as from_catalog:
            check_name(bad, "schema", allow_dot=False)
        assert from_config.value.message == from_catalog.value.message


def test_keys_ignore_case_beyond_ascii():
    assert name_key("Sales") == name_key("SALES") == "sales"
    assert name_key("ÉTÉ") == name_key("été")


def test_split_name_needs_exactly_the_parts():
    assert split_name("main.sales.orders", ("catalog", "schema", "table")) == ("main", "sales", "orders")
    with pytest.raises(InvalidParameter, match="write it as 'catalog.schema.table'"):
        split_name("main.orders", ("catalog", "schema", "table"))
    with pytest.raises(InvalidParameter, match="write it as 'catalog.schema'"):
        split_name("a.b.c", ("catalog", "schema"))
    with pytest.raises(InvalidParameter, match="schema name 'bad part' is invalid"):
        split_name("main.bad part", ("catalog", "schema"))
    with pytest.raises(InvalidParameter, match="must not be empty"):
        split_name("main.", ("catalog", "schema"))
