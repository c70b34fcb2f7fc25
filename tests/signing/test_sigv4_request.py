"""SigV4 verification of whole requests (header form and query form with a session token),
checked against the requests botocore's own signer makes."""

from __future__ import annotations

import calendar
import datetime
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from deltaport.signing.sigv4_request import (
    MalformedSignature,
    SignatureExpired,
    SignatureFromFuture,
    SignatureMismatch,
    UnknownAccessKey,
    verify_request,
)

FIXED = datetime.datetime(2024, 5, 6, 7, 8, 9)
NOW = calendar.timegm(FIXED.timetuple())
AKID = "ASIAEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "session.token/with+odd=chars"
ENDPOINT = "http://127.0.0.1:9000"


@pytest.fixture(autouse=True)
def frozen(monkeypatch):
    import botocore.auth

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda remove_tzinfo=True: FIXED)


class _Stub:
    """What botocore sent, answered with an empty 200 so nothing leaves the process."""

    def __init__(self) -> None:
        self.sent: list = []

    def __call__(self, request, **kwargs):
        self.sent.append(request)
        return AWSResponse(request.url, 200, {}, _Raw())


class _Raw:
    def stream(self, **kwargs):
        return iter([b""])

    def read(self, *args, **kwargs):
        return b""


def _client(token: str | None = TOKEN, secret: str = SECRET, checksum: str | None = None):
    config = Config(signature_version="s3v4", s3={"addressing_style": "path"})
    client = boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=AKID,
        aws_secret_access_key=secret,
        aws_session_token=token,
        region_name="us-east-1",
        config=config,
    )
    stub = _Stub()
    client.meta.events.register("before-send", stub)
    return client, stub


def _parts(request) -> tuple[str, str, str, list[tuple[str, str]]]:
    url = urlsplit(request.url)
    headers = [(k, v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()]
    headers.append(("Host", url.netloc))
    return request.method, url.path, url.query, headers


def _lookup(access_key: str, token: str | None):
    return SECRET if (access_key, token) == (AKID, TOKEN) else None


def _sent(call) -> tuple[str, str, str, list[tuple[str, str]]]:
    client, stub = _client()
    try:
        call(client)
    except Exception:  # the stub's empty answer may not parse; the request was sent
        pass
    return _parts(stub.sent[-1])


GET_RANGE = lambda c: c.get_object(Bucket="deltaport", Key="s/sc/t/part=1/a b+c.parquet", Range="bytes=4-99")  # noqa: E731
HEAD = lambda c: c.head_object(Bucket="deltaport", Key="s/sc/t/_delta_log/00000000000000000000.json")  # noqa: E731
LIST = lambda c: c.list_objects_v2(  # noqa: E731
    Bucket="deltaport", Prefix="s/sc/t/_delta_log/", Delimiter="/", MaxKeys=7, StartAfter="s/sc/t/_delta_log/0"
)


@pytest.mark.parametrize("call", [GET_RANGE, HEAD, LIST], ids=["get-range", "head", "list"])
def test_header_form_signed_by_botocore_verifies(call):
    method, path, query, headers = _sent(call)
    assert any(k.lower() == "authorization" for k, _ in headers)
    signed = verify_request(method, path, query, headers, _lookup, now=NOW)
    assert (signed.access_key, signed.session_token, signed.signed_at) == (AKID, TOKEN, NOW)


def test_header_form_signs_range_and_query_params():
    method, path, query, headers = _sent(GET_RANGE)
    changed = [(k, "bytes=0-99" if k.lower() == "range" else v) for k, v in headers]
    with pytest.raises(SignatureMismatch):
        verify_request(method, path, query, changed, _lookup, now=NOW)
    method, path, query, headers = _sent(LIST)
    with pytest.raises(SignatureMismatch):
        verify_request(method, path, query.replace("max-keys=7", "max-keys=8"), headers, _lookup, now=NOW)
    with pytest.raises(SignatureMismatch):
        verify_request(method, path, query + "&extra=1", headers, _lookup, now=NOW)


def test_header_form_refusals_say_why():
    method, path, query, headers = _sent(HEAD)
    with pytest.raises(SignatureMismatch):
        verify_request(method, path.replace("00000.json", "00001.json"), query, headers, _lookup, now=NOW)
    with pytest.raises(SignatureMismatch):
        verify_request("GET", path, query, headers, _lookup, now=NOW)
    with pytest.raises(UnknownAccessKey):
        verify_request(method, path, query, headers, lambda k, t: None, now=NOW)
    with pytest.raises(SignatureMismatch):
        verify_request(method, path, query, headers, lambda k, t: SECRET + "x", now=NOW)
    with pytest.raises(SignatureExpired):
        verify_request(method, path, query, headers, _lookup, now=NOW + 16 * 60)
    with pytest.raises(SignatureFromFuture):
        verify_request(method, path, query, headers, _lookup, now=NOW - 16 * 60)
    verify_request(method, path, query, headers, _lookup, now=NOW + 14 * 60)
    no_auth = [(k, v) for k, v in headers if k.lower() != "authorization"]
    with pytest.raises(MalformedSignature):
        verify_request(method, path, query, no_auth, _lookup, now=NOW)
    garbled = [(k, "AWS4-HMAC-SHA256 Credential=x" if k.lower() == "authorization" else v) for k, v in headers]
    with pytest.raises(MalformedSignature):
        verify_request(method, path, query, garbled, _lookup, now=NOW)
    undated = [(k, v) for k, v in headers if k.lower() != "x-amz-date"]
    with pytest.raises(MalformedSignature):
        verify_request(method, path, query, undated, _lookup, now=NOW)


def test_session_token_is_bound():
    method, path, query, headers = _sent(HEAD)
    other = [(k, "another" if k.lower() == "x-amz-security-token" else v) for k, v in headers]
    with pytest.raises(UnknownAccessKey):
        verify_request(method, path, query, other, _lookup, now=NOW)
    with pytest.raises(SignatureMismatch):  # a lookup that knows the other token too: still signed over
        verify_request(method, path, query, other, lambda k, t: SECRET, now=NOW)


def test_payload_hash_empty_and_unsigned():
    method, path, query, headers = _sent(HEAD)
    claimed = dict((k.lower(), v) for k, v in headers)["x-amz-content-sha256"]
    assert claimed in ("UNSIGNED-PAYLOAD", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    with pytest.raises(MalformedSignature):
        verify_request(method, path, query, headers, _lookup, now=NOW, body_sha256="0" * 64)
    # UNSIGNED-PAYLOAD in place of the empty body's hash: the signature no longer matches
    swapped = [(k, "UNSIGNED-PAYLOAD" if k.lower() == "x-amz-content-sha256" else v) for k, v in headers]
    if claimed != "UNSIGNED-PAYLOAD":
        with pytest.raises(SignatureMismatch):
            verify_request(method, path, query, swapped, _lookup, now=NOW)


def test_query_form_with_security_token_verifies():
    client, _ = _client()
    url = urlsplit(
        client.generate_presigned_url(
            "get_object", Params={"Bucket": "deltaport", "Key": "s/sc/t/a b=c.parquet"}, ExpiresIn=600
        )
    )
    assert "X-Amz-Security-Token" in url.query
    headers = [("Host", url.netloc)]
    signed = verify_request("GET", url.path, url.query, headers, _lookup, now=NOW + 10)
    assert (signed.access_key, signed.session_token) == (AKID, TOKEN)
    with pytest.raises(SignatureExpired):
        verify_request("GET", url.path, url.query, headers, _lookup, now=NOW + 601)
    with pytest.raises(SignatureFromFuture):
        verify_request("GET", url.path, url.query, headers, _lookup, now=NOW - 3600)
    with pytest.raises(SignatureMismatch):
        verify_request("GET", url.path + "x", url.query, headers, _lookup, now=NOW)
    with pytest.raises(SignatureMismatch):
        verify_request("GET", url.path, url.query, [("Host", "127.0.0.1:9001")], _lookup, now=NOW)


def test_path_reencoded_by_a_proxy_still_verifies_but_an_encoded_slash_does_not_turn_into_one():
    method, path, query, headers = _sent(GET_RANGE)
    assert "%20" in path
    verify_request(method, path.replace("%20", "%20").replace("part%3D1", "part=1"), query, headers, _lookup, now=NOW)
    with pytest.raises(SignatureMismatch):
        verify_request(method, path.replace("/t/part", "%2Ft/part"), query, headers, _lookup, now=NOW)
