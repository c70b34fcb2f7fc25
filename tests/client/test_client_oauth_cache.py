"""OAuth client-credentials tokens are fetched once per client credential and shared by every client."""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path

import httpx
import pytest
from client_support import TOKEN, RecordingTransport

import deltaport.client as ds
from deltaport.client.auth import BearerTokenAuth, clear_oauth_cache
from deltaport.client.rest import RestClient

pytest_plugins = ["client_fixtures"]


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_oauth_cache()
    yield
    clear_oauth_cache()


class TokenServer:
    """An OAuth token endpoint in front of the real server; records which client asked for a token."""

    def __init__(self) -> None:
        self.real = RecordingTransport()
        self.clients: list[str] = []
        self.lock = threading.Lock()
        self.transport = httpx.MockTransport(self.handler)

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/oauth/token":
            basic = request.headers["Authorization"].removeprefix("Basic ")
            with self.lock:
                self.clients.append(base64.b64decode(basic).decode().split(":")[0])
            return httpx.Response(200, json={"access_token": TOKEN, "expires_in": 3600})
        return self.real.handle_request(request)


def _profile(tmp_path: Path, sharing_server, client_id: str, name: str) -> str:
    path = tmp_path / f"{name}.share"
    path.write_text(
        json.dumps(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": sharing_server.url + "/delta-sharing",
                "tokenEndpoint": sharing_server.url + "/oauth/token",
                "clientId": client_id,
                "clientSecret": "s3cret",
                "scope": "sharing",
            }
        )
    )
    return str(path)


def test_two_reads_with_one_profile_fetch_one_token(sharing_server, tmp_path):
    tokens = TokenServer()
    path = _profile(tmp_path, sharing_server, "client-1", "one")
    first = ds.load_as_pandas(f"{path}#corpus.default.partitioned", transport=tokens.transport)
    second = ds.load_as_pandas(f"{path}#corpus.default.partitioned", transport=tokens.transport)
    assert len(first) == len(second) == 6
    assert tokens.clients == ["client-1"]
    # a copy of the profile in another file is the same client credential
    copy = _profile(tmp_path, sharing_server, "client-1", "copy")
    assert [s.name for s in ds.SharingClient(copy, transport=tokens.transport).list_shares()] == ["corpus", "second"]
    assert tokens.clients == ["client-1"]
    sharing = [r for r in tokens.real.requests if "/delta-sharing/shares" in r.url.path]
    assert len(sharing) >= 3 and all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in sharing)


def test_another_client_id_fetches_its_own_token(sharing_server, tmp_path):
    tokens = TokenServer()
    one = _profile(tmp_path, sharing_server, "client-1", "one")
    two = _profile(tmp_path, sharing_server, "client-2", "two")
    for path in (one, two, one, two):
        ds.SharingClient(path, transport=tokens.transport).list_shares()
    assert tokens.clients == ["client-1", "client-2"]


def test_concurrent_clients_share_one_fetch(sharing_server, tmp_path):
    tokens = TokenServer()
    path = _profile(tmp_path, sharing_server, "client-1", "one")
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with RestClient(path, transport=tokens.transport) as rest:
                rest.list_shares()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert tokens.clients == ["client-1"]


def test_shared_token_is_refreshed_before_expiry(sharing_server, tmp_path):
    tokens = TokenServer()
    path = _profile(tmp_path, sharing_server, "client-1", "one")
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    with RestClient(path, transport=tokens.transport, clock=clock) as rest:
        rest.list_shares()
    now[0] += 2900  # 700 s of the hour left: still good
    with RestClient(path, transport=tokens.transport, clock=clock) as rest:
        rest.list_shares()
    assert len(tokens.clients) == 1
    now[0] += 200  # 500 s left (< 600): the next client refreshes it
    with RestClient(path, transport=tokens.transport, clock=clock) as rest:
        rest.list_shares()
    assert len(tokens.clients) == 2


def test_bearer_profiles_get_their_own_provider(sharing_profile):
    one, two = RestClient(sharing_profile), RestClient(sharing_profile)
    assert isinstance(one._auth, BearerTokenAuth) and one._auth is not two._auth
