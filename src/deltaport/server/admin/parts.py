"""What the admin API's routes share: the catalog, the admin tokens, the hook that makes a write
visible to the sharing side, and paging."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, TypeVar

from deltaport.catalog.store import CatalogDB
from deltaport.delta.schema import Schema
from deltaport.errors import InvalidParameter, PermissionDenied, Unauthenticated
from deltaport.server.ops.request_info import current_request
from deltaport.server.sharing.tokens import TokenBinding, TokenCodec
from deltaport.server.sources.config import hash_token

if TYPE_CHECKING:
    from deltaport.server.admin.links import ActivationLinks

T = TypeVar("T")

#: The principal admin requests are audited as (admin tokens carry no name).
ADMIN = "admin"

#: Most items on one page of a listing (``max_results`` 0 or absent asks for this many).
PAGE_LIMIT = 1000


@dataclass(frozen=True)
class AdminParts:
    """The admin API's collaborators.

    ``reload`` runs after every write and returns once the sharing side serves the new catalog
    (so a revoked token or share is refused by the next request). ``describe_table`` reads a
    location's Delta log: its schema and partition columns, or a DeltaportError saying why it is
    not a readable Delta table. ``links`` keeps pending activation links (sealed) and shows them.
    ``read_only`` names the YAML file that is the catalog, when it is one: writes are refused."""

    catalog: CatalogDB
    admin_digests: frozenset[bytes]
    codec: TokenCodec
    reload: Callable[[], None]
    describe_table: Callable[[str], tuple[Schema, list[str]]]
    links: ActivationLinks
    read_only: str | None = None

    def check_admin(self, authorization: str | None) -> str:
        """The admin's principal name, or Unauthenticated. Only admin tokens open admin routes;
        a recipient's token is not one, whatever it may read."""
        if not self.admin_digests:
            raise PermissionDenied(
                "the admin API is turned off: give the server 'adminTokens' in its config or the "
                "DELTAPORT_ADMIN_TOKEN environment variable"
            )
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated("Missing admin token: send 'Authorization: Bearer <admin token>'.")
        digest = hash_token(authorization[7:].strip())
        found = False
        for known in self.admin_digests:  # every digest compared, so timing tells nothing
            found |= hmac.compare_digest(digest, known)
        if not found:
            raise Unauthenticated("The admin token is not valid: use one of the server's 'adminTokens'.")
        seen = current_request()
        if seen is not None:  # for the audit event of the request
            seen.principal = ADMIN
        return ADMIN

    def check_writable(self, target: str | None = None) -> None:
        """Refuse writes to a catalog that is a config file. ``target``: what the write creates,
        when the path does not name it, for the request's audit event."""
        seen = current_request()
        if seen is not None and target is not None:
            seen.target = target
        if self.read_only is not None:
            raise PermissionDenied(
                f"the catalog is the config file {PurePath(self.read_only).name}: edit that file (the server "
                "reloads it), or move it into a catalog database with 'deltaport catalog import'"
            )

    def page(
        self, kind: str, items: Sequence[T], key: Callable[[T], str], max_results: int | None, page_token: str | None
    ) -> tuple[list[T], str | None]:
        """One page of ``items`` (sorted by ``key``) after the page token's last key."""
        if max_results is not None and max_results < 0:
            raise InvalidParameter("max_results must be 0 (the server's page size) or more")
        limit = PAGE_LIMIT if not max_results else min(max_results, PAGE_LIMIT)
        binding = TokenBinding("admin", f"admin:{kind}")
        after = self.codec.decode("list", page_token, binding).get("a") if page_token else None
        rest = [item for item in items if after is None or key(item) > str(after)]
        chosen = rest[:limit]
        more = len(rest) > limit
        token = self.codec.encode("list", binding, {"a": key(chosen[-1])}, ttl_ms=86_400_000) if more else None
        return chosen, token


def with_token(body: dict[str, Any], token: str | None) -> dict[str, Any]:
    if token:
        body["next_page_token"] = token
    return body
