"""GCS downscoped tokens, known answers: the OAuth token request and the STS exchange as sent, against
a small local HTTP server standing in for both (no GCS emulator evaluates Credential Access
Boundaries, so what Google would enforce is not run here: the boundary sent is checked word for
word instead)."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qsl

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from vending_support import StubServer, closed_port_url

from deltaport.errors import StorageCredentialsRefused, StorageUnavailable
from deltaport.signing.vending import CredentialScope
from deltaport.signing.vending.gcs_boundary import GcsBoundaryVendor, access_boundary

NOW = 1_790_000_000.0
PRIVATE = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PEM = PRIVATE.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()


def _key(token_uri: str) -> dict:
    return {
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "kid-1",
        "private_key": PEM,
        "client_email": "deltaport@p.iam.gserviceaccount.com",
        "token_uri": token_uri,
    }


def _google(seen):
    if seen.path == "/token":
        return 200, "application/json", b'{"access_token": "source-token-for-tests", "expires_in": 3599}'
    body = {
        "access_token": "downscoped-token-for-tests",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": 3000,
    }
    return 200, "application/json", json.dumps(body).encode()


def _vend(options: dict, sts: str, location: str = "gs://my-bucket/tables/t1"):
    return GcsBoundaryVendor(sts_endpoint=sts).vend(CredentialScope(location, options, 900, "r"), now=NOW)


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_the_token_request_and_the_exchange_are_googles(secrets_used):
    secrets_used.add("source-token-for-tests", "downscoped-token-for-tests", label="GCS tokens")
    with StubServer(_google) as google:
        creds = _vend({"service_account_key": json.dumps(_key(f"{google.url}/token"))}, f"{google.url}/v1/token")
    oauth, sts = google.seen

    assert (oauth.method, oauth.path) == ("POST", "/token")
    assert oauth.headers["content-type"] == "application/x-www-form-urlencoded"
    form = dict(parse_qsl(oauth.body.decode()))
    assert form.keys() == {"grant_type", "assertion"}
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    header, claims, signature = form["assertion"].split(".")
    assert json.loads(_unb64(header)) == {"alg": "RS256", "typ": "JWT", "kid": "kid-1"}
    assert json.loads(_unb64(claims)) == {
        "iss": "deltaport@p.iam.gserviceaccount.com",
        "scope": "https://www.googleapis.com/auth/devstorage.read_only",
        "aud": f"{google.url}/token",
        "iat": int(NOW),
        "exp": int(NOW) + 3600,
    }
    PRIVATE.public_key().verify(
        _unb64(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )  # raises where the signature is not the key's

    assert (sts.method, sts.path) == ("POST", "/v1/token")
    assert sts.headers["content-type"] == "application/x-www-form-urlencoded"
    exchange = dict(parse_qsl(sts.body.decode()))
    assert exchange.keys() == {"grant_type", "subject_token_type", "requested_token_type", "subject_token", "options"}
    assert exchange["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert exchange["subject_token_type"] == exchange["requested_token_type"]
    assert exchange["requested_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert exchange["subject_token"] == "source-token-for-tests"
    assert json.loads(exchange["options"]) == {
        "accessBoundary": {
            "accessBoundaryRules": [
                {
                    "availablePermissions": ["inRole:roles/storage.objectViewer"],
                    "availableResource": "//storage.googleapis.com/projects/_/buckets/my-bucket",
                    "availabilityCondition": {
                        "title": "one table's directory",
                        "expression": "resource.name.startsWith('projects/_/buckets/my-bucket/objects/tables/t1/') || "
                        "api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('tables/t1/')",
                    },
                }
            ]
        }
    }

    assert creds.kind == "gcp" and creds.values == {"oauthToken": "downscoped-token-for-tests"}
    assert creds.expiration_ms == int((NOW + 3000) * 1000)  # what STS gave, not the 900 s asked
    assert creds.wire()["credentials"]["gcpOauthToken"] == {"oauthToken": "downscoped-token-for-tests"}
    assert "downscoped-token-for-tests" not in repr(creds)


def test_the_key_file_is_read_from_the_path_the_options_name(tmp_path):
    with StubServer(_google) as google:
        path = tmp_path / "key.json"
        path.write_text(json.dumps(_key(f"{google.url}/token")))
        creds = _vend({"google_service_account": str(path)}, f"{google.url}/v1/token")
    assert creds.values["oauthToken"] == "downscoped-token-for-tests"


def test_a_quote_in_the_prefix_cannot_end_the_condition_early():
    rule = access_boundary("b", "it's")["accessBoundary"]["accessBoundaryRules"][0]
    assert "startsWith('projects/_/buckets/b/objects/it\\'s/')" in rule["availabilityCondition"]["expression"]
    assert "availabilityCondition" not in access_boundary("b", "")["accessBoundary"]["accessBoundaryRules"][0]


def test_a_key_google_refuses_is_the_providers_to_fix():
    def refuse(seen):
        return 400, "application/json", b'{"error": "invalid_grant", "error_description": "Invalid JWT Signature."}'

    with StubServer(refuse) as google, pytest.raises(StorageCredentialsRefused) as refused:
        _vend({"service_account_key": json.dumps(_key(f"{google.url}/token"))}, f"{google.url}/v1/token")
    assert refused.value.http_status == 503 and "provider must fix" in refused.value.message
    assert "invalid_grant" in refused.value.operator_message
    assert "PRIVATE KEY" not in refused.value.operator_message


def test_without_a_service_account_key_the_provider_is_told_what_to_set():
    with pytest.raises(StorageCredentialsRefused) as refused:
        _vend({"bucket": "b"}, "http://127.0.0.1:9")
    assert "service_account_key" in refused.value.operator_message


@pytest.mark.parametrize("where", ["sts 5xx", "sts closed port", "oauth closed port"])
def test_google_unreachable_or_failing_is_unavailable(where):
    def sts_fails(seen):
        return _google(seen) if seen.path == "/token" else (503, "application/json", b"{}")

    with StubServer(sts_fails) as google, pytest.raises(StorageUnavailable) as failed:
        token_uri = closed_port_url() + "/token" if where == "oauth closed port" else f"{google.url}/token"
        sts = closed_port_url() + "/v1/token" if where == "sts closed port" else f"{google.url}/v1/token"
        _vend({"service_account_key": json.dumps(_key(token_uri))}, sts)
    assert not isinstance(failed.value, StorageCredentialsRefused)
