"""The ``deltaport`` command line: one module per command group (inspect, serve, demo, conformance,
catalog, admin), put together here."""

from __future__ import annotations

import typer

from deltaport.cli.admin import admin_app
from deltaport.cli.catalog import catalog_app
from deltaport.cli.conformance import conformance
from deltaport.cli.demo import demo
from deltaport.cli.inspect import inspect
from deltaport.cli.serve import serve

app = typer.Typer(
    name="deltaport",
    help="Delta Sharing, whole: inspect Delta tables, serve shares, read them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"deltaport {version('deltaport')}")
        raise typer.Exit()


@app.callback()
def _group(
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print deltaport's version and exit."
    ),
) -> None:
    """Delta Sharing, whole: inspect Delta tables, serve shares, read them back."""


#: Modules an optional part needs -> the extra that installs them.
_EXTRAS = {
    **dict.fromkeys(
        ("fastapi", "fastapi_offline", "uvicorn", "starlette", "pydantic", "cryptography", "prometheus_client"),
        "server",
    ),
    **dict.fromkeys(("sqlalchemy", "alembic"), "server"),
    "psycopg": "postgres",
    "pyspark": "spark",
    "polars": "polars",
    "obstore": "s3",
}


for command in (inspect, serve, demo, conformance):
    app.command()(command)
app.add_typer(catalog_app, name="catalog")
app.add_typer(admin_app, name="admin")


def main() -> None:
    try:
        app(prog_name="deltaport")
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        typer.echo(f"error: this command needs the '{extra}' extra: pip install \"deltaport[{extra}]\"", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
