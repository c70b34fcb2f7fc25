"""Page and refresh tokens: signed, bound, expiring."""

from __future__ import annotations

import pytest

from deltaport.errors import InvalidParameter
from deltaport.server.tokens import TokenBinding, TokenCodec, params_checksum

B = TokenBinding("alice", "s.d.t", "id1")


def test_round_trip_and_binding():
    now = [1000.0]
    codec = TokenCodec(b"k" * 32, clock=lambda: now[0])
    p = params_checksum({"version": None, "limitHint": 3})
    tok = codec.encode("page", B, {"v": 4, "i": 10}, ttl_ms=60_000, params=p)
    assert codec.decode("page", tok, B, params=p) == {"v": 4, "i": 10}
    with pytest.raises(InvalidParameter, match="does not match the table"):
        codec.decode("page", tok, TokenBinding("alice", "s.d.other", "id1"), params=p)
    with pytest.raises(InvalidParameter, match="does not match the table"):
        codec.decode("page", tok, TokenBinding("alice", "s.d.t", "id2"), params=p)
    with pytest.raises(InvalidParameter, match="Error decoding"):  # another recipient cannot replay it
        codec.decode("page", tok, TokenBinding("bob", "s.d.t", "id1"), params=p)
    with pytest.raises(InvalidParameter, match="Query parameter mismatch"):
        codec.decode("page", tok, B, params=params_checksum({"version": None, "limitHint": 4}))
    with pytest.raises(InvalidParameter, match="Error decoding"):  # a page token is no refresh token
        codec.decode("refresh", tok, B)
    now[0] += 61
    with pytest.raises(InvalidParameter, match="has expired"):
        codec.decode("page", tok, B, params=p)


@pytest.mark.parametrize("mangle", [lambda t: t[:-2] + "AA", lambda t: "x" + t, lambda t: "garbage",
                                    lambda t: t.split(".")[0], lambda t: ""])
def test_forged_or_damaged_tokens_are_refused(mangle):
    codec = TokenCodec(b"k" * 32)
    tok = codec.encode("refresh", B, {"v": 1}, ttl_ms=60_000)
    with pytest.raises(InvalidParameter, match="Error decoding the refresh token"):
        codec.decode("refresh", mangle(tok), B)


def test_tokens_from_another_secret_are_refused():
    tok = TokenCodec(b"a" * 32).encode("page", B, {"v": 1, "i": 1}, ttl_ms=60_000)
    with pytest.raises(InvalidParameter, match="Error decoding"):
        TokenCodec(b"b" * 32).decode("page", tok, B)
