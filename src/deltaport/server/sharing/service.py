"""The Delta Sharing endpoints as plain methods: validate and plan everything, then stream.

Every check (parameters, grants, history, versions, format, tokens) runs before the first byte,
so a client error is always a 4xx JSON response; only signing happens while streaming.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import pyarrow.compute as pc

from deltaport.delta import CommitChanges, DeltaTable, Snapshot, SnapshotCache, TableConfig
from deltaport.delta.history import to_epoch_ms
from deltaport.delta.replay import ABSOLUTE_PATH
from deltaport.delta.scan import scan
from deltaport.delta.table_changes import TableChanges
from deltaport.errors import DeltaportError, InvalidParameter, TimestampOutOfRange, UnsupportedOperation, public_message
from deltaport.expressions import And
from deltaport.protocol import lines
from deltaport.protocol.capabilities import DELTA, HEADER, PARQUET, Capabilities
from deltaport.protocol.hints import parse_json_predicate, parse_sql_predicates
from deltaport.protocol.requests import ChangesRequest, QueryRequest, parse_max_results, parse_version_param
from deltaport.server.fast.columnar_lines import ColumnarLines
from deltaport.server.fast.file_keys import KeyingPool
from deltaport.server.fast.freshness import LatestState
from deltaport.server.ops.access import RecipientAllowLists
from deltaport.server.ops.request_info import FilesServed, current_request
from deltaport.server.sharing.registry import Principal, Registry, SharedTable, StoreOpener
from deltaport.server.sharing.slices import Slice
from deltaport.server.sharing.tokens import TokenBinding, TokenCodec, params_checksum
from deltaport.server.sharing.translate import FileLineMaker, choose_format, header_lines
from deltaport.server.sources.config import RecipientConfig, SchemaConfig, ServerConfig, ShareConfig, SharedTableConfig
from deltaport.server.sources.reload_summary import describe_reload
from deltaport.storage import store_for

log = logging.getLogger("deltaport.server")


@dataclass
class Reply:
    """What an endpoint answers, with headers: JSON, a small complete NDJSON body (``content``),
    or an NDJSON stream built while it is sent; ``served``: the data files it hands out (/query,
    /changes), for the metrics and the audit log."""

    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    stream: Iterator[bytes | memoryview] | None = None
    status: int = 200
    served: FilesServed | None = None


#: (table, request base URL, recipient) -> the UrlSigner of the table's file URLs for that recipient
SignerFactory = Callable[[SharedTable, str, Principal], Any]


def parse_fileidhash(value: str | None) -> str | None:
    if value is None:
        return None
    name = value.strip().lower()
    if name not in (PARQUET, DELTA):
        raise InvalidParameter(f"Unsupported fileidhash: '{value}'. Supported: parquet, delta")
    return name


def _history_error(shared: SharedTable) -> InvalidParameter:
    return InvalidParameter(
        "Reading table by version or timestamp is not supported because history sharing "
        f"is not enabled on table: {shared.full_name}"
    )


def _share_item(share: ShareConfig) -> dict[str, Any]:
    return {
        "name": share.name,
        **({"id": share.id} if share.id else {}),
        **({"comment": share.comment} if share.comment else {}),
    }


def _table_item(share: ShareConfig, schema: SchemaConfig, table: SharedTableConfig) -> dict[str, Any]:
    item = {"name": table.name, "schema": schema.name, "share": share.name}
    if table.id:
        item["id"] = table.id
    if share.id:
        item["shareId"] = share.id
    return item


def _listing(items: list[dict[str, Any]], next_page_token: str | None) -> Reply:
    return Reply(json={"items": items, **({"nextPageToken": next_page_token} if next_page_token else {})})


def _version_reply(version: int) -> Reply:
    return Reply(headers={lines.VERSION_HEADER: str(version)})


def _binding(who: Principal, shared: SharedTable) -> TokenBinding:
    """What a table's page and refresh tokens are bound to: the recipient and the table."""
    return TokenBinding(who.name, shared.full_name.lower(), shared.config.id)


def _timestamp_ms(value: str, name: str) -> int:
    try:
        if ":" not in value:  # a date alone names no instant
            raise ValueError(value)
        return to_epoch_ms(value)
    except (ValueError, TypeError):
        raise InvalidParameter(
            f"Invalid {name}: {value!r} is not an ISO-8601 timestamp with a zone, e.g. 2024-05-01T00:00:00Z"
        ) from None


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
        return _listing([_table_item(found, in_schema, table) for table in page], token)

    def list_all_tables(self, who: Principal, share: str, max_results: str | None, page_token: str | None) -> Reply:
        found = self.registry.share(who, share)
        every = [(schema, table) for schema in found.schemas for table in schema.tables]
        page, token = self.registry.paginate(
            who, f"all-tables:{found.name}", every, parse_max_results(max_results), page_token
        )
        return _listing([_table_item(found, schema, table) for schema, table in page], token)

    # --- table version and metadata ---------------------------------------------------------

    def _delta(self, shared: SharedTable) -> DeltaTable:
        return shared.delta(self.cache)

    def _check_start_version(self, shared: SharedTable, version: int, what: str = "data") -> None:
        first = shared.config.start_version
        if version < first:
            raise InvalidParameter(f"You can only query table {what} since version {first}.")

    def table_version(
        self, who: Principal, share: str, schema: str, table: str, starting_timestamp: str | None
    ) -> Reply:
        shared = self.registry.table(who, share, schema, table)
        delta_table = self._delta(shared)
        if starting_timestamp is None:
            return _version_reply(delta_table.latest_version())
        if not shared.config.history_shared:
            raise _history_error(shared)
        when = _timestamp_ms(starting_timestamp, "startingTimestamp")
        version = delta_table.history().version_at_or_after(when)
        self._check_start_version(shared, version)
        return _version_reply(version)

    async def latest_table_version(
        self, who: Principal, share: str, schema: str, table: str, latest: LatestState
    ) -> Reply:
        """``table_version`` without a timestamp, the table's state worked out by ``latest``."""
        shared = self.registry.table(who, share, schema, table)
        return _version_reply(await latest.version(self._delta(shared)))

    def _snapshot(self, shared: SharedTable, version: int | None, timestamp: str | None) -> Snapshot:
        if (version is not None or timestamp is not None) and not shared.config.history_shared:
            raise _history_error(shared)
        delta_table = self._delta(shared)
        if timestamp is not None:
            version = delta_table.history().version_at_or_before(_timestamp_ms(timestamp, "timestamp"))
        snap = delta_table.snapshot(version)
        self._check_start_version(shared, snap.version)
        return snap

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
        snap = self._snapshot(shared, asked_version, timestamp)
        time_travel = asked_version is not None or timestamp is not None
        return self._metadata_reply(shared, snap, caps, time_travel=time_travel, whole=shared.slice(who) is None)

    async def latest_metadata(
        self, who: Principal, share: str, schema: str, table: str, capabilities: str | None, latest: LatestState
    ) -> Reply:
        """``metadata`` without a version or timestamp, the table's state worked out by ``latest``."""
        caps = Capabilities.parse(capabilities)
        shared = self.registry.table(who, share, schema, table)
        snap = await latest.snapshot(self._delta(shared))
        self._check_start_version(shared, snap.version)
        return self._metadata_reply(shared, snap, caps, time_travel=False, whole=shared.slice(who) is None)

    def _metadata_reply(
        self, shared: SharedTable, snap: Snapshot, caps: Capabilities, *, time_travel: bool, whole: bool
    ) -> Reply:
        """The metadata; the table's size and file count only to a recipient who may read all of it."""
        fmt = choose_format(caps, snap.config)
        body = header_lines(
            snap.config,
            fmt,
            history_shared=shared.config.history_shared,
            version=snap.version if time_travel else None,
            size=snap.size_in_bytes if whole else None,
            num_files=snap.num_files if whole else None,
        )
        return Reply(headers=self._table_headers(snap.version, caps, fmt, None), content=b"".join(body))

    def _table_headers(self, version: int, caps: Capabilities, fmt: str, id_hash_header: str | None) -> dict[str, str]:
        headers = {lines.VERSION_HEADER: str(version), "Content-Type": lines.NDJSON, HEADER: caps.response_header(fmt)}
        if id_hash_header is not None:
            headers["fileidhash"] = id_hash_header
        return headers

    # --- query --------------------------------------------------------------------------------

    def _predicate(self, req: QueryRequest):
        parts = []
        if req.json_predicate_hints and self.config.evaluate_json_predicate_hints:
            expr = parse_json_predicate(req.json_predicate_hints)
            if expr is not None:
                parts.append(expr)
        if req.predicate_hints and self.config.evaluate_predicate_hints:
            expr = parse_sql_predicates(list(req.predicate_hints))
            if expr is not None:
                parts.append(expr)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else And(tuple(parts))

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
        if caps.async_query:
            raise UnsupportedOperation(
                "asynchronous queries are not supported by this server: send the query "
                "without asyncquery=true in delta-sharing-capabilities"
            )
        answer = _Answer(who, caps, parse_fileidhash(fileidhash), base_url)
        shared = self.registry.table(who, share, schema, table)
        if req.specific_version and not shared.config.history_shared:
            raise _history_error(shared)
        if req.starting_version is not None:
            return self._streaming_query(who, shared, req, answer)
        return self._snapshot_query(who, shared, req, answer)

    def _snapshot_query(self, who: Principal, shared: SharedTable, req: QueryRequest, answer: _Answer) -> Reply:
        binding = _binding(who, shared)
        checksum = params_checksum(req.checksum_params())
        snap, start = self._query_snapshot(shared, req, binding, checksum)
        fmt = choose_format(answer.caps, snap.config)
        _check_paths_inside(snap)
        part = shared.slice(who)
        within = part.mask_of_struct(snap.config, snap.live.column("partitionValues")) if part is not None else None
        indices = scan(snap, self._predicate(req), req.limit_hint, within=within).indices
        page_size = self._page_size(req.max_files, paged=bool(req.max_files or req.page_token))
        next_token = None
        if page_size is not None:
            indices, next_token = self._snapshot_page(indices, start, page_size, snap.version, binding, checksum)
        refresh = None
        if req.include_refresh_token:
            ttl_ms = self.config.refresh_token_ttl_ms
            refresh = self.codec.encode("refresh", binding, {"v": snap.version}, ttl_ms=ttl_ms, params=checksum)
        end_stream = answer.caps.include_end_stream_action or req.include_refresh_token or page_size is not None
        version = snap.version if (req.version is not None or req.timestamp is not None) else None
        head = header_lines(
            snap.config,
            fmt,
            history_shared=shared.config.history_shared,
            version=version,
            size=snap.size_in_bytes if part is None else None,  # a slice's recipient learns nothing of the rest
            num_files=snap.num_files if part is None else None,
        )
        maker = self._line_maker(shared, answer, fmt, snap.table_uri)
        files = maker.snapshot_lines(snap, indices, version=version)
        tail = None
        if end_stream:
            tail = lambda: lines.end_stream(  # noqa: E731
                refresh_token=refresh, next_page_token=next_token, min_url_expiration_timestamp=maker.expiry.min_ms
            )
        headers = self._table_headers(snap.version, answer.caps, fmt, answer.id_hash)
        served = FilesServed(shared.share.name, len(indices), _declared_size(snap, indices))
        return Reply(headers=headers, stream=_stream(head, files, tail, end_stream), served=served)

    def _query_snapshot(
        self, shared: SharedTable, req: QueryRequest, binding: TokenBinding, checksum: str
    ) -> tuple[Snapshot, int]:
        """The snapshot a query reads and the index of its first file: the version a page or
        refresh token pins (the one the query already read: not time travel, so it needs no history
        sharing), else the version or timestamp asked for, else the latest."""
        pinned, start = None, 0
        if req.page_token:
            data = self.codec.decode("page", req.page_token, binding, params=checksum)
            pinned, start = int(data["v"]), int(data["i"])
        elif req.refresh_token:
            pinned = int(self.codec.decode("refresh", req.refresh_token, binding, params=checksum)["v"])
        if pinned is None:
            return self._snapshot(shared, req.version, req.timestamp), start
        snap = self._delta(shared).snapshot(pinned)
        self._check_start_version(shared, snap.version)
        return snap, start

    def _snapshot_page(
        self, indices: Any, start: int, page_size: int, version: int, binding: TokenBinding, checksum: str
    ) -> tuple[Any, str | None]:
        """One page of a snapshot's files and the token of the next page (None on the last)."""
        if start > len(indices):
            raise InvalidParameter("The page token is out of range for this query. Please restart the query.")
        next_token = None
        if start + page_size < len(indices):
            next_token = self.codec.encode(
                "page",
                binding,
                {"v": version, "i": start + page_size},
                ttl_ms=self.config.query_table_page_token_ttl_ms,
                params=checksum,
            )
        return indices.slice(start, page_size), next_token

    def _line_maker(self, shared: SharedTable, answer: _Answer, fmt: str, table_uri: str) -> FileLineMaker:
        return FileLineMaker(
            table_uri=table_uri,
            signer=self.signer_factory(shared, answer.base_url, answer.who),
            expires_in=self.config.pre_signed_url_timeout_seconds,
            fmt=fmt,
            id_hash=answer.id_hash or fmt,
            now=self.clock(),
            columnar=self.columnar,
        )

    def _page_size(self, max_files: int | None, *, paged: bool) -> int | None:
        """Files per page: ``maxFiles`` capped by the config; a page token alone continues with the
        config's page size. None when the reply is not paged."""
        if not paged:
            return None
        limit = self.config.query_table_page_size_limit
        return min(max_files or limit, limit)

    # --- streaming query and change data feed -------------------------------------------------

    def _change_range(
        self,
        who: Principal,
        shared: SharedTable,
        start: int,
        end: int | None,
        page_token: str | None,
        checksum: str,
        *,
        cdf: bool,
    ) -> tuple[TableChanges, _Position | None, tuple[int, int]]:
        """The change range of a streaming query or /changes, the position a page token resumes at
        (None on a first page), and the (end, latest) versions its next page token must pin: a later
        page reads the range the first page read, whatever commits landed since."""
        position, pinned = None, None
        if page_token:
            data = self.codec.decode("page", page_token, _binding(who, shared), params=checksum)
            position, pinned = _token_position(data, start)
        resume = None if position is None else position[0]
        changes = TableChanges.try_new(
            self._delta(shared), start, pinned[0] if pinned else end, change_data=cdf, resume=resume
        )
        if position is not None and position[0] > changes.end:
            raise InvalidParameter(_OUT_OF_RANGE)
        return changes, position, pinned or (changes.end, changes.latest)

    def _streaming_query(self, who: Principal, shared: SharedTable, req: QueryRequest, answer: _Answer) -> Reply:
        start = req.starting_version
        assert start is not None  # a streaming query is one with a startingVersion
        self._check_start_version(shared, start)
        checksum = params_checksum(req.checksum_params())
        changes, position, pinned = self._change_range(
            who, shared, start, req.ending_version, req.page_token, checksum, cdf=False
        )
        fmt = choose_format(answer.caps, changes.start_config)
        protocols = req.include_historical_protocol and fmt == DELTA
        plan = _ChangePlan(
            start=start,
            head_config=changes.start_config,
            head_version=start,
            protocol_version=start if protocols else None,
            fmt=fmt,
            changes=changes,
            entries_of=_entries_of(start, CommitChanges.data_changes, protocols, True, shared.slice(who)),
            position=position,
            pinned=pinned,
            checksum=checksum,
        )
        return self._change_reply(who, shared, plan, answer, req.max_files)

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
        answer = _Answer(who, Capabilities.parse(capabilities), parse_fileidhash(fileidhash), base_url)
        req = ChangesRequest.parse(params)
        shared = self.registry.table(who, share, schema, table)
        if not shared.config.history_shared:
            raise InvalidParameter(f"cdf is not enabled on table {shared.full_name}")
        start, end = self._change_versions(shared, req)
        self._check_start_version(shared, start, "changes")
        checksum = params_checksum(req.checksum_params(start))
        changes, position, pinned = self._change_range(who, shared, start, end, req.page_token, checksum, cdf=True)
        historical = req.include_historical_metadata
        head_config = changes.start_config if historical else self._delta(shared).config_at(pinned[1])
        fmt = choose_format(answer.caps, head_config)
        protocols = req.include_historical_protocol and fmt == DELTA
        plan = _ChangePlan(
            start=start,
            head_config=head_config,
            head_version=start if historical else pinned[1],
            protocol_version=start if protocols else None,
            fmt=fmt,
            changes=changes,
            entries_of=_entries_of(start, CommitChanges.change_feed, protocols, historical, shared.slice(who)),
            position=position,
            pinned=pinned,
            checksum=checksum,
        )
        return self._change_reply(who, shared, plan, answer, req.max_files)

    def _change_versions(self, shared: SharedTable, req: ChangesRequest) -> tuple[int, int | None]:
        """The starting and ending versions of a /changes request, timestamps resolved."""
        start, end = req.starting_version, req.ending_version
        asks_time = req.starting_timestamp is not None or req.ending_timestamp is not None
        history = self._delta(shared).history() if asks_time else None
        try:
            if req.starting_timestamp is not None:
                assert history is not None
                when = _timestamp_ms(req.starting_timestamp, "startingTimestamp")
                start = history.version_at_or_after(when, allow_before_earliest=False)
            if req.ending_timestamp is not None:
                assert history is not None
                when = _timestamp_ms(req.ending_timestamp, "endingTimestamp")
                end = history.version_at_or_before(when, allow_after_latest=True)
        except TimestampOutOfRange as exc:
            raise InvalidParameter(str(exc)) from None
        assert start is not None  # given, or resolved from startingTimestamp above
        return start, end

    def _change_reply(
        self, who: Principal, shared: SharedTable, plan: _ChangePlan, answer: _Answer, max_files: int | None
    ) -> Reply:
        """The response of a streaming query or /changes: one page of the plan's entries, read from
        its position on (a page is read and its lines made before its first byte, a body of at most
        the page size limit's lines; an unpaged reply is read while it streams)."""
        paged = max_files is not None or plan.position is not None
        size = self._page_size(max_files, paged=paged)
        entries = _positioned(plan.changes, plan.position, plan.entries_of)
        next_token: str | None = None
        served: FilesServed | None = None
        if size is None:
            body: Iterable[ChangeEntry] = _served_while_streaming(_primed(entries), shared.share.name)
        else:
            body, after = _page(entries, size)
            if after is not None:
                next_token = self._change_token(who, shared, plan, after)
            served = _files_served(shared.share.name, body)
        head = header_lines(
            plan.head_config,
            plan.fmt,
            history_shared=True,
            version=plan.head_version,
            protocol_version=plan.protocol_version,
        )
        maker = self._line_maker(shared, answer, plan.fmt, self._delta(shared).uri)
        end_stream = answer.caps.include_end_stream_action or paged
        tail = None
        if end_stream:
            tail = lambda: lines.end_stream(  # noqa: E731
                next_page_token=next_token, min_url_expiration_timestamp=maker.expiry.min_ms
            )
        headers = self._table_headers(plan.start, answer.caps, plan.fmt, answer.id_hash)
        stream = _stream(head, _change_lines(body, plan.fmt, maker), tail, end_stream)
        if size is not None:  # a page, its entries read already: made whole, sent without streaming
            return Reply(headers=headers, content=b"".join(stream), served=served)
        return Reply(headers=headers, stream=stream, served=served)

    def _change_token(self, who: Principal, shared: SharedTable, plan: _ChangePlan, at: _Position) -> str:
        """The page token of the page that begins at ``at``, pinning the plan's (end, latest)."""
        return self.codec.encode(
            "page",
            _binding(who, shared),
            {"v": at[0], "i": at[1], "e": plan.pinned[0], "l": plan.pinned[1]},
            ttl_ms=self.config.query_table_page_token_ttl_ms,
            params=plan.checksum,
        )


@dataclass(frozen=True)
class _Answer:
    """How a table request is to be answered: to whom, the client's capabilities, the ``fileidhash``
    it asked for, and the base URL its file URLs are made under."""

    who: Principal
    caps: Capabilities
    id_hash: str | None
    base_url: str


#: One entry of a change response: ("protocol" | "metaData", commit, None) or (file kind, commit, action).
ChangeEntry = tuple[str, CommitChanges, Optional[dict[str, Any]]]

#: Where a change response reads from: a commit's version and the index of an entry in that commit.
_Position = tuple[int, int]

_OUT_OF_RANGE = "The page token is out of range for this query. Please restart the query."


@dataclass(frozen=True)
class _ChangePlan:
    """A streaming query's or /changes' answer before paging: its header (config, the version its
    metaData line names, the protocol line's version if historical protocols are asked for), the
    change range and how a commit's entries are chosen, the position a page token resumes at (None
    on a first page), the (end, latest) versions its page tokens pin (so later pages read the same
    range even if the table moves on) and the checksum of the parameters they repeat."""

    start: int
    head_config: TableConfig
    head_version: int
    protocol_version: int | None
    fmt: str
    changes: TableChanges
    entries_of: Callable[[CommitChanges], list[ChangeEntry]]
    position: _Position | None
    pinned: tuple[int, int]
    checksum: str


def _token_position(data: Mapping[str, Any], start: int) -> tuple[_Position, tuple[int, int]]:
    """A change page token's position and pinned (end, latest) versions."""
    try:
        position, pinned = (int(data["v"]), int(data["i"])), (int(data["e"]), int(data["l"]))
    except (KeyError, TypeError, ValueError):
        raise InvalidParameter(_OUT_OF_RANGE) from None
    if position[0] < start or position[1] < 0:
        raise InvalidParameter(_OUT_OF_RANGE)
    return position, pinned


def _entries_of(
    start: int,
    file_actions: Callable[[CommitChanges], Iterator[tuple[str, dict[str, Any]]]],
    protocols: bool,
    metadata: bool,
    part: Slice | None,
) -> Callable[[CommitChanges], list[ChangeEntry]]:
    """How a commit's entries are chosen: its protocol and metaData (when asked for, after the
    starting version), then its file actions as ``file_actions`` chooses them, without those
    outside the recipient's slice (judged by the table as that commit left it)."""

    def entries(change: CommitChanges) -> list[ChangeEntry]:
        later = change.version > start
        out: list[ChangeEntry] = []
        if protocols and later and change.protocol is not None:
            out.append(("protocol", change, None))
        if metadata and later and change.metadata is not None:
            out.append(("metaData", change, None))
        files = list(file_actions(change))
        if part is not None and files:
            inside = part.mask_of_actions(change.config, [action for _, action in files]).tolist()
            files = [file for file, keep in zip(files, inside) if keep]
        return out + [(kind, change, action) for kind, action in files]

    return entries


def _positioned(
    changes: TableChanges, position: _Position | None, entries_of: Callable[[CommitChanges], list[ChangeEntry]]
) -> Iterator[tuple[_Position, ChangeEntry]]:
    """The range's entries from ``position`` on (from its start when None), each with its position;
    commits are read only as far as the entries are asked for."""
    first, skip = position if position is not None else (None, 0)
    for n, change in enumerate(changes.commits(first)):
        entries = entries_of(change)
        for i in range(skip if n == 0 else 0, len(entries)):
            yield (change.version, i), entries[i]


def _page(entries: Iterator[tuple[_Position, ChangeEntry]], size: int) -> tuple[list[ChangeEntry], _Position | None]:
    """The first ``size`` entries, and the position of the one after them (None at the end)."""
    taken = list(itertools.islice(entries, size + 1))
    after = taken[size][0] if len(taken) > size else None
    return [entry for _, entry in taken[:size]], after


def _primed(entries: Iterator[tuple[_Position, ChangeEntry]]) -> Iterator[ChangeEntry]:
    """``entries`` without positions, the first read now: its commit's errors come before any byte."""
    first = next(entries, None)
    return itertools.chain(() if first is None else (first[1],), (entry for _, entry in entries))


def _files_served(share: str, entries: Iterable[ChangeEntry]) -> FilesServed:
    actions = [action for _, _, action in entries if action is not None]
    return FilesServed(share, len(actions), sum(int(a.get("size") or 0) for a in actions))


def _served_while_streaming(entries: Iterator[ChangeEntry], share: str) -> Iterator[ChangeEntry]:
    """``entries``, noting on the request being served (known now, not in the thread that streams),
    once they are all sent, the files they handed out."""
    seen = current_request()

    def counted() -> Iterator[ChangeEntry]:
        files = size = 0
        for entry in entries:
            if entry[2] is not None:
                files, size = files + 1, size + int(entry[2].get("size") or 0)
            yield entry
        if seen is not None:
            seen.served = FilesServed(share, files, size)

    return counted()


def _change_lines(entries: Iterable[ChangeEntry], fmt: str, maker: FileLineMaker) -> Iterator[bytes]:
    for kind, change, action in entries:
        if kind == "metaData":
            yield header_lines(change.config, fmt, history_shared=True, version=change.version)[1]
        elif kind == "protocol":
            yield header_lines(change.config, fmt, history_shared=True, protocol_version=change.version)[0]
        else:
            assert action is not None  # file entries carry their action
            yield maker.line(kind, action, version=change.version, timestamp=change.timestamp)


def _declared_size(snap: Snapshot, indices: Any) -> int:
    """The sum of the sizes the snapshot's files at ``indices`` declare."""
    if not len(indices):
        return 0
    return int(pc.sum(pc.take(snap.live.column("size"), indices)).as_py() or 0)


def _check_paths_inside(snap: Snapshot) -> None:
    """Refuse, before any byte is sent, a snapshot naming data or deletion-vector files outside its
    table's root."""
    if snap.has_absolute_paths:
        paths = snap.live.column("path")
        root = snap.table_uri.rstrip("/") + "/"
        outside = pc.and_(pc.match_substring_regex(paths, ABSOLUTE_PATH), pc.invert(pc.starts_with(paths, root)))
        if pc.any(outside).as_py():
            raise UnsupportedOperation("Table contains absolute paths outside its root and cannot be shared")
    if snap.has_deletion_vectors:
        storage = pc.struct_field(snap.live.column("deletionVector"), "storageType")
        if pc.any(pc.equal(storage, "p")).as_py():
            raise UnsupportedOperation("Table contains absolute deletion vector paths and cannot be shared")


def _stream(
    head: list[bytes], files: Iterator[bytes | memoryview], tail, end_stream: bool
) -> Iterator[bytes | memoryview]:
    yield b"".join(head)
    try:
        yield from files
    except DeltaportError as exc:
        if not end_stream:
            raise
        yield lines.end_stream(error_message=f"{exc.error_code}: {public_message(exc)}")
        return
    except Exception:
        if not end_stream:
            raise
        yield lines.end_stream(error_message="INTERNAL_ERROR: the server failed while streaming the response")
        return
    if tail is not None:
        yield tail()
