"""What tests/test_readme.py needs to run README.md's snippets as written: the README's fenced
blocks, a Delta table shaped like the one the snippets name, Python run statement by statement, a
`deltaport serve` process started from YAML text, and the README's placeholders filled in."""

from __future__ import annotations

import ast
import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from servers import _stop, _wait_for

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent

_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README: the heading it sits under, its language and text."""

    heading: str
    language: str
    text: str
    line: int  # the opening fence's line number

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0] if self.text else ""

    @property
    def key(self) -> tuple[str, str]:
        """What finds it: its heading and its first line's code (a trailing comment and runs of
        spaces left out, so rewording a comment or realigning it changes nothing)."""
        return self.heading, " ".join(re.split(r"\s#", self.first_line)[0].split())

    def lines(self) -> list[str]:
        """Its non-empty lines, trailing ``# comments`` kept (bash and Python ignore them)."""
        return [line for line in self.text.splitlines() if line.strip()]


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, in order; an unclosed fence is an error."""
    blocks: list[Block] = []
    heading, opened, language, body = "", 0, "", []
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if opened:
            if line.strip() == "```":
                blocks.append(Block(heading, language, "\n".join(body), opened))
                opened = 0
            else:
                body.append(line)
        elif fence:
            opened, language, body = number, fence.group(1), []
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
    if opened:
        raise ValueError(f"README.md: the code block opened on line {opened} is never closed")
    return blocks


# --- the table the snippets read --------------------------------------------------------------------

#: The commit time of version v: one day apart from 2024-04-29 on, so the README's
#: ``2024-05-01T00:00:00Z`` falls inside the table's history (at version 2).
FIRST_COMMIT = dt.datetime(2024, 4, 29, tzinfo=dt.timezone.utc)
ORDERS_VERSIONS = 6


def _orders_rows(ids: range) -> list[dict[str, Any]]:
    regions = ("EU", "US", "emea")
    return [{"order_id": i, "region": regions[i % 3], "amount": float(i * 10)} for i in ids]


def make_orders_table(path: Path) -> Path:
    """``orders``, as the snippets call it, written by delta-rs: partitioned by ``region`` (``EU``,
    ``US``, ``emea``), with a change data feed and versions 0..5 (appends, an update, deletes), its
    commits a day apart from :data:`FIRST_COMMIT`."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    def rows(ids: range) -> pa.Table:
        return pa.Table.from_pylist(_orders_rows(ids))

    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(path, rows(range(1, 10)), partition_by=["region"], configuration=cdf)  # v0
    write_deltalake(path, rows(range(10, 16)), mode="append")  # v1
    DeltaTable(path).update(updates={"amount": "amount + 1"}, predicate="order_id = 2")  # v2
    DeltaTable(path).delete("order_id = 3")  # v3
    write_deltalake(path, rows(range(16, 22)), mode="append")  # v4
    DeltaTable(path).delete("order_id = 7")  # v5
    for version in range(ORDERS_VERSIONS):
        at = (FIRST_COMMIT + dt.timedelta(days=version)).timestamp()
        os.utime(path / "_delta_log" / f"{version:020d}.json", (at, at))
    return path


# --- Python run statement by statement -----------------------------------------------------------


@dataclass
class Step:
    """One top-level statement of a snippet: its source, the names it bound, an expression's value."""

    source: str
    bound: dict[str, Any]
    value: Any = None


def run_python(code: str, namespace: dict[str, Any]) -> list[Step]:
    """Run ``code`` in ``namespace`` one top-level statement at a time, keeping what each bound
    (names it assigned) and, for an expression statement, its value."""
    steps = []
    for node in ast.parse(code).body:
        source = ast.get_source_segment(code, node) or ""
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), "<README>", "eval"), namespace)
            steps.append(Step(source, {}, value))
            continue
        exec(compile(ast.Module([node], type_ignores=[]), "<README>", "exec"), namespace)
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        steps.append(Step(source, {name: namespace[name] for name in names}))
    return steps


def step(steps: list[Step], start: str) -> Step:
    """The one step whose source starts with ``start``."""
    found = [s for s in steps if s.source.startswith(start)]
    assert len(found) == 1, f"{len(found)} statements start with {start!r}"
    return found[0]


# --- placeholders --------------------------------------------------------------------------------


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each placeholder replaced; a placeholder that is not there is an error (the
    README changed under the runner, which then needs a look)."""
    for placeholder, value in values.items():
        if placeholder not in text:
            raise AssertionError(f"placeholder {placeholder!r} is no longer in the README snippet:\n{text}")
        text = text.replace(placeholder, value)
    return text


def ports(text: str) -> list[int]:
    """The port numbers a snippet names in ``host:port`` or ``port: N`` form."""
    return [int(p) for p in re.findall(r"(?::|Port:|port:)\s*(\d{2,5})\b", text)]


# --- processes -------------------------------------------------------------------------------------


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment for a process run in another folder: ``PYTHONPATH`` made absolute (a
    relative ``src`` would name another folder there, or none, and the process would import some
    other deltaport), this environment's ``deltaport`` first on ``PATH``, then ``extra``."""
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **(extra or {})}


# --- a server process started from YAML text ------------------------------------------------------


class YamlServe:
    """``deltaport serve --config server.yaml`` in ``workdir`` with ``yaml_text`` as its config (no
    host or port flags: the YAML says them); returns once ``health_url`` answers."""

    def __init__(self, yaml_text: str, workdir: Path, health_url: str) -> None:
        path = workdir / "server.yaml"
        path.write_text(yaml_text)
        self.log = workdir / "serve.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "deltaport"), "serve", "--config", str(path)],
                cwd=workdir,
                env=child_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for(lambda: httpx.get(health_url, timeout=1).status_code == 200, self.proc, "deltaport serve")

    def stop(self) -> None:
        _stop(self.proc)


def run_line(line: str, cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """README shell lines run by bash in ``cwd`` (environment: :func:`child_env`); output captured,
    never printed (it may hold activation links)."""
    command = ["bash", "-c", line]
    return subprocess.run(command, cwd=cwd, env=child_env(env), capture_output=True, text=True, timeout=120)
