"""Directory access in tests: Delta tables on a moto S3 server, served by a deltaport app whose
credentials for them come from moto's own STS.

``moto_vendors`` stands in until the S3 vendor (``deltaport.signing.vending``) is merged: it will be
replaced by ``cloud_vendor_for`` then. Everything that builds a directory-access server for tests
goes through :func:`serve_with_dir`, so that swap is made here only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from deltaport.server import create_app, parse_config
from deltaport.signing.vending import CredentialScope, TemporaryCredentials


class MotoStsVendor:
    """Federation tokens from moto's STS, good for moto's S3 at the same endpoint."""

    def __init__(self, moto: Any) -> None:
        self.moto = moto
        self.issued = 0

    def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials:
        import boto3

        sts = boto3.client(
            "sts",
            endpoint_url=self.moto.endpoint,
            aws_access_key_id=self.moto.access_key,
            aws_secret_access_key=self.moto.secret_key,
            region_name=self.moto.region,
        )
        answer = sts.get_federation_token(Name=scope.session_name[:32], DurationSeconds=900)
        self.issued += 1
        c = answer["Credentials"]
        values = {
            "accessKeyId": c["AccessKeyId"],
            "secretAccessKey": c["SecretAccessKey"],
            "sessionToken": c["SessionToken"],
            "endpoint": self.moto.endpoint,
        }
        return TemporaryCredentials(scope.location, "aws", values, int((now + scope.lifetime_seconds) * 1000))


def moto_vendors(moto: Any):
    vendor = MotoStsVendor(moto)

    def vendors(location: Any, options: Mapping[str, Any]) -> MotoStsVendor:
        return vendor

    return vendors, vendor


def with_access_modes(config: Any, modes: Mapping[str, tuple[str, ...]]) -> Any:
    """``config`` with the tables named in ``modes`` given those accessModes (until YAML takes them)."""
    shares = []
    for share in config.shares:
        schemas = []
        for schema in share.schemas:
            tables = tuple(
                dataclasses.replace(t, access_modes=modes[t.name]) if t.name in modes else t for t in schema.tables
            )
            schemas.append(dataclasses.replace(schema, tables=tables))
        shares.append(dataclasses.replace(share, schemas=tuple(schemas)))
    return dataclasses.replace(config, shares=tuple(shares))


def serve_with_dir(raw_config: dict, modes: Mapping[str, tuple[str, ...]], moto: Any):
    """A running deltaport app over ``raw_config`` (tables on moto), the tables in ``modes`` offered
    so, credentials from moto's STS; returns (server, vendor)."""
    from servers import RunningServer

    app = create_app(with_access_modes(parse_config(raw_config), modes))
    vendors, vendor = moto_vendors(moto)
    app.state.service.directory.cloud_vendors = vendors
    return RunningServer(app), vendor
