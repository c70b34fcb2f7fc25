"""What the server shares, found through the profile alone, and which table each check uses.

Discovery only gathers: it never judges. A table whose metadata cannot be read in the default
(parquet) format is left out; a table answered with a malformed metadata response is remembered for
the metadata check to report. Each role (a table with files, a partitioned one, one with history,
one with a change data feed, one with enough files to page) is probed lazily, with few requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from deltaport.conformance.shapes import Answer, read_answer, schema_fields
from deltaport.conformance.wire import Failed, Skipped, Wire, expect, json_object, table_path

#: At most this many tables are probed (their metadata read); the rest are listed only.
MAX_TABLES = 40
#: Probes per role (history, change feed, files) before giving up on finding one.
MAX_PROBES = 12
#: Partition column types a JSON predicate can name (schema type -> the hint's valueType).
HINT_TYPES = {
    "string": "string",
    "integer": "int",
    "short": "int",
    "byte": "int",
    "long": "long",
    "date": "date",
    "boolean": "bool",
}


@dataclass(frozen=True)
class TableRef:
    share: str
    schema: str
    name: str

    @property
    def path(self) -> str:
        return table_path(self.share, self.schema, self.name)

    def __str__(self) -> str:
        return f"{self.share}.{self.schema}.{self.name}"


@dataclass(frozen=True)
class TableInfo:
    """A table whose metadata the server answered in the default format."""

    ref: TableRef
    version: int
    metadata: dict[str, Any]
    fields: dict[str, Any]

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.get("partitionColumns") or [])

    @property
    def num_files(self) -> int | None:
        n = self.metadata.get("numFiles")
        return n if isinstance(n, int) and not isinstance(n, bool) else None

    @property
    def says_change_feed(self) -> bool:
        conf = self.metadata.get("configuration") or {}
        return "true" in (
            str(conf.get("enableChangeDataFeed")).lower(),
            str(conf.get("delta.enableChangeDataFeed")).lower(),
        )


@dataclass
class Discovery:
    shares: list[str] = field(default_factory=list)
    tables: list[TableRef] = field(default_factory=list)
    readable: list[TableInfo] = field(default_factory=list)
    malformed: list[tuple[TableRef, str]] = field(default_factory=list)  # metadata answered 200, but wrong
    problem: str | None = None  # why nothing could be discovered


def list_items(wire: Wire, path: str, *, max_results: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Every item of a listing endpoint, following nextPageToken: (items, pages). Each page is
    checked: JSON object, ``items`` an array of objects (or missing), at most ``max_results`` of them."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    pages = 0
    while True:
        params = {k: v for k, v in (("maxResults", max_results), ("pageToken", token)) if v is not None}
        body = json_object(wire.get(path, params=params), f"GET {path}")
        page = body.get("items", [])
        expect(
            isinstance(page, list) and all(isinstance(i, dict) for i in page),
            f"items to be an array of objects from GET {path}",
            page,
        )
        if max_results is not None:
            expect(
                len(page) <= max_results,
                f"at most maxResults={max_results} items per page of GET {path}",
                f"{len(page)} items",
            )
        items.extend(page)
        pages += 1
        token = body.get("nextPageToken")
        expect(token is None or isinstance(token, str), f"nextPageToken to be a string from GET {path}", token)
        if not token:
            return items, pages
        expect(pages < 10_000, f"GET {path} to end its pages", "10000 pages and still a nextPageToken")


def item_names(items: list[dict[str, Any]], path: str) -> list[str]:
    """The names of a listing's items, each a non-empty string."""
    names = [i.get("name") for i in items]
    expect(all(isinstance(n, str) and n for n in names), f"every item of GET {path} to have a name", names)
    return [n for n in names if isinstance(n, str)]


def discover(wire: Wire, share: str | None = None) -> Discovery:
    """The shares (or just ``share``), their tables, and the metadata of up to :data:`MAX_TABLES`."""
    found = Discovery()
    try:
        found.shares = [share] if share else item_names(list_items(wire, "/shares")[0], "/shares")
        for s in found.shares:
            path = f"/shares/{_quote(s)}/schemas"
            for schema in item_names(list_items(wire, path)[0], path):
                tpath = f"{path}/{_quote(schema)}/tables"
                found.tables += [TableRef(s, schema, t) for t in item_names(list_items(wire, tpath)[0], tpath)]
    except (Failed, httpx.HTTPError) as exc:
        found.problem = f"listing the shared tables failed: {exc}"
        return found
    for ref in found.tables[:MAX_TABLES]:
        _probe_metadata(wire, ref, found)
    if not found.tables:
        found.problem = "the profile's shares hold no table"
    elif not found.readable:
        found.problem = "no shared table's metadata could be read in the default (parquet) format"
    return found


def _quote(name: str) -> str:
    return quote(name, safe="")


def _probe_metadata(wire: Wire, ref: TableRef, found: Discovery) -> None:
    resp = wire.get(ref.path + "/metadata")
    if resp.status_code != 200:
        return  # e.g. a table that needs the delta format: not one the parquet-format checks can use
    request = f"GET .../{ref.name}/metadata"
    try:
        answer = read_answer(resp, request)
        expect(
            not answer.files and answer.end_stream is None,
            f"only a protocol and a metaData line from {request}",
            "more lines",
        )
        found.readable.append(
            TableInfo(ref, answer.version, answer.metadata, schema_fields(answer.metadata["schemaString"], ""))
        )
    except Failed as exc:
        found.malformed.append((ref, str(exc)))


class Target:
    """What the checks run against: the wire, what discovery found, and each role's table, probed
    once on first use. Answers several checks read (a table's full file list) are kept."""

    def __init__(self, wire: Wire, found: Discovery) -> None:
        self.wire = wire
        self.found = found
        self._roles: dict[str, TableInfo | None] = {}
        self._reasons: dict[str, str] = {}
        self._memo: dict[Any, Any] = {}
        self.change_starts: dict[TableRef, int] = {}

    def need(self, role: str) -> TableInfo:
        """The table for ``role`` (``readable``, ``files``, ``partitioned``, ``history``, ``changes``, ``pages``), or
        :class:`Skipped` saying why there is none."""
        if role not in self._roles:
            self._roles[role] = self._find(role)
        table = self._roles[role]
        if table is None:
            raise Skipped(self.found.problem or self._reasons[role])
        return table

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, made once per ``key`` (a failure is not kept: the next check asks again)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def snapshot(self, table: TableInfo) -> Answer:
        """The table's latest snapshot in the parquet format (POST /query with ``{}``), read once."""

        def read() -> Answer:
            return read_answer(self.wire.post(table.ref.path + "/query", body={}), "POST .../query {}")

        return self.memo(("snapshot", table.ref), read)

    def _find(self, role: str) -> TableInfo | None:
        finders: dict[str, tuple[Callable[[], TableInfo | None], str]] = {
            "readable": (lambda: next(iter(self.found.readable), None), "no shared table's metadata could be read"),
            "files": (lambda: self._with_files(1), "no shared table has a file"),
            "pages": (lambda: self._with_files(3), "no shared table has 3 or more files to page"),
            "partitioned": (
                self._partitioned,
                "no shared table with files is partitioned by a string, integer, long, date or boolean column",
            ),
            "history": (self._history, "no table with history is shared (none accepted GET .../metadata?version=)"),
            "changes": (self._changes, "no table with a change data feed is shared (GET .../changes failed on each)"),
        }
        find, reason = finders[role]
        table = find()
        probed = min(len(self.found.tables), MAX_TABLES)
        self._reasons[role] = reason + (
            f" (probed {probed} of {len(self.found.tables)} tables)" if probed < len(self.found.tables) else ""
        )
        return table

    def _file_count(self, table: TableInfo) -> int:
        """How many files the table has, at least (a first page of 2 with more counts as 3)."""
        if table.num_files is not None:
            return table.num_files

        def probe() -> int:
            resp = self.wire.post(table.ref.path + "/query", body={"maxFiles": 2})
            try:
                answer = read_answer(resp, "POST .../query {maxFiles: 2}")
            except Failed:
                return 0
            return len(answer.files) + (1 if (answer.end_stream or {}).get("nextPageToken") else 0)

        return self.memo(("file count", table.ref), probe)

    def _with_files(self, at_least: int) -> TableInfo | None:
        probes = 0
        for table in self.found.readable:
            if table.num_files is None:
                probes += 1
                if probes > MAX_PROBES:
                    return None
            if self._file_count(table) >= at_least:
                return table
        return None

    def _partitioned(self) -> TableInfo | None:
        for table in self.found.readable:
            hintable = [c for c in table.partition_columns if HINT_TYPES.get(str(table.fields.get(c))) is not None]
            if hintable and (table.num_files is None or table.num_files > 0):
                return table
        return None

    def _candidates(self) -> list[TableInfo]:
        """Readable tables, those whose metadata says they record a change data feed first."""
        return sorted(self.found.readable, key=lambda t: not t.says_change_feed)[:MAX_PROBES]

    def _history(self) -> TableInfo | None:
        for table in self._candidates():
            resp = self.wire.get(table.ref.path + "/metadata", params={"version": table.version})
            if resp.status_code == 200:
                return table
        return None

    def _changes(self) -> TableInfo | None:
        for table in self._candidates():
            for start in dict.fromkeys((max(0, table.version - 10), table.version)):
                resp = self.wire.get(table.ref.path + "/changes", params={"startingVersion": start})
                if resp.status_code == 200:
                    self.change_starts[table.ref] = start
                    return table
        return None
