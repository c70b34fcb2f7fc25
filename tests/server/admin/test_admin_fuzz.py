"""Schemathesis over the admin API, bounded for the suite: the server's own /openapi.json, every
admin operation (and the public activation routes) in both generation modes with a fixed seed,
~1,000 requests against a server whose SQLite catalog holds real tables, shares and recipients (see
admin_fuzz_support.py for what is generated and what every answer must satisfy;
``benchmarks/fuzz_server.py --admin`` runs 10,000+).
"""

from __future__ import annotations

import httpx
import orjson
import pytest
from admin_fuzz_support import (
    ADMIN_TOKEN,
    FILE_SECRET,
    TOKEN_SECRET,
    AdminFuzzer,
    AdminWorld,
    Tally,
    admin_answer_problems,
    admin_app,
    load_schema,
)
from secret_scan import secrets_used
from servers import RunningServer

secrets_used.add(ADMIN_TOKEN, label="the admin fuzzing server's admin token")
secrets_used.add(FILE_SECRET.decode(), label="the admin fuzzing server's file-URL secret")
secrets_used.add(TOKEN_SECRET, label="the admin fuzzing server's page-token secret")

SEED = 20260801
EXAMPLES = 18  # per operation and generation mode
U = "/api/2.1/unity-catalog"
ROUTES = {
    f"POST {U}/catalogs",
    f"GET {U}/catalogs",
    f"GET {U}/catalogs/{{name}}",
    f"PATCH {U}/catalogs/{{name}}",
    f"DELETE {U}/catalogs/{{name}}",
    f"POST {U}/schemas",
    f"GET {U}/schemas",
    f"GET {U}/schemas/{{full_name}}",
    f"PATCH {U}/schemas/{{full_name}}",
    f"DELETE {U}/schemas/{{full_name}}",
    f"POST {U}/tables",
    f"GET {U}/tables",
    f"GET {U}/tables/{{full_name}}",
    f"GET {U}/tables/{{full_name}}/exists",
    f"DELETE {U}/tables/{{full_name}}",
    f"POST {U}/shares",
    f"GET {U}/shares",
    f"GET {U}/shares/{{name}}",
    f"PATCH {U}/shares/{{name}}",
    f"DELETE {U}/shares/{{name}}",
    f"GET {U}/shares/{{name}}/permissions",
    f"PATCH {U}/shares/{{name}}/permissions",
    f"GET {U}/recipients/{{name}}/share-permissions",
    f"POST {U}/recipients",
    f"GET {U}/recipients",
    f"GET {U}/recipients/{{name}}",
    f"PATCH {U}/recipients/{{name}}",
    f"DELETE {U}/recipients/{{name}}",
    f"POST {U}/recipients/{{name}}/rotate-token",
    f"GET {U}/public/data_sharing_activation/{{activation_token}}",
    "GET /delta_sharing/activate/{activation_token}",
}
#: Routes whose success needs a combination the steering makes too rarely for a bounded run: a
#: Delta table at a free location under a fresh valid name, a live activation link.
RARELY_2XX = {f"POST {U}/tables", f"GET {U}/public/data_sharing_activation/{{activation_token}}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    made = AdminWorld.create(tmp_path_factory.mktemp("admin-fuzz"))
    yield made
    made.db.close()


@pytest.fixture(scope="module")
def fuzz_server(world):
    server = RunningServer(admin_app(world))
    world.collect_page_tokens(server.url)
    yield server
    server.stop()


def test_generated_admin_requests_get_unity_catalog_answers(world, fuzz_server):
    tally = Tally()
    fuzzer = AdminFuzzer(load_schema(fuzz_server.url), fuzz_server.url, world, tally)
    for bearer in world.bearers:
        secrets_used.add(bearer, label="an admin fuzzing recipient's bearer token")
    fuzzer.run(EXAMPLES, SEED)
    for bearer in world.bearers:  # recipients the run deleted were seeded again, with new tokens
        secrets_used.add(bearer, label="an admin fuzzing recipient's bearer token")
    report = tally.report()
    print(report)  # shown by pytest when the test fails
    assert tally.failures == [], report + "\n" + "\n".join(str(f) for f in tally.failures[:20])
    documented = {f"{op.method.upper()} {op.path}" for op in fuzzer.operations()}
    assert documented >= ROUTES  # the admin API is in the server's own document
    assert set(tally.requests) == documented  # and every operation of it was fuzzed
    assert 800 <= tally.total <= 2000, report
    assert tally.seconds < 90, report
    statuses = {route: {status // 100 for (r, status) in tally.statuses if r == route} for route in ROUTES}
    for route in ROUTES - RARELY_2XX:  # the steering works: each route answered and refused
        assert {2, 4} <= statuses[route], (route, report)
    for kind in (400, 401, 403, 404, 409):  # bad input, no or a wrong token, a spent link, missing, taken
        assert any(status == kind for (_, status) in tally.statuses), (kind, report)


def test_the_catalog_still_serves_after_the_fuzzing(world, fuzz_server):
    """Whatever the generated writes did, the catalog stays whole: the seed is back, a new
    recipient activates and reads a seeded share over the protocol."""
    world.seed()
    admin = httpx.Client(base_url=fuzz_server.url + U, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with admin:
        made = admin.post("/recipients", json={"name": "after-fuzzing"})
        assert made.status_code == 200, made.text
        granted = admin.patch(
            "/shares/fuzz/permissions", json={"changes": [{"principal": "after-fuzzing", "add": ["SELECT"]}]}
        )
        assert granted.status_code == 200, granted.text
    link = made.json()["activation_url"].rsplit("/", 1)[1]
    profile = httpx.get(f"{fuzz_server.url}{U}/public/data_sharing_activation/{link}")
    assert profile.status_code == 200
    bearer = profile.json()["bearerToken"]
    secrets_used.add(bearer, label="a recipient's bearer token")
    tables = httpx.get(
        profile.json()["endpoint"] + "/shares/fuzz/all-tables", headers={"Authorization": f"Bearer {bearer}"}
    )
    assert tables.status_code == 200, tables.text
    assert {"orders", "changes"} <= {t["name"] for t in tables.json()["items"]}


class _Answer:
    def __init__(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.status_code = status
        self.content = body
        self.headers = {"content-type": ["application/json"], **(headers or {})}


def _error(message: str = "share 'x' does not exist: create it first") -> bytes:
    return orjson.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": message})


def _bad_answers(world: AdminWorld) -> list[tuple[_Answer, str]]:
    return [
        (_Answer(500, _error("")), "server error 500"),
        (_Answer(503, _error(), {"retry-after": ["5"]}), "server error 503"),
        (_Answer(404, b"not found", {"content-type": ["text/plain"]}), "error is not JSON"),
        (_Answer(400, b"{", {}), "error body does not parse as JSON"),
        (_Answer(404, orjson.dumps({"errorCode": "X", "message": "m"})), "not exactly error_code and message"),
        (_Answer(400, orjson.dumps({"error_code": "X", "message": ""})), "not a non-empty string"),
        (_Answer(400, _error(f"cannot open {world.db_dir}/catalog.db")), "leaks where the catalog database is"),
        (_Answer(401, _error(), {"www-authenticate": [f"Bearer {ADMIN_TOKEN}"]}), "leaks the admin token"),
        (_Answer(200, orjson.dumps({"bearer": world.bearers[0]})), "leaks recipient bearer token #0"),
        (_Answer(400, _error('Traceback (most recent call last):\n  File "x.py", line 1')), "leaks a traceback"),
        (_Answer(400, _error("no table at /srv/private/tables/t")), "shows a path the request did not name"),
        (_Answer(200, b"[1, 2]"), "not a JSON object"),
    ]


def test_the_properties_catch_a_bad_answer(world):
    route = f"GET {U}/shares/{{name}}"
    for answer, problem in _bad_answers(world):
        problems = admin_answer_problems("GET", route, answer, world.forbidden(), [str(world.root)], [])
        assert any(problem in p for p in problems), (problem, problems)


def test_the_properties_pass_a_good_answer(world):
    route = f"GET {U}/tables/{{full_name}}"
    table = orjson.dumps({"storage_location": str(world.root / "orders")})
    allowed = [str(world.root)]
    assert admin_answer_problems("GET", route, _Answer(200, table), world.forbidden(), allowed, []) == []
    named = _error("'/srv/given/by/the/request' is not a readable Delta table")
    assert admin_answer_problems("GET", route, _Answer(400, named), {}, allowed, ["/srv/given/by/the/request"]) == []
    page = _Answer(200, b"<html></html>", {"content-type": ["text/html"]})
    assert admin_answer_problems("GET", "GET /delta_sharing/activate/{t}", page, world.forbidden(), [], []) == []
    protocol = _Answer(404, orjson.dumps({"errorCode": "RESOURCE_DOES_NOT_EXIST", "message": "no such link"}))
    assert admin_answer_problems("GET", "GET /delta_sharing/activate/{t}", protocol, {}, [], []) == []
