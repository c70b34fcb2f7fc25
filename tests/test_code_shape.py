"""The source stays readable: no function in src/ longer than ~60 lines (docstring excluded)
unless its docstring says why ("Long by choice: ...")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "deltaport"
LIMIT = 60


def _long_functions(path: Path, root: Path = SRC.parent) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assert node.end_lineno is not None
        length = node.end_lineno - node.lineno + 1
        doc = ast.get_docstring(node) or ""
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            first = node.body[0]
            assert first.end_lineno is not None
            length -= first.end_lineno - first.lineno + 1
        if length > LIMIT and "Long by choice:" not in doc:
            out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_the_source_tree_is_found():
    assert len(list(SRC.rglob("*.py"))) > 30


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_long_function_without_a_reason(path):
    assert _long_functions(path) == []


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT + 1))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n", encoding="utf-8")
    assert _long_functions(tmp_path / "m.py", tmp_path) == ["m.py:1 f (62 lines)"]
    reason = '    """Long by choice: a test."""\n'
    (tmp_path / "m.py").write_text(f"def f():\n{reason}{body}\n", encoding="utf-8")
    assert _long_functions(tmp_path / "m.py", tmp_path) == []


FAST = sorted((SRC / "server" / "fast").glob("[!_]*.py"))


@pytest.mark.parametrize("path", FAST, ids=lambda p: p.name)
def test_each_fast_path_names_its_slow_path_and_the_test_holding_them_equal(path):
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    found = re.search(r"Fast form of:\s+(.+?)\.\s+Held\s+equal\s+by:\s+(tests/\S+\.py)\.", doc, re.DOTALL)
    assert found, f"{path.name}: its docstring must say 'Fast form of: ... Held equal by: tests/....py.'"
    assert (SRC.parents[1] / found.group(2)).is_file(), f"{path.name} names {found.group(2)}, which does not exist"


def test_the_fast_paths_are_found():
    assert len(FAST) >= 5
