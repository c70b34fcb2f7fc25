"""Small Arrow helpers that stay off slow conversion paths.

``pa.array(numpy_array)`` goes through a generic converter whose first use imports pandas (a
quarter of a second); building arrays from numpy buffers avoids it.
"""

from __future__ import annotations

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


def np_bool_array(values: np.ndarray) -> pa.BooleanArray:
    """A numpy bool array as an Arrow boolean array."""
    packed = np.packbits(np.ascontiguousarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(packed)])
