"""``GET /api/2.1/unity-catalog/audit-events`` on a real server over loopback: events stored in the
catalog database (directly, and by real protocol requests through the audit log) read back
filtered and paged, bad parameters refused in Unity Catalog's shape, only admin tokens let in."""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass

import httpx
import orjson
import pytest
from secret_scan import secrets_used
from test_admin_sdk import ADMIN, ENDPOINT

from deltaport.catalog.model import AuditEvent
from deltaport.catalog.store import CatalogDB
from deltaport.server import AuditLog, create_app, parse_config
from deltaport.server.admin.activation import ACTIVATION_API
from deltaport.server.admin.audit_routes import AuditQuery
from deltaport.server.sharing.tokens import TokenBinding, TokenCodec

ROUTE = "/api/2.1/unity-catalog/audit-events"
SECRET = "audit-route-page-token-secret"
secrets_used.add(SECRET, label="the page token secret")


@dataclass
class Audited:
    url: str
    catalog: CatalogDB
    audit: AuditLog
    admin: httpx.Client

    def list(self, **params) -> dict:
        response = self.admin.get(ROUTE, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def everything(self, **params) -> list[dict]:
        """Every page, following next_page_token; asserts each page but the last says more follow."""
        events, token = [], None
        while True:
            body = self.list(**params, **({"page_token": token} if token else {}))
            events += body["events"]
            token = body.get("next_page_token")
            if token is None:
                return events
            assert body["events"], "a page that says more follow is never empty"


@pytest.fixture
def audited(tmp_path):
    from servers import RunningServer

    config = parse_config(
        {
            "version": 1,
            "catalog": str(tmp_path / "catalog.db"),
            "adminTokens": [ADMIN],
            "tokenSecret": SECRET,
            "catalogPollSeconds": 0.2,
        },
        base=tmp_path,
    )
    catalog = CatalogDB(config.catalog_url)
    audit = AuditLog([catalog.add_audit_block], flush_every_s=0.05)
    server = RunningServer(create_app(config, catalog=catalog, audit=audit))
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    yield Audited(server.url, catalog, audit, admin)
    admin.close()
    server.stop()
    audit.close()
    catalog.close()


def _event(n: int, **fields) -> AuditEvent:
    values = {"time": 1_000_000 + n, "request_id": f"req-{n}", "principal": "alice", "action": "queryTable"}
    return AuditEvent(**{**values, "status": 200, **fields})


def _ids(events: list[dict]) -> list[str]:
    return [e["request_id"] for e in events]


def test_an_event_shows_every_field_it_has_and_no_empty_one(audited):
    full = _event(
        1,
        client_ip="10.1.2.3",
        user_agent="curl/8",
        share="Sales",
        schema="retail",
        table="orders",
        version=7,
        files=3,
        bytes=4096,
        duration_ms=12.5,
        detail={"predicate": "x > 1"},
    )
    bare = _event(2, principal="anonymous", action="getShare", status=404)
    audited.catalog.add_audit_events([full, bare])
    events = audited.list()["events"]
    assert events[0] == {
        "time": 1_000_001,
        "request_id": "req-1",
        "principal": "alice",
        "action": "queryTable",
        "status": 200,
        "client_ip": "10.1.2.3",
        "user_agent": "curl/8",
        "share": "Sales",
        "schema": "retail",
        "table": "orders",
        "version": 7,
        "files": 3,
        "bytes": 4096,
        "duration_ms": 12.5,
        "detail": {"predicate": "x > 1"},
    }
    assert events[1] == {
        "time": 1_000_002,
        "request_id": "req-2",
        "principal": "anonymous",
        "action": "getShare",
        "status": 404,
    }
    assert "next_page_token" not in audited.list()


def test_filters_by_time_principal_action_and_share(audited):
    audited.catalog.add_audit_events(
        [
            _event(0, share="sales"),
            _event(1, principal="bob", share="Sales"),
            _event(2, action="downloadFile", share="other"),
            _event(3, principal="admin:admin", action="createShare", share="SALES"),
            _event(4, principal="bob", action="downloadFile"),
        ]
    )
    assert _ids(audited.list()["events"]) == [f"req-{i}" for i in range(5)]
    # [start_time, end_time): the start is in, the end is out
    assert _ids(audited.list(start_time=1_000_001, end_time=1_000_003)["events"]) == ["req-1", "req-2"]
    assert _ids(audited.list(start_time=1_000_003)["events"]) == ["req-3", "req-4"]
    assert _ids(audited.list(end_time=1_000_001)["events"]) == ["req-0"]
    assert _ids(audited.list(principal="bob")["events"]) == ["req-1", "req-4"]
    assert _ids(audited.list(action="downloadFile")["events"]) == ["req-2", "req-4"]
    assert _ids(audited.list(share="sAlEs")["events"]) == ["req-0", "req-1", "req-3"]  # any case
    assert _ids(audited.list(share="sales", principal="bob")["events"]) == ["req-1"]
    assert _ids(audited.list(principal="Bob")["events"]) == []  # principals match exactly
    assert _ids(audited.list(action="downloadFile", start_time=1_000_003)["events"]) == ["req-4"]
    assert audited.list(start_time=2_000_000) == {"events": []}


def test_paging_reads_everything_once_in_order_even_while_events_arrive(audited):
    audited.catalog.add_audit_events([_event(n) for n in range(23)])
    pages, token, seen = 0, None, []
    while True:
        body = audited.list(max_results=5, **({"page_token": token} if token else {}))
        pages += 1
        assert len(body["events"]) <= 5
        seen += _ids(body["events"])
        if pages == 2:  # an event stored mid-listing comes on a later page, after the ones before it
            audited.catalog.add_audit_events([_event(99)])
        token = body.get("next_page_token")
        if token is None:
            break
    assert seen == [f"req-{n}" for n in range(23)] + ["req-99"]
    assert pages == 5  # 24 events, 5 a page
    exactly = audited.list(max_results=24)
    assert len(exactly["events"]) == 24 and "next_page_token" not in exactly  # no empty last page


def test_paging_keeps_the_filters(audited):
    audited.catalog.add_audit_events([_event(n, principal="bob" if n % 3 == 0 else "alice") for n in range(20)])
    got = audited.everything(principal="bob", max_results=2)
    assert _ids(got) == [f"req-{n}" for n in range(0, 20, 3)]
    assert _ids(audited.everything(max_results=1000)) == [f"req-{n}" for n in range(20)]


def _payload(token: str) -> dict:
    body = token.split(".")[0]
    return orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def _token(codec: TokenCodec, after: int) -> str:
    """A page token as the server makes them for the listing without filters, signed by ``codec``."""
    params = AuditQuery(None, None, None, None, None).checksum()
    return codec.encode("list", TokenBinding("admin", "admin:audit"), {"a": after}, ttl_ms=86_400_000, params=params)


def _forged_tokens(audited) -> dict[str, str]:
    """Page tokens the server must refuse: forged, expired, from another listing, for other filters."""
    audited.catalog.add_audit_events([_event(n) for n in range(3)])
    issued = audited.list(max_results=1)["next_page_token"]
    expired = TokenCodec(SECRET.encode(), clock=lambda: time.time() - 2 * 86_400)
    for n in range(3):
        audited.admin.post("/api/2.1/unity-catalog/shares", json={"name": f"s{n}"}).raise_for_status()
    shares_token = audited.admin.get("/api/2.1/unity-catalog/shares", params={"max_results": 1}).json()
    payload, mac = _payload(issued), issued.split(".")[1]
    payload["d"]["a"] = 0  # another start, the old signature
    tampered = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode() + "." + mac
    return {
        "garbage": "not-a-token",
        "tampered": tampered,
        "other secret": _token(TokenCodec(b"another server's secret"), 1),
        "expired": _token(expired, 1),
        "another listing": shares_token["next_page_token"],
        "other filters": issued,  # sent below with principal=alice
    }


def test_forged_expired_or_misused_page_tokens_are_refused(audited):
    for what, token in _forged_tokens(audited).items():
        params = {"page_token": token, **({"principal": "alice"} if what == "other filters" else {})}
        response = audited.admin.get(ROUTE, params=params)
        assert response.status_code == 400, (what, response.text)
        body = response.json()
        assert body["error_code"] == "INVALID_PARAMETER_VALUE", what
        assert "page_token" in body["message"] and "without page_token" in body["message"], what
        assert token not in body["message"], what


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"start_time": "yesterday"}, "start_time must be a time in epoch milliseconds"),
        ({"end_time": "1.5"}, "end_time must be a time in epoch milliseconds"),
        ({"start_time": "-1"}, "start_time must be epoch milliseconds from 0 to 253402300799999"),
        ({"end_time": "9" * 30}, "end_time must be epoch milliseconds from 0 to 253402300799999"),
        ({"principal": "al\x00ice"}, "principal must be a name of at most 1024 characters without control"),
        ({"share": "s" * 1025}, "share must be a name of at most 1024 characters"),
        ({"start_time": "2000", "end_time": "1000"}, "give an end_time at or after start_time"),
        ({"max_results": "0"}, "max_results must be an integer from 1 to 1000"),
        ({"max_results": "1001"}, "max_results must be an integer from 1 to 1000"),
        ({"max_results": "many"}, "max_results must be an integer from 1 to 1000"),
    ],
)
def test_bad_parameters_are_400_naming_the_fix(audited, params, needle):
    response = audited.admin.get(ROUTE, params=params)
    assert response.status_code == 400
    assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert needle in response.json()["message"]


def _recipient_bearer(audited) -> str:
    """A recipient made through the admin API and activated: its bearer token, granted share s1."""
    api = "/api/2.1/unity-catalog"
    audited.admin.post(api + "/shares", json={"name": "s1"}).raise_for_status()
    made = audited.admin.post(api + "/recipients", json={"name": "acme", "authentication_type": "TOKEN"})
    link = made.json()["activation_url"]
    change = {"changes": [{"principal": "acme", "add": ["SELECT"]}]}
    audited.admin.patch(api + "/shares/s1/permissions", json=change).raise_for_status()
    profile = httpx.get(audited.url + ACTIVATION_API + "/" + link.rsplit("/", 1)[1], timeout=10).json()
    secrets_used.add(profile["bearerToken"])
    return profile["bearerToken"]


def test_only_an_admin_token_reads_the_audit_log(audited):
    bearer = _recipient_bearer(audited)
    with httpx.Client(base_url=audited.url, timeout=10) as anyone:
        assert anyone.get(ENDPOINT + "/shares", headers={"Authorization": f"Bearer {bearer}"}).status_code == 200
        for headers in ({"Authorization": f"Bearer {bearer}"}, {"Authorization": "Bearer wrong"}, {}):
            refused = anyone.get(ROUTE, headers=headers)
            assert refused.status_code == 401, headers
            assert refused.json()["error_code"] == "UNAUTHENTICATED"
            assert "events" not in refused.json()


def test_events_of_real_requests_are_listed_and_hold_no_token(audited):
    bearer = _recipient_bearer(audited)
    unknown = "unknown-" + secrets.token_urlsafe(16)
    secrets_used.add(unknown)
    with httpx.Client(base_url=audited.url + ENDPOINT, timeout=30) as recipient:
        for token in (bearer, bearer, unknown):
            recipient.get("/shares", headers={"Authorization": f"Bearer {token}"})
    assert audited.audit.flush(10)
    listing = audited.admin.get(ROUTE, params={"action": "listShares", "max_results": 2})
    assert listing.status_code == 200
    texts = [listing.text]
    events = listing.json()["events"]
    token = listing.json().get("next_page_token")
    while token:
        more = audited.admin.get(ROUTE, params={"action": "listShares", "max_results": 2, "page_token": token})
        texts.append(more.text)
        events += more.json()["events"]
        token = more.json().get("next_page_token")
    assert [e["principal"] for e in events] == ["acme", "acme", "unauthenticated"]
    assert any(e["status"] == 401 for e in events)
    for text in texts:
        for secret in (bearer, unknown, ADMIN, SECRET):
            assert secret not in text
    # a page token carries the last id and nothing else
    payload = _payload(listing.json()["next_page_token"])
    assert list(payload["d"]) == ["a"] and isinstance(payload["d"]["a"], int)
