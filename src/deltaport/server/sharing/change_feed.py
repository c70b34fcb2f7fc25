"""The change data feed and streaming queries: a change range of the engine's
:class:`~deltaport.delta.table_changes.TableChanges`, read from a page token's position (commit
version, entry in it), one page at a time, rendered as the protocol's lines.

The engine owns what a commit's changes are and whether the feed was recorded; this module chooses
a commit's entries for the response (protocol and metaData lines when asked for, the recipient's
slice), pages them and makes the page tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from deltaport.delta import CommitChanges, TableConfig
from deltaport.delta.table_changes import TableChanges
from deltaport.errors import InvalidParameter, TimestampOutOfRange
from deltaport.protocol import lines
from deltaport.protocol.capabilities import DELTA
from deltaport.protocol.requests import ChangesRequest, QueryRequest
from deltaport.server.ops.request_info import FilesServed, current_request
from deltaport.server.sharing.answers import Answer, Reply, binding, page_out_of_range, stream_body, timestamp_ms
from deltaport.server.sharing.registry import Principal, SharedTable
from deltaport.server.sharing.slices import Slice
from deltaport.server.sharing.tokens import params_checksum
from deltaport.server.sharing.translate import FileLineMaker, choose_format, header_lines

if TYPE_CHECKING:
    from deltaport.server.sharing.service import SharingService


class ChangeFeed:
    """The change responses of ``service``'s tables."""

    def __init__(self, service: SharingService) -> None:
        self.service = service

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
            data = self.service.codec.decode("page", page_token, binding(who, shared), params=checksum)
            position, pinned = _token_position(data, start)
        resume = None if position is None else position[0]
        changes = TableChanges.try_new(
            self.service.delta(shared), start, pinned[0] if pinned else end, change_data=cdf, resume=resume
        )
        if position is not None and position[0] > changes.end:
            raise page_out_of_range()
        return changes, position, pinned or (changes.end, changes.latest)

    def streaming_query(self, who: Principal, shared: SharedTable, req: QueryRequest, answer: Answer) -> Reply:
        start = req.starting_version
        assert start is not None  # a streaming query is one with a startingVersion
        self.service.check_start_version(shared, start)
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

    def changes(self, who: Principal, shared: SharedTable, params: Mapping[str, str | None], answer: Answer) -> Reply:
        """GET /changes of ``shared``: its change data feed over the asked range, from a page token's position."""
        req = ChangesRequest.parse(params)
        if not shared.config.history_shared:
            raise InvalidParameter(f"cdf is not enabled on table {shared.full_name}")
        start, end = self._change_versions(shared, req)
        self.service.check_start_version(shared, start, "changes")
        checksum = params_checksum(req.checksum_params(start))
        changes, position, pinned = self._change_range(who, shared, start, end, req.page_token, checksum, cdf=True)
        historical = req.include_historical_metadata
        head_config = changes.start_config if historical else self.service.delta(shared).config_at(pinned[1])
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
        history = self.service.delta(shared).history() if asks_time else None
        try:
            if req.starting_timestamp is not None:
                assert history is not None
                when = timestamp_ms(req.starting_timestamp, "startingTimestamp")
                start = history.version_at_or_after(when, allow_before_earliest=False)
            if req.ending_timestamp is not None:
                assert history is not None
                when = timestamp_ms(req.ending_timestamp, "endingTimestamp")
                end = history.version_at_or_before(when, allow_after_latest=True)
        except TimestampOutOfRange as exc:
            raise InvalidParameter(str(exc)) from None
        assert start is not None  # given, or resolved from startingTimestamp above
        return start, end

    def _change_reply(
        self, who: Principal, shared: SharedTable, plan: _ChangePlan, answer: Answer, max_files: int | None
    ) -> Reply:
        """The response of a streaming query or /changes: one page of the plan's entries, read from
        its position on (a page is read and its lines made before its first byte, a body of at most
        the page size limit's lines; an unpaged reply is read while it streams)."""
        paged = max_files is not None or plan.position is not None
        size = self.service.page_size(max_files, paged=paged)
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
            placement=self.service.directory.placement(shared),
        )
        maker = self.service.line_maker(shared, answer, plan.fmt, self.service.delta(shared).uri)
        end_stream = answer.caps.include_end_stream_action or paged
        tail = None
        if end_stream:
            tail = lambda: lines.end_stream(  # noqa: E731
                next_page_token=next_token, min_url_expiration_timestamp=maker.expiry.min_ms
            )
        headers = self.service.table_headers(plan.start, answer.caps, plan.fmt, answer.id_hash)
        stream = stream_body(head, _change_lines(body, plan.fmt, maker), tail, end_stream)
        if size is not None:  # a page, its entries read already: made whole, sent without streaming
            return Reply(headers=headers, content=b"".join(stream), served=served)
        return Reply(headers=headers, stream=stream, served=served)

    def _change_token(self, who: Principal, shared: SharedTable, plan: _ChangePlan, at: _Position) -> str:
        """The page token of the page that begins at ``at``, pinning the plan's (end, latest)."""
        return self.service.codec.encode(
            "page",
            binding(who, shared),
            {"v": at[0], "i": at[1], "e": plan.pinned[0], "l": plan.pinned[1]},
            ttl_ms=self.service.config.query_table_page_token_ttl_ms,
            params=plan.checksum,
        )


#: One entry of a change response: ("protocol" | "metaData", commit, None) or (file kind, commit, action).
ChangeEntry = tuple[str, CommitChanges, Optional[dict[str, Any]]]

#: Where a change response reads from: a commit's version and the index of an entry in that commit.
_Position = tuple[int, int]


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
        raise page_out_of_range() from None
    if position[0] < start or position[1] < 0:
        raise page_out_of_range()
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
