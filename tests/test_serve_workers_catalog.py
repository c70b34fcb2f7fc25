"""`deltaport serve --workers 2` on a PostgreSQL catalog: a share made through the admin API of
whichever worker answers is served by both; grants and revocations, page tokens and asynchronous
queries (kept in the catalog database) of one worker work on the other, and the queries outlive a
restart of the whole server. One server for the module, restarted once (the last test)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from secret_scan import secrets_used
from servers import ServeProcess
from typer.testing import CliRunner

from deltaport.cli.admin import admin_app
from postgres import postgres_server  # noqa: F401  (the session's cluster)
from workers_support import each_on_a_new_connection, on_every_worker, wait_for_workers

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"
ADMIN = "workers-pg-admin-5d1e"
SECRET = "workers-pg-token-secret-c47a"
secrets_used.add(ADMIN, SECRET, label="a workers catalog test's token")
TABLE = "/delta-sharing/shares/partners/schemas/retail/tables/orders"
ASYNC = {"delta-sharing-capabilities": "asyncquery=true"}
CALLS = 12


class Deployment:
    """`deltaport serve --workers 2` on one PostgreSQL database, and a recipient's bearer token."""

    def __init__(self, catalog: str, workdir: Path) -> None:
        self.config = {
            "version": 1,
            "catalog": catalog,
            "adminTokens": [ADMIN],
            "tokenSecret": SECRET,
            "catalogPollSeconds": 0.2,
            "asyncQueryThresholdMs": 0,  # every asyncquery=true query is answered with a queryId
        }
        self.workdir = workdir
        self.server = self._start()
        self.bearer = ""

    def _start(self) -> ServeProcess:
        server = ServeProcess(self.config, self.workdir, "--workers", "2")
        wait_for_workers(server)
        return server

    def restart(self) -> None:
        self.server.stop()
        assert self.server.proc.wait(30) == 0
        self.server = self._start()

    def admin(self, *args: str) -> str:
        env = {"DELTAPORT_HOST": self.server.url, "DELTAPORT_ADMIN_TOKEN": ADMIN}
        result = CliRunner().invoke(admin_app, list(args), env=env)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    def post(self, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
        """One request on a new connection (so either worker may answer it)."""
        auth = {"Authorization": f"Bearer {self.bearer}", **(headers or {})}
        return httpx.post(f"{self.server.url}{TABLE}{path}", json=body, headers=auth, timeout=30)

    def shares(self) -> list | int:
        """The shares the recipient sees (or the status of the refusal), on a new connection."""
        answer = httpx.get(
            f"{self.server.url}/delta-sharing/shares", headers={"Authorization": f"Bearer {self.bearer}"}
        )
        return [s["name"] for s in answer.json()["items"]] if answer.status_code == 200 else answer.status_code

    def shares_seen(self) -> list:
        return each_on_a_new_connection(CALLS, self.shares)


@pytest.fixture(scope="module")
def deployment(postgres_server, tmp_path_factory) -> Iterator[Deployment]:  # noqa: F811
    made = Deployment(postgres_server.create_database(), tmp_path_factory.mktemp("serve"))
    try:
        made.admin("catalogs", "create", "main", "--storage-root", str(TABLES))
        made.admin("schemas", "create", "main.sales")
        made.admin("tables", "create", "main.sales.orders", "--location", str(TABLES / "basic_partitioned"))
        made.admin("shares", "create", "partners")
        made.admin("shares", "add-table", "partners", "main.sales.orders", "--as", "retail.orders")
        made_recipient = made.admin("recipients", "create", "acme")
        link = next(line for line in made_recipient.splitlines() if "activation link" in line)
        profile = httpx.get(
            f"{made.server.url}/api/2.1/unity-catalog/public/data_sharing_activation/{link.rsplit('/', 1)[1]}"
        )
        assert profile.status_code == 200, profile.text
        made.bearer = profile.json()["bearerToken"]
        secrets_used.add(made.bearer, label="a workers catalog test's recipient token")
        made.admin("shares", "grant", "partners", "acme")
        _until(made.shares_seen, [["partners"]] * CALLS)
        yield made
    finally:
        made.server.stop()


def _until(seen, expected, seconds: float = 20) -> None:
    deadline = time.time() + seconds
    while (now := seen()) != expected:
        assert time.time() < deadline, now
        time.sleep(0.3)


def _lines(answer: httpx.Response) -> list[dict]:
    assert answer.status_code == 200, answer.text
    return [orjson.loads(line) for line in answer.text.splitlines() if line.strip()]


def _files(answer: httpx.Response) -> list[tuple]:
    """The files of a query's answer, without their (per-request) URLs."""
    return sorted((f["file"]["id"], f["file"]["size"]) for f in _lines(answer) if "file" in f)


def _submitted(deployment: Deployment) -> str:
    answer = deployment.post("/query", {}, ASYNC)
    lines = _lines(answer)
    assert answer.headers["delta-sharing-capabilities"] == "asyncquery=true"
    assert len(lines) == 1 and lines[0]["queryStatus"]["status"] == "pending", lines
    return lines[0]["queryStatus"]["queryId"]


def _polled(deployment: Deployment, query_id: str, seconds: float = 20) -> httpx.Response:
    """The first answer of ``…/queries/{id}`` that is not pending, each poll on a new connection."""
    deadline = time.monotonic() + seconds
    while True:
        answer = deployment.post(f"/queries/{query_id}", {})
        if _lines(answer)[0].get("queryStatus", {}).get("status") != "pending":
            return answer
        assert time.monotonic() < deadline, "the query stayed pending"
        time.sleep(0.05)


def test_grants_and_revocations_are_seen_by_every_worker(deployment):
    deployment.admin("shares", "revoke", "partners", "acme")
    _until(deployment.shares_seen, [[]] * CALLS)
    assert all(seen == [] for seen in on_every_worker(deployment.server, deployment.shares))
    deployment.admin("shares", "grant", "partners", "acme")
    _until(deployment.shares_seen, [["partners"]] * CALLS)
    assert all(seen == ["partners"] for seen in on_every_worker(deployment.server, deployment.shares))


def _paged(deployment: Deployment) -> list[tuple]:
    """The table's files read a page of one file at a time, each page on a new connection."""
    paged, token = [], None
    while True:
        page = _lines(deployment.post("/query", {"maxFiles": 1, **({"pageToken": token} if token else {})}))
        paged += [(f["file"]["id"], f["file"]["size"]) for f in page if "file" in f]
        token = page[-1]["endStreamAction"].get("nextPageToken")
        if not token:
            return paged


def test_page_tokens_of_one_worker_continue_on_the_other(deployment):
    everything = _files(deployment.post("/query", {}))
    assert len(everything) >= 4  # several pages
    readings = on_every_worker(deployment.server, lambda: _paged(deployment), calls=4)  # readers at once
    assert all(sorted(paged) == everything and len(paged) == len(everything) for paged in readings)


def test_an_async_query_of_one_worker_is_polled_on_every_worker(deployment):
    query_id = _submitted(deployment)
    sync = _files(deployment.post("/query", {}))
    polls = on_every_worker(deployment.server, lambda: _polled(deployment, query_id))
    assert all(_files(answer) == sync for answer in polls) and sync
    forged = f"{query_id[:-2]}xx"
    unknown = on_every_worker(deployment.server, lambda: deployment.post(f"/queries/{forged}", {}))
    assert {answer.status_code for answer in unknown} == {404}
    assert {answer.json()["errorCode"] for answer in unknown} == {"RESOURCE_DOES_NOT_EXIST"}


def test_async_queries_outlive_a_restart_of_the_whole_server(deployment):
    """The state is in the catalog database and the ids are signed with the config's tokenSecret:
    after a restart every new worker polls a query taken before it to its result, one polled
    before the restart as well as one not polled yet."""
    polled = _submitted(deployment)
    before = _files(_polled(deployment, polled))
    unpolled = _submitted(deployment)
    deployment.restart()
    for query_id in (polled, unpolled):
        polls = on_every_worker(deployment.server, lambda query_id=query_id: _polled(deployment, query_id))
        assert all(_files(answer) == before for answer in polls) and before
