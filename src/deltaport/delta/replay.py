"""Log replay keyed by (path, deletion-vector id), columnar.

A snapshot's live files are the adds that no later add or remove with the same key supersedes.
Given a base (checkpoint adds, or a cached snapshot's live files, whose keys are unique) and the
commits after it, only the commits are grouped by key; the base is filtered with one hash
membership test. That makes a refresh after a small commit cost O(new actions) plus one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaport.delta.arrow_util import np_array, select_rows

KEY = "_key"


def _dv_id(dv: pa.Array) -> pa.Array:
    """Delta's DV unique id: storageType + pathOrInlineDv (+ '@' + offset), '' without a DV."""
    st = pc.fill_null(pc.struct_field(dv, "storageType"), "")
    p = pc.fill_null(pc.struct_field(dv, "pathOrInlineDv"), "")
    off = pc.struct_field(dv, "offset")
    off_s = pc.fill_null(pc.binary_join_element_wise("@", pc.cast(off, pa.string()), ""), "")
    return pc.binary_join_element_wise(st, p, off_s, "")


ABSOLUTE_PATH = "^[A-Za-z][A-Za-z0-9+.-]*:/"  # a URI scheme (and authority, or file:/x); relative paths have neither


def any_absolute(paths: pa.Array | pa.ChunkedArray) -> bool:
    """Some path is an absolute URI (anchored, so a row costs a few bytes, not a scan of the path)."""
    return len(paths) > 0 and bool(pc.any(pc.match_substring_regex(paths, ABSOLUTE_PATH)).as_py())


def _decoded(paths: pa.Array) -> pa.Array:
    """Percent-encoded paths decoded (paths in the log are URIs: ``a%20b`` and ``a b`` name one file).

    Column-wise: each distinct escape in the column is replaced in the bytes once. A ``%25`` (whose
    decoding could make a new escape) or bytes that do not decode as UTF-8 take the row-wise way."""
    encoded = pc.match_substring_regex(paths, "%")  # RE2 finds a literal ~3x faster than match_substring
    if not pc.any(encoded).as_py():
        return paths
    data = np.frombuffer(paths.buffers()[2], dtype=np.uint8)
    at = np.flatnonzero(data[:-2] == ord("%"))
    codes = {bytes(pair) for pair in np.unique(np.stack([data[at + 1], data[at + 2]], axis=1), axis=0)}
    codes = {c for c in codes if all(chr(b) in "0123456789abcdefABCDEF" for b in c)}
    if b"25" not in codes:
        raw = paths.cast(pa.binary())
        for code in codes:
            raw = pc.replace_substring(raw, b"%" + code, bytes([int(code, 16)]))
        try:
            return raw.cast(pa.string())
        except pa.ArrowInvalid:
            pass
    values = paths.to_pylist()
    for i in np.flatnonzero(np.asarray(pc.fill_null(encoded, False))):
        values[i] = unquote(values[i])
    return pa.array(values, pa.string())


def _one_slash_file(paths: pa.Array) -> pa.Array:
    """``file:/x`` (as Hadoop writes it) spelled ``file:///x``."""
    return pc.replace_substring_regex(paths, "^file:/([^/])", "file:///\\1")


def normalise_paths(paths: pa.Array, root_uri: str) -> pa.Array:
    """Each file named one way, as Delta's own readers resolve them: percent-encoding decoded, and
    absolute paths inside the table root made relative (as adds usually are), whether written
    ``file:/root/…`` or ``file:///root/…``."""
    paths = _decoded(paths)
    if not any_absolute(paths):
        return paths
    paths = _one_slash_file(paths)
    prefix = unquote(root_uri.rstrip("/")) + "/"
    prefix = prefix.replace("file:/", "file:///", 1) if prefix.startswith("file:/") and prefix[6:7] != "/" else prefix
    starts = pc.starts_with(paths, prefix)
    return pc.if_else(starts, pc.utf8_slice_codeunits(paths, len(prefix)), paths)


def with_keys(t: pa.Table, root_uri: str = "") -> pa.Table:
    """The table with a ``_key`` column: the normalised path, plus NUL + DV unique id for DV files."""
    if KEY in t.column_names:
        return t
    paths = pa.chunked_array([normalise_paths(c, root_uri) for c in t.column("path").chunks], pa.string())
    dv = t.column("deletionVector")
    if dv.null_count == len(dv):
        key = paths  # no DVs: the path alone is the key (zero copy)
    else:
        dv = dv.combine_chunks()
        paths = paths.combine_chunks()
        key = pc.if_else(pc.is_null(dv), paths, pc.binary_join_element_wise(paths, _dv_id(dv), "\x00"))
    return t.append_column(KEY, key)


def touched_keys(commits: Sequence[tuple[pa.Table, pa.Table]], root_uri: str = "") -> pa.Array:
    """Every key the commits' (adds, removes) name: what supersedes an older file of that key."""
    keys = [
        with_keys(t.select(["path", "deletionVector"]), root_uri).column(KEY).combine_chunks()
        for pair in commits
        for t in pair
        if t.num_rows
    ]
    return pc.unique(pa.concat_arrays(keys)) if keys else pa.array([], pa.string())


def replay(base: pa.Table | None, commits: Sequence[tuple[pa.Table, pa.Table]], root_uri: str = "") -> pa.Table:
    """Live adds after applying ``commits`` (each (adds, removes), ascending) on ``base``.

    The result keeps the ``_key`` column; base rows first (in base order), then surviving new
    adds in commit order.
    """
    add_tables: list[pa.Table] = []
    add_seq: list[np.ndarray] = []
    rem_keys: list[pa.Array] = []
    rem_seq: list[np.ndarray] = []
    seq = 0
    for adds, removes in commits:
        # removes sort before the adds of the same commit: an add and a remove of one key in a
        # single commit leaves the file live
        if removes.num_rows:
            rk = with_keys(removes.select(["path", "deletionVector"]), root_uri).column(KEY).combine_chunks()
            rem_keys.append(rk)
            rem_seq.append(np.arange(seq, seq + len(rk), dtype=np.int64))
            seq += len(rk)
        if adds.num_rows:
            add_tables.append(with_keys(adds, root_uri))
            add_seq.append(np.arange(seq, seq + adds.num_rows, dtype=np.int64))
            seq += adds.num_rows

    new_adds = pa.concat_tables(add_tables) if add_tables else None
    if base is not None:
        base = with_keys(base, root_uri)
    if new_adds is None and not rem_keys:
        return base if base is not None else None

    add_keys = new_adds.column(KEY).combine_chunks() if new_adds is not None else pa.array([], pa.string())
    seq_add = np.concatenate(add_seq) if add_seq else np.empty(0, np.int64)
    if not rem_keys and len(pc.unique(add_keys)) == len(add_keys):  # unique() beats count_distinct() 2x
        winners = new_adds
        touched = add_keys
    else:
        all_keys = pa.concat_arrays([add_keys, *rem_keys])
        all_seq = np.concatenate([seq_add, *rem_seq])
        grouped = (
            pa.table({"k": all_keys, "s": np_array(all_seq)}).group_by("k", use_threads=False).aggregate([("s", "max")])
        )
        winning = grouped.column("s_max")
        winners = new_adds.filter(pc.is_in(np_array(seq_add), value_set=winning)) if new_adds is not None else None
        touched = grouped.column("k").combine_chunks()
    parts = []
    if base is not None and base.num_rows:
        if len(touched):
            hit = pc.is_in(base.column(KEY), value_set=touched)
            if pc.any(hit).as_py():
                base = select_rows(base, ~np.asarray(hit.combine_chunks() if isinstance(hit, pa.ChunkedArray) else hit))
        parts.append(base)
    if winners is not None and winners.num_rows:
        parts.append(winners.select(parts[0].column_names) if parts else winners)
    if not parts:
        template = base if base is not None else new_adds
        assert template is not None  # there was something to replay
        return template.slice(0, 0)
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
