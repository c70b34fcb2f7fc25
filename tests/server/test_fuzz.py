"""Schemathesis over the server's own /openapi.json, bounded for the suite: a fixed seed, every
operation in both generation modes, ~1,200 requests in well under a minute (see fuzz_support.py
for what is generated and what every answer must satisfy; benchmarks/fuzz_server.py runs 10,000+).
"""

from __future__ import annotations

import orjson
import pytest
from fuzz_support import (
    FILE_SECRET,
    OTHER_TOKEN,
    TABLES,
    TOKEN,
    TOKEN_SECRET,
    FileUrls,
    Fuzzer,
    Tally,
    answer_problems,
    forbidden_texts,
    fuzz_app,
    load_schema,
)
from secret_scan import secrets_used
from servers import RunningServer

secrets_used.add(TOKEN, OTHER_TOKEN, label="a fuzzing recipient's bearer token")
secrets_used.add(FILE_SECRET.decode(), label="the fuzzing server's file-URL secret")
secrets_used.add(TOKEN_SECRET, label="the fuzzing server's page-token secret")

SEED = 20260801
EXAMPLES = 50  # per operation and generation mode
P = "/delta-sharing"
T = P + "/shares/{share}/schemas/{schema}/tables/{table}"
ROUTES = {
    "GET /health",
    f"GET {P}/shares",
    f"GET {P}/shares/{{share}}",
    f"GET {P}/shares/{{share}}/schemas",
    f"GET {P}/shares/{{share}}/schemas/{{schema}}/tables",
    f"GET {P}/shares/{{share}}/all-tables",
    f"GET {T}/version",
    f"HEAD {T}",
    f"GET {T}/metadata",
    f"POST {T}/query",
    f"GET {T}/changes",
    f"POST {T}/temporary-table-credentials",
    f"POST {T}/queries/{{query_id}}",
    f"GET {P}/files/{{key}}/{{path}}",
    f"HEAD {P}/files/{{key}}/{{path}}",
}


@pytest.fixture(scope="module")
def fuzz_server():
    server = RunningServer(fuzz_app())
    yield server
    server.stop()


def test_generated_requests_get_protocol_answers(fuzz_server):
    tally = Tally()
    fuzzer = Fuzzer(load_schema(fuzz_server.url), fuzz_server.url, FileUrls.collect(fuzz_server.url), tally)
    fuzzer.run(EXAMPLES, SEED)
    report = tally.report()
    print(report)  # shown by pytest when the test fails
    assert tally.failures == [], report + "\n" + "\n".join(str(f) for f in tally.failures[:20])
    assert set(tally.requests) == ROUTES  # every operation of the document was fuzzed
    assert 800 <= tally.total <= 2000, report
    assert tally.seconds < 60, report
    statuses = {route: {status // 100 for (r, status) in tally.statuses if r == route} for route in ROUTES}
    for route in ROUTES - {"GET /health"}:  # the steering works: each route answered and refused
        assert {2, 4} <= statuses[route], (route, report)
    for kind in (401, 404):  # some requests lacked a valid token; some named what does not exist
        assert any(status == kind for (_, status) in tally.statuses), report
    files = {s for (r, s) in tally.statuses if "/files/" in r}
    assert {200, 403, 404} <= files, report  # issued, tampered or unsigned, and signed but missing


class _Answer:
    def __init__(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.status_code = status
        self.content = body
        self.headers = {"content-type": ["application/json"], **(headers or {})}


def _error(message: str = "no such table") -> bytes:
    return orjson.dumps({"errorCode": "RESOURCE_DOES_NOT_EXIST", "message": message})


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (_Answer(500, _error()), "server error 500"),
        (_Answer(503, _error(), {"retry-after": ["5"]}), "server error 503"),
        (_Answer(404, b"not found", {"content-type": ["text/plain"]}), "error is not JSON"),
        (_Answer(400, b"{", {}), "error body does not parse as JSON"),
        (_Answer(400, orjson.dumps({"errorCode": "X", "message": "m", "detail": "d"})), "not exactly errorCode"),
        (_Answer(400, orjson.dumps({"errorCode": 4, "message": "m"})), "not a string"),
        (_Answer(404, _error(f"no table at {TABLES}/basic_partitioned")), "leaks where the tables are stored"),
        (_Answer(401, _error(), {"www-authenticate": [f"Bearer {TOKEN}"]}), "leaks the bearer token"),
        (_Answer(400, _error('Traceback (most recent call last):\n  File "x.py", line 1')), "leaks a traceback"),
        (_Answer(403, _error(FILE_SECRET.hex())), "leaks the file-URL secret (hex)"),
        (_Answer(200, b'{"a":1}\n{', {"content-type": ["application/x-ndjson"]}), "does not parse"),
    ],
)
def test_the_properties_catch_a_bad_answer(answer, problem):
    problems = answer_problems("GET", "GET /delta-sharing/shares", answer, forbidden_texts())
    assert any(problem in p for p in problems), problems


def test_the_properties_pass_a_good_answer():
    assert answer_problems("GET", "GET /x", _Answer(404, _error()), forbidden_texts()) == []
    head = _Answer(404, b"")  # a HEAD answer carries no body
    assert answer_problems("HEAD", "HEAD /x", head, forbidden_texts()) == []
    data = _Answer(200, b"PAR1 'Traceback' bytes of a data file", {"content-type": ["application/octet-stream"]})
    assert answer_problems("GET", "GET /delta-sharing/files/{key}/{path}", data, forbidden_texts()) == []
