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

__all__ = ["CredentialScope", "TemporaryCredentials", "Vendor"]

#: The protocol's name of each kind of credential in the answer.
WIRE_FIELDS = {"aws": "awsTempCredentials", "azure": "azureUserDelegationSas", "gcp": "gcpOauthToken"}


@dataclass(frozen=True)
class CredentialScope:
    """What credentials are asked for.

    ``location``: the directory, normalised (``scheme://authority/path``, no trailing ``/``): a
    table's root, one of its auxiliary locations, or a directory inside one of them.
    """

    location: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)
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
