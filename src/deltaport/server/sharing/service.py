"""The Delta Sharing endpoints as plain methods: validate and plan everything, then stream.

Every check (parameters, grants, history, versions, format, tokens) runs before the first byte,
so a client error is always a 4xx JSON response; only signing happens while streaming.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from deltaport.delta import DeltaTable, Snapshot, SnapshotCache
from deltaport.errors import InvalidParameter
from deltaport.protocol import lines
from deltaport.protocol.capabilities import HEADER, Capabilities
from deltaport.protocol.requests import QueryRequest, parse_max_results, parse_version_param
from deltaport.server.fast.columnar_lines import ColumnarLines
from deltaport.server.fast.file_keys import KeyingPool
from deltaport.server.fast.freshness import LatestState
from deltaport.server.ops.access import RecipientAllowLists
from deltaport.server.ops.request_info import current_request
from deltaport.server.s3face.credentials import FaceCredentials
from deltaport.server.sharing.answers import (
    Answer,
    Reply,
    SignerFactory,
    parse_fileidhash,
    timestamp_ms,
)
from deltaport.server.sharing.async_queries import AsyncQueries
from deltaport.server.sharing.change_feed import ChangeFeed
from deltaport.server.sharing.directory import CloudVendors, DirectoryAccess, url_refusal
from deltaport.server.sharing.registry import Principal, Registry, SharedTable, StoreOpener
from deltaport.server.sharing.snapshot_query import SnapshotQueries, Table, history_error
from deltaport.server.sharing.tokens import TokenCodec
from deltaport.server.sharing.translate import FileLineMaker, choose_format, header_lines
from deltaport.server.sources.config import RecipientConfig, SchemaConfig, ServerConfig, ShareConfig, SharedTableConfig
from deltaport.server.sources.reload_summary import describe_reload
from deltaport.signing.vending import cloud_vendor_for
from deltaport.storage import store_for

log = logging.getLogger("deltaport.server")


def _share_item(share: ShareConfig) -> dict[str, Any]:
    return {
        "name": share.name,
        **({"id": share.id} if share.id else {}),
        **({"displayName": share.display_name} if share.display_name else {}),
        **({"comment": share.comment} if share.comment else {}),
        **({"properties": dict(share.properties)} if share.properties else {}),
    }


def _table_item(shared: SharedTable, placement: Mapping[str, Any]) -> dict[str, Any]:
    share, table = shared.share, shared.config
    item: dict[str, Any] = {"name": table.name, "schema": shared.schema.name, "share": share.name}
    if table.id:
        item["id"] = table.id
    if share.id:
        item["shareId"] = share.id
    return {**item, **placement}


def _listing(items: list[dict[str, Any]], next_page_token: str | None) -> Reply:
    return Reply(json={"items": items, **({"nextPageToken": next_page_token} if next_page_token else {})})


def _version_reply(version: int) -> Reply:
    return Reply(headers={lines.VERSION_HEADER: str(version)})


class _Unchanged:
    """A parameter not given: the value stays as it is."""


UNCHANGED = _Unchanged()


class SharingService:
    def __init__(
        self,
        config: ServerConfig,
        *,
        signer_factory: SignerFactory,
        cache: SnapshotCache,
        codec: TokenCodec,
        clock: Callable[[], float] = time.time,
        keying: KeyingPool | None = None,
        open_store: StoreOpener = store_for,
        cloud_vendors: CloudVendors = cloud_vendor_for,
    ) -> None:
        self.config = config
        self.cache = cache
        self.codec = codec
        self.clock = clock
        self.registry = Registry(config, codec, open_store=open_store)
        self.signer_factory = signer_factory
        self.columnar = ColumnarLines(pool=keying)
        self._open_store = open_store
        self.ip_access = RecipientAllowLists()
        self.feed = ChangeFeed(self)
        self.directory = DirectoryAccess(
            face=FaceCredentials(config.token_secret),
            bucket=config.directory_bucket,
            cloud_vendors=cloud_vendors,
            lifetime_seconds=config.temporary_credential_validity_seconds,
        )
        self.snapshots = SnapshotQueries(self)
        self.async_queries = AsyncQueries(
            codec,
            plan=self.snapshots.plan,
            serve=self.snapshots.reply,
            threshold_ms=config.async_query_threshold_ms,
            ttl_seconds=config.async_query_ttl_seconds,
        )

    def serve_catalog(
        self,
        shares: tuple[ShareConfig, ...],
        recipients: tuple[RecipientConfig, ...],
        *,
        bearer_token_hash: bytes | _Unchanged | None = UNCHANGED,
    ) -> None:
        """Serve these shares to these recipients (and, when given, this global bearer token) from
        the next request on (tables already open stay open, with their caches)."""
        bearer = self.config.bearer_token_hash if isinstance(bearer_token_hash, _Unchanged) else bearer_token_hash
        config = dataclasses.replace(self.config, shares=shares, recipients=recipients, bearer_token_hash=bearer)
        old = self.config
        change = describe_reload(
            (old.shares, old.recipients, old.bearer_token_hash), (shares, recipients, config.bearer_token_hash)
        )
        if change is not None:
            log.info("now serving: %s", change)
        self.registry = Registry(config, self.codec, open_store=self._open_store, previous=self.registry)
        self.config = config

    def principal(self, authorization: str | None) -> Principal:
        """Who ``authorization`` authenticates as, admitted by :meth:`admit`."""
        who = self.registry.authenticate(authorization, int(self.clock() * 1000))
        self.admit(who)
        return who

    def admit(self, who: Principal) -> None:
        """Note ``who`` on the request being served (request_info.py) and refuse it (PermissionDenied)
        when its recipient's IP access list does not hold the request's client address. Called
        for every protocol request and every download of a file this server serves; outside a
        request the client address is unknown, which a non-empty list refuses."""
        seen = current_request()
        if seen is not None:
            seen.principal = who.name
        self.ip_access.check(self.registry.config, who.name, None if seen is None else seen.client_ip)

    # --- listing ----------------------------------------------------------------------------

    def list_shares(self, who: Principal, max_results: str | None, page_token: str | None) -> Reply:
        shares = self.registry.shares(who)
        page, token = self.registry.paginate(who, "shares", shares, parse_max_results(max_results), page_token)
        return _listing([_share_item(found) for found in page], token)

    def get_share(self, who: Principal, share: str) -> Reply:
        return Reply(json={"share": _share_item(self.registry.share(who, share))})

    def list_schemas(self, who: Principal, share: str, max_results: str | None, page_token: str | None) -> Reply:
        found = self.registry.share(who, share)
        page, token = self.registry.paginate(
            who, f"schemas:{found.name}", list(found.schemas), parse_max_results(max_results), page_token
        )
        return _listing([{"name": schema.name, "share": found.name} for schema in page], token)

    def list_tables(
        self, who: Principal, share: str, schema: str, max_results: str | None, page_token: str | None
    ) -> Reply:
        found, in_schema = self.registry.schema(who, share, schema)
        page, token = self.registry.paginate(
            who,
            f"tables:{found.name}:{in_schema.name}",
            list(in_schema.tables),
            parse_max_results(max_results),
            page_token,
        )
        return _listing([self._table_item(who, found, in_schema, table) for table in page], token)

    def list_all_tables(self, who: Principal, share: str, max_results: str | None, page_token: str | None) -> Reply:
        found = self.registry.share(who, share)
        every = [(schema, table) for schema in found.schemas for table in schema.tables]
        page, token = self.registry.paginate(
            who, f"all-tables:{found.name}", every, parse_max_results(max_results), page_token
        )
        return _listing([self._table_item(who, found, schema, table) for schema, table in page], token)

    def _table_item(self, who: Principal, share: ShareConfig, schema: SchemaConfig, table: SharedTableConfig) -> dict:
        shared = self.registry.table(who, share.name, schema.name, table.name)
        return _table_item(shared, self.directory.placement(shared))

    # --- table version and metadata ---------------------------------------------------------

    def delta(self, shared: SharedTable) -> DeltaTable:
        return shared.delta(self.cache)

    def check_start_version(self, shared: SharedTable, version: int, what: str = "data") -> None:
        first = shared.config.start_version
        if version < first:
            raise InvalidParameter(f"You can only query table {what} since version {first}.")

    def table_version(
        self, who: Principal, share: str, schema: str, table: str, starting_timestamp: str | None
    ) -> Reply:
        shared = self.registry.table(who, share, schema, table)
        delta_table = self.delta(shared)
        if starting_timestamp is None:
            return _version_reply(delta_table.latest_version())
        if not shared.config.history_shared:
            raise history_error(shared)
        when = timestamp_ms(starting_timestamp, "startingTimestamp")
        version = delta_table.history().version_at_or_after(when)
        self.check_start_version(shared, version)
        return _version_reply(version)

    async def latest_table_version(
        self, who: Principal, share: str, schema: str, table: str, latest: LatestState
    ) -> Reply:
        """``table_version`` without a timestamp, the table's state worked out by ``latest``."""
        shared = self.registry.table(who, share, schema, table)
        return _version_reply(await latest.version(self.delta(shared)))

    def metadata(
        self,
        who: Principal,
        share: str,
        schema: str,
        table: str,
        version: str | None,
        timestamp: str | None,
        capabilities: str | None,
    ) -> Reply:
        caps = Capabilities.parse(capabilities)
        asked_version = parse_version_param("version", version)
        if asked_version is not None and timestamp is not None:
            raise InvalidParameter("Please only provide one of: version,timestamp")
        shared = self.registry.table(who, share, schema, table)
        snap = self.snapshots.latest_or_asked(shared, asked_version, timestamp)
        time_travel = asked_version is not None or timestamp is not None
        return self._metadata_reply(shared, snap, caps, time_travel=time_travel, whole=shared.slice(who) is None)

    async def latest_metadata(
        self, who: Principal, share: str, schema: str, table: str, capabilities: str | None, latest: LatestState
    ) -> Reply:
        """``metadata`` without a version or timestamp, the table's state worked out by ``latest``."""
        caps = Capabilities.parse(capabilities)
        shared = self.registry.table(who, share, schema, table)
        snap = await latest.snapshot(self.delta(shared), self.config.stream_above_files)
        self.check_start_version(shared, snap.version)
        return self._metadata_reply(shared, snap, caps, time_travel=False, whole=shared.slice(who) is None)

    def _metadata_reply(
        self, shared: SharedTable, snap: Table, caps: Capabilities, *, time_travel: bool, whole: bool
    ) -> Reply:
        """The metadata; the table's size and file count only to a recipient who may read all of it,
        and only when the table is read whole (a streamed table's are not counted for it)."""
        fmt = choose_format(caps, snap.config)
        counted = snap if whole and isinstance(snap, Snapshot) else None
        body = header_lines(
            snap.config,
            fmt,
            history_shared=shared.config.history_shared,
            version=snap.version if time_travel else None,
            size=counted.size_in_bytes if counted is not None else None,
            num_files=counted.num_files if counted is not None else None,
            placement=self.directory.placement(shared),
        )
        return Reply(headers=self.table_headers(snap.version, caps, fmt, None), content=b"".join(body))

    def table_headers(self, version: int, caps: Capabilities, fmt: str, id_hash_header: str | None) -> dict[str, str]:
        headers = {lines.VERSION_HEADER: str(version), "Content-Type": lines.NDJSON, HEADER: caps.response_header(fmt)}
        if id_hash_header is not None:
            headers["fileidhash"] = id_hash_header
        return headers

    # --- query --------------------------------------------------------------------------------

    def query(
        self,
        who: Principal,
        share: str,
        schema: str,
        table: str,
        body: bytes,
        capabilities: str | None,
        fileidhash: str | None,
        base_url: str,
    ) -> Reply:
        req = QueryRequest.parse(body)
        caps = Capabilities.parse(capabilities)
        answer = Answer(who, caps, parse_fileidhash(fileidhash), base_url)
        shared = self.registry.table(who, share, schema, table)
        refusal = url_refusal(shared)
        if refusal is not None:
            raise refusal
        if req.specific_version and not shared.config.history_shared:
            raise history_error(shared)
        if req.starting_version is not None:
            return self.feed.streaming_query(who, shared, req, answer)
        if caps.async_query and not req.page_token:  # a later page is served at once (async_queries.py)
            return self.async_queries.submit(who, shared, req, answer)
        return self.snapshots.reply(who, shared, req, answer, None)

    def query_info(
        self,
        who: Principal,
        share: str,
        schema: str,
        table: str,
        query_id: str,
        body: bytes,
        capabilities: str | None,
        fileidhash: str | None,
        base_url: str,
    ) -> Reply:
        """POST …/queries/{queryId}: an asynchronous query's status or result (async_queries.py)."""
        answer = Answer(who, Capabilities.parse(capabilities), parse_fileidhash(fileidhash), base_url)
        shared = self.registry.table(who, share, schema, table)
        return self.async_queries.poll(who, shared, query_id, body, answer)

    def line_maker(self, shared: SharedTable, answer: Answer, fmt: str, table_uri: str) -> FileLineMaker:
        return FileLineMaker(
            table_uri=table_uri,
            signer=self.signer_factory(shared, answer.base_url, answer.who),
            expires_in=self.config.pre_signed_url_timeout_seconds,
            fmt=fmt,
            id_hash=answer.id_hash or fmt,
            now=self.clock(),
            columnar=self.columnar,
        )

    def page_size(self, max_files: int | None, *, paged: bool) -> int | None:
        """Files per page: ``maxFiles`` capped by the config; a page token alone continues with the
        config's page size. None when the reply is not paged."""
        if not paged:
            return None
        limit = self.config.query_table_page_size_limit
        return min(max_files or limit, limit)

    def changes(
        self,
        who: Principal,
        share: str,
        schema: str,
        table: str,
        params: Mapping[str, str | None],
        capabilities: str | None,
        base_url: str,
        fileidhash: str | None = None,
    ) -> Reply:
        """GET /changes: the change data feed (change_feed.py)."""
        answer = Answer(who, Capabilities.parse(capabilities), parse_fileidhash(fileidhash), base_url)
        shared = self.registry.table(who, share, schema, table)
        refusal = url_refusal(shared)
        if refusal is not None:
            raise refusal
        return self.feed.changes(who, shared, params, answer)

    def table_credentials(
        self, who: Principal, share: str, schema: str, table: str, body: bytes, endpoint: str
    ) -> Reply:
        """POST …/temporary-table-credentials (directory.py)."""
        shared = self.registry.table(who, share, schema, table)
        return self.directory.credentials(who, shared, body, endpoint, self.clock())
