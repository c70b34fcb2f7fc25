"""The parquet-format file line is written from its field declaration."""

from __future__ import annotations

import orjson

from deltaport.protocol import lines
from deltaport.protocol.lines import WireField


def test_file_lines_have_the_declared_fields_in_order_and_leave_out_empty_optional_ones():
    out = orjson.loads(lines.file_parquet("cdf", url="u", id="i", partition_values={"p": None}, size=3, version=0))
    assert list(out["cdf"]) == ["url", "id", "partitionValues", "size", "version"]
    assert out["cdf"]["partitionValues"] == {"p": None} and out["cdf"]["version"] == 0
    full = orjson.loads(
        lines.file_parquet(
            "file",
            url="u",
            id="i",
            partition_values={},
            size=3,
            stats="{}",
            expiration_timestamp=5,
            version=1,
            timestamp=2,
        )
    )
    assert list(full["file"]) == [f.name for f in lines.FILE_FIELDS]


def test_file_lines_follow_a_changed_declaration(monkeypatch):
    declared = (
        WireField("bytes", "size", "number"),
        WireField("where", "url", "string"),
        WireField("stats", "stats", "string"),
    )
    monkeypatch.setattr(lines, "FILE_FIELDS", declared)
    out = lines.file_parquet("add", url="u", id="i", partition_values={}, size=3)
    assert out == b'{"add":{"bytes":3,"where":"u","stats":null}}\n'
