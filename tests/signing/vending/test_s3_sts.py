"""S3 temporary credentials from STS, against a moto server process (S3, STS and IAM on one port).

What moto 5.2 enforces, measured here:

* With IAM authentication on (``INITIAL_NO_AUTH_ACTION_COUNT``, or ``/moto-api/reset-auth`` as the
  ``auth_moto`` fixture does), assumed-role credentials must be known and correctly signed, and each
  S3 request is checked against the **role's own** identity policies. The **session policy** given
  to ``AssumeRole`` is recorded (its state shows it) but never evaluated: credentials from a role
  that may read the whole bucket read a sibling prefix even under a session policy for one prefix.
* moto evaluates no ``s3:prefix`` condition (it passes no request values to conditions, and a
  condition without values holds), so ``ListBucket`` allowed on the bucket lists any prefix.
* With authentication on, moto recomputes the signature of a ``ListObjects`` whose ``prefix`` holds a
  ``/`` differently from boto3 and refuses it (``SignatureDoesNotMatch``), so listing and delta-rs
  are tested on a moto without authentication (the shared ``moto_server``).
* ``GetFederationToken`` drops its policy (moto's state holds ``policy: null``), and its ``AKIA``
  credentials are refused (``InvalidAccessKeyId``) once authentication is on: they are tested on a
  moto without authentication, where nothing is checked.

So the policy is tested twice: as sent (read back from moto's state, or from the request on the
wire), and as evaluated by moto when it is a role's own policy, where a sibling's objects and any
write are refused.
"""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qsl

import boto3
import deltalake
import httpx
import pytest
from botocore.exceptions import ClientError
from vending_support import BUCKET, TABLE, StubServer, closed_port_url

from deltaport.errors import StorageCredentialsRefused, StorageUnavailable
from deltaport.signing.vending import CredentialScope
from deltaport.signing.vending.s3_sts import S3StsVendor, session_policy

LOCATION = f"s3://{BUCKET}/tables/t1"


def _vend(options: dict, lifetime: int = 3600, vendor: S3StsVendor | None = None, location: str = LOCATION):
    scope = CredentialScope(location, options, lifetime, "recipient-1")
    return (vendor or S3StsVendor()).vend(scope, now=time.time())


def _reader(auth_moto, creds):  # moto with authentication on
    v = creds.values
    return auth_moto.client("s3", v["accessKeyId"], v["secretAccessKey"], v["sessionToken"])


def _delta_rs(creds) -> deltalake.DeltaTable:
    from deltaport.client.directory import storage_options

    return deltalake.DeltaTable(creds.location, storage_options=storage_options(creds))


def _register(secrets_used, creds) -> None:
    secrets_used.add(creds.values["secretAccessKey"], creds.values["sessionToken"], label="vended credentials")


ROLE = "arn:aws:iam::123456789012:role/table-reader"


@pytest.fixture(scope="module")
def plain_moto(moto_server):
    """The shared moto (no authentication) holding the table: what it records is read back."""
    moto_server.upload_dir(BUCKET, "tables/t1", TABLE)
    return moto_server


def _plain_options(moto, **more) -> dict:
    return {
        "endpoint": moto.endpoint,
        "access_key_id": moto.access_key,
        "secret_access_key": moto.secret_key,
        "region": moto.region,
        "allow_http": True,
        **more,
    }


def _recorded(moto) -> list[dict]:
    return httpx.get(f"{moto.endpoint}/moto-api/data.json", timeout=10).json()["sts"]


def test_assumed_role_credentials_list_and_read_the_table_with_boto3_and_delta_rs(plain_moto, secrets_used):
    creds = _vend(_plain_options(plain_moto, aws_role_arn=ROLE))
    _register(secrets_used, creds)
    assert creds.kind == "aws" and creds.values["accessKeyId"].startswith("ASIA")
    assert creds.values["endpoint"] == plain_moto.endpoint
    v = creds.values
    s3 = boto3.client(
        "s3",
        endpoint_url=plain_moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id=v["accessKeyId"],
        aws_secret_access_key=v["secretAccessKey"],
        aws_session_token=v["sessionToken"],
    )
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="tables/t1/_delta_log/")["Contents"]
    assert {o["Key"].rsplit("/", 1)[1] for o in listed} >= {"00000000000000000000.json"}
    body = s3.get_object(Bucket=BUCKET, Key="tables/t1/_delta_log/00000000000000000000.json")["Body"].read()
    assert body == (TABLE / "_delta_log" / "00000000000000000000.json").read_bytes()
    table = _delta_rs(creds)
    expected = deltalake.DeltaTable(str(TABLE))
    assert table.version() == expected.version()
    assert table.to_pyarrow_table().sort_by("number").equals(expected.to_pyarrow_table().sort_by("number"))


def test_the_session_policy_sent_reads_only_the_tables_prefix(plain_moto):
    _vend(_plain_options(plain_moto, aws_role_arn=ROLE, aws_external_id="ext-42"))
    recorded = _recorded(plain_moto)["AssumedRole"][-1]
    assert json.loads(recorded["policy"]) == {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/tables/t1/*"},
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{BUCKET}",
                "Condition": {"StringLike": {"s3:prefix": ["tables/t1", "tables/t1/*"]}},
            },
        ],
    }
    assert recorded["role_arn"] == ROLE
    assert recorded["external_id"] == "ext-42"
    assert recorded["session_name"] == "recipient-1"


def test_the_policy_sent_as_moto_evaluates_it_refuses_a_sibling_and_writes(auth_moto, secrets_used):
    """moto evaluates a role's own policy, not a session policy: the policy sent for this session,
    read back from moto, becomes the policy of a role of its own, and the credentials for that role
    then read inside the table and nothing of the sibling ``tables/t1x`` (which a policy on
    ``tables/t1*`` would let through), and write nothing. Listing is not checked: moto evaluates no
    ``s3:prefix`` condition."""
    iam = auth_moto.admin("iam")
    role = iam.create_role(
        RoleName="scoped-reader",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
            }
        ),
    )["Role"]
    creds = _vend(auth_moto.options(aws_role_arn=role["Arn"]))
    _register(secrets_used, creds)
    iam.put_role_policy(
        RoleName="scoped-reader", PolicyName="as-sent", PolicyDocument=auth_moto.assumed_roles()[-1]["policy"]
    )
    s3 = _reader(auth_moto, creds)
    assert s3.get_object(Bucket=BUCKET, Key="tables/t1/_delta_log/00000000000000000000.json")["Body"].read()
    for call in (
        lambda: s3.get_object(Bucket=BUCKET, Key="tables/t1x/_delta_log/00000000000000000000.json"),
        lambda: s3.put_object(Bucket=BUCKET, Key="tables/t1/new.json", Body=b"{}"),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "AccessDenied"


def _capturing_session(sent: list):
    def factory(**kwargs):
        session = boto3.session.Session(**kwargs)
        session.events.register("provide-client-params.sts.*", lambda params, **_: sent.append(dict(params)))
        return session

    return factory


def test_without_a_role_a_federation_token_with_the_same_policy(moto_server, secrets_used):
    """moto (without authentication) gives ``AKIA`` federation credentials and checks nothing with
    them; the policy and duration are read from the request as boto3 sends it."""
    moto_server.upload_dir("fed-bucket", "tables/t1", TABLE)
    sent: list[dict] = []
    options = {
        "endpoint": moto_server.endpoint,
        "access_key_id": moto_server.access_key,
        "secret_access_key": moto_server.secret_key,
        "region": moto_server.region,
        "allow_http": True,
    }
    before = time.time()
    creds = _vend(
        options, lifetime=60, vendor=S3StsVendor(_capturing_session(sent)), location="s3://fed-bucket/tables/t1"
    )
    _register(secrets_used, creds)
    (params,) = sent
    assert json.loads(params["Policy"]) == session_policy("fed-bucket", "tables/t1")
    assert params["DurationSeconds"] == 900  # 60 s asked, STS's minimum given
    assert before + 890 <= creds.expiration_ms / 1000 <= time.time() + 910
    assert creds.values["accessKeyId"].startswith("AKIA")
    assert _delta_rs(creds).version() == deltalake.DeltaTable(str(TABLE)).version()


def test_a_lifetime_above_stss_bound_is_clamped_and_the_expiry_is_what_sts_gave(auth_moto):
    before = time.time()
    creds = _vend(auth_moto.options(aws_role_arn=auth_moto.role_arn), lifetime=10**6)
    assert before + 43_200 - 10 <= creds.expiration_ms / 1000 <= time.time() + 43_200 + 10


def test_the_bucket_root_policy_has_no_prefix_condition():
    policy = session_policy("b", "")
    assert policy["Statement"][0]["Resource"] == "arn:aws:s3:::b/*"
    assert "Condition" not in policy["Statement"][1]


def test_refused_server_credentials_are_the_providers_to_fix(auth_moto, caplog):
    with pytest.raises(StorageCredentialsRefused) as refused:
        _vend(auth_moto.options(aws_role_arn=auth_moto.role_arn, aws_secret_access_key="wrong-secret-value"))
    assert refused.value.http_status == 503 and refused.value.retry_after_seconds
    assert "provider must fix" in refused.value.message
    assert "wrong-secret-value" not in refused.value.operator_message
    assert "SignatureDoesNotMatch" in refused.value.operator_message or "InvalidClientTokenId" in (
        refused.value.operator_message
    )


def test_an_unreachable_sts_is_unavailable(auth_moto):
    with pytest.raises(StorageUnavailable) as unavailable:
        _vend(auth_moto.options(aws_role_arn=auth_moto.role_arn, aws_sts_endpoint=closed_port_url()))
    assert not isinstance(unavailable.value, StorageCredentialsRefused)
    assert unavailable.value.http_status == 503


def test_an_sts_answering_5xx_is_unavailable(auth_moto):
    with StubServer(lambda seen: (503, "text/xml", b"")) as sts:
        with pytest.raises(StorageUnavailable) as unavailable:
            _vend(auth_moto.options(aws_role_arn=auth_moto.role_arn, aws_sts_endpoint=sts.url))
        assert sts.seen and sts.seen[0].method == "POST"
    assert not isinstance(unavailable.value, StorageCredentialsRefused)


def test_the_credentials_repr_shows_no_secret(auth_moto):
    creds = _vend(auth_moto.options(aws_role_arn=auth_moto.role_arn))
    for secret in (creds.values["secretAccessKey"], creds.values["sessionToken"], auth_moto.secret_key):
        assert secret not in repr(creds)
        assert secret not in repr(S3StsVendor())


def test_without_credentials_anywhere_the_provider_is_told(monkeypatch, tmp_path):
    """No keys in the options and none in boto3's default chain (environment, files, instance)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageCredentialsRefused) as refused:
        _vend({"endpoint": closed_port_url(), "aws_role_arn": ROLE})
    assert "no AWS credentials" in refused.value.operator_message


_STS = "https://sts.amazonaws.com/doc/2011-06-15/"
_TOO_LONG = (
    f'<ErrorResponse xmlns="{_STS}"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>The requested '
    "DurationSeconds exceeds the MaxSessionDuration set for this role.</Message></Error><RequestId>1</RequestId>"
    "</ErrorResponse>"
)
_ASSUMED = (
    f'<AssumeRoleResponse xmlns="{_STS}"><AssumeRoleResult><Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId>'
    "<SecretAccessKey>stub-secret</SecretAccessKey><SessionToken>stub-token</SessionToken>"
    "<Expiration>2030-01-01T01:00:00Z</Expiration></Credentials><AssumedRoleUser><Arn>arn:aws:sts::1:assumed-role/r/s"
    "</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser></AssumeRoleResult><ResponseMetadata>"
    "<RequestId>2</RequestId></ResponseMetadata></AssumeRoleResponse>"
)


def test_a_lifetime_longer_than_the_role_allows_is_asked_again_for_an_hour():
    """STS refuses a duration above the role's MaxSessionDuration; the vendor asks once more for the
    default maximum, and says in the expiry what STS gave."""

    def sts(seen):
        form = dict(parse_qsl(seen.body.decode()))
        return (
            (400, "text/xml", _TOO_LONG.encode())
            if form["DurationSeconds"] != "3600"
            else (200, "text/xml", _ASSUMED.encode())
        )

    with StubServer(sts) as stub:
        creds = _vend(
            {"endpoint": stub.url, "aws_access_key_id": "a", "aws_secret_access_key": "b", "aws_role_arn": ROLE},
            lifetime=7200,
        )
    asked = [dict(parse_qsl(seen.body.decode()))["DurationSeconds"] for seen in stub.seen]
    assert asked == ["7200", "3600"]
    assert creds.expiration_ms == 1_893_459_600_000  # 2030-01-01T01:00:00Z
