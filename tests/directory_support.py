"""Directory access in tests: Delta tables on a moto S3 server (S3 and STS on one port), served by a
deltaport app that vends credentials for them with its S3 vendor (STS at moto's endpoint).

Everything that builds a directory-access test server goes through :func:`serve_with_dir`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from deltaport.server import create_app, parse_config
from deltaport.signing.vending import CredentialScope, TemporaryCredentials, Vendor, cloud_vendor_for
from deltaport.storage.locations import Location


class CountedVendors:
    """The server's own cloud vendors, counting the credentials they issue."""

    def __init__(self) -> None:
        self.issued = 0

    def __call__(self, location: Location, options: Mapping[str, Any]) -> Vendor:
        vendor = cloud_vendor_for(location, options)
        counter = self

        class Counted:
            def vend(self, scope: CredentialScope, *, now: float) -> TemporaryCredentials:
                counter.issued += 1
                return vendor.vend(scope, now=now)

        return Counted()


def with_access_modes(raw_config: dict, modes: Mapping[str, tuple[str, ...]]) -> dict:
    """``raw_config`` with the tables named in ``modes`` given those ``accessModes`` (and their
    history shared, which directory access needs)."""
    raw = copy.deepcopy(raw_config)
    for share in raw["shares"]:
        for schema in share.get("schemas") or []:
            for table in schema.get("tables") or []:
                if table["name"] in modes:
                    table["accessModes"] = list(modes[table["name"]])
                    table["historyShared"] = True
    return raw


def serve_with_dir(raw_config: dict, modes: Mapping[str, tuple[str, ...]], moto: Any):
    """A running deltaport app over ``raw_config`` (tables on ``moto``), the tables in ``modes``
    offered so; returns (server, the counted vendors)."""
    from servers import RunningServer

    app = create_app(parse_config(with_access_modes(raw_config, modes)))
    vendors = CountedVendors()
    app.state.service.directory.cloud_vendors = vendors
    return RunningServer(app), vendors
