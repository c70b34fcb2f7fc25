"""`deltaport conformance`: check any Delta Sharing server against the protocol."""

from __future__ import annotations

from typing import Optional

import typer

from deltaport.cli.common import fail, to_json


def conformance(
    profile: str = typer.Option(
        ..., "--profile", help="Recipient profile file (bearer token) of the Delta Sharing server to check."
    ),
    share: Optional[str] = typer.Option(
        None, "--share", help="Check only this share (default: every share the profile reads)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per check instead of a line."),
) -> None:
    """Check any Delta Sharing server against the protocol, black-box, through a recipient profile.

    Each check prints PASS, FAIL or SKIP, its name and the protocol section it tests.

    A failure adds what was expected and what came back; a skip says why the check could not run.

    Exit status: 0 when no check failed, 1 when one did, 2 when the kit could not start (profile, connection, token).
    """
    from deltaport.conformance import KitError, run, summary

    def emit(result) -> None:
        typer.echo(to_json(result.to_json()) if as_json else result.line())

    try:
        results = run(profile, share, emit=emit)
    except KitError as exc:
        fail(exc)
    if not as_json:
        typer.echo(summary(results))
    if any(result.status == "FAIL" for result in results):
        raise typer.Exit(code=1)
