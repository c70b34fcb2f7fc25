"""POST …/temporary-table-credentials over HTTP: a table on S3 (a moto server process with STS)
shared with ``dir`` gets credentials that read it with delta-rs; the location rule, the grant, the
access modes and an unreachable STS each get the protocol's error; other tables are unaffected."""

from __future__ import annotations

import time

import deltalake
import httpx
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.client.directory import storage_options
from deltaport.server import create_app, parse_config
from deltaport.signing.vending import TemporaryCredentials

P = "/delta-sharing/shares/s/schemas/d/tables"
TOKEN, OTHER = "creds-token-alice", "creds-token-bob"
BUCKET = "creds-bucket"


def _config(moto, location: str, **server) -> dict:
    table = {"location": location, "historyShared": True}
    return {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [
                    {
                        "name": "d",
                        "tables": [
                            {"name": "both", **table, "accessModes": ["url", "dir"]},
                            {"name": "dironly", **table, "accessModes": ["dir"]},
                            {"name": "urlonly", **table},
                            {
                                "name": "local",
                                "location": str(TABLES / "basic_partitioned"),
                                "historyShared": True,
                                "accessModes": ["dir"],
                                "auxiliaryLocations": [location],
                            },
                        ],
                    }
                ],
            },
            {"name": "other", "schemas": [{"name": "d", "tables": [{"name": "t", "location": location}]}]},
        ],
        "recipients": [
            {"name": "alice", "tokens": [TOKEN], "shares": ["s"]},
            {"name": "bob", "tokens": [OTHER], "shares": ["other"]},
        ],
        "storageOptions": {
            "endpoint": moto.endpoint,
            "access_key_id": moto.access_key,
            "secret_access_key": moto.secret_key,
            "region": moto.region,
            "allow_http": True,
            "virtual_hosted_style_request": False,
        },
        **server,
    }


@pytest.fixture(scope="module")
def served(moto_server, secrets_used):
    secrets_used.add(TOKEN, OTHER)
    location = moto_server.upload_dir(BUCKET, "tables/t1", TABLES / "basic_partitioned")
    server = RunningServer(create_app(parse_config(_config(moto_server, location))))
    with httpx.Client(base_url=server.url + P, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        yield client, location
    server.stop()


def _credentials(client: httpx.Client, table: str, **body) -> httpx.Response:
    return client.post(f"/{table}/temporary-table-credentials", json=body or None)


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.json()["errorCode"] == code, response.text
    return response.json()["message"]


def _delta_rs(creds: dict, location: str) -> deltalake.DeltaTable:
    """delta-rs on the answer's credentials, mapped to its options as the connector maps them."""
    answer = TemporaryCredentials(location, "aws", creds["awsTempCredentials"], creds["expirationTime"])
    return deltalake.DeltaTable(location, storage_options=storage_options(answer))


def test_a_dir_table_announces_its_location_and_gets_credentials_that_read_it(served, secrets_used):
    client, location = served
    listed = {t["name"]: t for t in client.get(str(client.base_url).rstrip("/")).json()["items"]}
    assert listed["both"]["location"] == location and listed["both"]["accessModes"] == ["url", "dir"]
    assert "location" not in listed["urlonly"] and listed["urlonly"]["accessModes"] == ["url"]
    answer = _credentials(client, "both")
    assert answer.status_code == 200, answer.text
    creds = answer.json()["credentials"]
    secrets_used.add(creds["awsTempCredentials"]["secretAccessKey"], creds["awsTempCredentials"]["sessionToken"])
    assert set(creds) == {"location", "awsTempCredentials", "expirationTime"}
    assert creds["location"] == location
    assert creds["expirationTime"] > time.time() * 1000
    got = _delta_rs(creds, location).to_pyarrow_table().sort_by("number")
    local = deltalake.DeltaTable(str(TABLES / "basic_partitioned")).to_pyarrow_table().sort_by("number")
    assert got.equals(local)


def test_a_directory_under_the_root_and_the_s3a_spelling_are_the_same_table(served):
    client, location = served
    for asked in (location + "/_delta_log", location.replace("s3://", "s3a://") + "/", location):
        answer = _credentials(client, "both", location=asked)
        assert answer.status_code == 200, answer.text
        assert answer.json()["credentials"]["location"] == asked


@pytest.mark.parametrize(
    "asked",
    [
        pytest.param("{root}x", id="sibling-prefix"),
        pytest.param("s3://other-bucket/tables/t1", id="other-bucket"),
        pytest.param("{root}/../t2", id="dot-dot"),
        pytest.param("{root}/a%2F..%2F..%2Ft2", id="encoded-separator"),
        pytest.param("gs://creds-bucket/tables/t1", id="other-scheme"),
        pytest.param("tables/t1", id="not-a-url"),
    ],
)
def test_a_location_outside_the_table_is_refused(served, asked):
    client, location = served
    message = _error(_credentials(client, "both", location=asked.format(root=location)), 400, "INVALID_PARAMETER_VALUE")
    assert "location" in message


def test_malformed_bodies_name_the_shape(served):
    client, _ = served
    for body in (b"{", b"[]", b'{"location": 3}', b'{"location": ""}'):
        r = client.post("/both/temporary-table-credentials", content=body)
        assert r.status_code == 400 and "location" in r.json()["message"], r.text


def test_modes_and_grants_decide_who_gets_credentials(served):
    client, _ = served
    message = _error(_credentials(client, "urlonly"), 400, "UNSUPPORTED_OPERATION")
    assert "accessModes" in message and "/query" in message
    _error(_credentials(client, "../../other/schemas/d/tables/t"), 404, "RESOURCE_DOES_NOT_EXIST")
    bob = httpx.Client(base_url=client.base_url, headers={"Authorization": f"Bearer {OTHER}"}, timeout=30)
    _error(_credentials(bob, "both"), 404, "RESOURCE_DOES_NOT_EXIST")
    anonymous = httpx.Client(base_url=client.base_url, timeout=30)
    _error(_credentials(anonymous, "both"), 401, "UNAUTHENTICATED")


def test_a_dir_only_table_refuses_file_urls_but_answers_metadata(served):
    client, location = served
    message = _error(client.post("/dironly/query", json={}), 400, "UNSUPPORTED_OPERATION")
    assert "temporary-table-credentials" in message
    _error(client.get("/dironly/changes", params={"startingVersion": 0}), 400, "UNSUPPORTED_OPERATION")
    meta = client.get("/dironly/metadata")
    assert meta.status_code == 200
    assert b'"accessModes":["dir"]' in meta.content and location.encode() in meta.content
    delta = client.get("/dironly/metadata", headers={"delta-sharing-capabilities": "responseformat=delta"})
    line = next(row for row in delta.content.splitlines() if b"metaData" in row)
    assert b'"accessModes":["dir"]' in line and b'"deltaMetadata"' in line
    assert client.post("/both/query", json={}).status_code == 200


def test_sts_down_is_a_503_with_retry_after_and_other_tables_still_answer(moto_server, secrets_used):
    secrets_used.add(TOKEN, OTHER)
    location = moto_server.upload_dir(BUCKET, "tables/t1", TABLES / "basic_partitioned")
    closed = "http://127.0.0.1:9"  # discard port: nothing answers
    cfg = _config(moto_server, location)
    cfg["shares"][0]["schemas"][0]["tables"][0]["storageOptions"] = {"aws_sts_endpoint": closed}
    server = RunningServer(create_app(parse_config(cfg)))
    try:
        with httpx.Client(base_url=server.url + P, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
            r = _credentials(c, "both")
            _error(r, 503, "TEMPORARILY_UNAVAILABLE")
            assert r.headers.get("Retry-After")
            assert _credentials(c, "dironly").status_code == 200
            assert c.post("/urlonly/query", json={}).status_code == 200
    finally:
        server.stop()


def test_a_local_tables_root_is_read_through_the_face_and_its_auxiliary_location_through_its_cloud(served, moto_server):
    client, location = served
    root = _credentials(client, "local").json()["credentials"]
    assert root["location"] == "s3://deltaport/s/d/local"
    assert root["awsTempCredentials"]["endpoint"] == str(client.base_url).split("/delta-sharing")[0]
    aux = _credentials(client, "local", location=location + "/_delta_log")
    assert aux.status_code == 200, aux.text
    creds = aux.json()["credentials"]["awsTempCredentials"]
    assert creds["endpoint"] == moto_server.endpoint  # vended by STS, not minted by the face
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=creds["endpoint"],
        aws_access_key_id=creds["accessKeyId"],
        aws_secret_access_key=creds["secretAccessKey"],
        aws_session_token=creds["sessionToken"],
        region_name="us-east-1",
    )
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="tables/t1/_delta_log/")
    assert listed["KeyCount"] > 0
