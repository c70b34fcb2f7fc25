"""GCS V4 signed URLs, known answers: a fixed service-account key, a fixed time and object give one
exact URL.

The expected URL was computed once with the independent implementation below (Google's V4
canonical request and string-to-sign, RSA PKCS#1 v1.5 with SHA-256 from ``cryptography``) and
checked to be byte for byte what obstore produced under a clock fixed at the same instant.
obstore signs with the system clock and cannot be given a time, so here:

* the independent implementation must still give the recorded URL (the known answer);
* every URL the signer makes now must equal, byte for byte, the independent implementation's URL
  for the same object at the ``X-Goog-Date`` the URL carries (a fresh date, checked against the
  clock);
* where libfaketime is installed, the signer run under a clock fixed at the known instant must give
  exactly the recorded URL.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import cryptography  # noqa: F401
import obstore  # noqa: F401
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from deltaport.signing import ObstoreSigner
from deltaport.storage import store_for

# A throwaway RSA-2048 key made for this test only; it signs nothing but these URLs.
KEY_PEM = """\
-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQChtZPOLGI4R+J9
Cyez3rN8KRdvQgvvXT4dvESCNeCSl3H2EekZydnfpJnpGINaF4voWy9GzgTHew9T
b5WWq4IqowzifraRNgd/U/Fsu3JgtNPAPB4/WDaVxa4uycn78+HGJpls6l7VZlRa
2wOi2FJdkpTBskN9XK4Kr/cfhTGTGIl38Dspf2P/1X+SOCur+lv5lgHVToFL/fyk
AQ52lNVAPc8cpnqMDnjtBOT/HzBBxGfo1b0sjr3+HFAF61YwVuY4B+NdWtCFCjb7
xPWF4G9DxZGGGQzEsYkuA0hgKmKik5P8HFGAwK0DUN0qDbvwY4OCY56qFtCgOtYl
+Hx95N5xAgMBAAECggEAJhet361Y3cUhNy9/hMF7Kk5LtOusABDI5xxITxv98Mo4
EC0b6fVAm4wcrWoW1wwg6vU/57/0JEF61L6+UCXKndyW1mve+cnubjIJ9wEY6mru
TqRaw7U19oYAiAkEyZMjphfFoIB9ImvehyB8dMncbSpwXEhv2YIRhXb6EbTAftOz
ApDPBWO/35ND1RlSJ49sF3+XCunfFGra8/qPQD35+KL3rHpS1jGVdKzb1/cY4kKQ
YEYY13Ls4XinR6mrLM4KmPAqBtvqOT9k7MdCUGtXK3oSY3qIBQTrx+yEgk00Ancz
UPSUhLNOd3+AlmeWdrxNaaiBgYEcfCgg9gT81q4BIQKBgQDL9Gag4XvapctrcnV1
VgDvT57OsRSElRjfZh49QhWbpiwGaAkuPXeRKy0uRbk7ipOgmtUoOTGU8r5atcxW
mu4cxBitbRRvoxSqDhHiyqP7PMXtQdwxlY0zg/5Wxr0caVK28rch8mYKKgVGGpTw
+m/Y8UhzRy3eJl7MQPkVWa8v3QKBgQDK+XEZw5LSOeq25DXfi5NqOkV+QG9Ihk84
H+m6cM25C2Dgj2/GJXU/rFA5+i/ZkG4Oh2+h9XUImj/Mg885DPLcxZLlkCF7KcR/
KYalsMMClvrmvIt3Ig8x/3J69G+oMsQiP9ITLcfcrNJWdOug5vtTLYvgsuS8Q3V5
ZHwFvdlJpQKBgQC8W2lQmQ2WP1nfUGSzyYqxeJnUj2vAiiXfY2L39gkYp12vSPN5
leDP280tF81a9L8kKvpC3Jcy1QABrDYboZfYTy3vNHcUJstVxgq0parNwzGTzSg7
Tr+J3RPONlq+W3K9bOi+XCvqpSYbuT7mUpNrCmJ7vDfbGxqfjj27fwkwrQKBgG4+
hdvEih59Lqsf0NMWcH8mH1CvlsIBkU2ep8iINHTpZTkTL1akScbHxNt4tDyrYduq
XEvPkj2V6kke3pLSIacf+OWPH2BSE1QuLeAY3hKuBqEEj4upiC9T285ErdDhof4o
Q+X+26tUgvpKjyDZ1HAdMPhesjY/PbMtjN9hen+xAoGBAL6caBHXw6gwDFCv/t42
kpPLAMNvXUcaa+ppiAcE49e8BGWUeCs9315Q9d7OtQh7k3phuygFlGGN4OwYssMl
Wco1OuQOdytMw1vLpp1ocqiEwrS951EOHpuSQiUbA2trOojMBVXK8kjGPQi9XBUI
XfR3SYWGXTiCLL8GC05zuAky
-----END PRIVATE KEY-----
"""
EMAIL = "sharing@deltaport-test.iam.gserviceaccount.com"
BUCKET, PREFIX = "deltaport-bucket", "tables/t1"
WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
EXPECTED_URL = (
    "https://storage.googleapis.com/deltaport-bucket/tables/t1/part-00000.snappy.parquet"
    "?X-Goog-Algorithm=GOOG4-RSA-SHA256"
    "&X-Goog-Credential=sharing%40deltaport-test.iam.gserviceaccount.com%2F20260102%2Fauto%2Fstorage%2Fgoog4_request"
    "&X-Goog-Date=20260102T030405Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host"
    "&X-Goog-Signature=244ffd076b2cdab5ca538113a19fc126775c7824971d8a2afc7030ef42d5299cf84398a290e1066966fc07fed60c25fa"
    "414f9554f52dc1fab9b065bf6e633a6e51bde3307978c00e791802da94c71941494a507a62c0f554100743144230bca8"
    "d8cd06d2d9b21b640b9ea833e751cbed8cf8ba31a6bced3b6af4f1c8615b2ba96cf631f26435c80ca5b937054215c673"
    "ef810720eef6e72172c2870eb35aa97e944802c8a1f93fe9f08905b2cc9e4a2470103e18add5a07f1c9f92049211fd35"
    "fe64f1eb2e78b290b28f7965c8aea0cd31264ff4d93fd9443dbf87538683d32c272957c663856875ac67a9195284e69c"
    "8341a6de9df32b4574629e74e0489ca2"
)


def v4_url(object_name: str, when: dt.datetime, expires: int, key_pem: str = KEY_PEM) -> str:
    """Google's V4 signed GET URL, written from the documented signing process (not from obstore)."""
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    stamp = when.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/auto/storage/goog4_request"
    host = "storage.googleapis.com"
    path = f"/{BUCKET}/" + quote(object_name.encode("utf-8"), safe="/")  # unreserved characters and '/' stay
    query = {
        "X-Goog-Algorithm": "GOOG4-RSA-SHA256",
        "X-Goog-Credential": f"{EMAIL}/{scope}",
        "X-Goog-Date": stamp,
        "X-Goog-Expires": str(expires),
        "X-Goog-SignedHeaders": "host",
    }
    canonical_query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in sorted(query.items()))
    canonical_request = "\n".join(["GET", path, canonical_query, f"host:{host}", "", "host", "UNSIGNED-PAYLOAD"])
    string_to_sign = "\n".join(
        ["GOOG4-RSA-SHA256", stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    signature = key.sign(string_to_sign.encode(), padding.PKCS1v15(), hashes.SHA256()).hex()
    return f"https://{host}{path}?{canonical_query}&X-Goog-Signature={signature}"


@pytest.fixture(scope="module")
def service_account(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gcs-kat") / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "deltaport-test",
                "private_key_id": "kat-key-1",
                "private_key": KEY_PEM,
                "client_email": EMAIL,
                "token_uri": "http://127.0.0.1:9/token",
            }
        )
    )  # never contacted: signing is local
    return path


def test_independent_v4_signing_gives_the_known_answer():
    assert v4_url("tables/t1/part-00000.snappy.parquet", WHEN, 900) == EXPECTED_URL
    # and the signature is the key's: it verifies with the public half over the same string-to-sign
    public = serialization.load_pem_private_key(KEY_PEM.encode(), password=None).public_key()
    query = dict(parse_qsl(urlsplit(EXPECTED_URL).query))
    canonical_request = (
        "GET\n/deltaport-bucket/tables/t1/part-00000.snappy.parquet\n"
        + urlsplit(EXPECTED_URL).query.split("&X-Goog-Signature=")[0]
        + "\nhost:storage.googleapis.com\n\nhost\nUNSIGNED-PAYLOAD"
    )
    string_to_sign = (
        "GOOG4-RSA-SHA256\n20260102T030405Z\n20260102/auto/storage/goog4_request\n"
        + hashlib.sha256(canonical_request.encode()).hexdigest()
    )
    public.verify(
        bytes.fromhex(query["X-Goog-Signature"]), string_to_sign.encode(), padding.PKCS1v15(), hashes.SHA256()
    )


@pytest.mark.parametrize(
    "path",
    [
        "part-00000.snappy.parquet",
        "a b/\u00fcn\u00ef c\u00f6d\u00e9/part-00001.parquet",  # space and non-ASCII: percent-encoded UTF-8
        "ts 10%3A00%3A00/part-00002.parquet",  # a literal '%' (Delta's escaped partition values) is %25
        "deletion_vector_0c6f8a2e-8d1b-4a4e-9d3a-0c6f8a2e8d1b.bin",
    ],
)
def test_signer_url_is_exactly_the_independent_one_at_its_date(service_account, path):
    signer = ObstoreSigner(store_for(f"gs://{BUCKET}/{PREFIX}", {"service_account_path": str(service_account)}))
    before = time.time()
    signed = signer.sign(path, expires_in=900)
    after = time.time()
    stamp = dict(parse_qsl(urlsplit(signed.url).query))["X-Goog-Date"]
    when = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    assert int(before) - 1 <= when.timestamp() <= after + 1  # signed now, with the system clock
    assert signed.url == v4_url(f"{PREFIX}/{path}", when, 900)
    assert signed.expiration_ms // 1000 - int(when.timestamp()) in (900, 899, 901)


_FAKETIME = next(
    (
        p
        for p in (
            os.environ.get("DELTAPORT_LIBFAKETIME", ""),
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/faketime/libfaketime.so.1",
        )
        if p and Path(p).exists()
    ),
    None,
)


@pytest.mark.skipif(_FAKETIME is None, reason="libfaketime is not installed: the signer's clock cannot be fixed")
def test_signer_at_the_known_instant_gives_the_known_url(service_account):
    code = "\n".join(
        [
            "from deltaport.signing import ObstoreSigner",
            "from deltaport.storage import store_for",
            f"store = store_for('gs://{BUCKET}/{PREFIX}', {{'service_account_path': {str(service_account)!r}}})",
            "print(ObstoreSigner(store).sign('part-00000.snappy.parquet', expires_in=900).url)",
        ]
    )
    env = {
        **os.environ,
        "LD_PRELOAD": _FAKETIME,
        "FAKETIME": "2026-01-02 03:04:05",
        "TZ": "UTC",
        "FAKETIME_DONT_RESET": "1",
    }  # a frozen clock: the instant cannot drift while Python starts
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == EXPECTED_URL
