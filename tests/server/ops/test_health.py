"""GET /health: "ok" to anyone (load balancers and start-up waits send no token), naming nothing the
server serves (how many shares it serves is for its metrics, which are private), whoever asks."""

from __future__ import annotations

import httpx
import pytest
from conftest import OTHER_TOKEN, TOKEN, corpus_config
from secret_scan import secrets_used
from servers import RunningServer

from deltaport.server import create_app, parse_config

ADMIN, METRICS, SCRAPER = "health-admin-token-0123", "health-metrics-token-0123", "health-scraper-flag-0123"
secrets_used.add(ADMIN, METRICS, SCRAPER)
CALLERS = ["anonymous", "alice", "bob", "unknown", "admin", "metricsToken", "--metrics-token"]


@pytest.fixture(scope="module")
def health():
    config = parse_config({**corpus_config(), "adminTokens": [ADMIN], "metricsToken": METRICS})
    server = RunningServer(create_app(config, metrics_token=SCRAPER))

    def ask(token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{server.url}/health", headers=headers, timeout=30)

    yield ask
    server.stop()


@pytest.mark.parametrize("token", [None, TOKEN, OTHER_TOKEN, "no-such-token", ADMIN, METRICS, SCRAPER], ids=CALLERS)
def test_health_is_ok_and_names_nothing_for_every_caller(health, token):
    answer = health(token)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
