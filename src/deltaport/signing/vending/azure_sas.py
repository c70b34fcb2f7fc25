"""Azure: a read-only (read + list) shared access signature for a table's directory.

Signed with a user delegation key where the storage options give an Azure AD identity (client id,
client secret, tenant: the key is asked for with the identity's token), else with the account key.

The scope is the directory (``sr=d`` with ``sdd``, its depth), which Azure honours on accounts
with a hierarchical namespace (ADLS Gen2). An account without one (flat blob storage, and Azurite)
refuses a directory SAS; there the provider may set ``azure_sas_scope: container``, and the SAS then
reads the whole container: every table in it, not this table only.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

import httpx

from deltaport.signing.vending import CredentialScope, TemporaryCredentials, option
from deltaport.signing.vending._http import post, refused
from deltaport.storage.locations import Location

__all__ = ["AzureSasVendor", "SasFields", "UserDelegationKey", "string_to_sign"]

SAS_VERSION = "2026-10-06"  # the layout signed below is this version's (and azure-storage-blob 12.31's)
CLOCK_SKEW = dt.timedelta(minutes=5)  # the SAS starts this much before now
MAX_DELEGATION = dt.timedelta(days=7)  # a user delegation key lives no longer
STORAGE_SCOPE = "https://storage.azure.com/.default"
DEFAULT_AUTHORITY = "https://login.microsoftonline.com"


@dataclass(frozen=True)
class UserDelegationKey:
    """The ``skoid``, ``sktid``, ``skt``, ``ske``, ``sks``, ``skv`` fields and the key itself."""

    signed_oid: str
    signed_tid: str
    signed_start: str
    signed_expiry: str
    signed_service: str
    signed_version: str
    value: str = field(repr=False)


@dataclass(frozen=True)
class SasFields:
    """What a service SAS (blob service) signs; times as ``YYYY-MM-DDTHH:MM:SSZ``."""

    account: str
    container: str
    path: str  # "" for the container
    permissions: str
    start: str
    expiry: str
    protocol: str
    resource: str  # "d" (directory), "c" (container), "b" (blob)
    version: str = SAS_VERSION

    def canonical_resource(self) -> str:
        base = f"/blob/{self.account}/{self.container}"
        return f"{base}/{self.path}" if self.path else base


def string_to_sign(f: SasFields, key: UserDelegationKey | None) -> str:
    """The string a blob service SAS of version ``SAS_VERSION`` signs: the account-key form, or the
    user-delegation form where ``key`` is given. The stored access policy, the agent and delegated
    user ids, the correlation id, IP range, snapshot, encryption scope, signed request headers and
    parameters and the response headers are all left empty."""
    head = [f.permissions, f.start, f.expiry, f.canonical_resource()]
    if key is None:
        middle = [""]  # si
    else:
        middle = [key.signed_oid, key.signed_tid, key.signed_start, key.signed_expiry]
        middle += [key.signed_service, key.signed_version, "", "", "", "", ""]  # saoid suoid scid skdutid sduoid
    tail = ["", f.protocol, f.version, f.resource, "", ""]  # sip, spr, sv, sr, snapshot, ses
    if key is not None:
        tail += ["", ""]  # srh, srq
    return "\n".join([*head, *middle, *tail, "", "", "", "", ""])  # rscc, rscd, rsce, rscl, rsct


def sign(f: SasFields, secret_b64: str, key: UserDelegationKey | None = None) -> str:
    """The SAS query string (no leading ``?``)."""
    digest = hmac.new(base64.b64decode(secret_b64), string_to_sign(f, key).encode(), hashlib.sha256).digest()
    query = [("sv", f.version), ("st", f.start), ("se", f.expiry), ("sr", f.resource), ("sp", f.permissions)]
    if f.resource == "d":
        query.append(("sdd", str(len(f.path.split("/")))))
    query.append(("spr", f.protocol))
    if key is not None:
        query += [("skoid", key.signed_oid), ("sktid", key.signed_tid), ("skt", key.signed_start)]
        query += [("ske", key.signed_expiry), ("sks", key.signed_service), ("skv", key.signed_version)]
    query.append(("sig", base64.b64encode(digest).decode()))
    return "&".join(f"{k}={quote(v, safe='')}" for k, v in query)


def _time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Target:
    account: str
    container: str
    path: str
    endpoint: str  # the blob service, e.g. https://account.blob.core.windows.net


def _target(location: str, options: Mapping[str, Any]) -> _Target:
    where = Location.parse(location)
    container, _, host = where.authority.partition("@")
    account = host.split(".", 1)[0] if host else option(options, "azure_storage_account_name", "account_name")
    if not account:
        raise refused("no storage account: set account_name in the table's storage options", location)
    endpoint = option(options, "azure_storage_endpoint", "endpoint", "azure_endpoint")
    if not endpoint and str(option(options, "azure_storage_use_emulator", "use_emulator")).lower() == "true":
        endpoint = f"http://127.0.0.1:10000/{account}"
    return _Target(str(account), container, where.path, str(endpoint or f"https://{account}.blob.core.windows.net"))


@dataclass(frozen=True)
class AzureSasVendor:
    """Vends for ``az://``, ``abfs(s)://`` and ``wasb(s)://`` locations. ``transport`` (httpx) is
    injected in tests for the Azure AD token and user delegation key requests."""

    transport: httpx.BaseTransport | None = None
    timeout: float = 10

    def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials:
        options = scope.storage_options
        target = _target(scope.location, options)
        moment = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        start, expiry = moment - CLOCK_SKEW, moment + dt.timedelta(seconds=scope.lifetime_seconds)
        by_directory = str(option(options, "azure_sas_scope") or "directory").lower() != "container"
        path = target.path if by_directory else ""
        client_id = option(options, "azure_client_id", "client_id", "azure_storage_client_id")
        if client_id:
            expiry = min(expiry, moment + MAX_DELEGATION)
        fields = SasFields(
            account=target.account,
            container=target.container,
            path=path,
            permissions="rl",
            start=_time(start),
            expiry=_time(expiry),
            protocol="https,http" if target.endpoint.startswith("http:") else "https",
            resource="d" if path else "c",
        )
        if client_id:
            key = self._delegation_key(target, options, str(client_id), start, expiry, scope.location)
            token = sign(fields, key.value, key)
        else:
            account_key = option(
                options, "azure_storage_account_key", "account_key", "access_key", "azure_storage_access_key"
            )
            if not account_key:
                raise refused(
                    "no account key nor client id/secret/tenant in the storage options to sign with", scope.location
                )
            token = sign(fields, str(account_key))
        values = {"sasToken": token}
        if option(options, "azure_storage_endpoint", "endpoint", "azure_endpoint"):
            values["endpoint"] = target.endpoint
        return TemporaryCredentials(scope.location, "azure", values, int(expiry.timestamp()) * 1000)

    def _delegation_key(
        self,
        target: _Target,
        options: Mapping[str, Any],
        client_id: str,
        start: dt.datetime,
        expiry: dt.datetime,
        location: str,
    ) -> UserDelegationKey:
        secret = option(options, "azure_client_secret", "client_secret", "azure_storage_client_secret")
        tenant = option(options, "azure_tenant_id", "tenant_id", "azure_storage_tenant_id", "authority_id")
        if not secret or not tenant:
            raise refused("a client id without its client secret and tenant id", location)
        authority = str(option(options, "azure_authority_host", "authority_host") or DEFAULT_AUTHORITY).rstrip("/")
        with httpx.Client(transport=self.transport, timeout=self.timeout) as http:
            answer = post(
                http,
                f"{authority}/{tenant}/oauth2/v2.0/token",
                location,
                data={
                    "grant_type": "client_credentials",
                    "client_id": client_id,
                    "client_secret": str(secret),
                    "scope": STORAGE_SCOPE,
                },
            )
            bearer = answer.json()["access_token"]
            body = (
                '<?xml version="1.0" encoding="utf-8"?>'
                f"<KeyInfo><Start>{_time(start)}</Start><Expiry>{_time(expiry)}</Expiry></KeyInfo>"
            )
            answer = post(
                http,
                f"{target.endpoint.rstrip('/')}/?restype=service&comp=userdelegationkey",
                location,
                content=body.encode(),
                headers={"Authorization": f"Bearer {bearer}", "x-ms-version": SAS_VERSION},
            )
        xml = ElementTree.fromstring(answer.content)  # the storage service's own answer

        def text(tag: str) -> str:
            return xml.findtext(tag) or ""

        return UserDelegationKey(
            text("SignedOid"),
            text("SignedTid"),
            text("SignedStart"),
            text("SignedExpiry"),
            text("SignedService"),
            text("SignedVersion"),
            text("Value"),
        )
