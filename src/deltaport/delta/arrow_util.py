"""Small Arrow helpers that stay off slow conversion paths.

``pa.array(numpy_array)`` goes through a generic converter whose first use imports pandas (a
quarter of a second); building arrays from numpy buffers avoids it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_NP_TO_ARROW = {
    np.dtype(np.int8): pa.int8(),
    np.dtype(np.int16): pa.int16(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.uint64): pa.uint64(),
    np.dtype(np.float64): pa.float64(),
}


def np_array(values: np.ndarray) -> pa.Array:
    """A numeric numpy array as an Arrow array, zero-copy."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_NP_TO_ARROW[values.dtype], len(values), [None, pa.py_buffer(values)])


def binary_array(data: bytes) -> pa.Array:
    """``data`` as a one-element large_binary array, zero-copy (``pa.scalar(data)`` imports pandas
    on first use)."""
    offsets = np.array([0, len(data)], dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def np_bool_array(values: np.ndarray) -> pa.BooleanArray:
    """A numpy bool array as an Arrow boolean array."""
    packed = np.packbits(np.ascontiguousarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(packed)])


def keep_runs(mask: np.ndarray, max_runs: int = 4096) -> list[tuple[int, int]] | None:
    """(start, length) of each run of True in ``mask``, or None when there are too many runs."""
    if mask.all():
        return [(0, len(mask))] if len(mask) else []
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, stops = edges[0::2], edges[1::2]
    if len(starts) > max_runs:
        return None
    return [(int(a), int(b - a)) for a, b in zip(starts, stops)]


def select_rows(data: Any, mask: np.ndarray) -> Any:
    """Rows of a Table / ChunkedArray where ``mask`` is True, zero-copy slices when runs are few."""
    runs = keep_runs(mask)
    if runs is None:
        return data.filter(np_bool_array(mask))
    if len(runs) == 1 and runs[0] == (0, len(mask)):
        return data
    pieces = [data.slice(a, n) for a, n in runs]
    if isinstance(data, pa.Table):
        return pa.concat_tables(pieces) if pieces else data.slice(0, 0)
    chunks = [c for p in pieces for c in p.chunks]
    return pa.chunked_array(chunks, type=data.type)


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` without rows (one empty chunk a column), as ``schema.empty_table()``
    makes it, which costs ~60 µs a call and imports pandas on first use."""
    return pa.Table.from_batches([pa.record_batch([pa.nulls(0, f.type) for f in schema], schema=schema)])
