"""Azure shared access signatures for a table's directory, against an Azurite process and against
azure-storage-blob's own SAS generator.

What Azurite 3.35 enforces, measured here: the signature (wrong key or tampered fields → 403), the
expiry, the container (a SAS for one container reads nothing of another) and the permissions (a
read + list SAS cannot write). It does not know directory SAS at all: ``sr=d`` is not among its
resource types (c, b, bs), so it skips the SAS check and refuses every request with
``AuthorizationFailure``, inside the directory too; it has no hierarchical namespace. The narrowest
scope it enforces that still lets a Delta reader list and read is the container
(``azure_sas_scope: container``): with it a reader also reads the other directories of that
container, which these tests show. The directory SAS itself is checked against the SDK's
string-to-sign only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from urllib.parse import parse_qs, parse_qsl

import deltalake
import httpx
import pytest
from azure.storage.blob import ContainerClient
from azure.storage.blob import UserDelegationKey as SdkUserDelegationKey
from azure.storage.blob._shared_access_signature import BlobSharedAccessSignature
from servers import AZURITE_KEY
from vending_support import TABLE, StubServer, closed_port_url

from deltaport.errors import StorageCredentialsRefused, StorageUnavailable
from deltaport.signing.vending import CredentialScope
from deltaport.signing.vending.azure_sas import (
    SAS_VERSION,
    AzureSasVendor,
    SasFields,
    UserDelegationKey,
    sign,
    string_to_sign,
)

CONTAINER = "vend"
LOCATION = f"az://{CONTAINER}/tables/t1"


@pytest.fixture(scope="module")
def tables(azurite):
    azurite.upload_dir(CONTAINER, "tables/t1", TABLE)
    azurite.upload_dir(CONTAINER, "tables/t2", TABLE)
    azurite.upload_dir("other", "tables/t1", TABLE)
    return azurite


@pytest.fixture(autouse=True)
def _quiet_test_clients():
    """The tests' own HTTP clients (httpx, the SDK's urllib3) log the URLs they fetch, SAS included;
    the secret scan is for what deltaport logs."""
    loggers = [logging.getLogger(name) for name in ("httpx", "urllib3")]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(logging.WARNING)
    yield
    for each, level in zip(loggers, levels):
        each.setLevel(level)


def _vend(options: dict, *, now: float | None = None, lifetime: int = 3600, vendor=None, location=LOCATION):
    scope = CredentialScope(location, options, lifetime, "recipient-1")
    return (vendor or AzureSasVendor()).vend(scope, now=time.time() if now is None else now)


def _status(url: str, sas: str) -> int:
    return httpx.get(f"{url}{'&' if '?' in url else '?'}{sas}", timeout=10).status_code


def test_a_container_sas_lists_and_reads_the_table_and_delta_rs_reads_it(tables, secrets_used):
    creds = _vend({**tables.storage_options(), "azure_sas_scope": "container"})
    sas = creds.values["sasToken"]
    secrets_used.add(sas, parse_qs(sas)["sig"][0], label="a SAS")
    assert creds.kind == "azure" and creds.values["endpoint"] == tables.endpoint
    assert dict(parse_qsl(sas))["sp"] == "rl" and dict(parse_qsl(sas))["sr"] == "c"
    client = ContainerClient(tables.endpoint, CONTAINER, credential=sas)
    names = {b.name for b in client.list_blobs(name_starts_with="tables/t1/_delta_log/")}
    assert "tables/t1/_delta_log/00000000000000000000.json" in names
    body = client.download_blob("tables/t1/_delta_log/00000000000000000000.json").readall()
    assert body == (TABLE / "_delta_log" / "00000000000000000000.json").read_bytes()
    table = deltalake.DeltaTable(
        f"az://{CONTAINER}/tables/t1",
        storage_options={
            "azure_storage_account_name": tables.account,
            "azure_storage_sas_key": sas,
            "azure_storage_endpoint": tables.endpoint,
            "allow_http": "true",
        },
    )
    expected = deltalake.DeltaTable(str(TABLE))
    assert table.to_pyarrow_table().sort_by("number").equals(expected.to_pyarrow_table().sort_by("number"))


def test_a_container_sas_reads_nothing_of_another_container_and_writes_nothing(tables):
    sas = _vend({**tables.storage_options(), "azure_sas_scope": "container"}).values["sasToken"]
    log = "tables/t1/_delta_log/00000000000000000000.json"
    assert _status(f"{tables.endpoint}/{CONTAINER}/{log}", sas) == 200
    assert _status(f"{tables.endpoint}/{CONTAINER}/tables/t2/_delta_log/00000000000000000000.json", sas) == 200
    assert _status(f"{tables.endpoint}/other/{log}", sas) == 403
    assert _status(f"{tables.endpoint}/other?restype=container&comp=list", sas) == 403
    put = httpx.put(
        f"{tables.endpoint}/{CONTAINER}/tables/t1/new.json?{sas}",
        content=b"{}",
        headers={"x-ms-blob-type": "BlockBlob"},
    )
    assert put.status_code == 403


def test_an_expired_sas_and_one_signed_with_another_key_are_refused(tables):
    log = f"{tables.endpoint}/{CONTAINER}/tables/t1/_delta_log/00000000000000000000.json"
    options = {**tables.storage_options(), "azure_sas_scope": "container"}
    expired = _vend(options, now=time.time() - 7200, lifetime=3600)
    assert expired.expiration_ms < time.time() * 1000
    assert _status(log, expired.values["sasToken"]) == 403
    other_key = _vend({**options, "account_key": "b3RoZXIga2V5"}).values["sasToken"]
    assert _status(log, other_key) == 403


def test_the_default_is_a_directory_sas_for_the_tables_directory(tables):
    """The SAS an ADLS Gen2 account is given: ``sr=d`` with the directory's depth. Azurite refuses it
    everywhere (it knows no directory SAS), inside the directory too."""
    sas = _vend(tables.storage_options()).values["sasToken"]
    query = dict(parse_qsl(sas))
    assert (query["sr"], query["sdd"], query["sp"], query["sv"]) == ("d", "2", "rl", SAS_VERSION)
    assert _status(f"{tables.endpoint}/{CONTAINER}/tables/t1/_delta_log/00000000000000000000.json", sas) == 403


FIXED = {"permissions": "rl", "start": "2026-01-02T03:04:05Z", "expiry": "2026-01-02T04:04:05Z"}
DELEGATION = UserDelegationKey(
    "6b8a2c0e-0000-4000-8000-000000000001",
    "72f988bf-0000-4000-8000-000000000002",
    "2026-01-02T03:00:00Z",
    "2026-01-03T03:00:00Z",
    "b",
    SAS_VERSION,
    "c2VjcmV0LWRlbGVnYXRpb24ta2V5LWZvci10ZXN0cw==",
)


def _sdk_key() -> SdkUserDelegationKey:
    key = SdkUserDelegationKey()
    key.signed_oid, key.signed_tid = DELEGATION.signed_oid, DELEGATION.signed_tid
    key.signed_start, key.signed_expiry = DELEGATION.signed_start, DELEGATION.signed_expiry
    key.signed_service, key.signed_version, key.value = "b", SAS_VERSION, DELEGATION.value
    return key


@pytest.mark.parametrize("delegated", [False, True], ids=["account-key", "user-delegation"])
@pytest.mark.parametrize(("resource", "path"), [("c", ""), ("b", "tables/t1")])
def test_the_string_to_sign_and_signature_are_azure_storage_blobs(delegated, resource, path):
    """Known answer: the SDK's generator, given the same fields, signs the same string with the same
    signature. The directory SAS (``sr=d``) signs the same layout, with ``d`` in the resource line."""
    key = DELEGATION if delegated else None
    fields = SasFields("devstoreaccount1", "vend", path, protocol="https,http", resource=resource, **FIXED)
    generator = BlobSharedAccessSignature("devstoreaccount1", AZURITE_KEY, _sdk_key() if delegated else None)
    generator.x_ms_version = SAS_VERSION
    seen: list[str] = []
    args = {"permission": "rl", "start": FIXED["start"], "expiry": FIXED["expiry"], "protocol": "https,http"}
    if resource == "c":
        sdk = generator.generate_container("vend", sts_hook=seen.append, **args)
    else:
        sdk = generator.generate_blob("vend", path, sts_hook=seen.append, **args)
    assert string_to_sign(fields, key) == seen[0]
    ours = dict(parse_qsl(sign(fields, DELEGATION.value if delegated else AZURITE_KEY, key)))
    assert ours == dict(parse_qsl(sdk))


def _delegation_stub(seen):
    if "oauth2" in seen.path:
        return 200, "application/json", json.dumps({"access_token": "aad-token-for-tests", "expires_in": 3599}).encode()
    key = (
        "<?xml version='1.0' encoding='utf-8'?><UserDelegationKey>"
        f"<SignedOid>{DELEGATION.signed_oid}</SignedOid><SignedTid>{DELEGATION.signed_tid}</SignedTid>"
        f"<SignedStart>{DELEGATION.signed_start}</SignedStart><SignedExpiry>{DELEGATION.signed_expiry}</SignedExpiry>"
        f"<SignedService>b</SignedService><SignedVersion>{SAS_VERSION}</SignedVersion>"
        f"<Value>{DELEGATION.value}</Value></UserDelegationKey>"
    )
    return 200, "application/xml", key.encode()


def _aad_options(authority: str, endpoint: str) -> dict:
    return {
        "account_name": "acct",
        "endpoint": endpoint,
        "azure_client_id": "client-1",
        "azure_client_secret": "client-secret-for-tests",
        "azure_tenant_id": "tenant-1",
        "azure_authority_host": authority,
    }


def test_with_an_aad_identity_a_user_delegation_sas_is_signed_with_the_key_asked_for(secrets_used):
    secrets_used.add("client-secret-for-tests", "aad-token-for-tests", DELEGATION.value, label="Azure secrets")
    now = time.time()
    with StubServer(_delegation_stub) as stub:
        creds = _vend(_aad_options(stub.url, f"{stub.url}/acct"), now=now, lifetime=30 * 86400)
    token_request, key_request = stub.seen
    assert token_request.path == "/tenant-1/oauth2/v2.0/token"
    assert dict(parse_qsl(token_request.body.decode())) == {
        "grant_type": "client_credentials",
        "client_id": "client-1",
        "client_secret": "client-secret-for-tests",
        "scope": "https://storage.azure.com/.default",
    }
    assert key_request.path == "/acct/?restype=service&comp=userdelegationkey"
    assert key_request.headers["authorization"] == "Bearer aad-token-for-tests"
    assert key_request.headers["x-ms-version"] == SAS_VERSION
    moment = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    expiry = (moment + dt.timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")  # 30 days asked, 7 at most
    assert f"<Expiry>{expiry}</Expiry>".encode() in key_request.body
    assert creds.expiration_ms == int((moment + dt.timedelta(days=7)).timestamp()) * 1000
    query = dict(parse_qsl(creds.values["sasToken"]))
    assert query["skoid"] == DELEGATION.signed_oid and query["sr"] == "d" and query["se"] == expiry
    fields = SasFields("acct", "vend", "tables/t1", "rl", query["st"], query["se"], "https,http", "d")
    assert query == dict(parse_qsl(sign(fields, DELEGATION.value, DELEGATION)))
    for secret in ("client-secret-for-tests", "aad-token-for-tests", creds.values["sasToken"]):
        assert secret not in repr(creds)


def test_an_identity_azure_ad_refuses_is_the_providers_to_fix():
    def refuse(seen):
        return 401, "application/json", b'{"error": "invalid_client", "error_description": "bad secret"}'

    with StubServer(refuse) as stub, pytest.raises(StorageCredentialsRefused) as refused:
        _vend(_aad_options(stub.url, f"{stub.url}/acct"))
    assert refused.value.http_status == 503 and "provider must fix" in refused.value.message
    assert "invalid_client" in refused.value.operator_message
    assert "client-secret-for-tests" not in refused.value.operator_message


@pytest.mark.parametrize("where", ["5xx", "closed port"])
def test_azure_ad_or_the_blob_service_unreachable_is_unavailable(where):
    if where == "5xx":
        with StubServer(lambda seen: (500, "text/plain", b"")) as stub, pytest.raises(StorageUnavailable) as failed:
            _vend(_aad_options(stub.url, f"{stub.url}/acct"))
    else:
        with pytest.raises(StorageUnavailable) as failed:
            _vend(_aad_options(closed_port_url(), f"{closed_port_url()}/acct"))
    assert not isinstance(failed.value, StorageCredentialsRefused)


def test_azurite_stopped_is_unavailable_for_the_delegation_key(tables):
    """With the key asked of a blob service that is down: unavailable, not refused."""

    def only_token(seen):
        return 200, "application/json", json.dumps({"access_token": "aad-token-for-tests"}).encode()

    with StubServer(only_token) as stub, pytest.raises(StorageUnavailable) as failed:
        _vend(_aad_options(stub.url, f"{closed_port_url()}/acct"))
    assert not isinstance(failed.value, StorageCredentialsRefused)


def test_without_a_key_or_identity_the_provider_is_told_what_to_set():
    with pytest.raises(StorageCredentialsRefused) as refused:
        _vend({"account_name": "acct"})
    assert "account key" in refused.value.operator_message
