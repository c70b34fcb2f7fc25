"""Prometheus metrics at /metrics: label values after real requests (route templates, methods,
statuses), files and bytes served per recipient and share, downloads, active streams, the snapshot
cache, a token for the scraper, one registry per app, and several worker processes added up."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import orjson
import pytest
from conftest import OTHER_TOKEN, TABLES, TOKEN, corpus_config
from prometheus_client.parser import text_string_to_metric_families
from secret_scan import secrets_used
from servers import RunningServer, ServeProcess

from deltaport.delta import SnapshotCache
from deltaport.server import create_app, parse_config
from deltaport.signing import SignedUrl

P = "/delta-sharing"
T = P + "/shares/corpus/schemas/default/tables"
TEMPLATE = "/shares/{share}/schemas/{schema}/tables/{table}"
ALICE = {"Authorization": f"Bearer {TOKEN}"}
METRICS_TOKEN = "metrics-scraper-token-3f9a"
secrets_used.add(METRICS_TOKEN, label="the metrics test's scraper token")
SCRAPER = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def scrape(client: httpx.Client) -> dict[str, dict[tuple, float]]:
    """Every sample of /metrics (scraped with the metrics token): name -> sorted label items -> value."""
    response = client.get("/metrics", headers=SCRAPER)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


@pytest.fixture(scope="module")
def served():
    """The corpus server with its snapshot cache at hand."""
    cache = SnapshotCache()
    server = RunningServer(create_app(parse_config(corpus_config()), cache=cache, metrics_token=METRICS_TOKEN))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client, cache
    server.stop()


def test_requests_are_counted_by_route_template_method_and_status(served):
    client, _ = served
    before = scrape(client)
    calls = [
        ("GET", P + "/shares", ALICE, 200, "/shares"),
        ("GET", P + "/shares/corpus", ALICE, 200, "/shares/{share}"),
        ("GET", P + "/shares/nope", ALICE, 404, "/shares/{share}"),
        ("GET", P + "/shares", {}, 401, "/shares"),
        ("GET", T + "/partitioned/version", ALICE, 200, TEMPLATE + "/version"),  # a hot path
        ("GET", T + "/cdf/metadata?version=1", ALICE, 200, TEMPLATE + "/metadata"),  # a hot path
        ("GET", T + "/cdf/metadata?versoin=1", ALICE, 400, TEMPLATE + "/metadata"),  # the route
        ("HEAD", T + "/partitioned", ALICE, 200, TEMPLATE),
        ("POST", T + "/partitioned/query", ALICE, 200, TEMPLATE + "/query"),
        ("GET", T + "/cdf/changes?startingVersion=0", ALICE, 200, TEMPLATE + "/changes"),
        ("GET", "/health", {}, 200, "/health"),
        ("GET", P + "/no/such/thing", ALICE, 404, "other"),
        ("GET", T + "/partitioned/nope", ALICE, 404, "other"),
    ]
    for method, url, headers, status, _ in calls:
        kwargs = {"json": {}} if method == "POST" else {}
        assert client.request(method, url, headers=headers, **kwargs).status_code == status, url
    after = scrape(client)
    expected: dict[tuple, int] = {}
    for method, _, _, status, route in calls:
        key = (("method", method), ("route", route), ("status", str(status)))
        expected[key] = expected.get(key, 0) + 1
    for key, count in expected.items():
        labels = dict(key)
        assert (
            value(after, "deltaport_requests_total", **labels) - value(before, "deltaport_requests_total", **labels)
            == count
        ), labels
        timed = {"route": labels["route"], "method": labels["method"]}
        assert value(after, "deltaport_request_duration_seconds_count", **timed) >= count
    routes = {dict(k)["route"] for k in after["deltaport_requests_total"]}
    assert not any(name in route for route in routes for name in ("corpus", "partitioned", "cdf", "nope"))


def test_methods_outside_http_s_own_are_one_label(served):
    client, _ = served
    before = scrape(client)
    for method in ("PROPFIND", "MKCOL", "LOCK"):
        assert client.request(method, P + "/shares", headers=ALICE).status_code == 405
    after = scrape(client)
    labels = {"route": "/shares", "method": "other", "status": "405"}
    assert value(after, "deltaport_requests_total", **labels) - value(before, "deltaport_requests_total", **labels) == 3
    assert not any(m in str(after) for m in ("PROPFIND", "MKCOL", "LOCK"))


def _file_lines(response: httpx.Response) -> list[dict]:
    lines = [orjson.loads(x) for x in response.content.splitlines()]
    return [x["file"] for x in lines if "file" in x] + [x["add"] for x in lines if "add" in x]


def test_files_and_bytes_served_per_recipient_and_share(served):
    client, _ = served
    before = scrape(client)
    files = _file_lines(client.post(T + "/partitioned/query", json={}, headers=ALICE))
    bob = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    bobs = _file_lines(client.post(P + "/shares/other/schemas/s/tables/t/query", json={"limitHint": 1}, headers=bob))
    changes = client.get(T + "/cdf/changes?startingVersion=0", headers=ALICE)
    cdf = [orjson.loads(x) for x in changes.content.splitlines()]
    cdf_files = [next(iter(x.values())) for x in cdf if {"add", "cdf", "remove"} & set(x)]
    after = scrape(client)
    assert files and bobs and cdf_files

    def grew(name: str, recipient: str, share: str) -> float:
        labels = {"recipient": recipient, "share": share}
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("deltaport_files_served_total", "alice", "corpus") == len(files) + len(cdf_files)
    assert grew("deltaport_bytes_served_total", "alice", "corpus") == sum(f["size"] for f in files + cdf_files)
    assert grew("deltaport_files_served_total", "bob", "other") == len(bobs)
    assert grew("deltaport_bytes_served_total", "bob", "other") == sum(f["size"] for f in bobs)


def test_downloads_count_the_bytes_sent_and_no_secret_reaches_a_label(served):
    client, _ = served
    files = _file_lines(client.post(T + "/partitioned/query", json={}, headers=ALICE))
    url = files[0]["url"]
    before = scrape(client)
    whole = client.get(url)
    part = client.get(url, headers={"Range": "bytes=0-9"})
    assert whole.status_code == 200 and part.status_code == 206 and len(part.content) == 10
    assert client.head(url).status_code == 200
    text = client.get("/metrics", headers=SCRAPER).text
    after = scrape(client)
    labels = {"recipient": "alice", "share": "corpus"}
    sent = value(after, "deltaport_download_bytes_total", **labels) - value(
        before, "deltaport_download_bytes_total", **labels
    )
    assert sent == len(whole.content) + 10
    download = {"route": "/files/{key}/{path:path}", "method": "GET", "status": "206"}
    assert value(after, "deltaport_requests_total", **download) >= 1
    query = url.split("?", 1)[1]
    assert TOKEN not in text and query not in text and url.split("?")[0].rsplit("/", 1)[-1] not in text


def test_the_snapshot_cache_figures_are_the_cache_s(served):
    client, cache = served
    for _ in range(2):
        assert client.get(T + "/cdf/metadata?version=2", headers=ALICE).status_code == 200
    after = scrape(client)
    assert cache.hits >= 1 and cache.misses >= 1
    assert value(after, "deltaport_snapshot_cache_hits_total") == cache.hits
    assert value(after, "deltaport_snapshot_cache_misses_total") == cache.misses
    assert value(after, "deltaport_snapshot_cache_entries") == len(cache) >= 1
    assert value(after, "deltaport_snapshot_cache_bytes") == cache.bytes_held > 0


def test_the_cache_counts_its_lookups():
    cache = SnapshotCache()
    assert cache.get("memory:///t", 0) is None and (cache.hits, cache.misses) == (0, 1)


class _HeldSigner:
    """Signs once let go: a response streams (its first line sent) until then."""

    def __init__(self) -> None:
        self.signing, self.go = threading.Event(), threading.Event()

    def sign(self, path: str, *, expires_in: int, now: float | None = None) -> SignedUrl:
        self.signing.set()
        assert self.go.wait(30)
        return SignedUrl(f"https://files.test/{path}", 1)


def test_active_streams_count_a_stream_while_it_is_sent_and_return_to_zero():
    signer = _HeldSigner()
    cfg = {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            }
        ],
    }
    server = RunningServer(
        create_app(parse_config(cfg), signer=lambda shared, base, who: signer, metrics_token=METRICS_TOKEN)
    )
    done: list[httpx.Response] = []
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            query = threading.Thread(
                target=lambda: done.append(client.post(P + "/shares/s/schemas/d/tables/t/query", json={}))
            )
            query.start()
            try:
                assert signer.signing.wait(30)
                assert value(scrape(client), "deltaport_active_streams") == 1
            finally:
                signer.go.set()
                query.join(30)
            assert done and done[0].status_code == 200 and b'"file"' in done[0].content
            deadline = time.monotonic() + 10  # the stream's task ends a moment after its last byte
            while value(scrape(client), "deltaport_active_streams") != 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert value(scrape(client), "deltaport_active_streams") == 0
    finally:
        server.stop()


ADMIN_TOKEN = "metrics-test-admin-token-77c1"
secrets_used.add(ADMIN_TOKEN, label="the metrics test's admin token")


def _refused(response: httpx.Response) -> bool:
    return (
        response.status_code == 401
        and response.json()["errorCode"] == "UNAUTHENTICATED"
        and "metrics token" in response.json()["message"]
        and response.headers["www-authenticate"].startswith("Bearer")
        and "deltaport_" not in response.text
    )


@pytest.mark.parametrize(
    "config",
    [{"metricsToken": METRICS_TOKEN}, {"metricsToken": "sha256:" + hashlib.sha256(METRICS_TOKEN.encode()).hexdigest()}],
    ids=["plain", "sha256"],
)
def test_metrics_need_the_metrics_token_or_an_admin_token(config):
    server = RunningServer(create_app(parse_config({**corpus_config(), **config, "adminTokens": [ADMIN_TOKEN]})))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.post(T + "/partitioned/query", json={}, headers=ALICE).status_code == 200
            wrong = ({}, {"Authorization": "Bearer wrong"}, ALICE, {"Authorization": f"Bearer {OTHER_TOKEN}"})
            for headers in (*wrong, {"Authorization": METRICS_TOKEN}, {"Authorization": f"Basic {METRICS_TOKEN}"}):
                assert _refused(client.get("/metrics", headers=headers)), headers
            for token in (METRICS_TOKEN, ADMIN_TOKEN):
                scraped = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
                assert scraped.status_code == 200
                assert 'deltaport_files_served_total{recipient="alice",share="corpus"}' in scraped.text
    finally:
        server.stop()


def test_without_a_token_or_an_admin_listener_metrics_are_not_served():
    app = create_app(parse_config(corpus_config()))
    server = RunningServer(app)
    try:
        for headers in ({}, ALICE, {"Authorization": f"Bearer {OTHER_TOKEN}"}):
            response = httpx.get(server.url + "/metrics", headers=headers, timeout=30)
            assert response.status_code == 404 and response.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
        assert app.state.metrics_at is None
    finally:
        server.stop()


@pytest.mark.parametrize("admin_tokens", [[], [ADMIN_TOKEN]], ids=["no-admin-token", "admin-token"])
def test_with_an_admin_listener_metrics_are_served_there_only(tmp_path, admin_tokens):
    config = {"version": 1, "catalog": str(tmp_path / "c.db"), "adminPort": 0, "adminTokens": admin_tokens}
    app = create_app(parse_config(config, base=tmp_path))
    server, admin = RunningServer(app), RunningServer(app.state.admin_app)
    try:
        assert httpx.get(server.url + "/health", timeout=30).status_code == 200
        with_admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert httpx.get(server.url + "/metrics", headers=with_admin, timeout=30).status_code == 404
        scraped = httpx.get(admin.url + "/metrics", headers=with_admin, timeout=30)
        assert scraped.status_code == 200 and 'route="/health"' in scraped.text
        anonymous = httpx.get(admin.url + "/metrics", timeout=30)
        assert anonymous.status_code == 200 if not admin_tokens else _refused(anonymous)
    finally:
        admin.stop()
        server.stop()


def test_deltaport_serve_takes_a_metrics_token_and_says_where_metrics_are(tmp_path):
    server = ServeProcess(corpus_config(), tmp_path, "--metrics-token", METRICS_TOKEN)
    try:
        assert _refused(httpx.get(server.url + "/metrics", headers=ALICE, timeout=30))
        assert httpx.get(server.url + "/metrics", headers=SCRAPER, timeout=30).status_code == 200
    finally:
        server.stop()
    assert "metrics: /metrics on the recipients' port, with a metrics or admin token" in server.log.read_text()
    (tmp_path / "quiet").mkdir()
    quiet = ServeProcess(corpus_config(), tmp_path / "quiet")
    try:
        assert httpx.get(quiet.url + "/metrics", headers=ALICE, timeout=30).status_code == 404
    finally:
        quiet.stop()
    assert "metrics: /metrics is not served; give the server a metrics token" in quiet.log.read_text()


def test_two_apps_in_one_process_keep_their_own_metrics():
    first, second = (
        RunningServer(create_app(parse_config(corpus_config()), metrics_token=METRICS_TOKEN)) for _ in range(2)
    )
    try:
        with httpx.Client(base_url=first.url) as one, httpx.Client(base_url=second.url) as two:
            for _ in range(3):
                assert one.get("/health").status_code == 200
            assert two.get("/health").status_code == 200
            health = {"route": "/health", "method": "GET", "status": "200"}
            assert value(scrape(one), "deltaport_requests_total", **health) == 3
            assert value(scrape(two), "deltaport_requests_total", **health) == 1
    finally:
        first.stop()
        second.stop()


def test_without_metrics_there_is_no_endpoint():
    server = RunningServer(create_app(parse_config(corpus_config()), metrics=False, metrics_token=METRICS_TOKEN))
    try:
        response = httpx.get(server.url + "/metrics", headers=SCRAPER)
        assert response.status_code == 404 and response.headers["x-request-id"]
    finally:
        server.stop()


_WORKER = textwrap.dedent(
    """
    import sys
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # starlette's TestClient on httpx
    from starlette.testclient import TestClient
    from deltaport.delta import SnapshotCache
    from deltaport.server import create_app, parse_config

    table = sys.argv[1]
    cache = SnapshotCache()
    schema = {"name": "d", "tables": [{"name": "t", "location": table}]}
    config = {"version": 1, "shares": [{"name": "s", "schemas": [schema]}]}
    with TestClient(create_app(parse_config(config), cache=cache, metrics_token="scraper")) as client:
        for _ in range(int(sys.argv[2])):
            assert client.get("/health").status_code == 200
        assert client.get("/delta-sharing/shares/s/schemas/d/tables/t/metadata").status_code == 200
        scraper = {"Authorization": "Bearer scraper"}
        scraped = client.get("/metrics", headers=scraper).text if sys.argv[3] == "scrape" else ""
    print(f"{cache.misses} {len(cache)}")
    print(scraped)
    """
)


def _worker(directory, health_calls: int, scrape_after: bool) -> tuple[int, int, str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _WORKER,
            str(TABLES / "basic_partitioned"),
            str(health_calls),
            "scrape" if scrape_after else "-",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    first, _, scraped = done.stdout.partition("\n")
    misses, entries = map(int, first.split())
    return misses, entries, scraped


def test_several_worker_processes_are_added_up(tmp_path):
    first_misses, _, _ = _worker(tmp_path, 2, scrape_after=False)  # a worker that served and stopped
    second_misses, second_entries, text = _worker(tmp_path, 3, scrape_after=True)
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    assert value(samples, "deltaport_requests_total", route="/health", method="GET", status="200") == 5
    metadata = {"route": TEMPLATE + "/metadata", "method": "GET", "status": "200"}
    assert value(samples, "deltaport_requests_total", **metadata) == 2
    assert first_misses >= 1 and second_misses >= 1
    assert value(samples, "deltaport_snapshot_cache_misses_total") == first_misses + second_misses
    assert value(samples, "deltaport_snapshot_cache_entries") == second_entries  # the stopped worker's is gone
    assert value(samples, "deltaport_active_streams") == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("gauge_livesum")]  # both marked dead
