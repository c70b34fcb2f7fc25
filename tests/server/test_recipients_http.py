"""Recipients over HTTP: expiry, hashed tokens, the single bearer token; share and table ids."""

from __future__ import annotations

import datetime as dt
import hashlib

import httpx
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config

P = "/delta-sharing"
EXPIRY = "2030-06-01T00:00:00Z"
EXPIRY_S = dt.datetime(2030, 6, 1, tzinfo=dt.timezone.utc).timestamp()


def _shares(ids: bool = False) -> list[dict]:
    """Three shares, one table each; with ids on the first two shares and on every table but one."""
    out = []
    for i, name in enumerate(("sales", "marketing", "ops")):
        table = {"name": f"t{i}", "location": str(TABLES / "basic_partitioned")}
        if ids and i < 2:
            table["id"] = f"table-id-{i}"
        share = {"name": name, "schemas": [{"name": "s", "tables": [table]}]}
        if ids and i < 2:
            share["id"] = f"share-id-{name}"
        out.append(share)
    if ids:
        out[0]["schemas"][0]["tables"].append({"name": "noid", "location": str(TABLES / "basic_partitioned")})
    return out


def _error(resp, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"errorCode", "message"} and body["errorCode"] == code, body
    return body["message"]


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def recipients_server():
    """Recipients with an expiry and with a sha256-hashed token; a clock the test moves."""
    now = [EXPIRY_S - 60]
    cfg = parse_config(
        {
            "version": 1,
            "shares": _shares(),
            "recipients": [
                {"name": "temp", "tokens": ["temp-token"], "shares": ["sales"], "expirationTime": EXPIRY},
                {
                    "name": "hashed",
                    "tokens": ["sha256:" + hashlib.sha256(b"hashed-secret").hexdigest()],
                    "shares": ["marketing"],
                },
            ],
        }
    )
    server = RunningServer(create_app(cfg, clock=lambda: now[0]))
    yield server, now
    server.stop()


def test_a_recipient_past_its_expiration_time_gets_401_json(recipients_server):
    server, now = recipients_server
    url = server.url + P + "/shares"
    try:
        now[0] = EXPIRY_S - 1
        r = httpx.get(url, headers=_bearer("temp-token"))
        assert r.status_code == 200 and [s["name"] for s in r.json()["items"]] == ["sales"]
        now[0] = EXPIRY_S  # the expiration time itself is already too late
        r = httpx.get(url, headers=_bearer("temp-token"))
        msg = _error(r, 401, "UNAUTHENTICATED")
        assert "expired" in msg and "new profile" in msg
        assert r.headers["www-authenticate"].startswith("Bearer")
        # every endpoint, not only the listing
        r = httpx.get(server.url + P + "/shares/sales/schemas/s/tables/t0/metadata", headers=_bearer("temp-token"))
        _error(r, 401, "UNAUTHENTICATED")
    finally:
        now[0] = EXPIRY_S - 60


def test_a_sha256_token_authenticates_with_the_plain_token(recipients_server):
    server, _ = recipients_server
    url = server.url + P + "/shares"
    r = httpx.get(url, headers=_bearer("hashed-secret"))
    assert r.status_code == 200 and [s["name"] for s in r.json()["items"]] == ["marketing"]
    r = httpx.post(
        server.url + P + "/shares/marketing/schemas/s/tables/t1/query", json={}, headers=_bearer("hashed-secret")
    )
    assert r.status_code == 200, r.text
    # the stored digest is not itself a token, and a wrong token is refused
    digest = hashlib.sha256(b"hashed-secret").hexdigest()
    for wrong in (digest, "sha256:" + digest, "hashed-secre", "hashed-secret2"):
        assert "not valid" in _error(httpx.get(url, headers=_bearer(wrong)), 401, "UNAUTHENTICATED")
    assert "Missing bearer token" in _error(httpx.get(url), 401, "UNAUTHENTICATED")


def test_the_single_bearer_token_reads_every_share():
    cfg = parse_config({"version": 1, "shares": _shares(), "authorization": {"bearerToken": "the-one-token"}})
    server = RunningServer(create_app(cfg))
    try:
        with httpx.Client(base_url=server.url + P, headers=_bearer("the-one-token"), timeout=30) as c:
            assert [s["name"] for s in c.get("/shares").json()["items"]] == ["sales", "marketing", "ops"]
            for i, share in enumerate(("sales", "marketing", "ops")):
                assert c.get(f"/shares/{share}/all-tables").json()["items"] == [
                    {"name": f"t{i}", "schema": "s", "share": share, "accessModes": ["url"]}
                ]
                r = c.post(f"/shares/{share}/schemas/s/tables/t{i}/query", json={})
                assert r.status_code == 200 and len(r.content.splitlines()) > 2, r.text
        _error(httpx.get(server.url + P + "/shares", headers=_bearer("other")), 401, "UNAUTHENTICATED")
        _error(httpx.get(server.url + P + "/shares/ops"), 401, "UNAUTHENTICATED")
    finally:
        server.stop()


#: A table shared the default way: by file URLs only (no location announced).
URL = {"accessModes": ["url"]}


def test_share_and_table_ids_are_the_configured_ones():
    cfg = parse_config({"version": 1, "shares": _shares(ids=True)})
    server = RunningServer(create_app(cfg))
    try:
        with httpx.Client(base_url=server.url + P, timeout=30) as c:
            assert c.get("/shares").json()["items"] == [
                {"name": "sales", "id": "share-id-sales"},
                {"name": "marketing", "id": "share-id-marketing"},
                {"name": "ops"},
            ]
            assert c.get("/shares/SALES").json() == {"share": {"name": "sales", "id": "share-id-sales"}}
            assert c.get("/shares/ops").json() == {"share": {"name": "ops"}}
            sales = [
                {"name": "t0", "schema": "s", "share": "sales", "id": "table-id-0", "shareId": "share-id-sales", **URL},
                {"name": "noid", "schema": "s", "share": "sales", "shareId": "share-id-sales", **URL},
            ]
            assert c.get("/shares/sales/schemas/s/tables").json()["items"] == sales
            assert c.get("/shares/sales/all-tables").json()["items"] == sales
            assert c.get("/shares/marketing/all-tables").json()["items"] == [
                {
                    "name": "t1",
                    "schema": "s",
                    "share": "marketing",
                    "id": "table-id-1",
                    "shareId": "share-id-marketing",
                    **URL,
                }
            ]
            # no ids configured: none invented
            assert c.get("/shares/ops/schemas/s/tables").json()["items"] == [
                {"name": "t2", "schema": "s", "share": "ops", **URL}
            ]
    finally:
        server.stop()
