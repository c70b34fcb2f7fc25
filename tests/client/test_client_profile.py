"""Profiles, table URLs and credentials: v1, v2 bearer_token, v2 OAuth client credentials."""

from __future__ import annotations

import base64
import io
import json
import urllib.parse
from pathlib import Path

import httpx
import orjson
import pytest
from client_support import TOKEN, RecordingTransport, write_profile

import deltaport.client as ds
from deltaport.client.auth import OAuthClientCredentials
from deltaport.client.errors import InvalidTableUrl, ProfileError, TokenExpired
from deltaport.client.profile import parse_url, read_profile
from deltaport.errors import DeltaportError, Unauthenticated

pytest_plugins = ["client_fixtures"]

# --- URLs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "",
        "#",
        "foo",
        "foo#",
        "foo#share",
        "foo#share.schema",
        "foo#share.schema.",
        "#share.schema.table",
        "foo#.schema.table",
        "foo#share..table",
        "foo#a.b.c.d",
    ],
)
def test_bad_urls_raise_value_error(url):
    with pytest.raises(ValueError, match="Invalid 'url'") as err:
        parse_url(url)
    assert isinstance(err.value, DeltaportError) and isinstance(err.value, InvalidTableUrl)
    assert "<share>.<schema>.<table>" in str(err.value)  # names the fix
    with pytest.raises(ValueError, match="Invalid 'url'"):
        ds.load_as_pandas(url)


def test_url_splits_at_the_last_hash():
    assert parse_url("foo#bar#share.schema.table") == ("foo#bar", "share", "schema", "table")
    assert parse_url("/p/x.share#s.sc.t") == ("/p/x.share", "s", "sc", "t")


# --- profile files ---------------------------------------------------------------------------------

V1 = {
    "shareCredentialsVersion": 1,
    "endpoint": "https://example.com/delta-sharing/",
    "bearerToken": "s3cr3t-value",
    "expirationTime": "2099-01-01T00:00:00Z",
}


def test_profile_sources_all_parse_the_same(tmp_path):
    path = tmp_path / "p.share"
    path.write_text(json.dumps(V1))
    expected = read_profile(V1)
    assert expected.endpoint == "https://example.com/delta-sharing"  # trailing slash stripped
    assert expected.bearer_token == "s3cr3t-value" and expected.share_credentials_version == 1
    for source in (
        str(path),
        path,
        path.as_uri(),
        io.StringIO(json.dumps(V1)),
        io.BytesIO(json.dumps(V1).encode()),
        json.dumps(V1),
        json.dumps(V1).encode(),
        expected,
    ):
        assert read_profile(source) == expected
    assert "s3cr3t-value" not in repr(expected)  # secrets stay out of reprs


def test_the_official_profile_object_is_accepted(tmp_path):
    from delta_sharing.protocol import DeltaSharingProfile as Official

    path = tmp_path / "p.share"
    path.write_text(json.dumps(V1))
    assert read_profile(Official.read_from_file(str(path))) == read_profile(V1)


def test_profile_v2_types():
    bearer = read_profile(
        {"shareCredentialsVersion": 2, "type": "bearer_token", "endpoint": "http://h/d", "bearerToken": "b"}
    )
    assert bearer.auth_type == "bearer_token" and bearer.bearer_token == "b"
    oauth = read_profile(
        {
            "shareCredentialsVersion": 2,
            "type": "oauth_client_credentials",
            "endpoint": "http://h/d",
            "tokenEndpoint": "http://h/token/",
            "clientId": "id",
            "clientSecret": "s",
            "scope": "x",
        }
    )
    assert oauth.token_endpoint == "http://h/token" and oauth.client_id == "id" and oauth.scope == "x"
    basic = read_profile(
        {"shareCredentialsVersion": 2, "type": "basic", "endpoint": "http://h/d", "username": "u", "password": "p"}
    )
    assert basic.username == "u"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            {"shareCredentialsVersion": 3, "endpoint": "http://h", "bearerToken": "t"},
            "'shareCredentialsVersion' in the profile is 3 which is too new",
        ),
        ({"endpoint": "http://h", "bearerToken": "t"}, "shareCredentialsVersion"),
        ({"shareCredentialsVersion": 1, "bearerToken": "t"}, "'endpoint'"),
        ({"shareCredentialsVersion": 1, "endpoint": "http://h"}, "'bearerToken'"),
        ({"shareCredentialsVersion": 1, "endpoint": "ftp://h", "bearerToken": "t"}, "http(s) URL"),
        ({"shareCredentialsVersion": 2, "endpoint": "http://h", "bearerToken": "t"}, "'type'"),
        ({"shareCredentialsVersion": 2, "type": "magic", "endpoint": "http://h"}, "does not supports magic type"),
        (
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": "http://h",
                "clientId": "i",
                "clientSecret": "s",
            },
            "'tokenEndpoint'",
        ),
        (
            {"shareCredentialsVersion": 1, "endpoint": "http://h", "bearerToken": "t", "expirationTime": "soon"},
            "expirationTime",
        ),
        ("not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_malformed_profiles_raise_one_line_errors(body, needle):
    source = body.encode() if isinstance(body, str) else json.dumps(body)
    with pytest.raises(ProfileError) as err:
        read_profile(source)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, DeltaportError)


def test_missing_profile_file_names_the_path(tmp_path):
    with pytest.raises(ProfileError, match="profile file not found"):
        ds.load_as_pandas(f"{tmp_path / 'nope.share'}#a.b.c")


# --- reading with each credential kind ------------------------------------------------------------------


def test_v1_profile_reads(table_url):
    assert len(ds.load_as_pandas(table_url("partitioned"))) == 6


def test_v2_bearer_profile_reads(sharing_server, tmp_path):
    path = write_profile(
        tmp_path / "v2.share",
        sharing_server.url + "/delta-sharing",
        shareCredentialsVersion=2,
        type="bearer_token",
        expirationTime="2099-01-01T00:00:00Z",
    )
    assert len(ds.load_as_pandas(f"{path}#corpus.default.partitioned")) == 6
    assert [s.name for s in ds.SharingClient(path).list_shares()] == ["corpus", "second"]


def test_expired_v1_profile_raises_before_any_request(sharing_server, tmp_path, recording):
    path = write_profile(
        tmp_path / "old.share", sharing_server.url + "/delta-sharing", expirationTime="2020-01-01T00:00:00Z"
    )
    with pytest.raises(TokenExpired) as err:
        ds.load_as_pandas(f"{path}#corpus.default.partitioned", transport=recording)
    text = str(err.value)
    assert "expirationTime" in text and "2020-01-01T00:00:00Z" in text and "new profile" in text
    assert isinstance(err.value, Unauthenticated) and err.value.http_status == 401
    assert recording.requests == []


def test_wrong_token_gives_401_with_the_fix(sharing_server, tmp_path):
    path = write_profile(tmp_path / "bad.share", sharing_server.url + "/delta-sharing", bearerToken="nope")
    with pytest.raises(ds.SharingServerError) as err:
        ds.SharingClient(path).list_shares()
    assert err.value.http_status == 401 and err.value.error_code == "UNAUTHENTICATED"
    assert "profile" in str(err.value) and "\n" not in str(err.value)


class TokenEndpoint:
    """A tiny OAuth token endpoint (httpx transport) in front of the real server."""

    def __init__(self, inner: httpx.BaseTransport, *, expires_in=3600, access_token=TOKEN) -> None:
        self.inner = inner
        self.calls: list[httpx.Request] = []
        self.expires_in = expires_in
        self.access_token = access_token

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/oauth/token":
            self.calls.append(request)
            return httpx.Response(
                200, json={"access_token": self.access_token, "expires_in": self.expires_in, "token_type": "bearer"}
            )
        return self.inner.handle_request(request)


def _oauth_profile(tmp_path: Path, sharing_server, scope: str | None = "sharing") -> str:
    body = {
        "shareCredentialsVersion": 2,
        "type": "oauth_client_credentials",
        "endpoint": sharing_server.url + "/delta-sharing",
        "tokenEndpoint": sharing_server.url + "/oauth/token",
        "clientId": "client-1",
        "clientSecret": "s3cret",
    }
    if scope:
        body["scope"] = scope
    path = tmp_path / "oauth.share"
    path.write_text(json.dumps(body))
    return str(path)


def test_oauth_client_credentials_fetches_a_token_and_reads(sharing_server, tmp_path):
    real = RecordingTransport()
    endpoint = TokenEndpoint(real, expires_in="3600")  # a numeric string is accepted too
    transport = httpx.MockTransport(endpoint.handler)
    path = _oauth_profile(tmp_path, sharing_server)
    df = ds.load_as_pandas(f"{path}#corpus.default.partitioned", transport=transport)
    assert len(df) == 6
    assert len(endpoint.calls) == 1
    token_request = endpoint.calls[0]
    assert token_request.method == "POST"
    assert token_request.headers["Authorization"] == "Basic " + base64.b64encode(b"client-1:s3cret").decode()
    assert token_request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(token_request.content.decode()) == {
        "grant_type": ["client_credentials"],
        "scope": ["sharing"],
    }
    sharing = [r for r in real.requests if "/delta-sharing/shares" in r.url.path]
    assert sharing and all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in sharing)
    files = [r for r in real.requests if "/files/" in r.url.path]
    assert files and all("Authorization" not in r.headers for r in files)  # presigned URLs get no token


def test_oauth_token_is_refreshed_before_expiry():
    now = [1000.0]
    issued = []

    def handler(request: httpx.Request) -> httpx.Response:
        issued.append(request)
        return httpx.Response(200, json={"access_token": f"t{len(issued)}", "expires_in": 3600})

    auth = OAuthClientCredentials(
        "http://idp/token", "id", "secret", transport=httpx.MockTransport(handler), clock=lambda: now[0]
    )
    assert auth.headers()["Authorization"] == "Bearer t1"
    now[0] += 2000
    assert auth.headers()["Authorization"] == "Bearer t1"  # 1600 s of life left: kept
    now[0] += 1100
    assert auth.headers()["Authorization"] == "Bearer t2"  # 500 s left (< 600): refreshed
    assert len(issued) == 2
    assert "scope" not in urllib.parse.parse_qs(issued[0].content.decode())


def test_short_lived_oauth_token_is_refreshed_at_half_life():
    now = [0.0]
    count = [0]

    def handler(request):
        count[0] += 1
        return httpx.Response(200, json={"access_token": "t", "expires_in": 60})

    auth = OAuthClientCredentials(
        "http://idp/token", "id", "secret", transport=httpx.MockTransport(handler), clock=lambda: now[0]
    )
    auth.headers()
    now[0] = 20
    auth.headers()
    assert count[0] == 1
    now[0] = 31
    auth.headers()
    assert count[0] == 2


def test_oauth_refused_credentials_raise_with_the_fix():
    transport = httpx.MockTransport(lambda r: httpx.Response(401, json={"error": "invalid_client"}))
    auth = OAuthClientCredentials("http://idp/token", "id", "wrong", transport=transport)
    with pytest.raises(Unauthenticated) as err:
        auth.headers()
    assert "invalid_client" in str(err.value) and "clientSecret" in str(err.value)


def test_oauth_token_response_without_access_token_is_an_error():
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=orjson.dumps({"expires_in": 5})))
    auth = OAuthClientCredentials("http://idp/token", "id", "s", transport=transport)
    with pytest.raises(ds.SharingServerError, match="access_token"):
        auth.headers()


def test_oauth_401_from_the_server_fetches_a_new_token_once(sharing_server, tmp_path):
    real = RecordingTransport()
    tokens = iter(["revoked-token", TOKEN])
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/oauth/token":
            calls.append(request)
            return httpx.Response(200, json={"access_token": next(tokens), "expires_in": 3600})
        return real.handle_request(request)

    path = _oauth_profile(tmp_path, sharing_server, scope=None)
    shares = ds.SharingClient(path, transport=httpx.MockTransport(handler)).list_shares()
    assert [s.name for s in shares] == ["corpus", "second"]
    assert len(calls) == 2
