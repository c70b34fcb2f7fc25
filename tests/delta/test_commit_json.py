"""The columnar commit reader gives exactly what the exact per-line parser gives, whatever mix of actions
a commit holds (the fast path declares columns only for the kinds it finds)."""

from __future__ import annotations

import orjson
import pytest

from deltaport.delta.commit_json import _fast_parse, _slow_parse, parse_actions

ADD = {
    "add": {
        "path": "p=1/a.parquet",
        "partitionValues": {"p": "1"},
        "size": 10,
        "modificationTime": 1,
        "dataChange": True,
        "stats": '{"numRecords":3}',
    }
}
REMOVE = {
    "remove": {
        "path": "p=1/b.parquet",
        "deletionTimestamp": 5,
        "dataChange": True,
        "partitionValues": {"p": "1"},
        "size": 7,
    }
}
CDC = {"cdc": {"path": "_change_data/c.parquet", "partitionValues": {"p": "1"}, "size": 3, "dataChange": False}}
INFO = {"commitInfo": {"timestamp": 99, "operation": "WRITE"}}
TXN = {"txn": {"appId": "app", "version": 3}}
DOMAIN = {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}}


def _text(*actions, sep=b"\n") -> bytes:
    return sep.join(orjson.dumps(a) for a in actions) + b"\n"


def _same(data: bytes) -> None:
    fast = parse_actions(data, ["p"], where="00.json")
    exact = _slow_parse(data, ["p"], "00.json", None)
    for kind in ("adds", "removes", "cdcs"):
        assert getattr(fast, kind).to_pylist() == getattr(exact, kind).to_pylist(), kind
    assert fast.commit_info == exact.commit_info
    assert fast.txns == exact.txns and fast.domain_metadata == exact.domain_metadata


@pytest.mark.parametrize(
    "actions",
    [
        (ADD, ADD),
        (INFO, ADD, ADD),
        (REMOVE,),
        (ADD, REMOVE, INFO),
        (INFO, CDC, ADD, REMOVE, TXN, DOMAIN),
        (TXN,),
        (INFO,),
    ],
    ids=["adds", "info+adds", "remove", "add+remove+info", "everything", "txn", "info"],
)
def test_fast_path_equals_exact_parser(actions):
    data = _text(*actions)
    _fast_parse(data, ["p"], "00.json", None)  # the fast path takes it (no fallback)
    _same(data)


def test_irregular_layout_still_reads_every_action():
    # blank lines, spaces before the key, and a key spelled with a unicode escape
    spaced = b'  { "remove" : ' + orjson.dumps(REMOVE["remove"]) + b"}"
    escaped = b'{"\\u0061dd":' + orjson.dumps(ADD["add"]) + b"}"
    data = b"\n".join([orjson.dumps(INFO), b"", spaced, b"   ", escaped, orjson.dumps(ADD)]) + b"\n"
    _same(data)
    result = parse_actions(data, ["p"], where="00.json")
    assert result.adds.num_rows == 2 and result.removes.num_rows == 1
