"""The checks of change data feeds (GET /changes), streaming queries (POST /query with
startingVersion) and the file URLs the server hands out."""

from __future__ import annotations

from collections import Counter

from deltaport.conformance import files
from deltaport.conformance.discovery import TableInfo, Target
from deltaport.conformance.registry import Checks
from deltaport.conformance.shapes import (
    CAPABILITIES,
    CHANGES,
    DELTA,
    PARQUET,
    STREAMING,
    Answer,
    expect_partition_keys,
    format_named,
    read_answer,
)
from deltaport.conformance.wire import Skipped, expect

FEED = Checks()


# --- change data feed and streaming -----------------------------------------------------------------


def _in_order(answer: Answer, start: int, request: str) -> str:
    versions = [f.version or 0 for f in answer.files]
    expect(all(v >= start for v in versions), f"versions from {start} on in {request}", sorted(set(versions))[:5])
    expect(versions == sorted(versions), f"lines in version order in {request}", versions[:10])
    stamps: dict[int, set] = {}
    for f in answer.files:
        stamps.setdefault(f.version or 0, set()).add(f.timestamp)
    split = {v: s for v, s in stamps.items() if len(s) > 1}
    expect(not split, f"one timestamp per version in {request}", split)
    kinds = Counter(f.kind for f in answer.files)
    if answer.later_headers:
        kinds["later protocol/metaData"] = answer.later_headers
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no file line"


def _changes(t: Target, table: TableInfo, fmt: str) -> tuple[int, Answer]:
    start = t.change_starts[table.ref]

    def read() -> Answer:
        request = f"GET .../changes?startingVersion={start} ({fmt} format)"
        resp = t.wire.get(
            table.ref.path + "/changes",
            params={"startingVersion": start},
            headers={CAPABILITIES: f"responseformat={fmt}"},
        )
        return read_answer(resp, request, CHANGES)

    return start, t.memo(("changes", table.ref, fmt), read)


def streaming_answer(t: Target, table: TableInfo) -> tuple[int, Answer]:
    """A streaming query of the table (POST /query with startingVersion) from up to 10 versions
    back, or from its latest version if the server refuses that start; read once."""

    def read() -> tuple[int, Answer]:
        *earlier, last = dict.fromkeys((max(0, table.version - 10), table.version))
        for start in [*earlier, last]:
            resp = t.wire.post(table.ref.path + "/query", body={"startingVersion": start})
            if resp.status_code == 200 or start == last:
                return start, read_answer(resp, f"POST .../query {{startingVersion: {start}}}", STREAMING)
        raise AssertionError("the last start always returns")

    return t.memo(("streaming", table.ref), read)


@FEED.check("changes-parquet", "Data Change File Actions (QueryTableChanges)")
def changes_parquet(t: Target) -> str:
    table = t.need("changes")
    start, answer = _changes(t, table, PARQUET)
    request = f"GET .../changes?startingVersion={start}"
    expect(answer.fmt == PARQUET, f"the parquet format's lines from {request}", answer.fmt)
    expect_partition_keys(answer, table.partition_columns, request)
    return f"{table.ref} from version {start}: {_in_order(answer, start, request)}"


@FEED.check("changes-delta", "Delta Format Responses (QueryTableChanges)")
def changes_delta(t: Target) -> str:
    table = t.need("changes")
    start, answer = _changes(t, table, DELTA)
    _, parquet = _changes(t, table, PARQUET)
    request = f"GET .../changes?startingVersion={start} with responseformat=delta"
    expect(answer.fmt == DELTA, f"the delta format's lines from {request}", "parquet-format lines")
    expect(
        format_named(answer.capabilities) == DELTA,
        f"delta-sharing-capabilities naming delta on {request}",
        answer.capabilities,
    )
    summary = _in_order(answer, start, request)
    mine, theirs = (
        Counter((f.kind, f.version) for f in answer.files),
        Counter((f.kind, f.version) for f in parquet.files),
    )
    expect(
        mine == theirs,
        "the actions of the parquet format's answer (kind and version)",
        f"{dict(mine)} vs {dict(theirs)}",
    )
    return summary


@FEED.check("cdf-change-types", "Data Change File Actions (cdf: _change_type)")
def cdf_change_types(t: Target) -> str:
    table = t.need("changes")
    start, answer = _changes(t, table, PARQUET)
    cdf = [f for f in answer.files if f.kind == "cdf"]
    if not cdf:
        raise Skipped(f"the change feed of {table.ref} from version {start} has no cdf file (only add and remove)")
    return files.check_change_types(t.wire, cdf)


@FEED.check("streaming-query", "Data Change File Actions (query with startingVersion)")
def streaming_query(t: Target) -> str:
    table = t.need("history")
    start, answer = streaming_answer(t, table)
    request = f"POST .../query {{startingVersion: {start}}}"
    return f"{table.ref} from version {start}: {_in_order(answer, start, request)}"


# --- file URLs ------------------------------------------------------------------------------------


@FEED.check("file-url-get", "File (url)")
def file_url_get(t: Target) -> str:
    return files.check_get(t.wire, files.smallest(t.snapshot(t.need("files"))))


@FEED.check("file-url-range", "File (url, Range)")
def file_url_range(t: Target) -> None:
    files.check_range(t.wire, files.smallest(t.snapshot(t.need("files"))))


@FEED.check("file-url-altered", "File (url: an altered URL is refused)")
def file_url_altered(t: Target) -> str:
    return files.check_altered(t.wire, files.smallest(t.snapshot(t.need("files"))))
