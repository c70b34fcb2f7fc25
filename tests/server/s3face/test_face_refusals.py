"""What the S3 face refuses, each with S3's XML error and status: credentials of another table or
recipient, expired, forged, revoked (grant or token, through a config reload), keys and listing
prefixes outside the grant, ranges past the end, writes; other tables keep working."""

from __future__ import annotations

import copy
import http.client
import time
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError
from face_support import (
    ALICE,
    ALICE_OLD,
    BOB,
    face_config,
    running_face,
    s3_client,
)


@pytest.fixture(scope="module")
def face(tmp_path_factory):
    yield from running_face(tmp_path_factory)


LOG = "dir/s/dv/_delta_log/00000000000000000000.json"


def _code(call) -> tuple[str, int]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def test_credentials_read_only_their_table(face):
    dv = s3_client(face.mint("dv"))
    assert dv.get_object(Bucket="deltaport", Key=LOG)["Body"].read()
    assert _code(lambda: dv.get_object(Bucket="deltaport", Key="dir/s/cm/_delta_log/00000000000000000000.json")) == (
        "AccessDenied",
        403,
    )
    assert _code(lambda: dv.list_objects_v2(Bucket="deltaport", Prefix="dir/s/")) == ("AccessDenied", 403)
    assert _code(lambda: dv.list_objects_v2(Bucket="deltaport", Prefix="dir/s/cm/")) == ("AccessDenied", 403)
    assert _code(lambda: dv.list_objects_v2(Bucket="deltaport")) == ("AccessDenied", 403)
    bob = s3_client(face.mint("t", token=BOB, share="other"))
    assert _code(lambda: bob.get_object(Bucket="deltaport", Key=LOG)) == ("AccessDenied", 403)


def test_a_sub_path_grant_lists_nothing_beside_it(face):
    creds = face.mint("cm", sub="_delta_log")
    client = s3_client(creds)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="deltaport", Prefix="dir/s/cm/_delta_log")["Contents"]]
    assert keys and all(k.startswith("dir/s/cm/_delta_log/") for k in keys)
    assert _code(lambda: client.list_objects_v2(Bucket="deltaport", Prefix="dir/s/cm/")) == ("AccessDenied", 403)


def test_forged_expired_and_unknown_credentials(face):
    creds = face.mint("dv")
    v = dict(creds.values)
    forged = copy.copy(creds)
    secret = v["secretAccessKey"]
    object.__setattr__(forged, "values", {**v, "secretAccessKey": secret[:-1] + ("x" if secret[-1] != "x" else "y")})
    assert _code(lambda: s3_client(forged).get_object(Bucket="deltaport", Key=LOG)) == ("SignatureDoesNotMatch", 403)
    other = face.mint("dv")
    swapped = copy.copy(creds)
    object.__setattr__(swapped, "values", {**v, "sessionToken": other.values["sessionToken"]})
    assert _code(lambda: s3_client(swapped).get_object(Bucket="deltaport", Key=LOG)) == ("InvalidAccessKeyId", 403)
    tampered = copy.copy(creds)
    body = v["sessionToken"].split(".")
    body[1] = body[1][:-2] + ("AA" if body[1][-2:] != "AA" else "BB")
    object.__setattr__(tampered, "values", {**v, "sessionToken": ".".join(body)})
    assert _code(lambda: s3_client(tampered).get_object(Bucket="deltaport", Key=LOG)) == ("InvalidAccessKeyId", 403)
    short = face.mint("dv", lifetime=1)
    time.sleep(1.2)
    assert _code(lambda: s3_client(short).get_object(Bucket="deltaport", Key=LOG)) == ("ExpiredToken", 400)


def test_unsigned_and_write_requests(face):
    import httpx

    response = httpx.get(f"{face.url}/deltaport/{LOG}")
    assert (response.status_code, b"<Code>AccessDenied</Code>" in response.content) == (403, True)
    client = s3_client(face.mint("dv"))
    assert _code(lambda: client.put_object(Bucket="deltaport", Key="dir/s/dv/x", Body=b"1")) == (
        "MethodNotAllowed",
        405,
    )
    deleted = httpx.delete(f"{face.url}/deltaport/{LOG}")
    assert (deleted.status_code, b"<Code>MethodNotAllowed</Code>" in deleted.content) == (405, True)


def test_range_past_the_end_and_missing_keys(face):
    client = s3_client(face.mint("dv"))
    size = client.head_object(Bucket="deltaport", Key=LOG)["ContentLength"]
    assert _code(lambda: client.get_object(Bucket="deltaport", Key=LOG, Range=f"bytes={size}-")) == (
        "InvalidRange",
        416,
    )
    assert _code(lambda: client.get_object(Bucket="deltaport", Key="dir/s/dv/nope.parquet")) == ("NoSuchKey", 404)
    assert _code(lambda: client.get_object(Bucket="deltaport", Key="dir/s/dv/_delta_log")) == ("NoSuchKey", 404)


@pytest.mark.parametrize(
    "path",
    [
        "/deltaport/dir/s/dv/../cm/_delta_log/00000000000000000000.json",
        "/deltaport/dir/s/dv/%2E%2E/cm/_delta_log/00000000000000000000.json",
        "/deltaport/dir/s/dv/_delta_log%2F00000000000000000000.json",
        "/deltaport/dir/s/dv/link/secret.txt",
    ],
)
def test_dot_dot_encoded_separators_and_symlinks_out_are_denied(face, path):
    """Sent as raw bytes, signed by botocore's signer for exactly that path."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    outside = face.root / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text("not shared")
    if not (face.root / "dv" / "link").exists():
        (face.root / "dv" / "link").symlink_to(outside)
    v = face.mint("dv").values
    request = AWSRequest("GET", face.url + path, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials(v["accessKeyId"], v["secretAccessKey"], v["sessionToken"]), "s3", "us-east-1").add_auth(
        request
    )
    host = urlsplit(face.url).netloc
    connection = http.client.HTTPConnection(host, timeout=10)
    connection.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", host)
    for name, value in request.headers.items():
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    assert (response.status, b"<Code>AccessDenied</Code>" in body) == (403, True), body
    assert b"not shared" not in body


def test_revoking_the_grant_or_the_token_stops_the_credentials(face):
    through_old = s3_client(face.mint("dv", token=ALICE_OLD))
    through_new = s3_client(face.mint("dv", token=ALICE))
    bob = s3_client(face.mint("t", token=BOB, share="other"))
    assert through_old.head_object(Bucket="deltaport", Key=LOG)

    def refused(client) -> bool:
        try:
            client.head_object(Bucket="deltaport", Key=LOG)
        except ClientError as exc:
            return exc.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        return False

    face.reload(face_config(face.root, alice_tokens=(ALICE,)), until=lambda: refused(through_old))
    assert through_new.head_object(Bucket="deltaport", Key=LOG)  # the other token still works
    assert bob.list_objects_v2(Bucket="deltaport", Prefix="other/s/t/")["KeyCount"] > 0
    face.reload(face_config(face.root, alice_tokens=(ALICE,), alice_shares=()), until=lambda: refused(through_new))
    assert bob.list_objects_v2(Bucket="deltaport", Prefix="other/s/t/")["KeyCount"] > 0  # other tables unaffected
    face.reload(face_config(face.root), until=lambda: not refused(through_new))
