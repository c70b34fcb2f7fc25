"""`deltaport conformance`: the kit passes against deltaport itself, fails against servers that break the
protocol (each time on the check that covers the broken rule), and skips what a server cannot offer.

Servers are real: deltaport apps over tables from the shared corpus and one written with deltalake,
served by uvicorn on loopback; the breaking servers are the same app behind a small ASGI middleware.
Time budget for the file: about 60 s (measured: ~8 s).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from servers import RunningServer, free_port
from typer.testing import CliRunner

from deltaport.cli import app as cli
from deltaport.conformance import CHECKS
from deltaport.server import create_app, parse_config

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")) / "delta-tables"
TOKEN = "conformance-recipient-token"
#: The checks that need a partitioned table, a table with history, a change data feed, or pages.
NEEDS_PARTITIONS = {"predicate-hints"}
NEEDS_HISTORY = {"query-version-timestamp", "streaming-query"}
NEEDS_CHANGES = {"changes-parquet", "changes-delta", "cdf-change-types"}
NEEDS_PAGES = {"query-paging"}
#: The checks that need a table offered for directory access (test_directory_checks.py serves one).
NEEDS_DIR = {"credentials", "credentials-outside"}


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> str:
    """A table written with deltalake in 20 appends: 20 small files, so pages have something to page."""
    path = tmp_path_factory.mktemp("tables") / "many"
    for i in range(20):
        rows = pa.table({"id": pa.array(range(i * 5, i * 5 + 5), pa.int64()), "batch": pa.array([i] * 5, pa.int32())})
        write_deltalake(path, rows, mode="append")
    return str(path)


def config(tables: list[dict]) -> dict:
    return {
        "version": 1,
        "shares": [{"name": "kit", "schemas": [{"name": "default", "tables": tables}]}],
        "recipients": [{"name": "kit-recipient", "tokens": [TOKEN], "shares": ["kit"]}],
    }


def full_tables(many_files: str) -> list[dict]:
    return [
        {"name": "many", "location": many_files},
        {"name": "partitioned", "location": str(TABLES / "basic_partitioned")},
        {"name": "cdf", "location": str(TABLES / "cdf-table"), "historyShared": True},
    ]


@contextmanager
def serving(application, tmp_path: Path) -> Iterator[str]:
    """``application`` on loopback; yields the path of a profile for it."""
    server = RunningServer(application)
    profile = tmp_path / f"kit-{server.port}.share"
    endpoint = server.url + "/delta-sharing"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    try:
        yield str(profile)
    finally:
        server.stop()


def run_kit(profile: str, *args: str) -> tuple[int, dict[str, dict], str]:
    """The kit through its CLI entry point: exit code, results by check name, the output."""
    result = CliRunner().invoke(cli, ["conformance", "--profile", profile, "--json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    checks = {r["check"]: r for r in map(orjson.loads, result.output.splitlines())}
    assert_nothing_secret(result.output)
    return result.exit_code, checks, result.output


def assert_nothing_secret(output: str) -> None:
    assert TOKEN not in output
    assert not re.search(r"X-Amz-Signature=[0-9a-f]", output), "a presigned URL's signature was printed"


def failed(checks: dict[str, dict]) -> set[str]:
    return {name for name, r in checks.items() if r["status"] == "FAIL"}


# --- against deltaport itself -------------------------------------------------------------------------


def test_every_check_passes_against_deltaport_run_as_the_command(many_files, tmp_path):
    with serving(create_app(parse_config(config(full_tables(many_files)))), tmp_path) as profile:
        out = subprocess.run(
            [str(Path(sys.executable).parent / "deltaport"), "conformance", "--profile", profile, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 0, out.stdout + out.stderr
    checks = {r["check"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert list(checks) == [c.name for c in CHECKS]
    assert failed(checks) == set(), out.stdout
    ran = {name for name, r in checks.items() if r["status"] == "PASS"}
    assert ran >= NEEDS_PARTITIONS | NEEDS_HISTORY | NEEDS_CHANGES | NEEDS_PAGES, out.stdout
    assert {n for n, r in checks.items() if r["status"] != "PASS"} == NEEDS_DIR, out.stdout
    assert "kit.default.cdf" in checks["changes-parquet"]["detail"]
    assert "kit.default.partitioned" in checks["predicate-hints"]["detail"]
    assert "kit.default.many: 20 files" in checks["query-paging"]["detail"]
    assert_nothing_secret(out.stdout + out.stderr)


def test_text_output_is_one_line_per_check_and_a_summary_and_no_log_holds_a_url_signature(many_files, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="httpx")
    with serving(create_app(parse_config(config(full_tables(many_files)))), tmp_path) as profile:
        result = CliRunner().invoke(cli, ["conformance", "--profile", profile, "--share", "KIT"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(CHECKS) + 1
    assert lines[0].startswith("PASS  list-shares") and "[List Shares]" in lines[0]
    passed, skipped = len(CHECKS) - len(NEEDS_DIR), len(NEEDS_DIR)
    assert re.fullmatch(rf"{passed} passed, 0 failed, {skipped} skipped \({len(CHECKS)} checks, [\d.]+ s\)", lines[-1])
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert any("/delta-sharing/files/" in line for line in requests), "the file URLs' requests were not logged"
    assert_nothing_secret("\n".join(requests))


# --- against servers that break the protocol ------------------------------------------------------


async def _forward(app, scope, receive, send, *, body: Callable[[bytes], bytes] | None = None, drop_header=None):
    """Run ``app``, rewriting its response: the whole body through ``body``, minus header ``drop_header``."""
    start: dict = {}
    parts: list[bytes] = []

    async def rewrite(message):
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message["headers"] if k.lower() != drop_header]
            start.update(message, headers=headers)
            if body is None:
                await send(start)
            return
        if message["type"] != "http.response.body" or body is None:
            await send(message)
            return
        parts.append(message.get("body", b""))
        if message.get("more_body"):
            return
        new = body(b"".join(parts))
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(new)).encode())]})
        await send({"type": "http.response.body", "body": new})

    await app(scope, receive, rewrite)


def drop_version_header(app):
    """GET .../version answers without their Delta-Table-Version header."""

    async def broken(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].endswith("/version"):
            return await _forward(app, scope, receive, send, drop_header=b"delta-table-version")
        return await app(scope, receive, send)

    return broken


def drop_a_file_line_on_later_pages(app):
    """A /query asked for a later page (its body has a pageToken) loses its last file line."""

    def without_last_file(body: bytes) -> bytes:
        lines = body.splitlines(keepends=True)
        last = max(i for i, line in enumerate(lines) if line.startswith(b'{"file"'))
        return b"".join(lines[:last] + lines[last + 1 :])

    async def broken(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].endswith("/query"):
            return await app(scope, receive, send)
        asked = []

        async def remember():
            message = await receive()
            asked.append(message.get("body", b""))
            return message

        def maybe_cut(body: bytes) -> bytes:
            return without_last_file(body) if b"pageToken" in b"".join(asked) else body

        return await _forward(app, scope, remember, send, body=maybe_cut)

    return broken


def errors_in_another_shape(app):
    """Every error body becomes ``{"error": message}`` instead of ``{"errorCode", "message"}``."""

    def reshape(body: bytes) -> bytes:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if isinstance(parsed, dict) and "errorCode" in parsed:
            return orjson.dumps({"error": parsed.get("message", "")})
        return body

    async def broken(scope, receive, send):
        if scope["type"] != "http" or scope["method"] == "HEAD":
            return await app(scope, receive, send)
        return await _forward(app, scope, receive, send, body=reshape)

    return broken


@pytest.mark.parametrize(
    ("breakage", "expected_failures", "needle"),
    [
        (drop_version_header, {"table-version"}, "expected a Delta-Table-Version header on GET .../version"),
        (drop_a_file_line_on_later_pages, {"query-paging"}, "the pages to hold exactly the unpaged answer's files"),
        (
            errors_in_another_shape,
            {"auth-missing-token", "auth-wrong-token", "not-found", "credentials-url-only", "error-shape"},
            'without string errorCode and message: {"error"',
        ),
    ],
    ids=["no-version-header", "a-file-line-dropped", "errors-in-another-shape"],
)
def test_the_kit_fails_a_server_that_breaks_the_protocol(many_files, tmp_path, breakage, expected_failures, needle):
    application = breakage(create_app(parse_config(config(full_tables(many_files)))))
    with serving(application, tmp_path) as profile:
        code, checks, output = run_kit(profile)
    assert code == 1, output
    assert failed(checks) == expected_failures, output
    assert any(needle in checks[name]["detail"] for name in expected_failures), output
    assert {r["status"] for name, r in checks.items() if name not in expected_failures | NEEDS_DIR} == {"PASS"}, output


# --- what a server does not offer is skipped, with the reason ---------------------------------------


def test_without_a_change_feed_the_change_checks_are_skipped_with_the_reason(many_files, tmp_path):
    tables = [t for t in full_tables(many_files) if t["name"] != "cdf"]
    with serving(create_app(parse_config(config(tables))), tmp_path) as profile:
        code, checks, output = run_kit(profile)
    assert code == 0, output
    assert failed(checks) == set(), output
    skipped = {name for name, r in checks.items() if r["status"] == "SKIP"}
    assert skipped == NEEDS_CHANGES | NEEDS_HISTORY | NEEDS_DIR, output
    for name in NEEDS_CHANGES:
        assert checks[name]["detail"].startswith("no table with a change data feed is shared"), output
    for name in NEEDS_HISTORY:
        assert checks[name]["detail"].startswith("no table with history is shared"), output


# --- when the kit cannot start ------------------------------------------------------------------------


def test_a_profile_problem_or_an_unreachable_server_exits_2(many_files, tmp_path):
    runner = CliRunner()
    missing = runner.invoke(cli, ["conformance", "--profile", str(tmp_path / "nope.share")])
    assert missing.exit_code == 2 and "profile file not found" in missing.output
    nowhere = tmp_path / "nowhere.share"
    endpoint = f"http://127.0.0.1:{free_port()}/delta-sharing"
    nowhere.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": endpoint, "bearerToken": TOKEN}))
    unreachable = runner.invoke(cli, ["conformance", "--profile", str(nowhere)])
    assert unreachable.exit_code == 2 and "cannot reach the sharing server" in unreachable.output
    with serving(create_app(parse_config(config(full_tables(many_files)))), tmp_path) as profile:
        unknown = runner.invoke(cli, ["conformance", "--profile", profile, "--share", "elsewhere"])
        wrong = tmp_path / "wrong.share"
        wrong.write_text(Path(profile).read_text().replace(TOKEN, "not-the-token"))
        refused = runner.invoke(cli, ["conformance", "--profile", str(wrong)])
    assert unknown.exit_code == 2 and "share 'elsewhere' is not shared with this profile" in unknown.output
    assert refused.exit_code == 2 and "refused the profile's bearer token" in refused.output
