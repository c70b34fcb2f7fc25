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

A date column becomes ``datetime.date`` objects the same way: one object per day of its range,
taken by each row's day, where pyarrow converts every row's value (a column of a few hundred
distinct days over millions of rows is common: 0.25–0.34 s against pyarrow's 0.29–0.83 s for the
benchmark table's 34.5 M rows). A column whose range is wide for its length is left to pyarrow.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["to_pandas"]

#: as the official connector converts; split_blocks measured slower here
_OPTIONS: dict[str, Any] = {"date_as_object": True}


def _put_codes(chunk: pa.DictionaryArray, base: int, out: np.ndarray) -> None:
    """``chunk``'s indices shifted by ``base`` into ``out``; -1 (the last value, None) for a null."""
    indices = chunk.indices.fill_null(0) if chunk.null_count else chunk.indices
    np.add(indices.to_numpy(), base, out=out, dtype=np.intp)
    if chunk.null_count:
        out[chunk.is_null().to_numpy(zero_copy_only=False)] = -1


def _objects(chunks: Sequence[pa.DictionaryArray]) -> np.ndarray:
    """One ``object`` array of dictionary chunks' values: a single take from all their dictionaries
    (a take into a new array; one into a preallocated ``object`` array is several times slower),
    by codes written straight into one array of the width ``take`` uses (:func:`_code_array`)."""
    values, codes, base, pos = [], _code_array(chunks), 0, 0
    for chunk in chunks:
        values.append(chunk.dictionary.to_numpy(zero_copy_only=False))
        _put_codes(chunk, base, codes[pos : pos + len(chunk)])
        pos, base = pos + len(chunk), base + len(chunk.dictionary)
    values.append(np.array([None], dtype=object))
    return np.concatenate(values).take(codes)


def _code_array(chunks: Sequence[pa.Array]) -> np.ndarray:
    """An array for one code per row of ``chunks``, of ``intp``: the width ``take`` works in, which
    copies narrower codes into a new array of it first. Codes made per chunk, concatenated and
    widened took three arrays of fresh pages where this takes one; with the result's, a
    conversion of 34.5 M rows went from 0.88-2.34 s to 0.81-1.17 s over six processes each
    (fresh pages are slow to fault in on some machines, and unevenly so)."""
    return np.empty(sum(map(len, chunks)), dtype=np.intp)


#: A date column is taken from a table of its range's days when the range has at most this many
#: days, and at most one per this many rows (else building the table costs more than it saves).
_MAX_DAYS = 1 << 20
_ROWS_PER_DAY = 4
_EPOCH = dt.date(1970, 1, 1).toordinal()


def _date_objects(chunks: Sequence[pa.Array]) -> np.ndarray | None:
    """A date32 column's values as ``datetime.date`` objects (None for nulls), one object per day
    of its range; None when the range is too wide for that to pay, or has no dates."""
    bounds = [pc.min_max(c) for c in chunks if c.null_count < len(c)]
    if not bounds:
        return None
    low = min(b["min"].value for b in bounds)  # days since 1970-01-01
    high = max(b["max"].value for b in bounds)
    span = high - low + 1
    if span > _MAX_DAYS or span * _ROWS_PER_DAY > sum(map(len, chunks)):
        return None
    try:
        days = np.array([dt.date.fromordinal(_EPOCH + d) for d in range(low, high + 1)] + [None], dtype=object)
    except ValueError:  # beyond what datetime.date holds: pyarrow's conversion says so
        return None
    codes, pos = _code_array(chunks), 0
    for c in chunks:  # nulls: the None after the last day
        days_since = c.view(pa.int32()).fill_null(low + span).to_numpy()
        np.subtract(days_since, low, out=codes[pos : pos + len(c)], dtype=np.intp)
        pos += len(c)
    return days.take(codes)


def _plain(table: pa.Table, column: int) -> pa.Table:
    """``table`` with a dictionary-encoded string ``column`` decoded."""
    field = table.schema.field(column)
    if not pa.types.is_dictionary(field.type):
        return table
    plain = field.type.value_type
    return table.set_column(column, field.with_type(plain), table.column(column).cast(plain))


def _chunks(tables: list[pa.Table], column: int) -> list[Any]:
    return [c for t in tables for c in t.column(column).chunks]


def _is_date32(tables: list[pa.Table], column: int) -> bool:
    return all(pa.types.is_date32(t.schema.field(column).type) for t in tables)


def _frame(tables: list[pa.Table], schema: pa.Schema, **options: Any):
    """``tables`` (of ``schema``'s columns; the list is emptied) as one frame."""
    if not tables:
        return schema.empty_table().to_pandas(**_OPTIONS)
    names = tables[0].schema.names
    kinds = [{pa.types.is_dictionary(t.schema.field(i).type) for t in tables} for i in range(len(names))]
    for i in (i for i, kind in enumerate(kinds) if kind == {True, False}):  # some chunks plain: all plain
        tables[:] = [_plain(t, i) for t in tables]
    columns = {i: _objects(_chunks(tables, i)) for i, kind in enumerate(kinds) if kind == {True}}
    for i in (i for i, kind in enumerate(kinds) if kind == {False} and _is_date32(tables, i)):
        dates = _date_objects(_chunks(tables, i))
        if dates is not None:
            columns[i] = dates
    rest = pa.concat_tables([t.drop_columns([names[i] for i in columns]) for t in tables])
    tables.clear()
    frame = rest.to_pandas(**_OPTIONS, **options)
    del rest
    if not columns:
        return frame
    import pandas as pd

    # one frame of the columns as they are: inserting each would copy it
    ordered = {name: columns.pop(i) if i in columns else frame[name] for i, name in enumerate(names)}
    return pd.DataFrame(ordered, copy=False)


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
