"""Presigned URLs through obstore: S3 end to end on a moto server, GCS and Azure checked offline.

GCS and Azure signatures are recomputed here from their specifications (Google's V4 signing
process, RSA-SHA256; Azure's service SAS string-to-sign, HMAC-SHA256 with the account key), so
the test does not trust obstore's output, only that the services would compute the same thing.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import hmac
import json
import time
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx
import obstore  # noqa: F401
import pytest

from deltaport.errors import PermissionDenied, StorageError
from deltaport.signing import ObstoreSigner, SignedUrl, UrlSigner, signer_for
from deltaport.signing.sigv4 import verify_presigned
from deltaport.storage import store_for

FILES = {
    "part-00000.snappy.parquet": b"PAR1 plain",
    "date=2024-01-01/part-00001.parquet": b"PAR1 partitioned",
    "ts=2024-01-01 10%3A00%3A00/part-00002.parquet": b"PAR1 escaped partition value",
    "a b/ünï cödé/c%d+e&f.parquet": b"PAR1 odd names",
    "deletion_vector_0c6f8a2e-8d1b-4a4e-9d3a-0c6f8a2e8d1b.bin": b"\x01DV",
}

# The Azure storage emulator's published development account.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


# --- S3 (moto server) -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_table(moto_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("signing-s3")
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    uri = moto_server.upload_dir("signing", "tables/t1", root)
    return store_for(uri, moto_server.storage_options())


@pytest.mark.parametrize("path", sorted(FILES))
def test_s3_url_downloads_the_object(moto_server, s3_table, path):
    signer = ObstoreSigner(s3_table)
    before = int(time.time())
    signed = signer.sign(path, expires_in=600)
    assert isinstance(signed, SignedUrl)
    assert before + 600 <= signed.expiration_ms // 1000 <= int(time.time()) + 600
    assert signed.url.startswith(f"{moto_server.endpoint}/signing/tables/t1/")  # custom endpoint, path style
    assert "X-Amz-Signature=" in signed.url
    response = httpx.get(signed.url)
    assert response.status_code == 200
    assert response.content == FILES[path]


def test_s3_url_verifies_with_our_sigv4_verifier(moto_server, s3_table):
    """obstore's SigV4 and ours agree (moto itself does not check presigned signatures)."""
    signed = ObstoreSigner(s3_table).sign("a b/ünï cödé/c%d+e&f.parquet", expires_in=600)
    request = httpx.Request("GET", signed.url)
    raw_path, _, query = request.url.raw_path.partition(b"?")
    lookup = {moto_server.access_key: moto_server.secret_key}.get
    assert (
        verify_presigned("GET", request.headers["host"], raw_path, query, lookup, region=moto_server.region)
        == moto_server.access_key
    )
    with pytest.raises(PermissionDenied, match="signature does not match"):
        verify_presigned("GET", request.headers["host"], raw_path.replace(b"c%25d", b"c%25e"), query, lookup)


def test_s3_sign_many_and_signer_for(moto_server, s3_table):
    signer = signer_for(s3_table)
    assert isinstance(signer, ObstoreSigner) and isinstance(signer, UrlSigner)
    paths = sorted(FILES)
    signed = signer.sign_many(paths, expires_in=300)
    assert [httpx.get(s.url).content for s in signed] == [FILES[p] for p in paths]
    assert signer.sign_many([], expires_in=300) == []


@pytest.mark.parametrize("path", ["../other/x.parquet", "/abs.parquet", "a/../../x", "a\x00b", "", "a//b", "s3://b/x"])
def test_paths_outside_the_root_are_refused(s3_table, path):
    with pytest.raises(PermissionDenied):
        ObstoreSigner(s3_table).sign(path, expires_in=60)


def test_lifetime_is_checked(s3_table):
    with pytest.raises(ValueError, match="expires_in"):
        ObstoreSigner(s3_table).sign("x", expires_in=8 * 24 * 3600)


def test_stores_that_cannot_sign_are_refused():
    with pytest.raises(StorageError, match="only S3, Azure Blob and GCS"):
        ObstoreSigner(store_for("memory:///table"))


def test_obstore_errors_become_storage_errors(monkeypatch):
    import obstore.exceptions

    store = store_for(
        "s3://bucket/t",
        {
            "endpoint": "http://127.0.0.1:9",
            "region": "us-east-1",
            "access_key_id": "a",
            "secret_access_key": "b",
            "allow_http": True,
        },
    )

    def fail(*args, **kwargs):
        raise obstore.exceptions.GenericError("credential provider failed\n\nDebug source: ...")

    monkeypatch.setattr(obstore, "sign", fail)
    with pytest.raises(StorageError, match=r"^cannot sign a URL for x.parquet: the object store refused") as err:
        ObstoreSigner(store).sign("x.parquet", expires_in=60)
    # the store's location and its raw error are for the operator: never in the message a recipient reads
    assert "s3://bucket" not in err.value.message and "credential provider" not in err.value.message
    assert err.value.detail == "credential provider failed"
    assert "s3://bucket/t" in err.value.operator_message


# --- GCS (V4 signed URLs, no network needed) ------------------------------------------------


@pytest.fixture(scope="module")
def gcs_key(tmp_path_factory):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa as crypto

    key = crypto.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path: Path = tmp_path_factory.mktemp("gcs") / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "deltaport-test",
                "private_key_id": "test-key-1",
                "private_key": pem,
                "client_email": "sharing@deltaport-test.iam.gserviceaccount.com",
                "token_uri": "http://127.0.0.1:9/token",  # never contacted: signing is local
            }
        )
    )
    return key, path


def _check_gcs_v4(url: str, public_key, email: str) -> None:
    """Recompute Google's V4 string-to-sign and check the RSA-SHA256 signature."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    parts = urlsplit(url)
    params = [tuple(p.split("=", 1)) for p in parts.query.split("&")]
    query = dict(params)
    assert query["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
    date = query["X-Goog-Date"]
    scope = f"{date[:8]}/auto/storage/goog4_request"
    assert unquote(query["X-Goog-Credential"]) == f"{email}/{scope}"
    assert query["X-Goog-SignedHeaders"] == "host"
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(params) if k != "X-Goog-Signature")
    canonical_request = f"GET\n{parts.path}\n{canonical_query}\nhost:{parts.hostname}\n\nhost\nUNSIGNED-PAYLOAD"
    string_to_sign = f"GOOG4-RSA-SHA256\n{date}\n{scope}\n{hashlib.sha256(canonical_request.encode()).hexdigest()}"
    public_key.verify(
        bytes.fromhex(query["X-Goog-Signature"]), string_to_sign.encode(), padding.PKCS1v15(), hashes.SHA256()
    )


@pytest.mark.parametrize("path", sorted(FILES))
def test_gcs_v4_signature_verifies_with_the_public_key(gcs_key, path):
    from cryptography.exceptions import InvalidSignature

    key, sa_path = gcs_key
    store = store_for("gs://deltaport-bucket/tables/t1", {"service_account_path": str(sa_path)})
    signed = ObstoreSigner(store).sign(path, expires_in=900)
    parts = urlsplit(signed.url)
    assert parts.scheme == "https" and parts.hostname == "storage.googleapis.com"
    assert "X-Goog-Credential=" in parts.query and "X-Goog-Expires=900" in parts.query
    # the URL addresses exactly this object: decoding the path gives bucket/prefix/key
    assert unquote(parts.path) == f"/deltaport-bucket/tables/t1/{path}"
    _check_gcs_v4(signed.url, key.public_key(), "sharing@deltaport-test.iam.gserviceaccount.com")
    tampered = signed.url.replace("X-Goog-Expires=900", "X-Goog-Expires=901")
    with pytest.raises(InvalidSignature):
        _check_gcs_v4(tampered, key.public_key(), "sharing@deltaport-test.iam.gserviceaccount.com")


# --- Azure Blob (service SAS) ---------------------------------------------------------------


def _azure_signer() -> ObstoreSigner:
    store = store_for(
        "az://container/tables/t1",
        {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "use_emulator": True,
        },
    )
    return ObstoreSigner(store)


def _azure_sas_signature(query: dict, canonical_resource: str) -> str:
    """Service SAS string-to-sign for versions 2020-12-06 and later."""
    fields = [
        query["sp"],
        query.get("st", ""),
        query["se"],
        canonical_resource,
        query.get("si", ""),
        query.get("sip", ""),
        query.get("spr", ""),
        query["sv"],
        query["sr"],
        query.get("snapshot", ""),
        query.get("ses", ""),
        query.get("rscc", ""),
        query.get("rscd", ""),
        query.get("rsce", ""),
        query.get("rscl", ""),
        query.get("rsct", ""),
    ]
    digest = hmac.digest(base64.b64decode(AZURITE_KEY), "\n".join(fields).encode("utf-8"), "sha256")
    return base64.b64encode(digest).decode()


@pytest.mark.parametrize("path", sorted(FILES))
def test_azure_sas_matches_the_account_key_signature(path):
    """Names that need percent-encoding included: the canonicalized resource is the decoded name."""
    signed = _azure_signer().sign(path, expires_in=900)
    parts = urlsplit(signed.url)
    assert parts.netloc == "127.0.0.1:10000"
    assert unquote(parts.path) == f"/{AZURITE_ACCOUNT}/container/tables/t1/{path}"
    query = dict(parse_qsl(parts.query))
    assert query["sp"] == "r" and query["sr"] == "b" and query["se"] and query["sig"]
    expiry = calendar.timegm(time.strptime(query["se"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(expiry - time.time() - 900) <= 2
    assert abs(expiry * 1000 - signed.expiration_ms) <= 1000
    resource = f"/blob/{AZURITE_ACCOUNT}/container/tables/t1/{path}"
    assert query["sig"] == _azure_sas_signature(query, resource)
    query["sp"] = "rw"
    assert query["sig"] != _azure_sas_signature(query, resource)


def test_azure_sign_many_and_a_store_without_prefix():
    paths = sorted(FILES)
    for path, signed in zip(paths, _azure_signer().sign_many(paths, expires_in=60)):
        query = dict(parse_qsl(urlsplit(signed.url).query))
        assert query["sig"] == _azure_sas_signature(query, f"/blob/{AZURITE_ACCOUNT}/container/tables/t1/{path}")
    store = store_for(
        "az://container", {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY, "use_emulator": True}
    )
    signed = ObstoreSigner(store).sign("a b/c.parquet", expires_in=60)
    query = dict(parse_qsl(urlsplit(signed.url).query))
    assert query["sig"] == _azure_sas_signature(query, f"/blob/{AZURITE_ACCOUNT}/container/a b/c.parquet")
