"""What every command shares: one-line errors and JSON output."""

from __future__ import annotations

from typing import NoReturn

import orjson
import typer


def fail(exc: Exception) -> NoReturn:
    # the operator runs the CLI: show the cause and the table's location, which recipients never see
    typer.echo(f"error: {getattr(exc, 'operator_message', exc)}", err=True)
    raise typer.Exit(code=2)


def to_json(obj) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
