"""IP access lists: parsing, matching (v4, v6, CIDR, IPv4-mapped), the client behind trusted proxies,
and a recipient outside its list refused with the protocol's 403 on the routes, the hot paths and
the server's own file URLs."""

from __future__ import annotations

import dataclasses

import httpx
import orjson
import pytest
from conftest import OTHER_TOKEN, TOKEN, corpus_config
from servers import RunningServer

from deltaport.errors import InvalidParameter, PermissionDenied
from deltaport.server import create_app, parse_config
from deltaport.server.ops.access import IpAllowList, RecipientAllowLists, client_ip

P = "/delta-sharing"
T = P + "/shares/corpus/schemas/default/tables"
ALICE = {"Authorization": f"Bearer {TOKEN}"}
BOB = {"Authorization": f"Bearer {OTHER_TOKEN}"}
ALICE_LIST = ("10.0.0.0/8", "203.0.113.7", "2001:db8::/32")

# --- the list ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ip", "allowed"),
    [
        ("10.1.2.3", True),
        ("10.255.255.255", True),
        ("11.0.0.1", False),
        ("203.0.113.7", True),
        ("203.0.113.8", False),
        ("2001:db8::1", True),
        ("2001:db8:ffff::42", True),
        ("2001:db9::1", False),
        ("::ffff:10.1.2.3", True),  # an IPv4 client on a dual-stack socket
        ("::ffff:11.0.0.1", False),
        ("::10.1.2.3", False),  # IPv4-compatible (deprecated), not mapped: a different address
        ("testclient", False),
        ("", False),
        (None, False),
    ],
)
def test_a_list_allows_its_addresses_and_blocks(ip, allowed):
    assert IpAllowList.parse(ALICE_LIST).allows(ip) is allowed


def test_an_empty_list_allows_anywhere_and_contains_nothing():
    empty = IpAllowList.parse([])
    assert empty.allows("192.0.2.1") and empty.allows(None) and empty.allows("not an address")
    assert not empty.contains("192.0.2.1")


def test_a_mapped_entry_is_the_ipv4_block_it_maps():
    mapped = IpAllowList.parse(["::ffff:192.0.2.0/120"])
    assert mapped.networks == IpAllowList.parse(["192.0.2.0/24"]).networks
    assert mapped.allows("192.0.2.9") and mapped.allows("::ffff:192.0.2.9") and not mapped.allows("192.0.3.9")


@pytest.mark.parametrize("entry", ["10.0.0.256", "10.0.0.0/33", "example.com", "", "2001:db8::/129", "10.0.0.0/8/8"])
def test_a_malformed_entry_is_refused_by_name(entry):
    with pytest.raises(InvalidParameter) as caught:
        IpAllowList.parse(["10.0.0.0/8", entry])
    assert repr(entry) in str(caught.value) and "CIDR" in str(caught.value)


def test_a_block_with_host_bits_set_names_the_block_meant():
    with pytest.raises(InvalidParameter, match=r"did you mean 10\.0\.0\.0/8\?"):
        IpAllowList.parse(["10.1.2.3/8"])


# --- the client behind proxies ---------------------------------------------------------------------


def _scope(peer: str | None, *forwarded: str) -> dict:
    return {
        "type": "http",
        "client": (peer, 5000) if peer is not None else None,
        "headers": [(b"x-forwarded-for", value.encode()) for value in forwarded],
    }


PROXIES = IpAllowList.parse(["127.0.0.1", "10.0.0.0/8", "fd00::/8"])


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (_scope("192.0.2.1", "203.0.113.7"), "192.0.2.1"),  # an untrusted peer's header proves nothing
        (_scope("127.0.0.1"), "127.0.0.1"),  # a trusted peer that forwards nothing: the peer
        (_scope("127.0.0.1", "203.0.113.7"), "203.0.113.7"),
        (_scope("127.0.0.1", "198.51.100.1, 203.0.113.7"), "203.0.113.7"),  # right-most: left is the client's say
        (_scope("127.0.0.1", "198.51.100.1, 203.0.113.7, 10.0.0.5"), "203.0.113.7"),  # through two proxies
        (_scope("127.0.0.1", "198.51.100.1", "203.0.113.7,10.0.0.5"), "203.0.113.7"),  # two headers, in order
        (_scope("127.0.0.1", "10.0.0.9, 10.0.0.5"), "10.0.0.9"),  # all trusted: the left-most
        (_scope("127.0.0.1", "[2001:db8::7]:443, fd00::1"), "2001:db8::7"),
        (_scope("127.0.0.1", "203.0.113.7:8443"), "203.0.113.7"),
        (_scope("127.0.0.1", "::ffff:203.0.113.7"), "203.0.113.7"),
        (_scope("127.0.0.1", "203.0.113.7, unknown"), None),  # malformed where the client should be
        (_scope("127.0.0.1", "203.0.113.7, "), None),
        (_scope(None, "203.0.113.7"), None),
    ],
)
def test_the_client_is_the_right_most_untrusted_hop_behind_trusted_proxies(scope, expected):
    assert client_ip(scope, PROXIES) == expected


def test_without_trusted_proxies_the_client_is_the_peer():
    assert client_ip(_scope("127.0.0.1", "203.0.113.7"), IpAllowList()) == "127.0.0.1"


# --- recipients' lists -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Recipient:
    name: str
    allowed_ip_addresses: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Config:
    recipients: tuple[_Recipient, ...]


def test_recipient_lists_are_parsed_once_per_config_object(monkeypatch):
    parsed = []
    real = IpAllowList.parse.__func__

    def counting(cls, entries):
        parsed.append(tuple(entries))
        return real(cls, entries)

    monkeypatch.setattr(IpAllowList, "parse", classmethod(counting))
    lists = RecipientAllowLists()
    first = _Config((_Recipient("alice", ("10.0.0.0/8",)), _Recipient("bob")))
    for _ in range(3):
        lists.check(first, "alice", "10.1.1.1")
        lists.check(first, "bob", "192.0.2.1")  # no list: anywhere
        lists.check(first, "anonymous", None)  # no recipient: no list
    assert parsed == [("10.0.0.0/8",)]
    second = _Config((_Recipient("alice", ("192.0.2.0/24",)),))  # the catalog reloaded
    lists.check(second, "alice", "192.0.2.1")
    with pytest.raises(PermissionDenied):
        lists.check(second, "alice", "10.1.1.1")
    assert parsed == [("10.0.0.0/8",), ("192.0.2.0/24",)]


def test_a_refusal_names_the_address_and_what_to_ask_for():
    config = _Config((_Recipient("alice", ("10.0.0.0/8",)),))
    with pytest.raises(PermissionDenied) as caught:
        RecipientAllowLists().check(config, "alice", "192.0.2.1")
    message = str(caught.value)
    assert "192.0.2.1" in message and "data provider to add 192.0.2.1" in message
    with pytest.raises(PermissionDenied, match="could not be determined"):
        RecipientAllowLists().check(config, "alice", None)


def test_a_list_that_does_not_parse_refuses_everyone(caplog):
    config = _Config((_Recipient("alice", ("10.0.0.0/8", "ten.0.0.0/8")),))
    with pytest.raises(PermissionDenied, match="not valid"):
        RecipientAllowLists().check(config, "alice", "10.1.1.1")
    assert "'ten.0.0.0/8'" in caplog.text


# --- over HTTP ---------------------------------------------------------------------------------------


def _config():
    config = parse_config(corpus_config())
    recipients = tuple(
        dataclasses.replace(r, allowed_ip_addresses=ALICE_LIST) if r.name == "alice" else r for r in config.recipients
    )
    return dataclasses.replace(config, recipients=recipients)


@pytest.fixture(scope="module")
def behind_proxy():
    """The server behind a proxy on loopback: X-Forwarded-For names the client. uvicorn's own
    reading of that header is off, as `deltaport serve` must run it: the app's trusted proxies
    decide alone."""
    server = RunningServer(create_app(_config(), trusted_proxies=["127.0.0.1"]), proxy_headers=False)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
    server.stop()


def _from(ip: str, auth: dict = ALICE) -> dict:
    return {**auth, "X-Forwarded-For": ip}


def _assert_refused(response: httpx.Response, ip: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert set(body) == {"errorCode", "message"} and body["errorCode"] == "PERMISSION_DENIED"
    assert ip in body["message"] and "ask the data provider to add" in body["message"].lower()


@pytest.mark.parametrize("path", ["/shares", "/shares/corpus/schemas", "/shares/corpus/schemas/default/tables"])
@pytest.mark.parametrize("ip", ["10.20.30.40", "203.0.113.7", "2001:db8::9", "::ffff:10.1.2.3"])
def test_a_recipient_is_served_from_its_addresses(behind_proxy, path, ip):
    assert behind_proxy.get(P + path, headers=_from(ip)).status_code == 200


@pytest.mark.parametrize(
    ("ip", "named"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("203.0.113.8", "203.0.113.8"),
        ("2001:db9::1", "2001:db9::1"),
        ("::ffff:11.0.0.1", "11.0.0.1"),
    ],
)
def test_a_recipient_is_refused_elsewhere_on_a_protocol_route(behind_proxy, ip, named):
    _assert_refused(behind_proxy.get(P + "/shares", headers=_from(ip)), named)
    _assert_refused(behind_proxy.post(T + "/partitioned/query", json={}, headers=_from(ip)), named)


@pytest.mark.parametrize("call", ["version", "metadata"])
def test_a_recipient_is_refused_elsewhere_on_a_hot_path(behind_proxy, call):
    assert behind_proxy.get(f"{T}/partitioned/{call}", headers=_from("10.0.0.1")).status_code == 200
    _assert_refused(behind_proxy.get(f"{T}/partitioned/{call}", headers=_from("192.0.2.1")), "192.0.2.1")


def test_a_recipient_without_a_list_is_served_from_anywhere(behind_proxy):
    r = behind_proxy.get(P + "/shares/other/schemas/s/tables/t/version", headers=_from("192.0.2.1", BOB))
    assert r.status_code == 200


def test_an_unauthenticated_request_is_refused_as_such_not_by_address(behind_proxy):
    r = behind_proxy.get(P + "/shares", headers={"X-Forwarded-For": "192.0.2.1"})
    assert r.status_code == 401


def test_a_file_url_is_refused_outside_the_list_of_the_recipient_it_was_issued_to(behind_proxy):
    lines = behind_proxy.post(T + "/partitioned/query", json={}, headers=_from("10.0.0.1")).content.splitlines()
    url = next(orjson.loads(x)["file"]["url"] for x in lines if b'"file"' in x)
    assert url.startswith(str(behind_proxy.base_url).rstrip("/") + P + "/files/")
    assert behind_proxy.get(url, headers={"X-Forwarded-For": "10.0.0.1"}).status_code == 200
    _assert_refused(behind_proxy.get(url, headers={"X-Forwarded-For": "192.0.2.1"}), "192.0.2.1")
    assert behind_proxy.head(url, headers={"X-Forwarded-For": "192.0.2.1"}).status_code == 403


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored():
    server = RunningServer(create_app(_config()), proxy_headers=False)  # no trusted proxies: the peer is the client
    try:
        r = httpx.get(server.url + P + "/shares", headers=_from("10.0.0.1"), timeout=30)
        _assert_refused(r, "127.0.0.1")
    finally:
        server.stop()
