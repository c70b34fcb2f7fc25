"""A moto server (S3 + STS + IAM on one port) with moto's IAM authentication switched on, holding a
Delta table, an IAM user for the server and a role the server may assume."""

from __future__ import annotations

import json
from dataclasses import dataclass

import boto3
import httpx
import pytest
from servers import MotoServer
from vending_support import BUCKET, TABLE

ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
TRUST_ANYONE = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
}


@dataclass
class AuthMoto:
    server: MotoServer
    access_key: str
    secret_key: str
    role_arn: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def options(self, **more: str) -> dict:
        """The server's storage options for tables in this moto, as a provider writes them."""
        return {
            "endpoint": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_region": "us-east-1",
            "allow_http": "true",
            **more,
        }

    def client(self, service: str, access_key: str, secret_key: str, token: str | None = None):
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            aws_session_token=token,
        )

    def admin(self, service: str):
        return self.client(service, self.access_key, self.secret_key)

    def assumed_roles(self) -> list[dict]:
        """What moto's STS recorded of each AssumeRole (its state, read over its own API)."""
        return httpx.get(f"{self.endpoint}/moto-api/data.json", timeout=10).json()["sts"]["AssumedRole"]


@pytest.fixture(scope="session")
def auth_moto(secrets_used):
    """Set up while moto lets every request in, then every request is authenticated and checked
    against IAM policies (moto's ``/moto-api/reset-auth`` with a count of 0)."""
    server = MotoServer()
    try:
        server.upload_dir(BUCKET, "tables/t1", TABLE)
        server.upload_dir(BUCKET, "tables/t1x", TABLE)  # a sibling whose name starts like t1's
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        iam.create_user(UserName="deltaport-server")
        key = iam.create_access_key(UserName="deltaport-server")["AccessKey"]
        iam.put_user_policy(UserName="deltaport-server", PolicyName="all", PolicyDocument=json.dumps(ALLOW_ALL))
        role = iam.create_role(RoleName="table-reader", AssumeRolePolicyDocument=json.dumps(TRUST_ANYONE))["Role"]
        read_all = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_role_policy(RoleName="table-reader", PolicyName="s3", PolicyDocument=json.dumps(read_all))
        httpx.post(f"{server.endpoint}/moto-api/reset-auth", content=b"0", timeout=10).raise_for_status()
        secrets_used.add(key["SecretAccessKey"])
        yield AuthMoto(server, key["AccessKeyId"], key["SecretAccessKey"], role["Arn"])
    finally:
        server.stop()
