"""Arrow tables of a read → one pandas DataFrame, the frame ``pyarrow.Table.to_pandas(date_as_object=True)``
makes of their concatenation.

The readers may hand string columns over as dictionary arrays of strings
(:func:`~deltaport.client.reader.reader_for` with ``dictionaries``): parquet stores strings
dictionary-encoded, so each distinct string is then decoded once, where a plain read builds every
row's string and the pandas conversion hashes them all again to share equal ones (single-threaded,
holding the GIL: the longest part of a conversion). Such a column's pandas values are taken from
the chunks' dictionaries by their indices: the same ``str`` values (equal strings one object, as
pyarrow makes them), ``None`` for nulls, in an ``object`` column at the same place. A column
whose chunks are partly plain (a file without it, read as nulls) is decoded and converted by pyarrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["to_pandas"]

#: as the official connector converts; split_blocks measured slower here
_OPTIONS: dict[str, Any] = {"date_as_object": True}


def _codes(chunk: pa.DictionaryArray, base: int) -> np.ndarray:
    """``chunk``'s indices shifted by ``base``; -1 (the last value, None) for a null."""
    codes = chunk.indices.fill_null(-1).to_numpy()
    return codes + base if not chunk.null_count else np.where(codes >= 0, codes + base, -1)


def _objects(chunks: Sequence[pa.DictionaryArray]) -> np.ndarray:
    """One ``object`` array of dictionary chunks' values: a single take from all their dictionaries
    (a take into a new array; one into a preallocated ``object`` array is several times slower)."""
    values, codes, base = [], [], 0
    for chunk in chunks:
        values.append(chunk.dictionary.to_numpy(zero_copy_only=False))
        codes.append(_codes(chunk, base))
        base += len(chunk.dictionary)
    values.append(np.array([None], dtype=object))
    return np.concatenate(values).take(np.concatenate(codes) if codes else np.empty(0, dtype=np.intp))


def _plain(table: pa.Table, column: int) -> pa.Table:
    """``table`` with a dictionary-encoded string ``column`` decoded."""
    field = table.schema.field(column)
    if not pa.types.is_dictionary(field.type):
        return table
    plain = field.type.value_type
    return table.set_column(column, field.with_type(plain), table.column(column).cast(plain))


def _frame(tables: list[pa.Table], schema: pa.Schema, **options: Any):
    """``tables`` (of ``schema``'s columns; the list is emptied) as one frame."""
    if not tables:
        return schema.empty_table().to_pandas(**_OPTIONS)
    names = tables[0].schema.names
    kinds = [{pa.types.is_dictionary(t.schema.field(i).type) for t in tables} for i in range(len(names))]
    for i in (i for i, kind in enumerate(kinds) if kind == {True, False}):  # some chunks plain: all plain
        tables[:] = [_plain(t, i) for t in tables]
    expand = [i for i, kind in enumerate(kinds) if kind == {True}]
    columns = {i: _objects([c for t in tables for c in t.column(i).chunks]) for i in expand}
    rest = pa.concat_tables([t.drop_columns([names[i] for i in expand]) for t in tables])
    tables.clear()
    frame = rest.to_pandas(**_OPTIONS, **options)
    del rest
    for i in expand:  # in order, so that each lands where the table has it
        frame.insert(i, names[i], columns.pop(i))
    return frame


def to_pandas(tables: list[pa.Table], schema: pa.Schema, convert_in_batches: bool):
    """The frame of ``tables`` (emptied as they are converted), empty of ``schema`` when there are none.
    ``convert_in_batches``: one table at a time, each freed once converted (lower peak memory)."""
    if convert_in_batches and len(tables) > 1:
        import pandas as pd

        frames = []
        while tables:  # convert and drop one file at a time: the Arrow copy is freed as we go
            frames.append(_frame([tables.pop(0)], schema, self_destruct=True))
        return pd.concat(frames, axis=0, ignore_index=True, copy=False)
    return _frame(tables, schema)  # self_destruct would lower peak memory but doubles the time here
