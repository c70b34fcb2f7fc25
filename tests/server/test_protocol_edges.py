"""Edges: history limits, historical protocol, mid-stream failures, logs without secrets, fuzzed input."""

from __future__ import annotations

import logging
import random
import re

import httpx
import orjson
import pytest
from builders import writable_copy
from conftest import TABLES, TOKEN
from servers import RunningServer

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables"


def _serve(tables: list[dict], **extra) -> RunningServer:
    cfg = parse_config({"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}], **extra})
    return RunningServer(create_app(cfg))


def _lines(r) -> list[dict]:
    return [orjson.loads(x) for x in r.content.splitlines() if x.strip()]


def test_start_version_limits_every_read():
    server = _serve([{"name": "t", "location": str(TABLES / "cdf-table"), "historyShared": True, "startVersion": 1}])
    try:
        with httpx.Client(base_url=server.url) as c:
            r = c.post(T + "/t/query", json={"version": 0})
            assert r.status_code == 400 and "since version 1" in r.json()["message"]
            assert c.post(T + "/t/query", json={"version": 1}).status_code == 200
            r = c.get(T + "/t/changes", params={"startingVersion": 0})
            assert r.status_code == 400 and "table changes since version 1" in r.json()["message"]
            assert c.get(T + "/t/changes", params={"startingVersion": 1}).status_code == 200
            r = c.post(T + "/t/query", json={"startingVersion": 0})
            assert r.status_code == 400 and "since version 1" in r.json()["message"]
    finally:
        server.stop()


def test_include_historical_protocol(tmp_path):
    server = _serve([{"name": "t", "location": str(TABLES / "cdf-table-with-dv"), "historyShared": True}])
    caps = {"delta-sharing-capabilities": "responseformat=delta;readerfeatures=deletionvectors,columnmapping"}
    try:
        with httpx.Client(base_url=server.url) as c:
            out = _lines(
                c.get(
                    T + "/t/changes", headers=caps, params={"startingVersion": 0, "includeHistoricalProtocol": "true"}
                )
            )
            assert out[0]["protocol"]["version"] == 0
            plain = _lines(c.get(T + "/t/changes", headers=caps, params={"startingVersion": 0}))
            assert "version" not in plain[0]["protocol"]
    finally:
        server.stop()


def test_absolute_paths_outside_the_root_are_refused_before_streaming(tmp_path):
    table = tmp_path / "t"
    writable_copy(TABLES / "basic_partitioned", table)
    commit = table / "_delta_log" / f"{2:020d}.json"
    commit.write_bytes(
        orjson.dumps(
            {
                "add": {
                    "path": "file:///etc/passwd",
                    "partitionValues": {"letter": "z"},
                    "size": 10,
                    "modificationTime": 1,
                    "dataChange": True,
                }
            }
        )
        + b"\n"
    )
    server = _serve([{"name": "t", "location": str(table)}])
    try:
        r = httpx.post(server.url + T + "/t/query", json={})
        assert r.status_code == 400 and "absolute paths" in r.json()["message"]
    finally:
        server.stop()


def test_absolute_deletion_vector_paths_are_refused_before_streaming(tmp_path):
    table = tmp_path / "t"
    writable_copy(TABLES / "table-with-dv-small", table)
    log = table / "_delta_log"
    last = max(int(p.name[:20]) for p in log.glob("*.json"))
    live = DeltaTable(str(table), cache=SnapshotCache()).snapshot().files().to_pylist()[0]
    dv = {
        "storageType": "p",
        "pathOrInlineDv": "file:///etc/elsewhere/dv.bin",
        "offset": 1,
        "sizeInBytes": 10,
        "cardinality": 1,
    }
    add = {
        "path": live["path"],
        "partitionValues": {},
        "size": live["size"],
        "modificationTime": 1,
        "dataChange": True,
        "deletionVector": dv,
    }
    remove = {"path": live["path"], "deletionTimestamp": 2, "dataChange": True}
    if live.get("deletionVector"):
        remove["deletionVector"] = {k: v for k, v in live["deletionVector"].items() if v is not None}
    (log / f"{last + 1:020d}.json").write_bytes(
        orjson.dumps({"remove": remove}) + b"\n" + orjson.dumps({"add": add}) + b"\n"
    )
    server = _serve([{"name": "t", "location": str(table)}])
    caps = {"delta-sharing-capabilities": "responseformat=delta;readerfeatures=deletionvectors"}
    try:
        r = httpx.post(server.url + T + "/t/query", json={}, headers=caps)
        assert r.status_code == 400, r.text
        assert "absolute deletion vector paths" in r.json()["message"]
    finally:
        server.stop()


def test_failure_midway_becomes_an_end_stream_error_message():
    """A signer that fails on the third file: with end-stream actions asked for, the client is told."""
    from deltaport.delta import SnapshotCache
    from deltaport.errors import StorageError
    from deltaport.server.sharing.service import SharingService
    from deltaport.server.sharing.tokens import TokenCodec

    class FlakySigner:
        calls = 0

        def sign(self, path, *, expires_in, now=None):
            FlakySigner.calls += 1
            if FlakySigner.calls == 3:
                raise StorageError("the store refused to sign")
            from deltaport.signing import SignedUrl

            return SignedUrl(f"https://store/{path}?X-Amz-Signature=x", 1)

    cfg = parse_config(
        {
            "version": 1,
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}
                    ],
                }
            ],
        }
    )
    service = SharingService(
        cfg, signer_factory=lambda shared, base, who: FlakySigner(), cache=SnapshotCache(), codec=TokenCodec(b"k" * 32)
    )
    who = service.principal(None)
    reply = service.query(
        who, "s", "d", "t", b"{}", "responseformat=parquet;includeendstreamaction=true", None, "http://x/"
    )
    out = [orjson.loads(x) for x in b"".join(reply.stream).splitlines()]
    assert len([x for x in out if "file" in x]) < 6  # never a silently short list
    assert out[-1]["endStreamAction"]["errorMessage"].startswith("RESOURCE_DOES_NOT_EXIST: the store refused")
    FlakySigner.calls = 0
    reply = service.query(who, "s", "d", "t", b"{}", None, None, "http://x/")
    with pytest.raises(StorageError):  # without end-stream actions the response is cut, never silently short
        b"".join(reply.stream)


def test_change_feed_on_a_deletion_vector_table(profile):
    import delta_sharing

    df = delta_sharing.load_table_changes_as_pandas(
        f"{profile}#corpus.default.dv_cdf", starting_version=0, use_delta_format=True
    )
    assert len(df) > 0 and set(df["_change_type"]) >= {"insert"}
    with pytest.raises(Exception, match="deletionvectors"):  # parquet format cannot carry DVs
        delta_sharing.load_table_changes_as_pandas(f"{profile}#corpus.default.dv_cdf", starting_version=0)


def test_logs_carry_no_tokens_or_url_signatures(server, caplog):
    caplog.set_level(logging.DEBUG)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    out = _lines(
        httpx.post(
            server.url + "/delta-sharing/shares/corpus/schemas/default/tables/partitioned/query",
            json={"includeRefreshToken": True},
            headers=auth,
        )
    )
    url = out[2]["file"]["url"]
    httpx.get(url)
    httpx.get(url.replace("X-Amz-Expires=900", "X-Amz-Expires=901"))  # a refused one is logged too
    httpx.get(server.url + "/delta-sharing/shares", headers={"Authorization": "Bearer wrong-token-123"})
    # the server's loggers only (the test's own HTTP client logs the URLs it fetches)
    text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith(("deltaport", "uvicorn")))
    signature = url.split("X-Amz-Signature=")[1]
    refresh = out[-1]["endStreamAction"]["refreshToken"]
    for secret in (TOKEN, signature, "wrong-token-123", refresh, "X-Amz-Credential"):
        assert secret not in text
    assert "/delta-sharing/shares" in text  # the access log itself is there


def _random_value(rng: random.Random):
    return rng.choice(
        [
            None,
            "",
            "0",
            "-1",
            "1e99",
            "9" * 30,
            "x",
            "true",
            "%00",
            "../..",
            "é",
            "'; drop",
            "2024-01-01T00:00:00Z",
            "2999-01-01T00:00:00Z",
            "[]",
            "{}",
            " ",
            "null",
        ]
    )


def test_fuzzed_requests_never_get_a_5xx(server):
    rng = random.Random(1234)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    base = "/delta-sharing/shares/corpus/schemas/default/tables/"
    tables = ["partitioned", "dv", "cdf", "broken", "nohistory", "nosuch", "PARTITIONED", "a%2Fb"]
    params = [
        "version",
        "timestamp",
        "startingVersion",
        "endingVersion",
        "startingTimestamp",
        "endingTimestamp",
        "maxResults",
        "pageToken",
        "maxFiles",
        "includeHistoricalMetadata",
    ]
    fields = [
        "version",
        "timestamp",
        "startingVersion",
        "endingVersion",
        "limitHint",
        "maxFiles",
        "pageToken",
        "includeRefreshToken",
        "refreshToken",
        "predicateHints",
        "jsonPredicateHints",
        "bogus",
    ]
    statuses = []
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as c:
        for _ in range(300):
            table = rng.choice(tables)
            kind = rng.choice(["query", "metadata", "changes", "version", "list", "head"])
            headers = {}
            if rng.random() < 0.5:
                headers["delta-sharing-capabilities"] = rng.choice(
                    [
                        "responseformat=delta",
                        "responseformat=parquet,delta;readerfeatures=deletionvectors",
                        "responseformat=csv",
                        ";;==",
                        "includeendstreamaction=true",
                        "asyncquery=true",
                    ]
                )
            if rng.random() < 0.2:
                headers["fileidhash"] = rng.choice(["md5", "delta", "", "PARQUET"])
            q = {p: _random_value(rng) for p in rng.sample(params, rng.randint(0, 3))}
            q = {k: v for k, v in q.items() if v is not None}
            if kind == "query":
                body = {
                    f: rng.choice([_random_value(rng), rng.randint(-5, 5), True, [1], {"a": 1}])
                    for f in rng.sample(fields, rng.randint(0, 3))
                }
                raw = orjson.dumps(body) if rng.random() < 0.8 else rng.choice([b"", b"{", b"\xff", b"[]"])
                r = c.post(base + table + "/query", content=raw, headers=headers)
            elif kind == "head":
                r = c.head(base + table, params=q)
            elif kind == "list":
                r = c.get(
                    rng.choice(
                        [
                            "/delta-sharing/shares",
                            "/delta-sharing/shares/corpus/schemas",
                            "/delta-sharing/shares/corpus/all-tables",
                        ]
                    ),
                    params=q,
                )
            else:
                r = c.get(base + table + "/" + kind, params=q, headers=headers)
            statuses.append(r.status_code)
            assert r.status_code < 500, (kind, table, q, headers, r.text[:300])
            if r.status_code >= 400 and kind != "head":
                assert set(r.json()) == {"errorCode", "message"}
    assert any(s == 200 for s in statuses) and any(400 <= s < 500 for s in statuses)


def _writable_copy(name: str, dst) -> None:
    writable_copy(TABLES / name, dst)


_STORAGE_TEXT = re.compile(r"file:|s3a?://|abfss?://|wasbs?://|gs://|az://|delta-tables|/tmp/|/work/", re.IGNORECASE)


def test_engine_errors_never_show_where_the_table_is_stored(tmp_path, caplog):
    """Recipients must never learn the provider's storage location; the operator's log keeps it."""
    corrupt = tmp_path / "corrupt"
    _writable_copy("basic_partitioned", corrupt)
    (corrupt / "_delta_log" / f"{2:020d}.json").write_bytes(b'{"add":{"path":"x.parq\n')
    bad_checkpoint = tmp_path / "bad_checkpoint"  # the parquet reader's own error quotes the file's full path
    _writable_copy("with_checkpoint_no_last_checkpoint", bad_checkpoint)
    (bad_checkpoint / "_delta_log" / f"{0:020d}.json").unlink()
    next((bad_checkpoint / "_delta_log").glob("*.checkpoint.parquet")).write_bytes(b"PAR1 garbage")
    gap = tmp_path / "gap"
    _writable_copy("cdf-table", gap)
    (gap / "_delta_log" / f"{1:020d}.json").unlink()
    empty = tmp_path / "empty"
    (empty / "_delta_log").mkdir(parents=True)
    tables = [
        {"name": "corrupt", "location": str(corrupt)},
        {"name": "checkpoint", "location": bad_checkpoint.as_uri()},
        {"name": "good", "location": str(TABLES / "cdf-table"), "historyShared": True},
        {"name": "gap", "location": str(gap), "historyShared": True},
        {"name": "empty", "location": str(empty)},
    ]
    old, future = "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
    cases = [  # (method, table path, params or body, status, errorCode, exact message or None)
        ("post", "/corrupt/query", {}, 400, "MALFORMED_REQUEST", None),
        ("get", "/corrupt/metadata", None, 400, "MALFORMED_REQUEST", None),
        ("post", "/checkpoint/query", {}, 400, "MALFORMED_REQUEST", None),
        (
            "get",
            "/good/metadata",
            {"version": 99},
            400,
            "MALFORMED_REQUEST",
            "Cannot load table version 99 as it does not exist. The latest available version is 3.",
        ),
        ("get", "/good/metadata", {"timestamp": old}, 400, "MALFORMED_REQUEST", None),
        ("post", "/good/query", {"timestamp": future}, 400, "MALFORMED_REQUEST", None),
        ("get", "/good/version", {"startingTimestamp": future}, 400, "MALFORMED_REQUEST", None),
        ("get", "/good/changes", {"startingTimestamp": future}, 400, "INVALID_PARAMETER_VALUE", None),
        (
            "get",
            "/gap/changes",
            {"startingVersion": 0},
            400,
            "RESOURCE_DOES_NOT_EXIST",
            "table files missing. Ask the data provider to restore the table's missing log files.",
        ),
        ("post", "/empty/query", {}, 400, "MALFORMED_REQUEST", None),
    ]
    caplog.set_level(logging.WARNING, logger="deltaport")
    server = _serve(tables)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            for method, path, args, status, code, message in cases:
                if method == "post":
                    r = c.post(T + path, json=args)
                else:
                    r = c.get(T + path, params=args)
                assert (r.status_code, r.json()["errorCode"]) == (status, code), (path, r.text)
                if message is not None:
                    assert r.json()["message"] == message
                seen = r.text + "\n" + "\n".join(f"{k}: {v}" for k, v in r.headers.items())
                assert not _STORAGE_TEXT.search(seen), (path, seen)
                for p in (tmp_path, TABLES):
                    assert str(p) not in seen and p.as_uri() not in seen
    finally:
        server.stop()
    # the operator still learns which table broke, and why
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("deltaport"))
    assert str(corrupt) in logged and "bad_checkpoint" in logged and "commit 1 is no longer in the log" in logged
