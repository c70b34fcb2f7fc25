"""The pandas conversion: dictionary-read string columns give the frame pyarrow gives of plain strings."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pandas.testing import assert_frame_equal

from deltaport.client.frames import _date_objects, to_pandas

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("day", pa.date32())])


def _table(ids: list[int], strings: list[str | None], *, dictionary: bool) -> pa.Table:
    column = pa.array(strings, pa.string())
    if dictionary:
        column = column.dictionary_encode()
    days = pa.array([dt.date(2024, 1, 1 + i % 28) for i in ids], pa.date32())
    return pa.table([pa.array(ids, pa.int64()), column, days], names=SCHEMA.names)


def _plain(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables([t.cast(SCHEMA) for t in tables])


def _tables(dictionary_last: bool = True) -> list[pa.Table]:
    return [
        _table([1, 2, 3], ["b", "a", "b"], dictionary=True),
        _table([4, 5, 6, 7], ["c", None, "a", "c"], dictionary=True).slice(1, 3),  # its own dictionary, a null
        _table([8, 9], [None, "d"], dictionary=dictionary_last),
    ]


def test_dictionary_strings_give_pyarrows_frame():
    tables = _tables()
    expected = _plain(tables).to_pandas(date_as_object=True)
    frame = to_pandas(list(tables), SCHEMA, convert_in_batches=False)
    assert_frame_equal(frame, expected)
    assert frame["s"].tolist() == ["b", "a", "b", None, "a", "c", None, "d"]  # None, not NaN
    assert list(frame.columns) == ["id", "s", "day"]


def test_partly_plain_columns_and_batches_give_the_same_frame():
    expected = _plain(_tables(dictionary_last=False)).to_pandas(date_as_object=True)
    assert_frame_equal(to_pandas(_tables(dictionary_last=False), SCHEMA, convert_in_batches=False), expected)
    assert_frame_equal(to_pandas(_tables(), SCHEMA, convert_in_batches=True), expected)


def test_no_tables_give_an_empty_typed_frame():
    frame = to_pandas([], SCHEMA, convert_in_batches=False)
    assert list(frame.columns) == SCHEMA.names and len(frame) == 0
    assert str(frame["id"].dtype) == "int64"


def _days(days: list[int | None], *, start: dt.date = dt.date(2024, 1, 1)) -> pa.Table:
    values = [None if d is None else start + dt.timedelta(days=d) for d in days]
    return pa.table([pa.array(range(len(days)), pa.int64()), pa.array(values, pa.date32())], names=["id", "day"])


def test_dates_are_taken_from_one_object_per_day_and_equal_pyarrows():
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    tables = [_days([0, 3, None, 3] * 10), _days([2, 0, 1] * 10).slice(1, 25), _days([None] * 5)]
    expected = pa.concat_tables(tables).to_pandas(date_as_object=True)
    frame = to_pandas(list(tables), schema, convert_in_batches=False)
    assert_frame_equal(frame, expected)
    days = frame["day"].tolist()
    assert days[2] is None and days[-1] is None and days[1] == dt.date(2024, 1, 4)
    assert _date_objects([c for t in tables for c in t.column("day").chunks]) is not None  # the lookup was used
    assert_frame_equal(to_pandas(list(tables), schema, convert_in_batches=True), expected)


def test_dates_spread_wide_for_their_rows_are_left_to_pyarrow():
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32())])
    for tables in ([_days([0, 400, 800, 400])], [_days([None, None])], [_days([0, 2_000_000], start=dt.date(1, 1, 1))]):
        expected = pa.concat_tables(tables).to_pandas(date_as_object=True)
        frame = to_pandas(list(tables), schema, convert_in_batches=False)
        assert_frame_equal(frame, expected)
        assert _date_objects(tables[0].column("day").chunks) is None  # left to pyarrow
