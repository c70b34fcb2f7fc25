"""S3 (and S3-compatible stores): temporary credentials from STS, cut down by a session policy.

The session policy allows ``s3:GetObject`` on ``arn:aws:s3:::bucket/prefix/*`` and ``s3:ListBucket``
on the bucket only for ``s3:prefix`` ``prefix`` and ``prefix/*``; what the credentials may do is
the intersection of that and what the role (``aws_role_arn``, STS ``AssumeRole``) or, without a
role, the server's own IAM user (``GetFederationToken``) may do.

The server's own credentials come from the storage options (``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``aws_region``), else from boto3's default chain.
Where the options name an S3-compatible ``endpoint``, STS is asked at that endpoint too (MinIO and
moto answer STS there) unless ``aws_sts_endpoint`` names another, and the answer carries the
endpoint (``awsTempCredentials.endpoint``, an extension field) so that a reader knows where to go.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deltaport.errors import StorageUnavailable
from deltaport.signing.vending import CredentialScope, TemporaryCredentials, option
from deltaport.signing.vending._http import refused
from deltaport.storage.locations import Location

__all__ = ["S3StsVendor", "session_policy"]

MIN_SECONDS = 900
MAX_ASSUME_ROLE_SECONDS = 43_200  # a role's MaxSessionDuration can be no longer
MAX_FEDERATION_SECONDS = 129_600
ROLE_DEFAULT_MAX_SECONDS = 3600  # a role's MaxSessionDuration unless its owner raised it

# Codes with which STS says the server's own credentials (or its role setup) will not do.
_REFUSED = {
    "AccessDenied",
    "ExpiredToken",
    "IncompleteSignature",
    "InvalidAccessKeyId",
    "InvalidClientTokenId",
    "MalformedPolicyDocument",
    "NoSuchEntity",
    "PackedPolicyTooLarge",
    "RegionDisabledException",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "ValidationError",
}


def session_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """Read (get + list) ``prefix`` of ``bucket`` and nothing else (all of it where ``prefix`` is "")."""
    objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    listing: dict[str, Any] = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{bucket}"}
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": objects}, listing],
    }


def _session(options: Mapping[str, Any], factory: Callable[..., Any]) -> Any:
    return factory(
        aws_access_key_id=option(options, "aws_access_key_id", "access_key_id"),
        aws_secret_access_key=option(options, "aws_secret_access_key", "secret_access_key"),
        aws_session_token=option(options, "aws_session_token", "session_token", "aws_token", "token"),
        region_name=option(options, "aws_region", "region", "aws_default_region", "default_region") or "us-east-1",
    )


def _boto3_session(**kwargs: Any) -> Any:
    import boto3

    return boto3.session.Session(**kwargs)


def _quiet_botocore() -> None:
    """botocore logs requests, signatures and STS's answers (the credentials) at DEBUG: its loggers
    stay at INFO unless the operator set a level for them."""
    botocore_log = logging.getLogger("botocore")
    if botocore_log.level == logging.NOTSET:
        botocore_log.setLevel(logging.INFO)


@dataclass(frozen=True)
class S3StsVendor:
    """Vends for ``s3://`` locations. ``session_factory`` makes the boto3 session (injected in tests)."""

    session_factory: Callable[..., Any] = _boto3_session
    connect_timeout: float = 5
    read_timeout: float = 10

    def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials:
        where = Location.parse(scope.location)
        options = scope.storage_options
        s3_endpoint = option(options, "aws_endpoint", "endpoint", "aws_endpoint_url", "endpoint_url")
        sts = self._client(options, option(options, "aws_sts_endpoint") or s3_endpoint)
        policy = json.dumps(session_policy(where.authority, where.path), separators=(",", ":"))
        role = option(options, "aws_role_arn")
        answer = _call(
            lambda: (
                self._assume(sts, str(role), options, scope, policy)
                if role
                else sts.get_federation_token(
                    Name=_federation_name(scope.session_name),
                    Policy=policy,
                    DurationSeconds=min(max(scope.lifetime_seconds, MIN_SECONDS), MAX_FEDERATION_SECONDS),
                )
            ),
            scope.location,
        )
        creds = answer["Credentials"]
        values = {
            "accessKeyId": creds["AccessKeyId"],
            "secretAccessKey": creds["SecretAccessKey"],
            "sessionToken": creds["SessionToken"],
        }
        if s3_endpoint:
            values["endpoint"] = str(s3_endpoint)
        return TemporaryCredentials(scope.location, "aws", values, int(creds["Expiration"].timestamp() * 1000))

    def _client(self, options: Mapping[str, Any], endpoint: Any) -> Any:
        from botocore.config import Config

        _quiet_botocore()
        config = Config(
            connect_timeout=self.connect_timeout, read_timeout=self.read_timeout, retries={"max_attempts": 2}
        )
        return _session(options, self.session_factory).client("sts", endpoint_url=endpoint or None, config=config)

    def _assume(
        self, sts: Any, role: str, options: Mapping[str, Any], scope: CredentialScope, policy: str
    ) -> dict[str, Any]:
        """AssumeRole for the lifetime asked (within STS's bounds); where that is longer than the role
        allows, once more for the role's default maximum (an hour)."""
        from botocore.exceptions import ClientError

        args: dict[str, Any] = {"RoleArn": role, "RoleSessionName": _role_session_name(scope.session_name)}
        args["Policy"] = policy
        if option(options, "aws_external_id"):
            args["ExternalId"] = str(option(options, "aws_external_id"))
        seconds = min(max(scope.lifetime_seconds, MIN_SECONDS), MAX_ASSUME_ROLE_SECONDS)
        try:
            return sts.assume_role(DurationSeconds=seconds, **args)
        except ClientError as exc:
            too_long = "MaxSessionDuration" in str(exc.response.get("Error", {}).get("Message", ""))
            if not too_long or seconds <= ROLE_DEFAULT_MAX_SECONDS:
                raise
            return sts.assume_role(DurationSeconds=ROLE_DEFAULT_MAX_SECONDS, **args)


def _role_session_name(name: str) -> str:
    """STS's RoleSessionName: 2 to 64 of ``[\\w+=,.@-]``."""
    cleaned = "".join(c if c.isalnum() or c in "+=,.@-_" else "-" for c in name)[:64]
    return cleaned if len(cleaned) >= 2 else f"deltaport-{cleaned}"


def _federation_name(name: str) -> str:
    """GetFederationToken's Name: 2 to 32 of ``[\\w+=,.@-]``."""
    return _role_session_name(name)[:32]


def _call(fn: Callable[[], dict[str, Any]], location: str) -> dict[str, Any]:
    """``fn()``, with STS's failures as the errors the server answers: unreachable, throttled or 5xx →
    StorageUnavailable; the server's credentials refused or unfit → StorageCredentialsRefused."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

    try:
        return fn()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status >= 500 or code in ("Throttling", "ThrottlingException", "RequestLimitExceeded") or not code:
            raise StorageUnavailable(
                "the storage's token service did not answer; retry later", detail=f"STS {status} {code}"
            ) from exc
        if code in _REFUSED or status in (400, 401, 403):
            raise refused(f"STS refused the request: {code}: {error.get('Message', '')}", location) from exc
        raise StorageUnavailable("the storage's token service failed; retry later", detail=f"STS {code}") from exc
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise refused(f"the server has no AWS credentials to ask STS with ({type(exc).__name__})", location) from exc
    except BotoCoreError as exc:  # connection refused or reset, timeouts, bad endpoint
        raise StorageUnavailable(
            "the storage's token service could not be reached; retry later", detail=f"STS: {type(exc).__name__}"
        ) from exc
