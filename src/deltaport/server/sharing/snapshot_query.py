"""POST …/query without a starting version: the files of one version of a table, paged.

A table read whole (a cached :class:`~deltaport.delta.Snapshot`) is scanned at once and paged by
the index of its files; a table whose checkpoint holds ``streamAboveFiles`` files or more is read
a piece at a time (streamed_query.py) and paged by the place of its files. Both list the same
files in the same order and answer with the same lines; only the page tokens differ, and each
kind of token resumes the kind of query that issued it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from deltaport.delta import DeltaTable, Snapshot
from deltaport.delta.replay import ABSOLUTE_PATH
from deltaport.delta.scan import scan
from deltaport.delta.streamed import Place, StreamedSnapshot
from deltaport.errors import InvalidParameter, UnsupportedOperation
from deltaport.expressions import And
from deltaport.protocol import lines
from deltaport.protocol.hints import parse_json_predicate, parse_sql_predicates
from deltaport.protocol.requests import QueryRequest
from deltaport.server.ops.request_info import FilesServed
from deltaport.server.sharing.answers import Answer, Reply, binding, page_out_of_range, stream_body, timestamp_ms
from deltaport.server.sharing.registry import Principal, SharedTable
from deltaport.server.sharing.streamed_query import (
    Cursors,
    StreamedFiles,
    StreamedPlan,
    counted_lines,
    declared_size,
    keep_files,
    place_of,
    token_data,
)
from deltaport.server.sharing.tokens import TokenBinding, params_checksum
from deltaport.server.sharing.translate import FileLineMaker, choose_format, header_lines

if TYPE_CHECKING:
    from deltaport.server.sharing.service import SharingService

Table = Snapshot | StreamedSnapshot

#: A checkpoint size no table reaches: the table is read whole (a page token of a whole read).
_NEVER = 1 << 62


def history_error(shared: SharedTable) -> InvalidParameter:
    return InvalidParameter(
        "Reading table by version or timestamp is not supported because history sharing "
        f"is not enabled on table: {shared.full_name}"
    )


@dataclass
class _Listed:
    """A query's files as its response lists them: the lines, the token of the next page (asked
    once the lines are sent), the files handed out (None: noted on the request as they are sent),
    and the table's size and file count for the metadata line (None: not told)."""

    lines: Iterator[Any]
    next_page_token: Callable[[], str | None]
    served: FilesServed | None
    size: int | None
    num_files: int | None


@dataclass(frozen=True)
class _Query:
    """One snapshot query, planned: whose, of what, and how its files are listed."""

    who: Principal
    shared: SharedTable
    req: QueryRequest
    bound: TokenBinding
    checksum: str
    page_size: int | None
    maker: FileLineMaker
    version: int | None  # the version its lines name (time travel), else None


class SnapshotQueries:
    """The snapshot queries of a :class:`~deltaport.server.sharing.service.SharingService`."""

    def __init__(self, service: SharingService) -> None:
        self.service = service
        self.cursors = Cursors()

    def reply(
        self, who: Principal, shared: SharedTable, req: QueryRequest, answer: Answer, pinned: int | None
    ) -> Reply:
        """The query's reply; at version ``pinned`` (an asynchronous query's) when given."""
        service = self.service
        bound, checksum = binding(who, shared), params_checksum(req.checksum_params())
        table, start = self._table(shared, req, bound, checksum, pinned)
        fmt = choose_format(answer.caps, table.config)
        query = _Query(
            who,
            shared,
            req,
            bound,
            checksum,
            service.page_size(req.max_files, paged=bool(req.max_files or req.page_token)),
            service.line_maker(shared, answer, fmt, table.table_uri),
            table.version if (req.version is not None or req.timestamp is not None) else None,
        )
        if isinstance(table, StreamedSnapshot):
            listed = self._streamed(query, table, start)
        else:
            listed = self._whole(query, table, start)
        return self._reply(query, table, fmt, answer, listed)

    def plan(self, who: Principal, shared: SharedTable, req: QueryRequest) -> int:
        """The version a query reads, its table loaded and checked as the query's would be."""
        table, _ = self._table(shared, req, binding(who, shared), params_checksum(req.checksum_params()))
        if isinstance(table, Snapshot):
            check_paths_inside(table)
        return table.version

    def _reply(self, query: _Query, table: Table, fmt: str, answer: Answer, listed: _Listed) -> Reply:
        service, req, maker = self.service, query.req, query.maker
        refresh = None
        if req.include_refresh_token:
            ttl_ms = service.config.refresh_token_ttl_ms
            refresh = service.codec.encode(
                "refresh", query.bound, {"v": table.version}, ttl_ms=ttl_ms, params=query.checksum
            )
        end_stream = answer.caps.include_end_stream_action or req.include_refresh_token or query.page_size is not None
        head = header_lines(
            table.config,
            fmt,
            history_shared=query.shared.config.history_shared,
            version=query.version,
            size=listed.size,
            num_files=listed.num_files,
            placement=service.directory.placement(query.shared),
        )
        tail = None
        if end_stream:
            tail = lambda: lines.end_stream(  # noqa: E731
                refresh_token=refresh,
                next_page_token=listed.next_page_token(),
                min_url_expiration_timestamp=maker.expiry.min_ms,
            )
        headers = service.table_headers(table.version, answer.caps, fmt, answer.id_hash)
        return Reply(headers=headers, stream=stream_body(head, listed.lines, tail, end_stream), served=listed.served)

    # --- the two ways to list ---------------------------------------------------------------

    def _whole(self, query: _Query, snap: Snapshot, start: Any) -> _Listed:
        if not isinstance(start, int):
            raise page_out_of_range()
        check_paths_inside(snap)
        within = _slice_mask(query)
        whole = within is None
        mask = within(snap) if within is not None else None
        indices = scan(snap, self.predicate(query.req), query.req.limit_hint, within=mask).indices
        next_token = None
        if query.page_size is not None:
            if start > len(indices):
                raise page_out_of_range()
            if start + query.page_size < len(indices):
                next_token = self._page_token(query, {"v": snap.version, "i": start + query.page_size})
            indices = indices.slice(start, query.page_size)
        files = query.maker.snapshot_lines(snap, indices, version=query.version)
        served = FilesServed(query.shared.share.name, len(indices), declared_size(snap, indices))
        return _Listed(
            files,
            lambda: next_token,
            served,
            snap.size_in_bytes if whole else None,  # a slice's recipient learns nothing of the rest
            snap.num_files if whole else None,
        )

    def _streamed(self, query: _Query, stream: StreamedSnapshot, start: Any) -> _Listed:
        place, owed = (Place(0, 0), query.req.limit_hint) if isinstance(start, int) else start
        if isinstance(start, int) and start:
            raise page_out_of_range()
        plan = StreamedPlan(place, keep_files(self.predicate(query.req), _slice_mask(query)), owed, query.page_size)
        files = StreamedFiles(stream, plan, check_paths_inside, self.cursors)

        def next_token() -> str | None:
            resume = files.resume()
            return None if resume is None else self._page_token(query, token_data(stream.version, *resume))

        def render(snap: Snapshot, indices: Any) -> Iterator[Any]:
            return query.maker.snapshot_lines(snap, indices, version=query.version)

        return _Listed(counted_lines(files.pieces(), render, query.shared.share.name), next_token, None, None, None)

    def _page_token(self, query: _Query, data: dict[str, Any]) -> str:
        ttl_ms = self.service.config.query_table_page_token_ttl_ms
        return self.service.codec.encode("page", query.bound, data, ttl_ms=ttl_ms, params=query.checksum)

    # --- which table, from where ------------------------------------------------------------

    def _table(
        self, shared: SharedTable, req: QueryRequest, bound: TokenBinding, checksum: str, pinned: int | None = None
    ) -> tuple[Table, int | tuple[Place, int | None]]:
        """The table a query reads and where its files start: the version a page or refresh token
        pins (the one the query already read: not time travel, so it needs no history sharing),
        else ``pinned``, else the version or timestamp asked for, else the latest. A page token
        of a streamed query resumes a streamed one."""
        service = self.service
        start: int | tuple[Place, int | None] = 0
        above = service.config.stream_above_files
        if req.page_token:
            data = service.codec.decode("page", req.page_token, bound, params=checksum)
            pinned = int(data["v"])
            start, above = (place_of(data), 0) if "p" in data else (int(data.get("i", 0)), _NEVER)
        elif req.refresh_token:
            pinned = int(service.codec.decode("refresh", req.refresh_token, bound, params=checksum)["v"])
        if pinned is None:
            return self.latest_or_asked(shared, req.version, req.timestamp, above), start
        table = service.delta(shared).streamed(pinned, above=above, cached=above != 0)
        service.check_start_version(shared, table.version)
        return table, start

    def latest_or_asked(
        self, shared: SharedTable, version: int | None, timestamp: str | None, above: int | None = None
    ) -> Table:
        """The table at the version or timestamp asked for, else the latest (streamed when its
        checkpoint holds ``above`` files or more; default: the config's ``streamAboveFiles``)."""
        service = self.service
        if (version is not None or timestamp is not None) and not shared.config.history_shared:
            raise history_error(shared)
        delta_table: DeltaTable = service.delta(shared)
        if timestamp is not None:
            version = delta_table.history().version_at_or_before(timestamp_ms(timestamp, "timestamp"))
        above = service.config.stream_above_files if above is None else above
        table = delta_table.streamed(version, above=above)
        service.check_start_version(shared, table.version)
        return table

    def predicate(self, req: QueryRequest) -> Any:
        config = self.service.config
        parts = []
        if req.json_predicate_hints and config.evaluate_json_predicate_hints:
            expr = parse_json_predicate(req.json_predicate_hints)
            if expr is not None:
                parts.append(expr)
        if req.predicate_hints and config.evaluate_predicate_hints:
            expr = parse_sql_predicates(list(req.predicate_hints))
            if expr is not None:
                parts.append(expr)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else And(tuple(parts))


def _slice_mask(query: _Query) -> Callable[[Snapshot], Any] | None:
    """Which of a snapshot's files lie in the querying recipient's slice; None when the recipient
    reads the whole table."""
    part = query.shared.slice(query.who)
    if part is None:
        return None
    return lambda snap: part.mask_of_struct(snap.config, snap.live.column("partitionValues"))


def check_paths_inside(snap: Snapshot) -> None:
    """Refuse, before its files are listed, a snapshot naming data or deletion-vector files outside
    its table's root."""
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
