"""Recipients, their tokens, activation links and rotation (on SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib

import pytest

from deltaport.errors import AlreadyExists, InvalidParameter, PermissionDenied, ResourceNotFound

DAY_MS = 24 * 3600 * 1000


def sha(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@pytest.fixture
def make(store, secrets_used):
    """create_recipient, with the activation token registered for the session's secret scan."""

    def make(name, **kwargs):
        info, activation = store.create_recipient(name, **kwargs)
        secrets_used.add(activation, label=f"activation token of {name}")
        return info, activation

    return make


@pytest.fixture
def activate(store, secrets_used):
    def activate(activation):
        info, bearer, expiry = store.activate(activation)
        secrets_used.add(bearer, label=f"bearer token of {info.name}")
        return info, bearer, expiry

    return activate


def test_a_recipient_starts_with_one_pending_token(store, make, clock):
    info, activation = make(
        "Alice",
        comment="c",
        expiration_time=clock.ms + DAY_MS,
        allowed_ip_addresses=["10.0.0.0/8", "2001:db8::1"],
        properties={"team": "eu"},
    )
    assert (info.name, info.comment, info.authentication_type, info.expiration_time) == (
        "Alice",
        "c",
        "TOKEN",
        clock.ms + DAY_MS,
    )
    assert (info.allowed_ip_addresses, dict(info.properties), info.created_at) == (
        ("10.0.0.0/8", "2001:db8::1"),
        {"team": "eu"},
        clock.ms,
    )
    assert len(info.id) == 36 and not info.activated
    (token,) = info.tokens
    assert token.token_hash is None and token.activated_at is None
    assert token.activation_hash == sha(activation)  # stored only as its digest
    assert token.activation_expires_at == clock.ms + 7 * DAY_MS
    assert token.expiration_time == clock.ms + DAY_MS
    assert activation.startswith("dpa_") and len(activation) > 40
    assert store.get_recipient("alice") == info
    assert store.list_recipients() == [info]


def test_recipient_arguments_are_checked(store, make, clock):
    make("alice")
    for kwargs, error, needle in [
        ({"name": "ALICE"}, AlreadyExists, "recipient 'ALICE' already exists: choose another name"),
        ({"name": "a b"}, InvalidParameter, "recipient name 'a b' is invalid"),
        ({"name": "b", "authentication_type": "OAUTH"}, InvalidParameter, "use TOKEN"),
        ({"name": "b", "expiration_time": clock.ms}, InvalidParameter, "is in the past"),
        ({"name": "b", "expiration_time": "2027"}, InvalidParameter, "epoch milliseconds"),
        ({"name": "b", "allowed_ip_addresses": ["10.0.0.300"]}, InvalidParameter, "not an IP address or CIDR"),
        ({"name": "b", "properties": {"": "x"}}, InvalidParameter, "keys must be non-empty strings"),
    ]:
        with pytest.raises(error) as info:
            make(**kwargs)
        assert needle in info.value.message
    assert [r.name for r in store.list_recipients()] == ["alice"]


def test_activation_makes_a_bearer_token_once(store, make, activate, clock):
    _, activation = make("alice", expiration_time=clock.ms + DAY_MS)
    clock.advance(10)
    info, bearer, expiry = activate(activation)
    assert bearer.startswith("dpt_") and len(bearer) > 40 and bearer != activation
    assert expiry == clock.ms - 10_000 + DAY_MS
    (token,) = info.tokens
    assert (token.token_hash, token.activated_at) == (sha(bearer), clock.ms)
    assert info.activated
    with pytest.raises(PermissionDenied, match="used already: ask the data provider for a new activation link"):
        store.activate(activation)
    with pytest.raises(ResourceNotFound, match="not known: ask the data provider for a new activation link"):
        store.activate("dpa_" + "x" * 43)
    with pytest.raises(ResourceNotFound):
        store.activate("")


def test_an_expired_link_is_refused(store, make, clock):
    _, activation = make("alice")
    clock.advance(7 * 24 * 3600)
    with pytest.raises(PermissionDenied, match="has expired: ask the data provider"):
        store.activate(activation)
    assert store.get_recipient("alice").tokens[0].token_hash is None


def test_the_activation_ttl_is_the_stores(catalog_url, clock, secrets_used):
    from deltaport.catalog.store import CatalogDB

    db = CatalogDB(catalog_url, clock=clock, activation_ttl_s=60)
    try:
        info, activation = db.create_recipient("alice")
        secrets_used.add(activation, label="activation token")
        assert info.tokens[0].activation_expires_at == clock.ms + 60_000
        clock.advance(60)
        with pytest.raises(PermissionDenied, match="expired"):
            db.activate(activation)
    finally:
        db.close()


def test_rotation_brings_expiries_forward_never_back(store, make, activate, clock, secrets_used):
    _, first = make("alice", expiration_time=clock.ms + 10 * DAY_MS)
    _, _bearer1, _ = activate(first)
    info, second = store.rotate_token("alice", 3600)
    secrets_used.add(second, label="rotated activation token")
    old, new = info.tokens
    assert old.expiration_time == clock.ms + 3600_000
    assert (new.token_hash, new.expiration_time, new.activation_hash) == (None, clock.ms + 10 * DAY_MS, sha(second))
    info, third = store.rotate_token("alice", 2 * DAY_MS // 1000)  # later than the first cut: no change to it
    secrets_used.add(third, label="rotated activation token")
    old, pending, newest = info.tokens
    assert old.expiration_time == clock.ms + 3600_000
    assert pending.expiration_time == clock.ms + 2 * DAY_MS  # the pending link's token was cut too
    assert pending.activation_expires_at == clock.ms + 2 * DAY_MS
    assert newest.expiration_time == clock.ms + 10 * DAY_MS
    info, fourth = store.rotate_token("alice", 0)
    secrets_used.add(fourth, label="rotated activation token")
    assert [t.expiration_time for t in info.tokens[:3]] == [clock.ms] * 3
    with pytest.raises(PermissionDenied, match="expired"):
        store.activate(second)  # its link now expires at once
    activate(fourth)


def test_rotation_needs_a_whole_non_negative_number(store, make):
    make("alice")
    for seconds in (-1, 1.5, True, "60"):
        with pytest.raises(InvalidParameter, match="existing_token_expire_in_seconds"):
            store.rotate_token("alice", seconds)
    assert len(store.get_recipient("alice").tokens) == 1


def test_rotating_an_expired_recipient_is_refused(store, make, clock):
    make("alice", expiration_time=clock.ms + 1000)
    clock.advance(2)
    with pytest.raises(InvalidParameter, match="has expired: give it a new expiration_time"):
        store.rotate_token("alice", 0)
    with pytest.raises(ResourceNotFound, match="recipient 'bob' does not exist"):
        store.rotate_token("bob", 0)


def test_updates_replace_only_what_is_given(store, make, clock):
    make("alice", comment="c", allowed_ip_addresses=["10.0.0.1"], properties={"a": "1"})
    clock.advance(1)
    info = store.update_recipient("ALICE", new_name="Alicia", properties={"b": "2"})
    assert (info.name, info.comment, info.allowed_ip_addresses, dict(info.properties), info.updated_at) == (
        "Alicia",
        "c",
        ("10.0.0.1",),
        {"b": "2"},
        clock.ms,
    )
    info = store.update_recipient("alicia", comment="d", allowed_ip_addresses=[])
    assert (info.comment, info.allowed_ip_addresses) == ("d", ())
    make("bob")
    with pytest.raises(AlreadyExists, match="recipient 'BOB' already exists"):
        store.update_recipient("alicia", new_name="BOB")
    with pytest.raises(InvalidParameter, match="not an IP address"):
        store.update_recipient("alicia", allowed_ip_addresses=["nope"])


def test_a_new_expiration_moves_live_tokens_but_never_revives_a_rotated_one(store, make, activate, clock, secrets_used):
    _, first = make("alice", expiration_time=clock.ms + 10 * DAY_MS)
    activate(first)
    _, second = store.rotate_token("alice", 3600)  # the first token now ends in an hour
    secrets_used.add(second, label="rotated activation token")
    info = store.update_recipient("alice", expiration_time=clock.ms + 30 * DAY_MS)
    rotated, current = info.tokens
    assert info.expiration_time == clock.ms + 30 * DAY_MS
    assert current.expiration_time == clock.ms + 30 * DAY_MS
    assert rotated.expiration_time == clock.ms + 3600_000
    info = store.update_recipient("alice", expiration_time=clock.ms + 60_000)  # sooner than everything
    assert [t.expiration_time for t in info.tokens] == [clock.ms + 60_000] * 2
    clock.advance(120)
    info = store.update_recipient("alice", expiration_time=clock.ms + DAY_MS)
    assert [t.expiration_time for t in info.tokens] == [clock.ms - 120_000 + 60_000] * 2  # expired ones stay expired
    with pytest.raises(InvalidParameter, match="in the past"):
        store.update_recipient("alice", expiration_time=clock.ms - 1)


def test_deleting_a_recipient_takes_its_tokens(store, make, activate):
    _, activation = make("alice")
    activate(activation)
    store.delete_recipient("alice")
    assert store.list_recipients() == []
    assert store.served().recipients == ()
    with pytest.raises(ResourceNotFound):
        store.delete_recipient("alice")
    make("alice")  # the name is free again
