"""Pure-Python SigV4 query presigning: byte-identical to botocore, and a strict verifier."""

from __future__ import annotations

import calendar
import datetime
import random
from urllib.parse import quote, urlsplit

import boto3
import pytest
from botocore.config import Config

from deltaport.errors import PermissionDenied
from deltaport.signing.sigv4 import SigV4Presigner, derive_signing_key, uri_encode_path, verify_presigned

FIXED = datetime.datetime(2024, 5, 6, 7, 8, 9)
NOW = calendar.timegm(FIXED.timetuple())
AKID = "AKIDEXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

KEYS = [
    "part-00000.snappy.parquet",
    "a b/c d.parquet",
    "p=100%/x%3Ay%25z.parquet",
    "date=2024-01-01/hour=10%3A00/part-0001.parquet",
    "ünïcödé/日本語/файл.parquet",
    "d1/d2/d3/d4/d5/d6/d7/d8/d9/deep.parquet",
    "odd !*'()&+,;$@:[]{}^`|\"<>#?.parquet",
    "tilde~and-dash_and.dot",
]


@pytest.fixture
def frozen(monkeypatch):
    """botocore's clock fixed at FIXED."""
    import botocore.auth

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda remove_tzinfo=True: FIXED)
    return NOW


def _boto_client(endpoint: str, region: str, token: str | None = None, secret: str = SECRET):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=AKID,
        aws_secret_access_key=secret,
        aws_session_token=token,
        region_name=region,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def _boto_url(
    key: str, *, endpoint="http://127.0.0.1:9000", region="us-east-1", token=None, expires=600, bucket="bucket"
) -> str:
    client = _boto_client(endpoint, region, token)
    return client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires)


def _verify(url: str, *, now=NOW + 1, secret=SECRET, **kwargs) -> str:
    parts = urlsplit(url)
    return verify_presigned(
        "GET", parts.netloc, parts.path, parts.query, lambda key: secret if key == AKID else None, now=now, **kwargs
    )


# --- identical to botocore ------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3", "ap-southeast-2"])
def test_identical_to_botocore(frozen, key, region):
    endpoint = "http://127.0.0.1:9000"
    ours = SigV4Presigner(endpoint, AKID, SECRET, region=region).presign(f"/bucket/{key}", expires_in=600, now=frozen)
    assert ours == _boto_url(key, endpoint=endpoint, region=region)


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://s3.example.com",
        "https://s3.example.com:443",  # default port: kept in the URL, left out of the signed host
        "http://LocalHost:8080",
        "http://127.0.0.1:80",
        "https://minio.internal:9443",
    ],
)
@pytest.mark.parametrize("expires", [1, 3600, 604800])
def test_identical_to_botocore_across_endpoints_and_lifetimes(frozen, endpoint, expires):
    ours = SigV4Presigner(endpoint, AKID, SECRET).presign("/bkt/dir/file name.parquet", expires_in=expires, now=frozen)
    assert ours == _boto_url("dir/file name.parquet", endpoint=endpoint, expires=expires, bucket="bkt")


def test_identical_to_botocore_with_session_token(frozen):
    token = "FQoGZXIvYXdzE/+token=="
    ours = SigV4Presigner("http://127.0.0.1:9000", AKID, SECRET, session_token=token).presign(
        "/bucket/a b.parquet", expires_in=900, now=frozen
    )
    theirs = _boto_url("a b.parquet", token=token, expires=900)
    assert ours == theirs
    # the token is signed too: it appears after SignedHeaders in the URL but sorts before it
    assert "X-Amz-SignedHeaders=host&X-Amz-Security-Token=" in ours
    assert _verify(ours) == AKID


def test_botocore_parameter_order(frozen):
    url = SigV4Presigner("http://h:1", AKID, SECRET).presign("/b/k", expires_in=60, now=frozen)
    names = [p.split("=", 1)[0] for p in urlsplit(url).query.split("&")]
    assert names == [
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    ]


def test_aws_documented_example():
    """The worked example in the S3 SigV4 query-authentication documentation."""
    presigner = SigV4Presigner(
        "https://examplebucket.s3.amazonaws.com", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    url = presigner.presign("/test.txt", expires_in=86400, now=calendar.timegm((2013, 5, 24, 0, 0, 0)))
    assert url.endswith("X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")


def test_uri_encode_path_matches_quote_on_random_strings():
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(32, 127)] + list("üé日本\u00a0\U0001f600/")
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert uri_encode_path(s) == quote(s, safe="/~")


def test_signing_key_is_cached_per_day_region_service():
    presigner = SigV4Presigner("http://h:1", AKID, SECRET)
    day = presigner.signing_key("20240506")
    assert presigner.signing_key("20240506") is day
    assert derive_signing_key(SECRET, "20240506", "us-east-1", "s3") is day
    assert derive_signing_key(SECRET, "20240507", "us-east-1", "s3") != day
    assert derive_signing_key(SECRET, "20240506", "eu-west-1", "s3") != day
    assert derive_signing_key(SECRET.encode(), "20240506", "us-east-1", "s3") == day


def test_day_boundary_changes_scope_and_still_verifies():
    presigner = SigV4Presigner("http://h:1", AKID, SECRET)
    midnight = calendar.timegm((2024, 5, 7, 0, 0, 0))
    before = presigner.presign("/b/k", expires_in=60, now=midnight - 1)
    after = presigner.presign("/b/k", expires_in=60, now=midnight)
    assert "%2F20240506%2F" in before and "%2F20240507%2F" in after
    assert _verify(before, now=midnight) == AKID
    assert _verify(after, now=midnight) == AKID


@pytest.mark.parametrize("bad", [0, -1, 604801, 1.5, True, "60"])
def test_presign_refuses_bad_lifetimes(bad):
    with pytest.raises(ValueError, match="expires_in"):
        SigV4Presigner("http://h:1", AKID, SECRET).presign("/b/k", expires_in=bad, now=NOW)


def test_presigner_refuses_bad_configuration():
    with pytest.raises(ValueError):
        SigV4Presigner("ftp://h", AKID, SECRET)
    with pytest.raises(ValueError):
        SigV4Presigner("http://h", "a/b", SECRET)
    assert SECRET not in repr(SigV4Presigner("http://h", AKID, SECRET))


# --- verification ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_verify_accepts_our_urls_and_botocores(frozen, key):
    ours = SigV4Presigner("http://127.0.0.1:9000", AKID, SECRET, region="eu-west-3").presign(
        f"/bucket/{key}", expires_in=600, now=frozen
    )
    assert _verify(ours, region="eu-west-3", service="s3") == AKID
    assert _verify(_boto_url(key, region="eu-west-3")) == AKID


def test_verify_accepts_bytes_and_the_path_as_an_http_client_sends_it(frozen):
    import httpx

    url = _boto_url("a b/ü%x=y [1].parquet")
    request = httpx.Request("GET", url)
    assert (
        verify_presigned(
            "GET",
            request.headers["host"],
            request.url.raw_path.split(b"?")[0],
            request.url.query,
            lambda k: SECRET,
            now=NOW,
        )
        == AKID
    )


def _tamper_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    pairs = [p.split("=", 1) for p in parts.query.split("&")]
    query = "&".join(f"{k}={value if k == name else v}" for k, v in pairs)
    return parts._replace(query=query).geturl()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Amz-Expires", "601"),
        ("X-Amz-Expires", "3600"),
        ("X-Amz-Date", "20240506T070810Z"),
        ("X-Amz-Credential", f"{AKID}%2F20240506%2Fus-east-1%2Fs3%2Faws4_request%2F"),
        ("X-Amz-Credential", "OTHER%2F20240506%2Fus-east-1%2Fs3%2Faws4_request"),
        ("X-Amz-Credential", f"{AKID}%2F20240506%2Fus-west-2%2Fs3%2Faws4_request"),
        ("X-Amz-SignedHeaders", "host%3Brange"),
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA1"),
        ("X-Amz-Signature", "0" * 64),
        ("X-Amz-Signature", ""),
    ],
)
def test_verify_refuses_any_tampered_parameter(frozen, name, value):
    url = _boto_url("dir/file.parquet")
    with pytest.raises(PermissionDenied):
        _verify(_tamper_param(url, name, value))


def test_verify_refuses_flipped_signature_characters(frozen):
    url = _boto_url("dir/file.parquet")
    signature = url.rsplit("=", 1)[1]
    for i in (0, 31, 63):
        flipped = signature[:i] + ("a" if signature[i] != "a" else "b") + signature[i + 1 :]
        with pytest.raises(PermissionDenied, match="signature does not match"):
            _verify(url.rsplit("=", 1)[0] + "=" + flipped)
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(url.rsplit("=", 1)[0] + "=" + signature.upper())


def test_verify_refuses_added_removed_and_duplicated_parameters(frozen):
    url = _boto_url("dir/file.parquet")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(url + "&response-content-type=text/html")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(url.replace("?", "?versionId=3&", 1))
    with pytest.raises(PermissionDenied, match="duplicate query parameter X-Amz-Expires"):
        _verify(url + "&X-Amz-Expires=600")
    with pytest.raises(PermissionDenied, match="duplicate query parameter X-Amz-Signature"):
        _verify(url + "&X-Amz-Signature=" + "0" * 64)
    with pytest.raises(PermissionDenied, match="missing X-Amz-Date"):
        _verify(url.replace("&X-Amz-Date=20240506T070809Z", ""))
    with pytest.raises(PermissionDenied, match="missing X-Amz-Signature"):
        _verify(url.rsplit("&", 1)[0])
    with pytest.raises(PermissionDenied, match="missing X-Amz-Signature"):
        _verify(url.split("?")[0])


@pytest.mark.parametrize(
    "other",
    [
        "dir/file.parquet2",
        "dir/File.parquet",
        "dir2/file.parquet",
        "dir/../dir/file.parquet",
        "dir//file.parquet",
    ],
)
def test_verify_refuses_a_tampered_path(frozen, other):
    url = _boto_url("dir/file.parquet")
    tampered = url.replace("/bucket/dir/file.parquet", "/bucket/" + quote(other, safe="/~"))
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(tampered)
    other_bucket = url.replace("/bucket/", "/bucket2/")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(other_bucket)


def test_verify_refuses_another_host_and_method(frozen):
    parts = urlsplit(_boto_url("k"))
    lookup = lambda k: SECRET  # noqa: E731
    with pytest.raises(PermissionDenied, match="signature does not match"):
        verify_presigned("GET", "127.0.0.1:9001", parts.path, parts.query, lookup, now=NOW)
    with pytest.raises(PermissionDenied, match="signature does not match"):
        verify_presigned("PUT", parts.netloc, parts.path, parts.query, lookup, now=NOW)
    assert verify_presigned("GET", parts.netloc.upper(), parts.path, parts.query, lookup, now=NOW) == AKID


def test_verify_refuses_expired_urls(frozen):
    url = _boto_url("k", expires=600)
    assert _verify(url, now=NOW + 600) == AKID  # last valid second
    with pytest.raises(PermissionDenied, match=r"URL expired at 2024-05-06T07:18:09Z"):
        _verify(url, now=NOW + 601)


def test_verify_refuses_future_dates_beyond_the_skew(frozen):
    url = _boto_url("k")
    assert _verify(url, now=NOW - 60) == AKID  # small clock skew tolerated
    with pytest.raises(PermissionDenied, match="dated in the future"):
        _verify(url, now=NOW - 3600)
    with pytest.raises(PermissionDenied, match="dated in the future"):
        _verify(url, now=NOW - 60, max_skew=10)


def test_verify_refuses_lifetimes_over_seven_days(frozen):
    url = _boto_url("k", expires=604801)
    with pytest.raises(PermissionDenied, match="out of range"):
        _verify(url)
    with pytest.raises(PermissionDenied, match="malformed X-Amz-Expires"):
        _verify(_tamper_param(url, "X-Amz-Expires", "-5"))


def test_verify_refuses_wrong_secret_and_unknown_key(frozen):
    url = _boto_url("k")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        _verify(url, secret=SECRET + "x")
    parts = urlsplit(url)
    with pytest.raises(PermissionDenied, match="unknown access key"):
        verify_presigned("GET", parts.netloc, parts.path, parts.query, lambda k: None, now=NOW)


def test_verify_checks_the_credential_scope(frozen):
    url = _boto_url("k", region="eu-west-3")
    assert _verify(url, region="eu-west-3") == AKID
    with pytest.raises(PermissionDenied, match="region 'eu-west-3' is not 'us-east-1'"):
        _verify(url, region="us-east-1")
    with pytest.raises(PermissionDenied, match="service 's3' is not 'execute-api'"):
        _verify(url, service="execute-api")
    mismatched = _tamper_param(url, "X-Amz-Credential", f"{AKID}%2F20240505%2Feu-west-3%2Fs3%2Faws4_request")
    with pytest.raises(PermissionDenied, match="does not match X-Amz-Date"):
        _verify(mismatched)
    with pytest.raises(PermissionDenied, match="malformed X-Amz-Credential"):
        _verify(_tamper_param(url, "X-Amz-Credential", AKID))
    with pytest.raises(PermissionDenied, match="malformed X-Amz-Date"):
        _verify(_tamper_param(url, "X-Amz-Date", "2024-05-06T07:08:09Z"))
    with pytest.raises(PermissionDenied, match="malformed X-Amz-Date"):
        _verify(_tamper_param(url, "X-Amz-Date", "20241306T070809Z"))


def test_permission_denied_is_http_403():
    with pytest.raises(PermissionDenied) as info:
        verify_presigned("GET", "h", "/b/k", "", lambda k: SECRET, now=NOW)
    assert info.value.http_status == 403 and info.value.error_code == "PERMISSION_DENIED"
