"""The checks of a table's files: POST /query in both formats, at a version or timestamp, with
predicate and limit hints, in pages, with refresh tokens and end-stream actions."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable

import orjson

from deltaport.conformance.discovery import HINT_TYPES, TableInfo, Target
from deltaport.conformance.feed_checks import streaming_answer
from deltaport.conformance.registry import Checks
from deltaport.conformance.shapes import (
    CAPABILITIES,
    DELTA,
    PARQUET,
    Answer,
    expect_partition_keys,
    expect_unique_ids,
    format_named,
    read_answer,
)
from deltaport.conformance.wire import Failed, Skipped, expect

QUERY = Checks()


def _post(t: Target, table: TableInfo, body: dict, request: str, headers: dict | None = None) -> Answer:
    return read_answer(t.wire.post(table.ref.path + "/query", body=body, headers=headers), request)


@QUERY.check("query-parquet", "Read Data from a Table")
def query_parquet(t: Target) -> str:
    table = t.need("files")
    answer = t.snapshot(table)
    request = "POST .../query {}"
    expect(answer.fmt == PARQUET, f"the parquet format's lines from {request}", answer.fmt)
    expect(
        answer.end_stream is None, f"no endStreamAction from {request} (none was asked for)", "an endStreamAction line"
    )
    expect_unique_ids(answer, request)
    expect_partition_keys(answer, table.partition_columns, request)
    for key in ("id", "schemaString", "partitionColumns"):
        expect(
            answer.metadata.get(key) == table.metadata.get(key),
            f"the metaData {key} GET .../metadata gives",
            answer.metadata.get(key),
        )
    return f"{table.ref}: {len(answer.files)} file(s) at version {answer.version}"


@QUERY.check("query-delta", "Delta Format Responses (query)")
def query_delta(t: Target) -> None:
    table = t.need("files")
    base = t.snapshot(table)
    request = "POST .../query with responseformat=delta"
    answer = _post(t, table, {}, request, {CAPABILITIES: "responseformat=delta"})
    expect(answer.fmt == DELTA, f"the delta format's lines from {request}", "parquet-format lines")
    expect(
        format_named(answer.capabilities) == DELTA,
        f"delta-sharing-capabilities naming delta on {request}",
        answer.capabilities,
    )
    expect_unique_ids(answer, request)
    sizes, base_sizes = sorted(f.size for f in answer.files), sorted(f.size for f in base.files)
    expect(
        sizes == base_sizes,
        "the files of the parquet format's answer (by size)",
        f"{len(sizes)} vs {len(base_sizes)} files",
    )


def _iso(ms: int) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _versioned(t: Target, table: TableInfo, body: dict, want: int) -> Answer:
    request = f"POST .../query {orjson.dumps(body).decode()}"
    answer = _post(t, table, body, request)
    expect(answer.version == want, f"Delta-Table-Version {want} for {request}", answer.version)
    wrong = [f.version for f in answer.files if f.version not in (None, want)]
    expect(not wrong, f"file lines' version (when present) {want} for {request}", wrong[:3])
    return answer


@QUERY.check("query-version-timestamp", "Read Data from a Table (version, timestamp)")
def query_version_timestamp(t: Target) -> str:
    table = t.need("history")
    latest = t.snapshot(table)
    at_version = _versioned(t, table, {"version": latest.version}, latest.version)
    expect(
        sorted(at_version.ids) == sorted(latest.ids), "the latest snapshot's files for its own version", "other files"
    )
    try:  # a commit's version and timestamp, from a streaming query's lines
        lines = streaming_answer(t, table)[1].files
    except Failed:
        return f"version {latest.version} (timestamp not queried: the streaming query failed, see streaming-query)"
    stamped = [f for f in lines if f.timestamp is not None and f.version is not None]
    if not stamped:
        return f"version {latest.version} (timestamp not queried: no commit timestamp seen)"
    commit = stamped[0]
    assert commit.version is not None and commit.timestamp is not None
    by_version = _versioned(t, table, {"version": commit.version}, commit.version)
    by_time = _versioned(t, table, {"timestamp": _iso(commit.timestamp)}, commit.version)
    expect(
        sorted(by_time.ids) == sorted(by_version.ids),
        f"the files of version {commit.version} at its commit timestamp",
        "other files",
    )
    return f"versions {latest.version} and {commit.version}, timestamp {_iso(commit.timestamp)}"


def _hint_cases(column: str, value_type: str, values: list[str]) -> list[tuple[str, dict, Callable]]:
    col = {"op": "column", "name": column, "valueType": value_type}

    def equal(v: str) -> dict:
        return {"op": "equal", "children": [col, {"op": "literal", "value": v, "valueType": value_type}]}

    def null(pv: dict) -> bool:
        return pv.get(column) in (None, "")

    cases: list[tuple[str, dict, Callable]] = [("isNull", {"op": "isNull", "children": [col]}, null)]
    if values:
        low, high = values[0], values[-1]
        cases += [
            (f"{column} = {low}", equal(low), lambda pv: pv.get(column) == low),
            (
                f"NOT {column} = {low}",
                {"op": "not", "children": [equal(low)]},
                lambda pv: not null(pv) and pv[column] != low,
            ),
            (
                f"{column} = {low} OR {high}",
                {"op": "or", "children": [equal(low), equal(high)]},
                lambda pv: pv.get(column) in (low, high),
            ),
        ]
    return cases


def _kept(base: Answer, answer: Answer, matches: Callable, what: str) -> str:
    ids = set(answer.ids)
    wanted = [f for f in base.files if matches(f.partition_values)]
    dropped = [f.partition_values for f in wanted if f.id not in ids]
    expect(
        not dropped, f"every file matching {what} kept", f"{len(dropped)} of {len(wanted)} dropped, e.g. {dropped[:1]}"
    )
    strangers = ids - set(base.ids)
    expect(not strangers, f"only files of the unfiltered answer for {what}", f"{len(strangers)} other file(s)")
    return f"{len(ids)}/{len(base.files)}"


def _sql_literal(value: str, schema_type: str) -> str:
    return (
        value
        if schema_type in ("integer", "short", "byte", "long", "boolean")
        else "'" + value.replace("'", "''") + "'"
    )


@QUERY.check("predicate-hints", "JSON Predicates for Filtering; SQL Expressions for Filtering")
def predicate_hints(t: Target) -> str:
    table = t.need("partitioned")
    base = t.snapshot(table)
    if not base.files:
        raise Skipped(f"the partitioned table {table.ref} has no file")
    column = next(c for c in table.partition_columns if str(table.fields.get(c)) in HINT_TYPES)
    schema_type = str(table.fields[column])
    values = sorted({v for f in base.files if (v := f.partition_values.get(column)) not in (None, "")})
    kept = []
    for what, tree, matches in _hint_cases(column, HINT_TYPES[schema_type], values):
        answer = _post(t, table, {"jsonPredicateHints": orjson.dumps(tree).decode()}, f"POST .../query (hint {what})")
        kept.append(f"{what}: {_kept(base, answer, matches, what)}")
    if values:
        sql = f"{column} = {_sql_literal(values[0], schema_type)}"
        answer = _post(t, table, {"predicateHints": [sql]}, f"POST .../query (predicateHints {sql})")
        kept.append(f"SQL {sql}: {_kept(base, answer, lambda pv: pv.get(column) == values[0], sql)}")
    return f"{table.ref}, files kept: " + "; ".join(kept)


@QUERY.check("limit-hint", "Read Data from a Table (limitHint)")
def limit_hint(t: Target) -> str:
    table = t.need("files")
    base = t.snapshot(table)
    answer = _post(t, table, {"limitHint": 1}, "POST .../query {limitHint: 1}")
    strangers = set(answer.ids) - set(base.ids)
    expect(not strangers, "only files of the unlimited answer for limitHint 1", f"{len(strangers)} other file(s)")
    counts = [f.num_records for f in base.files]
    has_rows = any(c is None or c > 0 for c in counts)
    if has_rows:
        rows = [f.num_records for f in answer.files]
        enough = bool(answer.files) and (None in rows or sum(r or 0 for r in rows) >= 1)
        expect(
            enough,
            "files holding at least 1 row for limitHint 1 (the table has rows)",
            f"{len(rows)} file(s), rows {rows[:5]}",
        )
    return f"{len(answer.files)} of {len(base.files)} file(s)"


@QUERY.check("query-paging", "Support Pagination in QueryTable and QueryTableChanges APIs (maxFiles, pageToken)")
def query_paging(t: Target) -> str:
    table = t.need("pages")
    base = t.snapshot(table)
    size = max(1, len(base.files) // 4)
    seen: list[str] = []
    pages: list[Answer] = []
    token: str | None = None
    while True:
        request = f"POST .../query page {len(pages) + 1} (maxFiles {size})"
        answer = _post(t, table, {"maxFiles": size, **({"pageToken": token} if token else {})}, request)
        if not pages and answer.end_stream is None and len(answer.files) == len(base.files):
            raise Skipped("the server does not page /query (it answered maxFiles with every file, no endStreamAction)")
        pages.append(answer)
        _check_page(answer, pages[0], size, request)
        seen += answer.ids
        token = (answer.end_stream or {}).get("nextPageToken")
        if not token:
            break
        expect(len(pages) <= len(base.files) + 1, "the pages to end", f"{len(pages)} pages and still a nextPageToken")
    repeated = [i for i, n in Counter(seen).items() if n > 1]
    expect(not repeated, "each file on one page only", f"{len(repeated)} file(s) on two pages")
    missing, extra = set(base.ids) - set(seen), set(seen) - set(base.ids)
    expect(
        not missing and not extra,
        "the pages to hold exactly the unpaged answer's files",
        f"{len(missing)} missing, {len(extra)} extra",
    )
    return f"{table.ref}: {len(base.files)} files in {len(pages)} pages of at most {size}"


def _check_page(answer: Answer, first: Answer, size: int, request: str) -> None:
    expect(answer.end_stream is not None, f"an endStreamAction as the last line of {request}", "none")
    expect(len(answer.files) <= size, f"at most maxFiles={size} files on {request}", len(answer.files))
    same_header = answer.header_lines == first.header_lines
    expect(same_header, f"the first page's protocol and metaData lines on {request}", "other lines")
    expect(answer.version == first.version, f"the first page's Delta-Table-Version on {request}", answer.version)


@QUERY.check("refresh-token", "EndStreamAction (includeRefreshToken, refreshToken)")
def refresh_token(t: Target) -> str:
    table = t.need("files")
    first = _post(t, table, {"includeRefreshToken": True}, "POST .../query {includeRefreshToken: true}")
    token = (first.end_stream or {}).get("refreshToken")
    expect(first.end_stream is not None, "an endStreamAction as the last line when includeRefreshToken is true", "none")
    expect(token, "endStreamAction.refreshToken when includeRefreshToken is true", first.end_stream)
    again = _post(
        t, table, {"includeRefreshToken": True, "refreshToken": token}, "POST .../query with the refreshToken"
    )
    expect(
        sorted(again.ids) == sorted(first.ids),
        "the same files when refreshed",
        f"{len(again.ids)} vs {len(first.ids)} file(s)",
    )
    expect(again.version == first.version, "the same Delta-Table-Version when refreshed", again.version)
    return f"{len(again.ids)} file(s) refreshed"


@QUERY.check("end-stream-action", "EndStreamAction")
def end_stream_action(t: Target) -> None:
    table = t.need("files")
    request = "POST .../query with includeendstreamaction=true"
    answer = _post(t, table, {}, request, {CAPABILITIES: "responseformat=parquet;includeendstreamaction=true"})
    expect(answer.end_stream is not None, f"an endStreamAction as the last line of {request}", "none")
    least = (answer.end_stream or {}).get("minUrlExpirationTimestamp")
    expirations = [f.expiration for f in answer.files]
    if least is not None and expirations and None not in expirations:
        expect(
            least == min(e for e in expirations if e is not None),
            "minUrlExpirationTimestamp: the least expirationTimestamp",
            least,
        )
