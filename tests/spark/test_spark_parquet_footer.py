"""The thrift compact-protocol codec of parquet footers (deltaport.spark.parquet_footer)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TABLES

from deltaport.spark.parquet_footer import (
    BINARY,
    FMD_ROW_GROUPS,
    FOOTER_ONLY,
    I64,
    LIST,
    RG_COLUMNS,
    Field,
    FooterError,
    Raw,
    Struct,
    TList,
    append_field,
    decode,
    encode,
    key_values,
    put_key_value,
)


def footer_of(data: bytes) -> bytes:
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


def corpus_files() -> list:
    return sorted(p for p in TABLES.rglob("*.parquet") if p.read_bytes()[-4:] == b"PAR1")


def test_every_corpus_footer_round_trips_byte_for_byte():
    files = corpus_files()
    assert len(files) > 100
    for path in files:
        footer = footer_of(path.read_bytes())
        assert encode(decode(footer)) == footer, path


def test_a_partly_decoded_footer_round_trips_and_keeps_only_what_is_not_named_raw():
    """decode(raw, FOOTER_ONLY): the schema and each chunk's statistics stay bytes; row groups,
    column chunks and their metadata are decoded; written back, the footer is the same bytes."""
    files = corpus_files()
    for path in files:
        footer = footer_of(path.read_bytes())
        tree = decode(footer, FOOTER_ONLY)
        assert encode(tree) == footer, path
        assert isinstance(tree.get(2), Raw)  # the schema
        whole = decode(footer)
        for group, full in zip(tree.get(FMD_ROW_GROUPS).items, whole.get(FMD_ROW_GROUPS).items, strict=True):
            assert len(group.get(RG_COLUMNS).items) == len(full.get(RG_COLUMNS).items)
            for column in group.get(RG_COLUMNS).items:
                meta = column.get(3)
                assert isinstance(meta, Struct) and all(type(f.value) in (int, bool, bytes, Raw) for f in meta.fields)
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(100))}), buffer, row_group_size=10)
    first = footer_of(buffer.getvalue())

    def statistics(tree: Struct):  # the first chunk's
        return tree.get(FMD_ROW_GROUPS).items[0].get(RG_COLUMNS).items[0].get(3).get(12)

    assert statistics(decode(first, FOOTER_ONLY)) == Raw(encode(statistics(decode(first))))


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_a_truncated_footer_raises_footer_error_when_partly_decoded(cut):
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(100)), "s": [str(i) for i in range(100)]}), buffer, row_group_size=10)
    footer = footer_of(buffer.getvalue())
    with pytest.raises(FooterError):
        decode(footer[: len(footer) - cut], FOOTER_ONLY)


def test_a_rewritten_footer_is_read_by_pyarrow_with_the_changes():
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(100))}), buffer, row_group_size=10)
    data = buffer.getvalue()
    meta = decode(footer_of(data))
    meta.put(3, I64, 42)  # num_rows
    put_key_value(meta, "k", "v")
    footer = encode(meta)
    read = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + len(footer).to_bytes(4, "little") + b"PAR1"))
    assert read.num_rows == 42 and read.metadata[b"k"] == b"v" and read.num_row_groups == 10
    assert key_values(decode(footer))["k"] == "v"


def test_a_field_appended_after_the_last_is_skipped_by_pyarrow_and_decoded_by_the_codec():
    buffer = io.BytesIO()
    pq.write_table(pa.table({"a": list(range(100))}), buffer, row_group_size=10)
    footer = footer_of(buffer.getvalue())
    longer = append_field(footer, Field(31_337, BINARY, b"\x00\xff" * 200))
    assert longer.startswith(footer[:-1]) and len(longer) > len(footer) + 400
    read = pq.read_metadata(pa.BufferReader(b"PAR1" + longer + len(longer).to_bytes(4, "little") + b"PAR1"))
    assert read.num_rows == 100 and read.num_row_groups == 10 and read.schema.names == ["a"]
    fields = decode(longer).fields
    assert fields[-1].id == 31_337 and fields[-1].value == b"\x00\xff" * 200
    assert encode(Struct(fields[:-1])) == footer
    with pytest.raises(FooterError, match="stop byte"):
        append_field(footer + b"\x15", Field(31_337, BINARY, b""))


def test_fields_are_kept_in_id_order_and_long_ids_and_lists_encode():
    value = Struct()
    value.put(40, I64, -5)
    value.put(2, BINARY, b"x" * 300)
    value.put(1, LIST, TList(5, list(range(20))))
    assert [f.id for f in value.fields] == [1, 2, 40]
    assert encode(decode(encode(value))) == encode(value)
    assert decode(encode(value)).get(40) == -5 and decode(encode(value)).get(1).items == list(range(20))


@pytest.mark.parametrize("data", [b"", b"\x15", b"\x19\xfc", b"\x18\xff\xff\xff\xff\x0f"])
def test_truncated_or_garbage_bytes_raise_footer_error(data):
    with pytest.raises(FooterError):
        decode(data)


def test_pyarrow_and_the_codec_place_every_corpus_chunk_alike():
    """The plan reads chunk offsets from pyarrow's footer (footer_chunks); the rewrite from the
    codec's (chunks): on every corpus file, every chunk of every row group is the same in both."""
    from deltaport.spark.chunks import chunks, footer_chunks, parse_footer

    files = corpus_files()
    for path in files:
        raw = footer_of(path.read_bytes())
        footer = parse_footer(raw)
        groups = range(footer.arrow.num_row_groups)
        leaves = range(footer.arrow.num_columns)
        assert footer_chunks(footer, groups, leaves) == chunks(decode(raw), groups, leaves), path
