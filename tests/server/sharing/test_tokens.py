"""Page and refresh tokens: signed, bound, expiring."""

from __future__ import annotations

import base64

import pytest

from deltaport.errors import InvalidParameter
from deltaport.server.sharing.tokens import TokenBinding, TokenCodec, params_checksum

B = TokenBinding("alice", "s.d.t", "id1")


def test_round_trip_and_binding():
    now = [1000.0]
    codec = TokenCodec(b"k" * 32, clock=lambda: now[0])
    p = params_checksum({"version": None, "limitHint": 3})
    tok = codec.encode("page", B, {"v": 4, "i": 10}, ttl_ms=60_000, params=p)
    assert codec.decode("page", tok, B, params=p) == {"v": 4, "i": 10}
    with pytest.raises(InvalidParameter) as err:
        codec.decode("page", tok, TokenBinding("alice", "s.d.other", "id1"), params=p)
    assert err.value.message == "The table specified in the page token does not match the table being queried."
    with pytest.raises(InvalidParameter, match="does not match the table"):
        codec.decode("page", tok, TokenBinding("alice", "s.d.t", "id2"), params=p)
    with pytest.raises(InvalidParameter) as err:  # another recipient cannot replay it
        codec.decode("page", tok, TokenBinding("bob", "s.d.t", "id1"), params=p)
    assert err.value.message == f"Error decoding the page token: {tok}."
    with pytest.raises(InvalidParameter) as err:
        codec.decode("page", tok, B, params=params_checksum({"version": None, "limitHint": 4}))
    assert err.value.message == (
        "Query parameter mismatch detected for the next page query. The query parameter "
        "cannot change when querying the next page results."
    )
    with pytest.raises(InvalidParameter) as err:  # a page token is no refresh token
        codec.decode("refresh", tok, B)
    assert err.value.message == f"Error decoding refresh token: {tok}."
    now[0] += 61
    with pytest.raises(InvalidParameter) as err:
        codec.decode("page", tok, B, params=p)
    assert err.value.message == "The page token has expired. Please restart the query."
    refresh = codec.encode("refresh", B, {"v": 1}, ttl_ms=1)
    now[0] += 1
    with pytest.raises(InvalidParameter) as err:
        codec.decode("refresh", refresh, B)
    assert err.value.message == "The refresh token has expired. Please restart the query."
    with pytest.raises(InvalidParameter) as err:
        fresh = codec.encode("refresh", B, {"v": 1}, ttl_ms=60_000)
        codec.decode("refresh", fresh, TokenBinding("alice", "s.d.u", "id1"))
    assert err.value.message == "The table specified in the refresh token does not match the table being queried."


def _flip(ch: str) -> str:
    return "B" if ch == "A" else "A"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-2] + _flip(t[-2]) + t[-1],
        lambda t: "x" + t,
        lambda t: "garbage",
        lambda t: t.split(".")[0],
        lambda t: "",
    ],
)
def test_forged_or_damaged_tokens_are_refused(mangle):
    codec = TokenCodec(b"k" * 32)
    tok = codec.encode("refresh", B, {"v": 1}, ttl_ms=60_000)
    with pytest.raises(InvalidParameter) as err:
        codec.decode("refresh", mangle(tok), B)
    assert err.value.message == f"Error decoding refresh token: {mangle(tok)}."


def test_a_second_spelling_of_the_same_signature_is_refused():
    codec = TokenCodec(b"k" * 32)
    tok = codec.encode("refresh", B, {"v": 1}, ttl_ms=60_000)
    body, mac = tok.split(".")
    # A 32-byte MAC is 43 characters; the last carries 2 bits and 4 unused ones. Setting an unused
    # bit decodes to the same bytes, and must still be refused.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(mac[-1])
    twin = f"{body}.{mac[:-1]}{alphabet[last ^ 1]}"
    assert base64.urlsafe_b64decode(twin.split(".")[1] + "=") == base64.urlsafe_b64decode(mac + "=")
    with pytest.raises(InvalidParameter):
        codec.decode("refresh", twin, B)
    assert codec.decode("refresh", tok, B) == {"v": 1}


def test_tokens_from_another_secret_are_refused():
    tok = TokenCodec(b"a" * 32).encode("page", B, {"v": 1, "i": 1}, ttl_ms=60_000)
    with pytest.raises(InvalidParameter, match="^Error decoding the page token: "):
        TokenCodec(b"b" * 32).decode("page", tok, B)


@pytest.mark.parametrize("case", ["forged", "other listing", "expired", "other recipient"])
def test_every_bad_list_token_is_the_same_error(case):
    now = [1000.0]
    codec = TokenCodec(b"k" * 32, clock=lambda: now[0])
    listing = TokenBinding("alice", "list:shares")
    tok = codec.encode("list", listing, {"o": 1}, ttl_ms=60_000)
    binding = listing
    if case == "forged":
        tok = "garbage"
    elif case == "other listing":
        binding = TokenBinding("alice", "list:schemas:s")
    elif case == "expired":
        now[0] += 61
    else:
        binding = TokenBinding("bob", "list:shares")
    with pytest.raises(InvalidParameter) as err:
        codec.decode("list", tok, binding)
    assert err.value.message.startswith("invalid 'nextPageToken'")  # the reference server's text, then the fix
