"""The server's own file URLs: a keyed BLAKE2b in a short presigned query (the earlier forms, in
SigV4's whole query, still verify), verified, and never outside the table root."""

from __future__ import annotations

import base64
import hashlib
import hmac
import pickle
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from deltaport.errors import PermissionDenied
from deltaport.signing import LocalFileSigner, ObstoreSigner, SignedUrl, UrlSigner, signer_for
from deltaport.signing.local_mac import SIGNATURE_CHARS, MacPresigner
from deltaport.signing.sigv4 import SigV4Presigner, uri_encode_path
from deltaport.storage import LocalStore, store_for

BASE = "https://sharing.example.com:8443/delta-sharing"
SECRET = b"0123456789abcdef0123456789abcdef"
NOW = 1_700_000_000

PATHS = [
    "part-00000-1a2b.c000.snappy.parquet",
    "date=2024-01-01/part-0.parquet",
    "ts=2024-01-01 10%3A00%3A00/part-0.parquet",  # Delta's escaped partition value, decoded once
    "a b/c%d/e+f=g&h.parquet",
    "ünïcödé/日本語.parquet",
    "odd #?[]!$'()*,;@.parquet",
    "deletion_vector_0c6f8a2e-8d1b-4a4e-9d3a-0c6f8a2e8d1b.bin",
    ".hidden/_underscore/x.parquet",
]


@pytest.fixture
def signer() -> LocalFileSigner:
    return LocalFileSigner(BASE, "share.schema.table", "deltaport", SECRET)


def _request_parts(url: str):
    """Host, raw path and raw query as an HTTP client sends them."""
    import httpx

    request = httpx.Request("GET", url)
    raw_path, _, query = request.url.raw_path.partition(b"?")
    return request.headers["host"], raw_path, query


@pytest.mark.parametrize("path", PATHS)
def test_round_trip(signer, path):
    signed = signer.sign(path, expires_in=3600, now=NOW)
    assert isinstance(signed, SignedUrl)
    assert signed.expiration_ms == (NOW + 3600) * 1000
    assert signed.url.startswith(f"{BASE}/files/share.schema.table/")
    assert "X-Amz-Signature=" in urlsplit(signed.url).query  # what the official client's kernel looks for
    host, raw_path, query = _request_parts(signed.url)
    assert signer.verify("GET", host, raw_path, query, now=NOW + 1) == ("share.schema.table", path)
    assert signer.verify("HEAD", host, raw_path.decode(), query.decode(), now=NOW + 1) == ("share.schema.table", path)


def test_satisfies_the_url_signer_protocol(signer):
    assert isinstance(signer, UrlSigner)
    assert SECRET.decode() not in repr(signer)
    assert "X-Amz-Signature" not in repr(signer.sign("x.parquet", expires_in=60))


def _day_key(scheme: str, secret: bytes, date: str, region: str) -> bytes:
    """The documented day key: an HMAC-SHA256 chain over the scheme's name and the secret, the
    date, region, service."""
    key = scheme.encode() + secret
    for part in (date, region, "s3", "deltaport_request"):
        key = hmac.digest(key, part.encode(), "sha256")
    return key


def _mac(secret: bytes, date: str, region: str, message: str) -> str:
    """The documented MAC, computed here from its definition: an 18-byte keyed BLAKE2b of the
    message, in base64url."""
    digest = hashlib.blake2b(message.encode(), key=_day_key("DELTAPORT-B2S", secret, date, region), digest_size=18)
    return base64.urlsafe_b64encode(digest.digest()).decode()


def test_url_has_a_short_presigned_query_and_the_documented_mac():
    signer = LocalFileSigner("http://127.0.0.1:8080", "t1", "deltaport", SECRET, region="eu-west-1")
    url = signer.sign("a b.parquet", expires_in=60, now=NOW).url
    path, _, query = url.removeprefix("http://127.0.0.1:8080").partition("?")
    assert path == "/files/t1/a%20b.parquet"
    unsigned, _, signature = query.partition("&X-Amz-Signature=")
    assert unsigned == "X-Amz-Credential=deltaport&X-Amz-Date=20231114T221320Z&X-Amz-Expires=60"
    assert signature == _mac(SECRET, "20231114", "eu-west-1", f"GET\n127.0.0.1:8080\n{unsigned}\n{path}")
    assert len(signature) == SIGNATURE_CHARS


def _earlier_url(path: str, *, expires_in: int = 60) -> str:
    """A file URL in the server's earlier form, built here from its definition: SigV4's whole
    query with ``X-Amz-Algorithm=DELTAPORT-BLAKE2B`` and a 32-byte keyed BLAKE2b in hex."""
    uri = "/delta-sharing/files/share.schema.table/" + uri_encode_path(path)
    query = (
        "X-Amz-Algorithm=DELTAPORT-BLAKE2B&X-Amz-Credential=deltaport%2F20231114%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date=20231114T221320Z&X-Amz-Expires={expires_in}&X-Amz-SignedHeaders=host"
    )
    key = _day_key("DELTAPORT-BLAKE2B", SECRET, "20231114", "us-east-1")
    message = f"GET\nsharing.example.com:8443\n{query}\n{uri}".encode()
    signature = hashlib.blake2b(message, key=key, digest_size=32).hexdigest()
    return f"https://sharing.example.com:8443{uri}?{query}&X-Amz-Signature={signature}"


@pytest.mark.parametrize("path", PATHS)
def test_urls_in_the_earlier_form_still_verify_until_they_expire(signer, path):
    host, raw_path, query = _request_parts(_earlier_url(path))
    assert signer.verify("GET", host, raw_path, query, now=NOW + 1) == ("share.schema.table", path)
    with pytest.raises(PermissionDenied, match="URL expired at"):
        signer.verify("GET", host, raw_path, query, now=NOW + 61)
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", host, raw_path, _with_param(query, "X-Amz-Expires", "3600"), now=NOW)


def _signatures(joined: str) -> list[str]:
    return [joined[i : i + SIGNATURE_CHARS] for i in range(0, len(joined), SIGNATURE_CHARS)]


def test_batch_signatures_are_those_of_single_urls(signer):
    query, batch, expiry = signer.batch_signing(expires_in=900, now=NOW)
    paths = ["part-0.parquet", "region=europe/part-1.parquet", "a b/ü.parquet"]
    uris = [uri_encode_path(p).encode() for p in paths]
    signatures = _signatures(batch.sign(uris))
    for path, uri, signature in zip(paths, uris, signatures, strict=True):
        signed = signer.sign(path, expires_in=900, now=NOW)
        assert signed.url == f"{BASE}/files/share.schema.table/{uri.decode()}?{query}&X-Amz-Signature={signature}"
        assert signed.expiration_ms == expiry
    assert len(set(signatures)) == len(uris)
    assert batch.sign([]) == ""


def test_a_batch_carries_the_days_key_never_the_secret(signer):
    _, batch, _ = signer.batch_signing(expires_in=900, now=NOW)
    shipped = pickle.dumps(batch)  # what a keying worker receives
    assert SECRET not in shipped
    _, next_day, _ = signer.batch_signing(expires_in=900, now=NOW + 86400)
    assert next_day.key != batch.key


def test_verify_with_host_from_base_url_and_a_stripped_prefix(signer):
    url = signer.sign("x/y.parquet", expires_in=60, now=NOW).url
    _, raw_path, query = _request_parts(url)
    assert signer.verify("GET", None, raw_path, query, now=NOW) == ("share.schema.table", "x/y.parquet")
    stripped = raw_path.replace(b"/delta-sharing", b"", 1)  # a proxy that removes the prefix
    assert signer.verify("GET", None, stripped, query, now=NOW) == ("share.schema.table", "x/y.parquet")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", "evil.example.com", raw_path, query, now=NOW)
    with pytest.raises(PermissionDenied, match="not a file URL"):
        signer.verify("GET", None, b"/other/share.schema.table/x/y.parquet", query, now=NOW)


@pytest.mark.parametrize("base", ["http://files.example:443", "https://files.example:80", "http://files.example:80"])
def test_a_url_on_the_other_schemes_default_port_verifies_with_its_host_header(base):
    """The verifier sees a Host header, not the scheme (TLS may end at a proxy): it counts both
    :80 and :443 as default, and the signer signs the host the same way."""
    signer = LocalFileSigner(base, "t1", "deltaport", SECRET)
    url = signer.sign("x.parquet", expires_in=60, now=NOW).url
    host, raw_path, query = _request_parts(url)
    assert signer.verify("GET", host, raw_path, query, now=NOW) == ("t1", "x.parquet")
    assert signer.verify("GET", None, raw_path, query, now=NOW) == ("t1", "x.parquet")


def test_verify_returns_the_table_key_from_the_url(signer):
    other = signer.for_table("share.schema.other")
    url = other.sign("x.parquet", expires_in=60, now=NOW).url
    host, raw_path, query = _request_parts(url)
    assert signer.verify("GET", host, raw_path, query, now=NOW) == ("share.schema.other", "x.parquet")
    swapped = raw_path.replace(b"share.schema.other", b"share.schema.table")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", host, swapped, query, now=NOW)


def test_verify_refuses_other_files_methods_keys_and_expired_urls(signer):
    url = signer.sign("a.parquet", expires_in=60, now=NOW).url
    host, raw_path, query = _request_parts(url)
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", host, raw_path.replace(b"a.parquet", b"b.parquet"), query, now=NOW)
    with pytest.raises(PermissionDenied, match="method PUT"):
        signer.verify("PUT", host, raw_path, query, now=NOW)
    with pytest.raises(PermissionDenied, match="URL expired at"):
        signer.verify("GET", host, raw_path, query, now=NOW + 61)
    with pytest.raises(PermissionDenied, match="missing X-Amz-Signature"):
        signer.verify("GET", host, raw_path, b"", now=NOW)
    stranger = LocalFileSigner(BASE, "share.schema.table", "deltaport", b"another secret")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        stranger.verify("GET", host, raw_path, query, now=NOW)
    other_key = LocalFileSigner(BASE, "share.schema.table", "someone", SECRET)
    with pytest.raises(PermissionDenied, match="unknown access key"):
        other_key.verify("GET", host, raw_path, query, now=NOW)


def _with_param(query: bytes, name: str, value: str) -> bytes:
    pairs = (p.split("=", 1) for p in query.decode().split("&"))
    return "&".join(f"{k}={value if k == name else v}" for k, v in pairs).encode()


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("X-Amz-Expires", "61", "signature does not match"),
        ("X-Amz-Expires", "999999999", "malformed X-Amz-Expires"),
        ("X-Amz-Date", "20231114T221321Z", "signature does not match"),
        ("X-Amz-Date", "20231115T221320Z", "signature does not match"),  # another day's key
        ("X-Amz-Date", "2023-11-14", "malformed X-Amz-Date"),
        ("X-Amz-Credential", "someone", "unknown access key"),
        ("X-Amz-Credential", "deltaport%2F20231114%2Fus-east-1%2Fs3%2Faws4_request", "unknown access key"),
        ("X-Amz-Credential", "", "missing X-Amz-Credential"),
        ("X-Amz-Signature", "0" * SIGNATURE_CHARS, "signature does not match"),
        ("X-Amz-Signature", "", "missing X-Amz-Signature"),
    ],
)
def test_verify_refuses_any_tampered_parameter(signer, name, value, problem):
    host, raw_path, query = _request_parts(signer.sign("a.parquet", expires_in=60, now=NOW).url)
    assert signer.verify("GET", host, raw_path, query, now=NOW) == ("share.schema.table", "a.parquet")
    with pytest.raises(PermissionDenied, match=problem):
        signer.verify("GET", host, raw_path, _with_param(query, name, value), now=NOW)


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("response-content-type=text%2Fhtml", "unexpected query parameter 'response-content-type'"),
        ("X-Amz-SignedHeaders=host", "unexpected query parameter 'X-Amz-SignedHeaders'"),
        ("X-Amz-Expires=61", "duplicate query parameter X-Amz-Expires"),
        ("X-Amz-Algorithm=AWS4-HMAC-SHA256", "missing X-Amz-SignedHeaders"),  # no passing off as SigV4
        ("X-Amz-Algorithm=DELTAPORT-BLAKE2B", "missing X-Amz-SignedHeaders"),  # nor as the earlier form
    ],
)
def test_verify_refuses_added_parameters(signer, extra, problem):
    host, raw_path, query = _request_parts(signer.sign("a.parquet", expires_in=60, now=NOW).url)
    with pytest.raises(PermissionDenied, match=problem):
        signer.verify("GET", host, raw_path, query + b"&" + extra.encode(), now=NOW)


@pytest.mark.parametrize(
    ("algorithm", "problem"),
    [
        ("AWS4-HMAC-SHA256", "signature does not match"),
        ("AWS4-HMAC-SHA1", "unsupported X-Amz-Algorithm 'AWS4-HMAC-SHA1'"),
        ("DELTAPORT-B2S", "unsupported X-Amz-Algorithm 'DELTAPORT-B2S'"),  # the short form has no whole shape
    ],
)
def test_urls_in_sigv4s_whole_shape_are_checked_by_their_algorithm(signer, algorithm, problem):
    host, raw_path, query = _request_parts(_earlier_url("a.parquet"))
    with pytest.raises(PermissionDenied, match=problem):
        signer.verify("GET", host, raw_path, _with_param(query, "X-Amz-Algorithm", algorithm), now=NOW)


def test_verify_refuses_flipped_signature_characters_and_future_dates(signer):
    host, raw_path, query = _request_parts(signer.sign("a.parquet", expires_in=60, now=NOW).url)
    signature = dict(parse_qsl(query.decode()))["X-Amz-Signature"]
    for i in (0, SIGNATURE_CHARS // 2, SIGNATURE_CHARS - 1):
        flipped = signature[:i] + ("a" if signature[i] != "a" else "b") + signature[i + 1 :]
        with pytest.raises(PermissionDenied, match="signature does not match"):
            signer.verify("GET", host, raw_path, _with_param(query, "X-Amz-Signature", flipped), now=NOW)
    with pytest.raises(PermissionDenied, match="dated in the future"):
        signer.verify("GET", host, raw_path, query, now=NOW - 3600)
    assert signer.verify("GET", host, raw_path, query, now=NOW + 60) == ("share.schema.table", "a.parquet")
    with pytest.raises(PermissionDenied, match="URL expired at"):
        signer.verify("GET", host, raw_path, query, now=NOW + 61)


def _sigv4_url(path: str, *, expires_in: int = 60) -> str:
    """A file URL as the server signed it before its own MAC: SigV4 with the same key."""
    presigner = SigV4Presigner("https://sharing.example.com:8443", "deltaport", SECRET)
    canonical = "/delta-sharing/files/share.schema.table/" + uri_encode_path(path)
    return presigner.presign_encoded(canonical, expires_in=expires_in, now=NOW)[0]


@pytest.mark.parametrize("path", PATHS)
def test_sigv4_urls_issued_before_still_verify_until_they_expire(signer, path):
    url = _sigv4_url(path)
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256&" in url
    host, raw_path, query = _request_parts(url)
    assert signer.verify("GET", host, raw_path, query, now=NOW + 1) == ("share.schema.table", path)
    assert signer.verify("HEAD", None, raw_path, query, now=NOW + 1) == ("share.schema.table", path)
    with pytest.raises(PermissionDenied, match="URL expired at"):
        signer.verify("GET", host, raw_path, query, now=NOW + 61)


def test_tampered_sigv4_urls_are_refused(signer):
    host, raw_path, query = _request_parts(_sigv4_url("a.parquet"))
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", host, raw_path.replace(b"a.parquet", b"b.parquet"), query, now=NOW)
    with pytest.raises(PermissionDenied, match="signature does not match"):
        signer.verify("GET", host, raw_path, _with_param(query, "X-Amz-Expires", "3600"), now=NOW)
    with pytest.raises(PermissionDenied, match="signature does not match"):  # nor passed off as the new scheme
        signer.verify("GET", host, raw_path, _with_param(query, "X-Amz-Algorithm", "DELTAPORT-BLAKE2B"), now=NOW)
    stranger = LocalFileSigner(BASE, "share.schema.table", "deltaport", b"another secret")
    with pytest.raises(PermissionDenied, match="signature does not match"):
        stranger.verify("GET", host, raw_path, query, now=NOW)


def test_default_clock(signer):
    signed = signer.sign("a.parquet", expires_in=60)
    assert abs(signed.expiration_ms - (time.time() + 60) * 1000) < 2000
    host, raw_path, query = _request_parts(signed.url)
    assert signer.verify("GET", host, raw_path, query) == ("share.schema.table", "a.parquet")


BAD_PATHS = [
    "",
    "..",
    "../x",
    "a/../../x",
    "a/..",
    "/etc/passwd",
    "//etc/passwd",
    "C:/Windows/x",
    "c:x",
    "s3://bucket/x",
    "file:///etc/passwd",
    "a\x00b",
    "a/\x00",
    "a\\..\\x",
    "..\\x",
    "a//b",
    "./a",
    "a/./b",
    "a/",
    ".",
    "a\nb",
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_sign_refuses_paths_outside_the_root(signer, path):
    with pytest.raises(PermissionDenied):
        signer.sign(path, expires_in=60, now=NOW)


def _forged(raw_path: str, presigner_class, *, host="sharing.example.com:8443") -> tuple[str, str, str]:
    """A validly signed request for an arbitrary raw path (as if the signer had been fooled)."""
    presigner = presigner_class("https://" + host, "deltaport", SECRET, region="us-east-1", service="s3")
    url, _ = presigner.presign_encoded(uri_encode_path(unquote(raw_path)), expires_in=60, now=NOW)
    return host, raw_path, urlsplit(url).query


@pytest.mark.parametrize(
    ("raw_path", "problem"),
    [
        ("/delta-sharing/files/share.schema.table/../../etc/passwd", "leave the table root"),
        ("/delta-sharing/files/share.schema.table/%2E%2E/%2E%2E/etc/passwd", "leave the table root"),
        ("/delta-sharing/files/share.schema.table/a/%2e%2e/%2e%2e/x", "leave the table root"),
        ("/delta-sharing/files/share.schema.table/%2Fetc%2Fpasswd", "relative to the table root"),
        ("/delta-sharing/files/share.schema.table//etc/passwd", "relative to the table root"),
        ("/delta-sharing/files/share.schema.table/C%3A%5CWindows", "backslash"),
        ("/delta-sharing/files/share.schema.table/a%00.parquet", "control character"),
        ("/delta-sharing/files/share.schema.table/..%5C..%5Cx", "backslash"),
        ("/delta-sharing/files/share.schema.table/a/./b", "'.' segment"),
        ("/delta-sharing/files/..%2Fsecret/x", "table key"),
        ("/delta-sharing/files/../x", "table key"),
        ("/delta-sharing/files/share.schema.table", "no file"),
        ("/delta-sharing/files/share.schema.table/%FF.parquet", "UTF-8"),
    ],
)
@pytest.mark.parametrize("presigner_class", [MacPresigner, SigV4Presigner])
def test_verify_refuses_escaping_paths_even_when_validly_signed(signer, raw_path, problem, presigner_class):
    host, path, query = _forged(raw_path, presigner_class)
    with pytest.raises(PermissionDenied, match=problem):
        signer.verify("GET", host, path, query, now=NOW)


def test_construction_checks_its_arguments():
    for key in ("", "..", ".", "a/b", "a\\b", "a\x00"):
        with pytest.raises(ValueError):
            LocalFileSigner(BASE, key, "deltaport", SECRET)
    with pytest.raises(ValueError):
        LocalFileSigner("ftp://x", "t", "deltaport", SECRET)
    with pytest.raises(ValueError):
        LocalFileSigner(BASE + "?q=1", "t", "deltaport", SECRET)
    with pytest.raises(ValueError):
        LocalFileSigner(BASE, "t", "deltaport", b"")
    with pytest.raises(ValueError):
        LocalFileSigner(BASE, "t", "deltaport", SECRET).for_table("a/b")
    with pytest.raises(ValueError, match="expires_in"):
        LocalFileSigner(BASE, "t", "deltaport", SECRET).sign("x", expires_in=8 * 86400)


def test_base_url_with_trailing_slash_and_encoded_table_key():
    signer = LocalFileSigner("http://localhost:8080/", "my table", "deltaport", "text secret")
    url = signer.sign("x.parquet", expires_in=60, now=NOW).url
    assert url.startswith("http://localhost:8080/files/my%20table/x.parquet?")
    host, raw_path, query = _request_parts(url)
    assert signer.verify("GET", host, raw_path, query, now=NOW) == ("my table", "x.parquet")


def test_signer_for_picks_the_implementation(tmp_path):
    local = signer_for(LocalStore(tmp_path), base_url=BASE, table_key="t", access_key="deltaport", secret=SECRET)
    assert isinstance(local, LocalFileSigner) and local.table_key == "t"
    with pytest.raises(ValueError, match="secret"):
        signer_for(LocalStore(tmp_path), base_url=BASE, table_key="t", access_key="deltaport")
    s3 = store_for(
        "s3://bucket/table",
        {
            "endpoint": "http://127.0.0.1:9",
            "region": "us-east-1",
            "access_key_id": "a",
            "secret_access_key": "b",
            "allow_http": True,
        },
    )
    assert isinstance(signer_for(s3), ObstoreSigner)
    with pytest.raises(TypeError):
        signer_for(object())  # type: ignore[arg-type]
