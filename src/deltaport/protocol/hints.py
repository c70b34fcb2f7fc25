"""The two filtering hints of a query request, parsed into predicate trees, and rendered back.

Hints are best effort: anything that cannot be understood means "no filtering" (None) for the
whole hint, or an ``Unsupported`` node where the rest of the tree can still prune. Parsing never
raises for bad input.

* ``jsonPredicateHints`` — a JSON op tree (``column``, ``literal``, ``isNull``, ``equal``,
  ``lessThan``, ``lessThanOrEqual``, ``greaterThan``, ``greaterThanOrEqual``, ``and``, ``or``,
  ``not``) with value types ``bool, int, long, string, date, float, double, timestamp``.
* ``predicateHints`` — a list of restricted SQL expressions, AND-ed together.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

import orjson

from deltaport.errors import UnsupportedOperation
from deltaport.expressions.tree import (
    FLIPPED_OPS,
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
    Unsupported,
    and_all,
    convert_text,
    describe,
    normalize_type,
    split_column_literal,
)

MAX_JSON_PREDICATE_BYTES = 1 << 20
MAX_PREDICATE_DEPTH = 100

_COMPARISON_JSON_OPS = {
    "=": "equal",
    "<": "lessThan",
    "<=": "lessThanOrEqual",
    ">": "greaterThan",
    ">=": "greaterThanOrEqual",
}
_JSON_COMPARISONS = {name.lower(): symbol for symbol, name in _COMPARISON_JSON_OPS.items()}
_JSON_VALUE_TYPES = {
    "bool": "boolean",
    "int": "integer",
    "long": "long",
    "string": "string",
    "date": "date",
    "float": "float",
    "double": "double",
    "timestamp": "timestamp",
}
_WIRE_VALUE_TYPES = {
    "boolean": "bool",
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "long",
    "string": "string",
    "date": "date",
    "float": "float",
    "double": "double",
    "timestamp": "timestamp",
}


class _Invalid(Exception):
    """A node that cannot be parsed; becomes ``Unsupported`` inside and/or, None at the root."""


class _TooDeep(Exception):
    """The tree is deeper than MAX_PREDICATE_DEPTH: the whole hint is skipped."""


# --- jsonPredicateHints ------------------------------------------------------------------------


def parse_json_predicate(text: str | bytes | None) -> Expr | None:
    """Parse a ``jsonPredicateHints`` string; None means "do not filter"."""
    if text is None:
        return None
    raw = text.encode() if isinstance(text, str) else text
    if not raw.strip() or len(raw) > MAX_JSON_PREDICATE_BYTES:
        return None
    try:
        tree = orjson.loads(raw)
        expr = _json_node(tree, 1)
    except (orjson.JSONDecodeError, _Invalid, _TooDeep, RecursionError):
        return None
    return None if isinstance(expr, Unsupported) else expr


def _json_node(node: Any, depth: int) -> Expr:
    if depth > MAX_PREDICATE_DEPTH:
        raise _TooDeep()
    if not isinstance(node, dict) or not isinstance(node.get("op"), str):
        raise _Invalid("a predicate node must be an object with an 'op'")
    op = node["op"].lower()
    children = node.get("children") or []
    if not isinstance(children, list):
        raise _Invalid("'children' must be a list")
    if op == "column":
        return _json_column(node)
    if op == "literal":
        return _json_literal(node)
    if op in _JSON_COMPARISONS:
        left, right = _json_children(children, 2, depth, node["op"])
        return Comparison(_JSON_COMPARISONS[op], left, right)  # type: ignore[arg-type]
    if op == "isnull":
        (child,) = _json_children(children, 1, depth, node["op"])
        return IsNull(child)
    if op == "not":
        (child,) = _json_children(children, 1, depth, node["op"])
        return Not(child)
    if op in ("and", "or"):
        if len(children) < 2:
            raise _Invalid(f"'{node['op']}' needs at least 2 children")
        parsed = tuple(_json_child_or_unsupported(child, depth + 1) for child in children)
        if all(isinstance(child, Unsupported) for child in parsed):
            raise _Invalid(f"no usable child in '{node['op']}'")
        return And(parsed) if op == "and" else Or(parsed)
    raise _Invalid(f"unknown op {node['op']!r}")


def _json_children(children: list[Any], arity: int, depth: int, op: str) -> list[Expr]:
    if len(children) != arity:
        raise _Invalid(f"'{op}' takes {arity} child(ren), got {len(children)}")
    return [_json_node(child, depth + 1) for child in children]


def _json_child_or_unsupported(child: Any, depth: int) -> Expr:
    try:
        return _json_node(child, depth)
    except _Invalid as error:
        return Unsupported(str(error))


def _json_value_type(node: dict[str, Any], *, required: bool) -> str | None:
    wire = node.get("valueType")
    if wire is None and not required:
        return None
    if not isinstance(wire, str) or wire.lower() not in _JSON_VALUE_TYPES:
        raise _Invalid(f"unsupported valueType {wire!r}")
    return _JSON_VALUE_TYPES[wire.lower()]


def _json_column(node: dict[str, Any]) -> Column:
    name = node.get("name")
    if not isinstance(name, str) or not name:
        raise _Invalid("a column needs a name")
    return Column(name, _json_value_type(node, required=False))


def _json_literal(node: dict[str, Any]) -> Literal:
    value_type = _json_value_type(node, required=True)
    assert value_type is not None
    value = node.get("value")
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, (int, float)):
        value = repr(value)
    if not isinstance(value, str):
        raise _Invalid("a literal needs a value")
    try:
        return Literal(convert_text(value, value_type), value_type)
    except ValueError as error:
        raise _Invalid(str(error)) from None


def expr_to_json(expr: Expr) -> str:
    """Render a tree as a ``jsonPredicateHints`` string.

    ``<>``, ``<=>`` and ``IN`` are rewritten with the wire ops (same rows selected, also under
    NOT). Raises UnsupportedOperation for what the wire cannot say: ``Unsupported`` nodes, NULL
    literals, and value types without a wire spelling (decimal, binary, timestamp_ntz).
    """
    return orjson.dumps(_render(expr)).decode()


def _render(expr: Expr) -> dict[str, Any]:
    if isinstance(expr, Column):
        return _render_column(expr, None)
    if isinstance(expr, Literal):
        return _render_literal(expr)
    if isinstance(expr, Comparison):
        return _render_comparison(expr)
    if isinstance(expr, IsNull):
        return {"op": "isNull", "children": [_render(expr.child)]}
    if isinstance(expr, Not):
        return {"op": "not", "children": [_render(expr.child)]}
    if isinstance(expr, (And, Or)):
        if not expr.children:
            return _render_literal(Literal(isinstance(expr, And), "boolean"))
        if len(expr.children) == 1:
            return _render(expr.children[0])
        op = "and" if isinstance(expr, And) else "or"
        return {"op": op, "children": [_render(child) for child in expr.children]}
    if isinstance(expr, In):
        return _render(Or(tuple(Comparison("=", expr.column, value) for value in expr.values)))
    _cannot_render(f"cannot express {describe(expr)} as a JSON predicate")


def _render_comparison(expr: Comparison) -> dict[str, Any]:
    if expr.op == "<>":
        return {"op": "not", "children": [_render_comparison(Comparison("=", expr.left, expr.right))]}
    if expr.op == "<=>":
        column, literal = split_column_literal(expr)
        if column is None or literal is None:
            _cannot_render(f"cannot express {describe(expr)} as a JSON predicate")
        if literal.value is None:
            return _render(IsNull(column))
        not_null = Not(IsNull(column))
        return {"op": "and", "children": [_render(not_null), _render(Comparison("=", column, literal))]}
    hint = expr.right if isinstance(expr.right, Literal) else expr.left
    hint_type = hint.value_type if isinstance(hint, Literal) else None
    children = [
        _render_column(side, hint_type) if isinstance(side, Column) else _render(side)
        for side in (expr.left, expr.right)
    ]
    return {"op": _COMPARISON_JSON_OPS[expr.op], "children": children}


def _render_column(column: Column, fallback_type: str | None) -> dict[str, Any]:
    rendered: dict[str, Any] = {"op": "column", "name": column.name}
    wire = _WIRE_VALUE_TYPES.get(column.value_type or "") or _WIRE_VALUE_TYPES.get(fallback_type or "")
    if wire:
        rendered["valueType"] = wire
    return rendered


def _render_literal(literal: Literal) -> dict[str, Any]:
    wire = _WIRE_VALUE_TYPES.get(literal.value_type)
    if wire is None or literal.value is None:
        _cannot_render(f"cannot express literal {describe(literal)} of type {literal.value_type} as JSON")
    return {"op": "literal", "value": _literal_text(literal.value), "valueType": wire}


def _literal_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            _cannot_render("a timestamp literal must carry a time zone")
        return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _cannot_render(message: str) -> NoReturn:
    raise UnsupportedOperation(message)


# --- predicateHints (restricted SQL) -----------------------------------------------------------


def parse_sql_predicates(hints: list[str] | str | None) -> Expr | None:
    """AND of every SQL hint that parses; entries that do not parse are skipped."""
    if hints is None:
        return None
    if isinstance(hints, str):
        hints = [hints]
    parsed: list[Expr] = []
    for hint in hints:
        if not isinstance(hint, str) or not hint.strip() or len(hint) > MAX_JSON_PREDICATE_BYTES:
            continue
        try:
            parsed.append(_SqlParser(hint).parse())
        except (_Invalid, _TooDeep, ValueError, RecursionError):
            continue
    return and_all(parsed)


_SQL_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:[bB][dD]|[lLsSyYdDfF])?(?![A-Za-z0-9_]))
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<symbol><=>|<=|>=|<>|!=|==|=|<|>|\(|\)|,|-|\.)
    """,
    re.X | re.S,
)
_SQL_COMPARISONS = {
    "=": "=",
    "==": "=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "<>": "<>",
    "!=": "<>",
    "<=>": "<=>",
}
_SQL_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_INT32_RANGE = range(-(2**31), 2**31)
_INT64_RANGE = range(-(2**63), 2**63)
_NUMBER_SUFFIX_TYPES = {"l": "long", "s": "short", "y": "byte", "d": "double", "f": "float"}


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _SQL_TOKEN.match(text, position)
        if match is None:
            raise _Invalid(f"unexpected character {text[position]!r}")
        position = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append((kind, match.group()))
    tokens.append(("end", ""))
    return tokens


def _unquote_string(token: str) -> str:
    quote, body = token[0], token[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            following = body[i + 1]
            if following == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2 : i + 6]):
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_SQL_ESCAPES.get(following, following))
            i += 2
        elif char == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _number_literal(token: str, negative: bool) -> Literal:
    lowered = token.lower()
    suffix = ""
    if lowered.endswith("bd"):
        suffix, lowered = "bd", lowered[:-2]
    elif lowered[-1] in _NUMBER_SUFFIX_TYPES and not lowered[-1].isdigit():
        suffix, lowered = lowered[-1], lowered[:-1]
    text = ("-" if negative else "") + lowered
    if suffix in ("l", "s", "y"):
        return Literal(convert_text(text, _NUMBER_SUFFIX_TYPES[suffix]), _NUMBER_SUFFIX_TYPES[suffix])
    if suffix in ("d", "f") or "e" in lowered:
        return Literal(float(text), _NUMBER_SUFFIX_TYPES.get(suffix, "double"))
    if suffix == "bd" or "." in lowered:
        return _decimal_literal(Decimal(text))
    number = int(text)
    if number in _INT32_RANGE:
        return Literal(number, "integer")
    if number in _INT64_RANGE:
        return Literal(number, "long")
    return _decimal_literal(Decimal(number))


def _decimal_literal(number: Decimal) -> Literal:
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    scale = max(0, -exponent)
    precision = max(len(digits) + max(0, exponent), scale, 1)
    if precision > 38:
        raise _Invalid(f"decimal literal {number} is too large")
    return Literal(number, f"decimal({precision},{scale})")


class _SqlParser:
    """Recursive descent over: OR, AND, NOT, comparisons, IS [NOT] NULL, [NOT] IN, BETWEEN."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.position = 0
        self.depth = 0

    def parse(self) -> Expr:
        expr = self._or()
        if self._peek()[0] != "end":
            raise _Invalid(f"unexpected {self._peek()[1]!r}")
        return expr

    # token helpers
    def _peek(self, ahead: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.position + ahead, len(self.tokens) - 1)]

    def _next(self) -> tuple[str, str]:
        token = self._peek()
        self.position += 1
        return token

    def _is_word(self, word: str, ahead: int = 0) -> bool:
        kind, text = self._peek(ahead)
        return kind == "word" and text.upper() == word

    def _accept_word(self, word: str) -> bool:
        if self._is_word(word):
            self.position += 1
            return True
        return False

    def _expect_symbol(self, symbol: str) -> None:
        kind, text = self._next()
        if kind != "symbol" or text != symbol:
            raise _Invalid(f"expected {symbol!r}, got {text!r}")

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_PREDICATE_DEPTH:
            raise _TooDeep()

    # boolean structure
    def _or(self) -> Expr:
        items = [self._and()]
        while self._accept_word("OR"):
            items.append(self._and())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def _and(self) -> Expr:
        items = [self._not()]
        while self._accept_word("AND"):
            items.append(self._not())
        return items[0] if len(items) == 1 else And(tuple(items))

    def _not(self) -> Expr:
        if self._accept_word("NOT"):
            self._enter()
            child = self._not()
            self.depth -= 1
            return Not(child)
        return self._predicate()

    def _predicate(self) -> Expr:
        left = self._primary()
        kind, text = self._peek()
        if kind == "symbol" and text in _SQL_COMPARISONS:
            self.position += 1
            return _comparison(_SQL_COMPARISONS[text], left, self._operand())
        if self._accept_word("IS"):
            negated = self._accept_word("NOT")
            if not self._accept_word("NULL"):
                raise _Invalid("only IS [NOT] NULL is supported")
            return Not(IsNull(left)) if negated else IsNull(left)
        negated = self._is_word("NOT") and (self._is_word("IN", 1) or self._is_word("BETWEEN", 1))
        if negated:
            self.position += 1
        if self._accept_word("IN"):
            expr: Expr = self._in_list(left)
        elif self._accept_word("BETWEEN"):
            low = self._operand()
            if not self._accept_word("AND"):
                raise _Invalid("BETWEEN needs AND")
            expr = And((_comparison(">=", left, low), _comparison("<=", left, self._operand())))
        else:
            return left
        return Not(expr) if negated else expr

    def _in_list(self, left: Expr) -> Expr:
        if not isinstance(left, Column):
            raise _Invalid("IN needs a column on the left")
        self._expect_symbol("(")
        values = [self._operand()]
        while self._peek() == ("symbol", ","):
            self.position += 1
            values.append(self._operand())
        self._expect_symbol(")")
        if not all(isinstance(value, Literal) for value in values):
            raise _Invalid("IN takes literals only")
        return In(left, tuple(values))  # type: ignore[arg-type]

    def _primary(self) -> Expr:
        if self._peek() == ("symbol", "("):
            self.position += 1
            self._enter()
            inner = self._or()
            self.depth -= 1
            self._expect_symbol(")")
            return inner
        return self._operand()

    # values
    def _operand(self) -> Column | Literal:
        kind, text = self._next()
        if kind == "symbol" and text == "(":
            self._enter()
            inner = self._operand()
            self.depth -= 1
            self._expect_symbol(")")
            return inner
        if kind == "symbol" and text == "-" and self._peek()[0] == "number":
            return _number_literal(self._next()[1], negative=True)
        if kind == "number":
            return _number_literal(text, negative=False)
        if kind == "string":
            return Literal(_unquote_string(text), "string")
        if kind == "quoted":
            return self._column(text[1:-1].replace("``", "`"))
        if kind != "word":
            raise _Invalid(f"unexpected {text!r}")
        word = text.upper()
        if word in ("TRUE", "FALSE"):
            return Literal(word == "TRUE", "boolean")
        if word == "NULL":
            return Literal(None, "null")
        if word in ("DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ") and self._peek()[0] == "string":
            value_type = normalize_type(word)
            assert value_type is not None
            return Literal(convert_text(_unquote_string(self._next()[1]), value_type), value_type)
        if word == "CAST" and self._peek() == ("symbol", "("):
            return self._cast()
        if word in ("AND", "OR", "NOT", "IS", "IN", "BETWEEN", "LIKE", "AS"):
            raise _Invalid(f"unexpected keyword {text!r}")
        return self._column(text)

    def _column(self, name: str) -> Column:
        parts = [name]
        while self._peek() == ("symbol", ".") and self._peek(1)[0] in ("word", "quoted"):
            self.position += 1
            kind, text = self._next()
            parts.append(text[1:-1].replace("``", "`") if kind == "quoted" else text)
        return Column(".".join(parts))

    def _cast(self) -> Column | Literal:
        self._expect_symbol("(")
        self._enter()
        inner = self._operand()
        self.depth -= 1
        if not self._accept_word("AS"):
            raise _Invalid("CAST needs AS")
        value_type = self._type_name()
        self._expect_symbol(")")
        if isinstance(inner, Column):
            if inner.value_type is not None:
                raise _Invalid("nested casts are not supported")
            return Column(inner.name, value_type)
        return _cast_literal(inner, value_type)

    def _type_name(self) -> str:
        kind, text = self._next()
        if kind != "word":
            raise _Invalid(f"expected a type name, got {text!r}")
        arguments: list[str] = []
        if self._peek() == ("symbol", "("):
            self.position += 1
            while self._peek() != ("symbol", ")"):
                kind, argument = self._next()
                if kind == "end":
                    raise _Invalid("unterminated type")
                arguments.append(argument)
            self.position += 1
        spelled = text.lower()
        if spelled in ("decimal", "dec", "numeric") and arguments:
            spelled = f"decimal({''.join(arguments)})"
        value_type = normalize_type(spelled)
        if value_type is None:
            raise _Invalid(f"unsupported type {text!r}")
        return value_type


def _comparison(op: str, left: Expr, right: Expr) -> Comparison:
    if isinstance(left, Literal) and isinstance(right, Column):
        return Comparison(FLIPPED_OPS[op], right, left)  # type: ignore[arg-type]
    return Comparison(op, left, right)  # type: ignore[arg-type]


def _cast_literal(literal: Literal, value_type: str) -> Literal:
    value = literal.value
    if value is None:
        return Literal(None, value_type)
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, Decimal)) or (isinstance(value, float) and value_type not in INTEGER_TYPES):
        text = str(value)
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime) and value_type == "date":
        return Literal(value, value_type)
    else:
        raise _Invalid(f"unsupported CAST of {describe(literal)} to {value_type}")
    try:
        return Literal(convert_text(text, value_type), value_type)
    except (ValueError, InvalidOperation):
        raise _Invalid(f"cannot CAST {describe(literal)} to {value_type}") from None
