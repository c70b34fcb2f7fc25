"""The Delta Sharing endpoints as plain methods: validate and plan everything, then stream.

Every check (parameters, grants, history, versions, format, tokens) runs before the first byte,
so a client error is always a 4xx JSON response; only signing happens while streaming.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from deltaport.delta import DeltaTable, Snapshot, SnapshotCache
from deltaport.delta.history import parse_timestamp
from deltaport.delta.replay import ABSOLUTE_PATH
from deltaport.delta.scan import scan
from deltaport.errors import DeltaportError, InvalidParameter, TimestampOutOfRange, UnsupportedOperation, public_message
from deltaport.expressions import And
from deltaport.protocol import lines
from deltaport.protocol.capabilities import DELTA, HEADER, PARQUET, Capabilities
from deltaport.protocol.hints import parse_json_predicate, parse_sql_predicates
from deltaport.protocol.requests import (
    QueryRequest,
    parse_bool_param,
    parse_max_results,
    parse_version_param,
)
from deltaport.server.columnar_lines import ColumnarLines
from deltaport.server.config import ServerConfig
from deltaport.server.file_keys import KeyingPool
from deltaport.server.registry import Principal, Registry, SharedTable
from deltaport.server.tokens import TokenBinding, TokenCodec, params_checksum
from deltaport.server.translate import FileLineMaker, choose_format, header_lines
from deltaport.signing.local import LocalFileSigner


@dataclass
class Reply:
    """What an endpoint answers: JSON or an NDJSON stream, with headers."""

    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    stream: Iterator[bytes | memoryview] | None = None
    status: int = 200


SignerFactory = Callable[[SharedTable, str], Any]  # (table, request base URL) -> UrlSigner


def parse_fileidhash(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v not in (PARQUET, DELTA):
        raise InvalidParameter(f"Unsupported fileidhash: '{value}'. Supported: parquet, delta")
    return v


def _history_error(st: SharedTable) -> InvalidParameter:
    return InvalidParameter(
        "Reading table by version or timestamp is not supported because history sharing "
        f"is not enabled on table: {st.full_name}"
    )


def _binding(who: Principal, st: SharedTable) -> TokenBinding:
    """What a table's page and refresh tokens are bound to: the recipient and the table."""
    return TokenBinding(who.name, st.full_name.lower(), st.config.id)


def _timestamp_ms(value: str, name: str) -> int:
    try:
        if ":" not in value:  # a date alone names no instant
            raise ValueError(value)
        return parse_timestamp(value)
    except (ValueError, TypeError):
        raise InvalidParameter(
            f"Invalid {name}: {value!r} is not an ISO-8601 timestamp with a zone, e.g. 2024-05-01T00:00:00Z"
        ) from None


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
    ) -> None:
        self.config = config
        self.cache = cache
        self.codec = codec
        self.clock = clock
        self.registry = Registry(config, codec)
        self.signer_factory = signer_factory
        self.columnar = ColumnarLines(pool=keying)

    def principal(self, authorization: str | None) -> Principal:
        return self.registry.authenticate(authorization, int(self.clock() * 1000))

    # --- listing ----------------------------------------------------------------------------

    def list_shares(self, who: Principal, max_results: str | None, page_token: str | None) -> Reply:
        shares = self.registry.shares(who)
        page, token = self.registry.paginate(who, "shares", shares, parse_max_results(max_results), page_token)
        items = [{"name": s.name, **({"id": s.id} if s.id else {})} for s in page]
        return Reply(json={"items": items, **({"nextPageToken": token} if token else {})})

    def get_share(self, who: Principal, share: str) -> Reply:
        s = self.registry.share(who, share)
        return Reply(json={"share": {"name": s.name, **({"id": s.id} if s.id else {})}})

    def list_schemas(self, who: Principal, share: str, max_results: str | None, page_token: str | None) -> Reply:
        s = self.registry.share(who, share)
        page, token = self.registry.paginate(
            who, f"schemas:{s.name}", list(s.schemas), parse_max_results(max_results), page_token
        )
        return Reply(
            json={
                "items": [{"name": sc.name, "share": s.name} for sc in page],
                **({"nextPageToken": token} if token else {}),
            }
        )

    def _table_item(self, share, schema, table) -> dict[str, Any]:
        item = {"name": table.name, "schema": schema.name, "share": share.name}
        if table.id:
            item["id"] = table.id
        if share.id:
            item["shareId"] = share.id
        return item

    def list_tables(
        self, who: Principal, share: str, schema: str, max_results: str | None, page_token: str | None
    ) -> Reply:
        s, sc = self.registry.schema(who, share, schema)
        page, token = self.registry.paginate(
            who, f"tables:{s.name}:{sc.name}", list(sc.tables), parse_max_results(max_results), page_token
        )
        return Reply(
            json={"items": [self._table_item(s, sc, t) for t in page], **({"nextPageToken": token} if token else {})}
        )

    def list_all_tables(self, who: Principal, share: str, max_results: str | None, page_token: str | None) -> Reply:
        s = self.registry.share(who, share)
        all_items = [(sc, t) for sc in s.schemas for t in sc.tables]
        page, token = self.registry.paginate(
            who, f"all-tables:{s.name}", all_items, parse_max_results(max_results), page_token
        )
        return Reply(
            json={
                "items": [self._table_item(s, sc, t) for sc, t in page],
                **({"nextPageToken": token} if token else {}),
            }
        )

    # --- table version and metadata ---------------------------------------------------------

    def _delta(self, st: SharedTable) -> DeltaTable:
        return st.delta(self.cache)

    def _check_start_version(self, st: SharedTable, version: int, what: str = "data") -> None:
        if version < st.config.start_version:
            raise InvalidParameter(f"You can only query table {what} since version {st.config.start_version}.")

    def table_version(
        self, who: Principal, share: str, schema: str, table: str, starting_timestamp: str | None
    ) -> Reply:
        st = self.registry.table(who, share, schema, table)
        dt = self._delta(st)
        if starting_timestamp is None:
            version = dt.latest_version()
        else:
            if not st.config.history_shared:
                raise _history_error(st)
            ts = _timestamp_ms(starting_timestamp, "startingTimestamp")
            version = dt.history().version_at_or_after(ts)
            self._check_start_version(st, version)
        return Reply(headers={lines.VERSION_HEADER: str(version)})

    def _snapshot(self, st: SharedTable, version: int | None, timestamp: str | None) -> Snapshot:
        if (version is not None or timestamp is not None) and not st.config.history_shared:
            raise _history_error(st)
        dt = self._delta(st)
        if timestamp is not None:
            version = dt.history().version_at_or_before(_timestamp_ms(timestamp, "timestamp"))
        snap = dt.snapshot(version)
        self._check_start_version(st, snap.version)
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
        v = parse_version_param("version", version)
        if v is not None and timestamp is not None:
            raise InvalidParameter("Please only provide one of: version,timestamp")
        st = self.registry.table(who, share, schema, table)
        snap = self._snapshot(st, v, timestamp)
        fmt = choose_format(caps, snap.config)
        body = header_lines(
            snap.config,
            fmt,
            history_shared=st.config.history_shared,
            version=snap.version if (v is not None or timestamp is not None) else None,
            size=snap.size_in_bytes,
            num_files=snap.num_files,
        )
        return Reply(headers=self._table_headers(snap.version, caps, fmt, None), stream=iter(body))

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
        id_hash_header = parse_fileidhash(fileidhash)
        st = self.registry.table(who, share, schema, table)
        if (
            req.version is not None or req.timestamp is not None or req.starting_version is not None
        ) and not st.config.history_shared:
            raise _history_error(st)
        if req.starting_version is not None:
            return self._streaming_query(who, st, req, caps, id_hash_header, base_url)
        binding = _binding(who, st)
        checksum = params_checksum(req.checksum_params())
        pinned = None
        start = 0
        if req.page_token:
            data = self.codec.decode("page", req.page_token, binding, params=checksum)
            pinned, start = int(data["v"]), int(data["i"])
        elif req.refresh_token:
            pinned = int(self.codec.decode("refresh", req.refresh_token, binding, params=checksum)["v"])
        if pinned is not None:
            # the version a page or refresh token carries is the one this query already read: not
            # time travel, so it needs no history sharing
            snap = self._delta(st).snapshot(pinned)
            self._check_start_version(st, snap.version)
        else:
            snap = self._snapshot(st, req.version, req.timestamp)
        fmt = choose_format(caps, snap.config)
        _check_paths_inside(snap)
        result = scan(snap, self._predicate(req), req.limit_hint)
        indices = result.indices
        page_size = self._page_size(req.max_files, paged=bool(req.max_files or req.page_token))
        next_token = None
        if page_size is not None:
            if start > len(indices):
                raise InvalidParameter("The page token is out of range for this query. Please restart the query.")
            if start + page_size < len(indices):
                next_token = self.codec.encode(
                    "page",
                    binding,
                    {"v": snap.version, "i": start + page_size},
                    ttl_ms=self.config.query_table_page_token_ttl_ms,
                    params=checksum,
                )
            indices = indices.slice(start, page_size)
        refresh = None
        if req.include_refresh_token:
            refresh = self.codec.encode(
                "refresh", binding, {"v": snap.version}, ttl_ms=self.config.refresh_token_ttl_ms, params=checksum
            )
        end_stream = (
            caps.include_end_stream_action
            or req.max_files is not None
            or req.include_refresh_token
            or page_size is not None
        )
        time_travel = req.version is not None or req.timestamp is not None
        signer = self.signer_factory(st, base_url)
        head = header_lines(
            snap.config,
            fmt,
            history_shared=st.config.history_shared,
            version=snap.version if time_travel else None,
            size=snap.size_in_bytes,
            num_files=snap.num_files,
        )
        now = self.clock()
        if fmt == PARQUET and isinstance(signer, LocalFileSigner) and _plain_files(snap):
            files: Iterator[bytes | memoryview]
            files, min_expiry = self.columnar.lines(
                snap,
                indices,
                signer,
                expires_in=self.config.pre_signed_url_timeout_seconds,
                now=now,
                id_hash=id_hash_header or fmt,
                version=snap.version if time_travel else None,
            )
            expiry_ms = lambda: min_expiry  # noqa: E731
        else:
            maker = FileLineMaker(
                table_uri=snap.table_uri,
                signer=signer,
                expires_in=self.config.pre_signed_url_timeout_seconds,
                fmt=fmt,
                id_hash=id_hash_header or fmt,
                now=now,
            )
            files = maker.snapshot_lines(snap, indices, version=snap.version if time_travel else None)
            expiry_ms = lambda: maker.expiry.min_ms  # noqa: E731
        tail = (
            (
                lambda: lines.end_stream(
                    refresh_token=refresh, next_page_token=next_token, min_url_expiration_timestamp=expiry_ms()
                )
            )
            if end_stream
            else None
        )
        return Reply(
            headers=self._table_headers(snap.version, caps, fmt, id_hash_header),
            stream=_stream(head, files, tail, end_stream),
        )

    # --- streaming query and change data feed -------------------------------------------------

    def _change_plan(self, st: SharedTable, start: int, end: int | None, *, cdf: bool) -> tuple[list, int]:
        dt = self._delta(st)
        latest = dt.latest_version()
        if start > latest:
            raise InvalidParameter(
                f"Provided Start version({start}) for reading change data is invalid. Start "
                f"version cannot be greater than the latest version of the table({latest})."
            )
        if end is not None and end > latest:
            if cdf:
                end = latest  # clamped for /changes, an error for /query
            else:
                raise InvalidParameter(
                    f"Provided end version({end}) is invalid. End version cannot be greater "
                    f"than the latest version of the table({latest})."
                )
        if end is not None and end < start:
            raise InvalidParameter(
                f"CDF range from start {start} to end {end} was invalid. End cannot be before start."
            )
        return dt.changes(start, end), latest

    def _page_size(self, max_files: int | None, *, paged: bool) -> int | None:
        """Files per page: ``maxFiles`` capped by the config; a page token alone continues with the
        config's page size. None when the reply is not paged."""
        if not paged:
            return None
        limit = self.config.query_table_page_size_limit
        return min(max_files or limit, limit)

    def _paged_change_plan(
        self,
        who: Principal,
        st: SharedTable,
        start: int,
        end: int | None,
        page_token: str | None,
        checksum_params: dict[str, Any],
        *,
        cdf: bool,
    ) -> tuple[list, int, tuple[int, int]]:
        """The changes of a streaming query or /changes, where a page token resumes in them, and
        the (end, latest) versions its next page token must pin: a later page reads the range the
        first page read, whatever commits landed since."""
        begin, pinned = 0, None
        if page_token:
            binding = _binding(who, st)
            data = self.codec.decode("page", page_token, binding, params=params_checksum(checksum_params))
            begin, pinned = int(data["i"]), (int(data["e"]), int(data["l"]))
        changes, latest = self._change_plan(st, start, pinned[0] if pinned else end, cdf=cdf)
        if pinned is None:
            pinned = (latest if end is None else min(end, latest), latest)
        return changes, begin, pinned

    def _streaming_query(self, who, st, req: QueryRequest, caps, id_hash_header, base_url) -> Reply:
        assert req.starting_version is not None  # a streaming query is one with a startingVersion
        self._check_start_version(st, req.starting_version)
        changes, begin, pinned = self._paged_change_plan(
            who, st, req.starting_version, req.ending_version, req.page_token, req.checksum_params(), cdf=False
        )
        start_cfg = self._delta(st).config_at(req.starting_version)
        for c in changes:
            if c.protocol is not None and c.protocol.min_reader_version > 3:
                raise UnsupportedOperation(
                    f"Delta protocol version ({c.protocol.min_reader_version},"
                    f"{c.protocol.min_writer_version}) is too new for this server"
                )
        fmt = choose_format(caps, start_cfg)
        historical_protocol = req.include_historical_protocol and fmt == DELTA
        entries: list[tuple[str, Any, Any]] = []
        for c in changes:
            if historical_protocol and c.protocol is not None and c.version > req.starting_version:
                entries.append(("protocol", c, None))
            if c.metadata is not None and c.version > req.starting_version:
                entries.append(("metaData", c, None))
            for kind in ("add", "remove"):
                for action in c.actions(kind, data_change_only=True):
                    entries.append((kind, c, action))
        return self._change_reply(
            who,
            st,
            req.starting_version,
            start_cfg,
            fmt,
            caps,
            id_hash_header,
            base_url,
            entries,
            req.max_files,
            begin,
            pinned,
            req.checksum_params(),
            metadata_version=True,
            protocol_version=req.starting_version if historical_protocol else None,
        )

    def changes(
        self,
        who: Principal,
        share: str,
        schema: str,
        table: str,
        params: dict[str, str | None],
        capabilities: str | None,
        base_url: str,
        fileidhash: str | None = None,
    ) -> Reply:
        caps = Capabilities.parse(capabilities)
        id_hash_header = parse_fileidhash(fileidhash)
        sv = parse_version_param("startingVersion", params.get("startingVersion"))
        ev = parse_version_param("endingVersion", params.get("endingVersion"))
        st_ts, en_ts = params.get("startingTimestamp"), params.get("endingTimestamp")
        max_files = params.get("maxFiles")
        mf = None
        if max_files is not None:
            try:
                mf = int(max_files)
            except ValueError:
                raise InvalidParameter(
                    f"expected a number but the string didn't have the appropriate format: maxFiles={max_files!r}"
                ) from None
            if mf <= 0:
                raise InvalidParameter("maxFiles must be positive.")
        if sv is not None and st_ts is not None:
            raise InvalidParameter(
                "Multiple starting arguments provided for CDF read. Please provide one of "
                "either startingTimestamp or startingVersion."
            )
        if ev is not None and en_ts is not None:
            raise InvalidParameter(
                "Multiple ending arguments provided for CDF read. Please provide one of either "
                "endingTimestamp or endingVersion."
            )
        if sv is None and st_ts is None:
            raise InvalidParameter("No startingVersion or startingTimestamp provided for CDF read.")
        st = self.registry.table(who, share, schema, table)
        if not st.config.history_shared:
            raise InvalidParameter(f"cdf is not enabled on table {st.full_name}")
        dt = self._delta(st)
        try:
            if st_ts is not None:
                sv = dt.history().version_at_or_after(
                    _timestamp_ms(st_ts, "startingTimestamp"), allow_before_earliest=False
                )
            if en_ts is not None:
                ev = dt.history().version_at_or_before(_timestamp_ms(en_ts, "endingTimestamp"), allow_after_latest=True)
        except TimestampOutOfRange as exc:
            raise InvalidParameter(str(exc)) from None
        assert sv is not None  # given, or resolved from startingTimestamp above
        self._check_start_version(st, sv, "changes")
        historical = parse_bool_param(params.get("includeHistoricalMetadata"))
        asked_protocol = parse_bool_param(params.get("includeHistoricalProtocol"))
        checksum = {
            "startingVersion": sv,
            "endingVersion": ev,
            "startingTimestamp": st_ts,
            "endingTimestamp": en_ts,
            "includeHistoricalMetadata": historical,
            "includeHistoricalProtocol": asked_protocol,
        }
        changes, begin, pinned = self._paged_change_plan(who, st, sv, ev, params.get("pageToken"), checksum, cdf=True)
        latest = pinned[1]
        end = changes[-1].version if changes else sv
        start_cfg = dt.config_at(sv)
        for c in [None, *changes]:
            cfg = start_cfg if c is None else c.config
            if not cfg.change_data_feed_enabled:
                v = sv if c is None else c.version
                raise InvalidParameter(
                    f"Error getting change data for range [{sv}, {end}] as change data was not "
                    f"recorded for version [{v}]"
                )
        head_cfg = start_cfg if historical else dt.config_at(latest)
        fmt = choose_format(caps, head_cfg)
        historical_protocol = asked_protocol and fmt == DELTA
        entries: list[tuple[str, Any, Any]] = []
        for c in changes:
            if historical_protocol and c.protocol is not None and c.version > sv:
                entries.append(("protocol", c, None))
            if historical and c.metadata is not None and c.version > sv:
                entries.append(("metaData", c, None))
            if c.has_cdc:
                entries.extend(("cdc", c, a) for a in c.actions("cdc"))
            elif not _empty_merge(c):
                for kind in ("add", "remove"):
                    entries.extend((kind, c, a) for a in c.actions(kind, data_change_only=True))
        return self._change_reply(
            who,
            st,
            sv,
            head_cfg,
            fmt,
            caps,
            id_hash_header,
            base_url,
            entries,
            mf,
            begin,
            pinned,
            checksum,
            metadata_version=latest if not historical else True,
            protocol_version=sv if historical_protocol else None,
        )

    def _change_reply(
        self,
        who,
        st,
        start_version,
        head_cfg,
        fmt,
        caps,
        id_hash_header,
        base_url,
        entries,
        max_files,
        begin: int,
        pinned: tuple[int, int],
        checksum_params,
        *,
        metadata_version,
        protocol_version: int | None = None,
    ) -> Reply:
        """The response of a streaming query or /changes; ``pinned`` = (end, latest) versions its
        page tokens carry, so later pages read the same range even if the table moves on."""
        binding = _binding(who, st)
        checksum = params_checksum(checksum_params)
        if begin > len(entries):
            raise InvalidParameter("The page token is out of range for this query. Please restart the query.")
        next_token = None
        paged = max_files is not None or begin > 0
        size = self._page_size(max_files, paged=paged)
        if size is not None:
            if begin + size < len(entries):
                next_token = self.codec.encode(
                    "page",
                    binding,
                    {"i": begin + size, "e": pinned[0], "l": pinned[1]},
                    ttl_ms=self.config.query_table_page_token_ttl_ms,
                    params=checksum,
                )
            entries = entries[begin : begin + size]
        head_version = start_version if metadata_version is True else metadata_version
        head = header_lines(head_cfg, fmt, history_shared=True, version=head_version, protocol_version=protocol_version)
        maker = FileLineMaker(
            table_uri=self._delta(st).uri,
            signer=self.signer_factory(st, base_url),
            expires_in=self.config.pre_signed_url_timeout_seconds,
            fmt=fmt,
            id_hash=id_hash_header or fmt,
            now=self.clock(),
        )
        end_stream = caps.include_end_stream_action or paged

        def body() -> Iterator[bytes]:
            for kind, c, action in entries:
                if kind == "metaData":
                    yield header_lines(c.config, fmt, history_shared=True, version=c.version)[1]
                elif kind == "protocol":
                    yield header_lines(c.config, fmt, history_shared=True, protocol_version=c.version)[0]
                else:
                    yield maker.line(kind, action, version=c.version, timestamp=c.timestamp)

        tail = (
            (lambda: lines.end_stream(next_page_token=next_token, min_url_expiration_timestamp=maker.expiry.min_ms))
            if end_stream
            else None
        )
        return Reply(
            headers=self._table_headers(start_version, caps, fmt, id_hash_header),
            stream=_stream(head, body(), tail, end_stream),
        )


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


def _plain_files(snap: Snapshot) -> bool:
    """No deletion vectors and no absolute paths: the columnar line path applies."""
    return not snap.has_deletion_vectors and not snap.has_absolute_paths


def _empty_merge(change) -> bool:
    """A MERGE that changed no rows: its file actions are bookkeeping, not data changes."""
    ci = change.commit_info
    if ci is None or (ci.operation or "").upper() != "MERGE":
        return False
    m = ci.operation_metrics or {}
    keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
    return all(str(m.get(k, "")) == "0" for k in keys)


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
