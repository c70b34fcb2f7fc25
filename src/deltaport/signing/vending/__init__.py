"""Temporary credentials for directory access: a recipient reads a table's directory itself.

A :class:`Vendor` turns a :class:`CredentialScope` (a directory URL the server has already checked
lies inside a shared table, the table's storage options, a lifetime) into
:class:`TemporaryCredentials` that can read (get and list) that directory and nothing else, until
they expire. The wire shape is the protocol's ``temporary-table-credentials`` answer, rendered
only by :meth:`TemporaryCredentials.wire`.

A vendor never sees a recipient's token; ``session_name`` names the recipient in the cloud's own
audit trail. A cloud that cannot be reached raises :class:`~deltaport.errors.StorageUnavailable`
(503 with Retry-After); a table whose options cannot vend raises
:class:`~deltaport.errors.UnsupportedOperation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from deltaport.errors import UnsupportedOperation
from deltaport.storage.locations import Location

__all__ = ["CredentialScope", "TemporaryCredentials", "Vendor", "cloud_vendor_for", "option"]

#: The protocol's name of each kind of credential in the answer.
WIRE_FIELDS = {"aws": "awsTempCredentials", "azure": "azureUserDelegationSas", "gcp": "gcpOauthToken"}


@dataclass(frozen=True)
class CredentialScope:
    """What credentials are asked for.

    ``location``: the directory, normalised (``scheme://authority/path``, no trailing ``/``): a
    table's root, one of its auxiliary locations, or a directory inside one of them.
    """

    location: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)  # keys and secrets
    lifetime_seconds: int = 3600
    session_name: str = "deltaport"


@dataclass(frozen=True)
class TemporaryCredentials:
    """Credentials that read ``location`` until ``expiration_ms`` (epoch milliseconds).

    ``values`` are the fields of the protocol's object for ``kind``: aws ``accessKeyId``,
    ``secretAccessKey``, ``sessionToken`` (and, for an S3-compatible store, ``endpoint``, an
    extension field clients that do not know it ignore); azure ``sasToken``; gcp ``oauthToken``.
    Never logged: ``repr`` shows no value.
    """

    location: str
    kind: Literal["aws", "azure", "gcp"]
    values: Mapping[str, str] = field(repr=False)
    expiration_ms: int

    def wire(self) -> dict[str, Any]:
        """The protocol's answer body."""
        return {
            "credentials": {
                "location": self.location,
                WIRE_FIELDS[self.kind]: dict(self.values),
                "expirationTime": self.expiration_ms,
            }
        }


class Vendor(Protocol):
    def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials: ...


def option(options: Mapping[str, Any], *names: str) -> Any:
    """The value of the first of ``names`` (any spelling of case) the storage options hold, else None."""
    lowered = {str(key).lower(): value for key, value in options.items()}
    for name in names:
        value = lowered.get(name)
        if value not in (None, ""):
            return value
    return None


def cloud_vendor_for(location: Location, options: Mapping[str, Any]) -> Vendor:
    """The vendor for a table stored at ``location`` (its storage ``options`` merged, the table's over
    the server's); UnsupportedOperation, naming what can be done, for a store no cloud vends for."""
    if location.scheme == "s3":
        from deltaport.signing.vending.s3_sts import S3StsVendor

        return S3StsVendor()
    if location.scheme in ("az", "abfs", "wasb", "adl", "azure"):
        from deltaport.signing.vending.azure_sas import AzureSasVendor

        return AzureSasVendor()
    if location.scheme == "gs":
        from deltaport.signing.vending.gcs_boundary import GcsBoundaryVendor

        return GcsBoundaryVendor(sts_endpoint=option(options, "gcs_sts_endpoint"))
    raise UnsupportedOperation(
        f"temporary credentials cannot be made for a table stored under {location.scheme}://: they are made "
        "for s3://, az://, abfss://, wasbs:// and gs:// tables; read this table with url access (query the table)"
    )
