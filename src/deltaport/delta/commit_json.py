"""Read newline-delimited JSON action files (commits, v2 checkpoints) into Arrow, columnar.

Fast path: Arrow's JSON reader with an explicit schema (it cannot read JSON objects as maps, and
its inference turns date-like strings into timestamps, so partition values are declared as a
struct of the partition columns and tag keys are harvested first). Non-file actions are found by
their key and parsed on their own. Any line the fast path cannot take sends the whole file to a
per-line parser, which is exact and names the offending line.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltaport.delta.actions import (
    FILE_FIELDS,
    TAGS_TYPE,
    CommitInfo,
    Metadata,
    Protocol,
    file_schema,
    partition_values_type,
)
from deltaport.delta.arrow_util import binary_array, empty_table, np_array, np_bool_array
from deltaport.errors import CorruptLog

FILE_KINDS = ("add", "remove", "cdc")
OTHER_KINDS = ("metaData", "protocol", "commitInfo", "txn", "domainMetadata", "checkpointMetadata", "sidecar")
_OTHER_KEYS = tuple(f'"{k}"'.encode() for k in OTHER_KINDS)

_TAGS_RE = re.compile(rb'"tags"\s*:\s*\{([^{}]*)\}(.)', re.S)
_KEY_RE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:')


@dataclass
class ActionFile:
    """The actions of one JSON action file, file actions as Arrow tables."""

    adds: pa.Table
    removes: pa.Table
    cdcs: pa.Table
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    commit_info: CommitInfo | None = None
    txns: list[dict[str, Any]] = field(default_factory=list)
    domain_metadata: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_metadata: dict[str, Any] | None = None
    sidecars: list[dict[str, Any]] = field(default_factory=list)


def empty_file_table(kind: str, pv_columns: list[str]) -> pa.Table:
    """A table of ``kind`` file actions without rows (shared: Arrow tables are immutable)."""
    return _empty_file_table(kind, tuple(pv_columns))


@functools.lru_cache(maxsize=256)
def _empty_file_table(kind: str, pv_columns: tuple[str, ...]) -> pa.Table:
    return empty_table(file_schema(kind, list(pv_columns)))


def _harvest_tag_keys(data: bytes) -> list[str] | None:
    """Every key used in a ``tags`` object, or None when the text is too irregular to trust."""
    found = _TAGS_RE.findall(data)
    if not found:
        return []
    if any(after not in (b",", b"}", b" ", b"\n", b"\r", b"\t") for _, after in found):
        return None  # a '}' inside a tag value: let the exact parser handle it
    keys = set(_KEY_RE.findall(b",".join(body for body, _ in found)))
    try:
        return sorted(orjson.loads(b'"' + k + b'"') for k in keys)
    except orjson.JSONDecodeError:
        return None


_FIRST_KEY = r'^\s*\{\s*"(?P<kind>[A-Za-z]+)"\s*:'


def _kinds_present(data: bytes) -> set[str]:
    """The action kinds of a file's lines: each line is one action, its only key first.

    When a non-blank line does not start with a key, every kind is assumed present.
    """
    lines = pc.split_pattern(binary_array(data), b"\n").values
    keys = pc.extract_regex(lines, _FIRST_KEY).flatten()[0]
    if keys.null_count:
        blank = pc.match_substring_regex(lines, r"^\s*$")
        if pc.any(pc.and_(pc.is_null(keys), pc.invert(blank))).as_py():
            return set(FILE_KINDS + OTHER_KINDS)
    return {k.decode() for k in pc.unique(keys.drop_null()).to_pylist()}


def _json_read_schema(pv_columns: list[str], tag_keys: list[str], kinds: set[str]) -> pa.Schema:
    """The reader's schema, with columns only for the kinds in ``kinds``: every declared column
    costs the reader a builder per row, present or not."""
    tags_struct = pa.struct([(k, pa.string()) for k in tag_keys])
    pv = partition_values_type(pv_columns)
    columns = []
    for kind in FILE_KINDS:
        if kind in kinds or kind == "add":
            fields = [(n, tags_struct if n == "tags" else t) for n, t in FILE_FIELDS[kind](pv)]
            columns.append((kind, pa.struct(fields)))
    # non-file actions: empty structs only mark the rows (lines) that hold them
    columns.extend((kind, pa.struct([])) for kind in OTHER_KINDS if kind in kinds)
    return pa.schema(columns)


def struct_to_map(arr: pa.Array) -> pa.MapArray:
    """A struct of string fields as a map<string,string>, dropping null entries."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    n = len(arr)
    names = [f.name for f in arr.type]
    k = len(names)
    struct_valid = None if arr.null_count == 0 else np.asarray(arr.is_valid())
    if k == 0 or n == 0:
        return pa.nulls(n, TAGS_TYPE)
    children = [arr.field(i).cast(pa.string()) for i in range(k)]
    values = pa.concat_arrays(children)  # column-major: j*n + i
    order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel()  # row-major
    values = values.take(np_array(order.astype(np.int64)))
    keys = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    valid = np.asarray(values.is_valid())
    if struct_valid is not None:
        valid &= np.repeat(struct_valid, k)
    counts = valid.reshape(n, k).sum(axis=1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    mask = np_bool_array(valid)
    return pa.MapArray.from_arrays(np_array(offsets), keys.filter(mask), values.filter(mask))


def _to_file_table(col: pa.ChunkedArray, kind: str, pv_columns: list[str]) -> pa.Table:
    target = file_schema(kind, pv_columns)
    valid = pc.is_valid(col)
    col = col.filter(valid).combine_chunks()
    if len(col) == 0:
        return empty_file_table(kind, pv_columns)
    arrays = []
    for f in target:
        child = col.field(f.name)
        if f.name == "tags":
            child = struct_to_map(child)
        elif child.type != f.type:
            child = child.cast(f.type)
        arrays.append(child)
    return pa.Table.from_arrays(arrays, schema=target)


def _other_actions(data: bytes, keys: tuple[bytes, ...] = _OTHER_KEYS) -> list[tuple[int, dict[str, Any]]]:
    """(line number, action) for every non-file action with one of ``keys``, parsed alone."""
    starts: set[int] = set()
    for key in keys:
        pos = data.find(key)
        while pos != -1:
            line_start = data.rfind(b"\n", 0, pos) + 1
            starts.add(line_start)
            nl = data.find(b"\n", pos)
            pos = data.find(key, nl) if nl != -1 else -1
    out = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        line = data[start : end if end != -1 else len(data)]
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _SlowPath() from None
        if isinstance(obj, dict):
            out.append((data.count(b"\n", 0, start), obj))
    return out


class _SlowPath(Exception):
    pass


def _apply_other(result: ActionFile, obj: dict[str, Any], where: str, table: str | None) -> None:
    try:
        if "metaData" in obj:
            result.metadata = Metadata.from_dict(obj["metaData"])
        elif "protocol" in obj:
            result.protocol = Protocol.from_dict(obj["protocol"])
        elif "commitInfo" in obj:
            result.commit_info = CommitInfo.from_dict(obj["commitInfo"] or {})
        elif "txn" in obj:
            result.txns.append(obj["txn"])
        elif "domainMetadata" in obj:
            result.domain_metadata.append(obj["domainMetadata"])
        elif "checkpointMetadata" in obj:
            result.checkpoint_metadata = obj["checkpointMetadata"]
        elif "sidecar" in obj:
            result.sidecars.append(obj["sidecar"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLog(f"{where}: invalid action {list(obj)[:1]}: missing or bad field {exc}", table=table) from exc


def _fast_parse(data: bytes, pv_columns: list[str], where: str, table: str | None) -> ActionFile:
    tag_keys = _harvest_tag_keys(data) if b'"tags"' in data else []
    if tag_keys is None:
        raise _SlowPath()
    schema = _json_read_schema(pv_columns, tag_keys, _kinds_present(data))
    block = 1 << 22
    while True:
        try:
            t = pj.read_json(
                io.BytesIO(data),
                read_options=pj.ReadOptions(block_size=block, use_threads=True),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
            )
            break
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block < len(data) + 1:
                block = max(block * 4, len(data) + 1)
                continue
            raise _SlowPath() from exc
    result = ActionFile(
        *(
            _to_file_table(t.column(kind), kind, pv_columns)
            if kind in t.column_names
            else empty_file_table(kind, pv_columns)
            for kind in FILE_KINDS
        )
    )
    marks = np.zeros(t.num_rows, dtype=bool)
    for kind in OTHER_KINDS:
        if kind not in t.column_names:
            continue
        col = t.column(kind)
        if col.null_count < len(col):
            marks |= np.asarray(pc.is_valid(col))
    for line_no, line in _lines_at(data, np.flatnonzero(marks)):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise _SlowPath() from None
        _apply_other(result, obj, f"{where} line {line_no}", table)
    return result


def _lines_at(data: bytes, rows: np.ndarray) -> list[tuple[int, bytes]]:
    """(1-based line number, text) of the given rows, a row being a non-blank line."""
    out: list[tuple[int, bytes]] = []
    if len(rows) == 0:
        return out
    wanted = iter(rows.tolist())
    target = next(wanted)
    row = line_no = 0
    pos, end = 0, len(data)
    while pos < end:
        nl = data.find(b"\n", pos)
        stop = end if nl == -1 else nl
        line_no += 1
        line = data[pos:stop]
        if line.strip():
            if row == target:
                out.append((line_no, line))
                target = next(wanted, None)
                if target is None:
                    break
            row += 1
        pos = stop + 1
    return out


def _slow_parse(data: bytes, pv_columns: list[str], where: str, table: str | None) -> ActionFile:
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in FILE_KINDS}
    others: list[tuple[int, dict[str, Any]]] = []
    lines = data.split(b"\n")
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            what = "truncated" if i == len(lines) and not data.endswith(b"\n") else "invalid"
            raise CorruptLog(f"{where} line {i}: {what} JSON ({exc})", table=table) from exc
        if not isinstance(obj, dict):
            raise CorruptLog(f"{where} line {i}: an action must be a JSON object", table=table)
        for kind in FILE_KINDS:
            if kind in obj:
                action = obj[kind]
                if not isinstance(action, dict) or not isinstance(action.get("path"), str):
                    raise CorruptLog(f"{where} line {i}: {kind} action without a path", table=table)
                rows[kind].append(_normalise_file_action(action, pv_columns))
                break
        else:
            others.append((i, obj))
    pv = partition_values_type(pv_columns)
    tables = []
    for kind in FILE_KINDS:
        schema = pa.schema(FILE_FIELDS[kind](pv))
        try:
            tables.append(pa.Table.from_pylist(rows[kind], schema=schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise CorruptLog(f"{where}: {kind} action with a field of the wrong type ({exc})", table=table) from exc
    result = ActionFile(*tables)
    for i, obj in others:
        _apply_other(result, obj, f"{where} line {i}", table)
    return result


def _normalise_file_action(action: dict[str, Any], pv_columns: list[str]) -> dict[str, Any]:
    out = dict(action)
    pv = action.get("partitionValues") or {}
    out["partitionValues"] = {c: (None if pv.get(c) is None else str(pv.get(c))) for c in pv_columns}
    tags = action.get("tags")
    if tags is not None:
        out["tags"] = {str(k): (None if v is None else str(v)) for k, v in tags.items()}
    if isinstance(out.get("stats"), (dict, list)):
        out["stats"] = orjson.dumps(out["stats"]).decode()
    return out


def parse_actions(data: bytes, pv_columns: list[str], *, where: str, table: str | None = None) -> ActionFile:
    """Parse one JSON action file. ``where`` names it in errors (e.g. the commit file name)."""
    if len(data) < 64 and not data.strip():
        return ActionFile(*(empty_file_table(k, pv_columns) for k in FILE_KINDS))
    try:
        result = _fast_parse(data, pv_columns, where, table)
    except _SlowPath:
        return _slow_parse(data, pv_columns, where, table)
    for t in (result.adds, result.removes, result.cdcs):
        if t.num_rows and t.column("path").null_count:
            return _slow_parse(data, pv_columns, where, table)  # exact error with a line number
    return result


def peek_protocol_metadata(
    data: bytes, *, where: str, table: str | None = None
) -> tuple[Protocol | None, Metadata | None]:
    """Protocol and metaData actions of a JSON action file, without reading its file actions."""
    if b'"metaData"' not in data and b'"protocol"' not in data:
        return None, None
    probe = ActionFile(*(empty_file_table(k, []) for k in FILE_KINDS))
    try:
        others = _other_actions(data, (b'"metaData"', b'"protocol"'))
    except _SlowPath:
        full = _slow_parse(data, [], where, table)
        return full.protocol, full.metadata
    for i, obj in others:
        if "metaData" in obj or "protocol" in obj:
            _apply_other(probe, obj, f"{where} line {i + 1}", table)
    return probe.protocol, probe.metadata


def peek_in_commit_timestamp(data: bytes) -> int | None:
    """``commitInfo.inCommitTimestamp`` (the first action of a commit when the feature is on)."""
    end = data.find(b"\n")
    first = data[: end if end != -1 else len(data)]
    if b"inCommitTimestamp" not in first:
        return None
    try:
        obj = orjson.loads(first)
        v = obj.get("commitInfo", {}).get("inCommitTimestamp")
        return int(v) if isinstance(v, (int, float)) else None
    except (orjson.JSONDecodeError, AttributeError):
        return None
