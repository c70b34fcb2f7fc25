"""The shapes of the protocol's NDJSON answers, read and checked line by line.

An answer is a protocol line, a metaData line, then action lines, and an optional endStreamAction
last ("Table Metadata Format", "Parquet Format Responses", "Delta Format Responses"). Reading one
checks every required field's type and normalises file lines of both formats to :class:`FileLine`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from deltaport.conformance.wire import Failed, expect, ndjson, redact, version_header

PARQUET = "parquet"
DELTA = "delta"
CAPABILITIES = "delta-sharing-capabilities"

#: File line kinds of each answer: a snapshot has ``file`` lines; a streaming query (startingVersion)
#: ``add`` and ``remove``; a change data feed ``add``, ``remove`` and ``cdf``.
SNAPSHOT = ("file",)
STREAMING = ("add", "remove")
CHANGES = ("add", "remove", "cdf")
_DELTA_KINDS = {"add": "add", "remove": "remove", "cdc": "cdf"}


@dataclass(frozen=True)
class FileLine:
    """One file of an answer, whatever the format (``kind`` in the parquet format's words)."""

    kind: str
    id: str
    url: str
    size: int
    partition_values: dict[str, Any]
    stats: dict[str, Any] | None
    expiration: int | None
    version: int | None
    timestamp: int | None

    @property
    def num_records(self) -> int | None:
        count = (self.stats or {}).get("numRecords")
        return count if isinstance(count, int) and not isinstance(count, bool) else None


@dataclass
class Answer:
    """An NDJSON table answer: its version header, format, header lines and files."""

    version: int
    fmt: str
    protocol: dict[str, Any]
    metadata: dict[str, Any]  # the metaData object (parquet) or its deltaMetadata (delta)
    header_lines: tuple[bytes, bytes]  # the protocol and metaData lines as sent, to compare pages
    files: list[FileLine] = field(default_factory=list)
    later_headers: int = 0  # protocol and metaData lines after the first two (changes, streaming)
    end_stream: dict[str, Any] | None = None
    capabilities: str | None = None

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.files]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_key(line: dict[str, Any], number: int, request: str) -> str:
    expect(
        len(line) == 1, f"each line of {request} to hold exactly one action", f"line {number} with keys {list(line)}"
    )
    return next(iter(line))


def _check_protocol(body: Any, fmt: str, where: str) -> dict[str, Any]:
    expect(isinstance(body, dict), f"a protocol object {where}", body)
    if fmt == DELTA:
        inner = body.get("deltaProtocol")
        expect(isinstance(inner, dict), f"protocol.deltaProtocol {where}", body)
        for key in ("minReaderVersion", "minWriterVersion"):
            expect(_is_int(inner.get(key)), f"deltaProtocol.{key} to be an integer {where}", inner)
        return inner
    expect(body.get("minReaderVersion") == 1, f"protocol.minReaderVersion 1 (parquet format) {where}", body)
    return body


def check_metadata(body: Any, fmt: str, where: str) -> dict[str, Any]:
    """The metaData object of either format (the deltaMetadata in the delta format), checked."""
    expect(isinstance(body, dict), f"a metaData object {where}", body)
    inner = body
    if fmt == DELTA:
        inner = body.get("deltaMetadata")
        expect(isinstance(inner, dict), f"metaData.deltaMetadata {where}", lambda: list(body))
    if "version" in body:
        expect(_is_int(body["version"]), f"metaData.version to be an integer {where}", body["version"])
    expect(isinstance(inner.get("id"), str) and inner["id"], f"metaData id to be a non-empty string {where}", inner)
    provider = (inner.get("format") or {}).get("provider") if isinstance(inner.get("format"), dict) else None
    expect(isinstance(provider, str), f"metaData format.provider to be a string {where}", inner.get("format"))
    columns = inner.get("partitionColumns")
    expect(
        isinstance(columns, list) and all(isinstance(c, str) for c in columns),
        f"metaData partitionColumns to be an array of names {where}",
        columns,
    )
    fields = schema_fields(inner.get("schemaString"), where)
    missing = [c for c in columns if c not in fields]
    expect(not missing, f"partition columns among the schema's fields {where}", f"{missing} not in {list(fields)}")
    return inner


def schema_fields(schema_string: Any, where: str) -> dict[str, Any]:
    """Top-level field name → type of a ``schemaString`` (a JSON struct, serialised)."""
    expect(isinstance(schema_string, str), f"metaData schemaString to be a string {where}", schema_string)
    try:
        schema = orjson.loads(schema_string)
    except orjson.JSONDecodeError:
        raise Failed(f"schemaString to be JSON {where}", schema_string[:120]) from None
    expect(
        isinstance(schema, dict) and schema.get("type") == "struct" and isinstance(schema.get("fields"), list),
        f'schemaString to be a {{"type": "struct", "fields": [...]}} {where}',
        schema_string[:120],
    )
    out = {}
    for f in schema["fields"]:
        expect(isinstance(f, dict) and isinstance(f.get("name"), str), f"named schema fields {where}", f)
        out[f["name"]] = f.get("type")
    return out


def _stats(raw: Any, where: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    expect(isinstance(raw, str), f"stats to be a JSON string (serialised) {where}", type(raw).__name__)
    try:
        stats = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Failed(f"stats to be serialised JSON {where}", raw[:120]) from None
    expect(isinstance(stats, dict), f"stats to be a JSON object {where}", raw[:120])
    return stats


def _file_fields(body: dict[str, Any], url_key: str, where: str) -> tuple[str, int, dict[str, Any]]:
    url, size, values = body.get(url_key), body.get("size"), body.get("partitionValues")
    if not (isinstance(url, str) and url):
        raise Failed(f"{url_key} to be a non-empty string {where}", redact(str(url)))
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise Failed(f"size to be a whole number of bytes {where}", str(size))
    if not isinstance(values, dict):
        raise Failed(f"partitionValues to be an object {where}", str(values))
    bad = {k: v for k, v in values.items() if not (v is None or isinstance(v, str))}
    expect(not bad, f"partition values to be strings (or null) {where}", bad)
    return url, size, values


def _optional_ints(body: dict[str, Any], keys: Iterable[str], where: str) -> list[int | None]:
    out = []
    for key in keys:
        value = body.get(key)
        expect(value is None or _is_int(value), f"{key} to be an integer when present {where}", value)
        out.append(value)
    return out


def parquet_file(kind: str, body: Any, where: str) -> FileLine:
    """A ``file``, ``add``, ``remove`` or ``cdf`` line of the parquet format."""
    expect(isinstance(body, dict), f"a {kind} object {where}", body)
    expect(
        isinstance(body.get("id"), str) and body["id"], f"{kind}.id to be a non-empty string {where}", body.get("id")
    )
    url, size, values = _file_fields(body, "url", where)
    expiration, version, timestamp = _optional_ints(body, ("expirationTimestamp", "version", "timestamp"), where)
    if kind != "file":
        expect(
            version is not None and timestamp is not None,
            f"{kind} lines to carry version and timestamp {where}",
            body.keys(),
        )
    return FileLine(
        kind, body["id"], url, size, values, _stats(body.get("stats"), where), expiration, version, timestamp
    )


def delta_file(body: Any, where: str, *, changes: bool) -> FileLine:
    """A ``file`` line of the delta format: a Delta single action whose path is the URL."""
    expect(isinstance(body, dict), f"a file object {where}", body)
    expect(isinstance(body.get("id"), str) and body["id"], f"file.id to be a non-empty string {where}", body.get("id"))
    single = body.get("deltaSingleAction")
    expect(isinstance(single, dict) and len(single) == 1, f"file.deltaSingleAction with one action {where}", single)
    name, action = next(iter(single.items()))
    allowed = ("add", "remove", "cdc") if changes else ("add",)
    expect(name in allowed, f"deltaSingleAction to be one of {', '.join(allowed)} {where}", name)
    expect(isinstance(action, dict), f"deltaSingleAction.{name} to be an object {where}", action)
    url, size, values = _file_fields(action, "path", where)
    expiration, version, timestamp = _optional_ints(body, ("expirationTimestamp", "version", "timestamp"), where)
    if changes:
        expect(
            version is not None and timestamp is not None,
            f"change lines to carry version and timestamp {where}",
            body.keys(),
        )
    kind = _DELTA_KINDS[name] if changes else "file"
    return FileLine(
        kind, body["id"], url, size, values, _stats(action.get("stats"), where), expiration, version, timestamp
    )


def read_answer(resp: httpx.Response, request: str, kinds: tuple[str, ...] = SNAPSHOT) -> Answer:
    """An NDJSON table answer, every line checked: protocol, metaData, ``kinds`` file lines (protocol
    and metaData lines may recur in a change answer), endStreamAction only last."""
    version = version_header(resp, request)
    lines = ndjson(resp, request)
    expect(len(lines) >= 2, f"a protocol and a metaData line from {request}", f"{len(lines)} line(s)")
    expect(_one_key(lines[0], 1, request) == "protocol", f"a protocol line first from {request}", list(lines[0]))
    fmt = DELTA if isinstance(lines[0]["protocol"], dict) and "deltaProtocol" in lines[0]["protocol"] else PARQUET
    where = f"in {request}"
    protocol = _check_protocol(lines[0]["protocol"], fmt, where)
    expect(_one_key(lines[1], 2, request) == "metaData", f"a metaData line second from {request}", list(lines[1]))
    metadata = check_metadata(lines[1]["metaData"], fmt, where)
    answer = Answer(version, fmt, protocol, metadata, (orjson.dumps(lines[0]), orjson.dumps(lines[1])))
    answer.capabilities = resp.headers.get(CAPABILITIES)
    changes = kinds != SNAPSHOT
    for number, line in enumerate(lines[2:], 3):
        key = _one_key(line, number, request)
        here = f"on line {number} of {request}"
        if key == "endStreamAction":
            expect(number == len(lines), f"endStreamAction only as the last line of {request}", f"line {number}")
            answer.end_stream = _end_stream(line[key], here)
        elif changes and key in ("protocol", "metaData"):
            _check_protocol(line[key], fmt, here) if key == "protocol" else check_metadata(line[key], fmt, here)
            answer.later_headers += 1
        elif fmt == PARQUET and key in kinds:
            answer.files.append(parquet_file(key, line[key], here))
        elif fmt == DELTA and key == "file":
            answer.files.append(delta_file(line[key], here, changes=changes))
        else:
            raise Failed(
                f"only {', '.join(kinds)} lines after the header of {request} ({fmt} format)", f"a {key} line {here}"
            )
    return answer


def _end_stream(body: Any, where: str) -> dict[str, Any]:
    expect(isinstance(body, dict), f"endStreamAction to be an object {where}", body)
    for key in ("refreshToken", "nextPageToken", "errorMessage"):
        expect(
            body.get(key) is None or isinstance(body[key], str),
            f"endStreamAction.{key} to be a string {where}",
            body.get(key),
        )
    _optional_ints(body, ("minUrlExpirationTimestamp",), where)
    expect(not body.get("errorMessage"), f"no endStreamAction.errorMessage {where}", lambda: body["errorMessage"][:200])
    return body


def expect_unique_ids(answer: Answer, request: str) -> None:
    repeated = [i for i, n in Counter(answer.ids).items() if n > 1]
    expect(not repeated, f"a distinct id for each file of {request}", f"{len(repeated)} id(s) repeated")


def expect_partition_keys(answer: Answer, columns: list[str], request: str) -> None:
    wanted = set(columns)
    wrong = [f.partition_values for f in answer.files if set(f.partition_values) != wanted]
    expect(not wrong, f"partitionValues keyed by the partition columns {sorted(wanted)} in {request}", wrong[:2])


def format_named(capabilities: str | None) -> str | None:
    """The ``responseformat`` a ``delta-sharing-capabilities`` response header names (None if none)."""
    for part in (capabilities or "").lower().split(";"):
        key, _, value = part.partition("=")
        if key.strip() == "responseformat":
            return value.strip()
    return None
