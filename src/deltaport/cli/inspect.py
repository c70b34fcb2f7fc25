"""`deltaport inspect`: check a Delta table before sharing it."""

from __future__ import annotations

from typing import Any, Optional

import typer

from deltaport.cli.common import fail, to_json


def inspect(
    table: str = typer.Argument(..., help="Table location: a path, file:// URI or s3://, az://, gs:// URL."),
    version: Optional[int] = typer.Option(None, "--version", "-v", help="Read this version."),
    timestamp: Optional[str] = typer.Option(
        None, "--timestamp", "-t", help="Read the latest version committed at or before this ISO-8601 time."
    ),
    files: bool = typer.Option(False, "--files", help="Print the live files as JSON lines (add actions)."),
    changes: Optional[str] = typer.Option(
        None, "--changes", help="Print the changes of versions FROM[..TO] as JSON lines, commit by commit."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
) -> None:
    """Check a Delta table before sharing it: version, protocol, features, schema, partitions, files, size."""
    from deltaport.delta import DeltaTable
    from deltaport.errors import DeltaportError

    if version is not None and timestamp is not None:
        fail(ValueError("give --version or --timestamp, not both"))
    try:
        dt = DeltaTable(table)
        if changes is not None:
            try:
                start, end = _parse_range(changes)
            except ValueError:
                fail(ValueError(f"--changes takes FROM or FROM..TO (versions), not {changes!r}"))
            for change in dt.changes(start, end):
                header: dict[str, Any] = {"version": change.version, "timestamp": change.timestamp}
                if change.commit_info is not None:
                    header["operation"] = change.commit_info.operation
                typer.echo(to_json({"commit": header}))
                if change.protocol is not None:
                    typer.echo(to_json({"protocol": change.protocol.to_dict()}))
                if change.metadata is not None:
                    typer.echo(to_json({"metaData": change.metadata.to_dict()}))
                for kind in ("add", "remove", "cdc"):
                    for action in change.actions(kind):
                        typer.echo(to_json({kind: action}))
            return
        snap = dt.snapshot(version, timestamp=timestamp)
        summary = snap.summary()
        if files:
            for action in snap.add_actions():
                typer.echo(to_json({"add": action}))
            return
        if as_json:
            typer.echo(to_json(summary))
            return
        _print_summary(summary)
    except DeltaportError as exc:
        fail(exc)
    except ValueError as exc:
        fail(exc)


def _parse_range(text: str) -> tuple[int, Optional[int]]:
    if ".." in text:
        a, b = text.split("..", 1)
        return int(a), (int(b) if b else None)
    return int(text), None


def _print_summary(s: dict) -> None:
    from deltaport.delta.history import format_ms

    p = s["protocol"]
    lines = [
        f"table       {s['table']}",
        f"version     {s['version']}" + (f"  (committed {format_ms(s['timestamp'])})" if s["timestamp"] else ""),
        f"table id    {s['id']}" + (f"  name {s['name']}" if s["name"] else ""),
        f"protocol    reader {p['minReaderVersion']}, writer {p['minWriterVersion']}",
        f"features    {', '.join(s['features']) or '-'}",
        f"partitions  {', '.join(s['partitionColumns']) or '-'}",
        f"files       {s['numFiles']}",
        f"size        {_human(s['sizeInBytes'])} ({s['sizeInBytes']} bytes)",
        "schema",
    ]
    for f in s["schema"]:
        t = f["type"] if isinstance(f["type"], str) else f["type"].get("type")
        lines.append(f"  {f['name']}: {t}{'' if f['nullable'] else ' not null'}")
    if s["configuration"]:
        lines.append("configuration")
        lines.extend(f"  {k} = {v}" for k, v in sorted(s["configuration"].items()))
    typer.echo("\n".join(lines))


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"
