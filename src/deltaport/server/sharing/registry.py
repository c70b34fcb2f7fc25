"""Who is asking (recipients and tokens), what they may see (grants), and names → tables.

A recipient sees only its shares; anything else is 404 exactly as if it did not exist. Tokens are
stored as SHA-256 digests and compared in constant time.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.errors import InvalidParameter, ResourceNotFound, Unauthenticated
from deltaport.server.sharing.slices import Slice, slice_for
from deltaport.server.sharing.tokens import LIST_TOKEN_ERROR, TokenBinding, TokenCodec
from deltaport.server.sources.config import (
    RecipientConfig,
    SchemaConfig,
    ServerConfig,
    ShareConfig,
    SharedTableConfig,
    hash_token,
)
from deltaport.storage import ObjectStore, store_for


@dataclass(frozen=True)
class Principal:
    name: str
    shares: frozenset[str] | None  # lower-cased share names; None = every share
    properties: Mapping[str, str] = field(default_factory=dict, compare=False)  # for partition slices
    #: the SHA-256 digest of the token it authenticated with (None: anonymous)
    token_digest: bytes | None = field(default=None, compare=False)

    def may_see(self, share: str) -> bool:
        return self.shares is None or share.lower() in self.shares


#: Opens the store of a table: (location, storage options) -> ObjectStore.
StoreOpener = Callable[[str, Mapping[str, Any]], ObjectStore]


@dataclass
class SharedTable:
    share: ShareConfig
    schema: SchemaConfig
    config: SharedTableConfig
    key: str  # opaque, URL-safe: names this table in the server's own file URLs
    storage_options: dict[str, Any] = field(default_factory=dict)
    open_store: StoreOpener = store_for
    _delta: DeltaTable | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def full_name(self) -> str:
        return f"{self.share.name}.{self.schema.name}.{self.config.name}"

    def slice(self, who: Principal) -> Slice | None:
        """The part of this table ``who`` may read; None: all of it."""
        return slice_for(self.config.partitions, who.properties)

    def delta(self, cache: SnapshotCache) -> DeltaTable:
        with self._lock:
            if self._delta is None:
                store = self.open_store(self.config.location, self.storage_options)
                self._delta = DeltaTable(self.config.location, store=store, cache=cache)
            return self._delta


def _principal(recipient: RecipientConfig, token_digest: bytes | None = None) -> Principal:
    return Principal(recipient.name, frozenset(recipient.shares), recipient.properties, token_digest)


@functools.lru_cache(maxsize=4096)  # every request for a file URL asks it
def recipient_key(name: str) -> str:
    """Names a recipient in the server's own file URLs (opaque, URL-safe)."""
    return hashlib.sha256(f"recipient\x00{name}".lower().encode()).hexdigest()[:16]


def _opened_key(location: str, options: Mapping[str, Any]) -> tuple[str, str]:
    return location, repr(sorted(options.items()))


def _table_key(share: str, schema: str, table: str) -> str:
    return hashlib.sha256(f"{share}\x00{schema}\x00{table}".lower().encode()).hexdigest()[:24]


class Registry:
    """One catalog as served: names to tables, token digests to recipients. Immutable once built;
    a new catalog is a new Registry (``previous`` hands over the tables already opened, so their
    caches stay warm)."""

    def __init__(
        self,
        config: ServerConfig,
        codec: TokenCodec,
        *,
        open_store: StoreOpener = store_for,
        previous: Registry | None = None,
    ) -> None:
        self.config = config
        self.codec = codec
        self._shares = {s.name.lower(): s for s in config.shares}
        self._tables: dict[tuple[str, str, str], SharedTable] = {}
        self._by_key: dict[str, SharedTable] = {}
        opened = previous._opened() if previous is not None else {}
        for share in config.shares:
            for schema in share.schemas:
                for table in schema.tables:
                    options = {**config.storage_options, **table.storage_options}
                    key = _table_key(share.name, schema.name, table.name)
                    shared = SharedTable(share, schema, table, key, options, open_store)
                    shared._delta = opened.get(_opened_key(table.location, options))
                    self._tables[(share.name.lower(), schema.name.lower(), table.name.lower())] = shared
                    self._by_key[key] = shared
        self._tokens = {t.digest: (r, t) for r in config.recipients for t in r.tokens}
        self._principals = {recipient_key(p.name): p for p in self._known_principals()}

    def _opened(self) -> dict[tuple[str, str], DeltaTable]:
        return {
            _opened_key(t.config.location, t.storage_options): t._delta
            for t in self._tables.values()
            if t._delta is not None
        }

    # --- authentication ---------------------------------------------------------------------

    def _known_principals(self) -> list[Principal]:
        cfg = self.config
        if not cfg.auth_enabled:
            return [Principal("anonymous", None)]
        known = [Principal("bearer", None)] if cfg.bearer_token_hash is not None else []
        return known + [_principal(r) for r in cfg.recipients]

    def principal_for_key(self, key: str) -> Principal | None:
        """The principal a file URL was issued to, by :func:`recipient_key`; None when it is no
        longer one this server knows."""
        return self._principals.get(key)

    def authenticate(self, authorization: str | None, now_ms: int) -> Principal:
        """The principal of a bearer token. Tokens are found by their SHA-256 digest (a lookup that
        tells nothing about any token), then compared in constant time."""
        cfg = self.config
        if not cfg.auth_enabled:
            return Principal("anonymous", None)
        if not authorization or not authorization.lower().startswith("bearer "):
            raise Unauthenticated(
                "Missing bearer token: send the header 'Authorization: Bearer <token>' "
                "with the token from your recipient profile."
            )
        digest = hash_token(authorization[7:].strip())
        found = self._tokens.get(digest)
        if found is not None and hmac.compare_digest(digest, found[1].digest):
            recipient, token = found
            if token.expiration_ms is not None and token.expiration_ms <= now_ms:
                raise Unauthenticated("The bearer token has expired: ask the data provider for a new profile.")
            return _principal(recipient, token.digest)
        if cfg.bearer_token_hash is not None and hmac.compare_digest(digest, cfg.bearer_token_hash):
            return Principal("bearer", None, token_digest=cfg.bearer_token_hash)
        raise Unauthenticated("The bearer token is not valid: check the token in your recipient profile.")

    def token_live(self, key: str, is_token: Callable[[bytes], bool], now_ms: int) -> bool:
        """Whether the principal :func:`recipient_key` ``key`` names still holds an unexpired token
        whose digest ``is_token`` recognises (the global bearer token for "bearer")."""
        who = self._principals.get(key)
        if who is None:
            return False
        cfg = self.config
        if who.name == "bearer" and cfg.bearer_token_hash is not None and is_token(cfg.bearer_token_hash):
            return True
        return any(
            is_token(t.digest) and (t.expiration_ms is None or t.expiration_ms > now_ms)
            for r in cfg.recipients
            if r.name == who.name
            for t in r.tokens
        )

    # --- names ------------------------------------------------------------------------------

    def shares(self, who: Principal) -> list[ShareConfig]:
        return [s for s in self.config.shares if who.may_see(s.name)]

    def share(self, who: Principal, name: str) -> ShareConfig:
        share = self._shares.get(name.lower())
        if share is None or not who.may_see(share.name):
            raise ResourceNotFound(f"share '{name}' not found")
        return share

    def schema(self, who: Principal, share_name: str, schema_name: str) -> tuple[ShareConfig, SchemaConfig]:
        share = self.share(who, share_name)
        for schema in share.schemas:
            if schema.name.lower() == schema_name.lower():
                return share, schema
        raise ResourceNotFound(f"schema '{schema_name}' not found")

    def table(self, who: Principal, share: str, schema: str, table: str) -> SharedTable:
        st = self._tables.get((share.lower(), schema.lower(), table.lower()))
        if st is None or not who.may_see(st.share.name):
            raise ResourceNotFound(
                f"[Share/Schema/Table] '{share}/{schema}/{table}' does not exist, "
                "please contact your share provider for further information."
            )
        return st

    def by_key(self, key: str) -> SharedTable | None:
        return self._by_key.get(key)

    # --- list pagination --------------------------------------------------------------------

    def paginate(
        self, who: Principal, what: str, items: list[Any], max_results: int, page_token: str | None
    ) -> tuple[list[Any], str | None]:
        binding = TokenBinding(who.name, f"list:{what}".lower())
        start = 0
        if page_token:
            data = self.codec.decode("list", page_token, binding)
            start = data.get("o", 0)
            if not isinstance(start, int) or not 0 <= start <= len(items):
                raise InvalidParameter(LIST_TOKEN_ERROR)
        end = start + max_results
        next_token = None
        if end < len(items) or (max_results == 0 and items and start < len(items)):
            next_token = self.codec.encode(
                "list", binding, {"o": end if max_results else start}, ttl_ms=self.config.query_table_page_token_ttl_ms
            )
        return items[start:end], next_token
