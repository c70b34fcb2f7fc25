"""The audit log read back: ``GET /audit-events``, the catalog database's audit events oldest first,
filtered and paged.

Query parameters: ``start_time`` and ``end_time`` (epoch ms; the time range is [start, end)),
``principal``, ``action`` (matched exactly), ``share`` (matched without regard to case),
``max_results`` (1 to PAGE_LIMIT, default PAGE_LIMIT) and ``page_token``. A page token is signed
and carries only the id of the last event of its page; it is bound to the listing's filters, so it
cannot be replayed against other filters or forged to skip ahead. An event is rendered with the
fields the catalog keeps (never a token: see :class:`AuditEvent`), absent values left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from fastapi import APIRouter, Query

from deltaport.catalog.model import AuditEvent
from deltaport.errors import InvalidParameter
from deltaport.server.admin.parts import PAGE_LIMIT, AdminParts, with_token
from deltaport.server.sharing.tokens import TokenBinding, params_checksum

_BINDING = TokenBinding("admin", "admin:audit")
_TOKEN_TTL_MS = 86_400_000


def audit_event_json(event: AuditEvent) -> dict[str, Any]:
    """One event as the admin API shows it: snake_case keys, time in epoch ms, absent values and an
    empty ``detail`` left out."""
    body = {
        "time": event.time,
        "request_id": event.request_id,
        "principal": event.principal,
        "action": event.action,
        "status": event.status,
        "client_ip": event.client_ip,
        "user_agent": event.user_agent,
        "share": event.share,
        "schema": event.schema,
        "table": event.table,
        "version": event.version,
        "files": event.files,
        "bytes": event.bytes,
        "duration_ms": event.duration_ms,
        "detail": dict(event.detail) if event.detail else None,
    }
    return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True)
class AuditQuery:
    """The filters of one listing, checked. A page token is bound to exactly these."""

    start_time: int | None
    end_time: int | None
    principal: str | None
    action: str | None
    share: str | None

    @classmethod
    def parse(
        cls,
        start_time: str | None,
        end_time: str | None,
        principal: str | None,
        action: str | None,
        share: str | None,
    ) -> AuditQuery:
        start, end = _epoch_ms("start_time", start_time), _epoch_ms("end_time", end_time)
        if start is not None and end is not None and end < start:
            raise InvalidParameter(
                f"end_time ({end}) is before start_time ({start}): give an end_time at or after start_time "
                "(the range is [start_time, end_time) in epoch milliseconds)"
            )
        return cls(start, end, _text("principal", principal), _text("action", action), _text("share", share))

    def checksum(self) -> str:
        return params_checksum(
            {"s": self.start_time, "e": self.end_time, "p": self.principal, "a": self.action, "h": self.share}
        )


#: The last millisecond of the year 9999: the latest time a filter may name.
MAX_TIME_MS = 253_402_300_799_999


def _epoch_ms(name: str, text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidParameter(
            f"{name} must be a time in epoch milliseconds (an integer such as 1700000000000), not {text[:40]!r}"
        ) from None
    if not 0 <= value <= MAX_TIME_MS:
        raise InvalidParameter(f"{name} must be epoch milliseconds from 0 to {MAX_TIME_MS}, not {text[:40]!r}")
    return value


def _text(name: str, value: str | None) -> str | None:
    """A name to match, or None for none: no control characters (a database may refuse them)."""
    if not value:
        return None
    if len(value) > 1024 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidParameter(f"{name} must be a name of at most 1024 characters without control characters")
    return value


def _max_results(text: str | None) -> int:
    if text is None or text == "":
        return PAGE_LIMIT
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= PAGE_LIMIT:
        raise InvalidParameter(
            f"max_results must be an integer from 1 to {PAGE_LIMIT}, not {text[:40]!r}: "
            "leave it out for pages of the largest size"
        )
    return value


def _after_id(parts: AdminParts, page_token: str | None, query: AuditQuery) -> int | None:
    """The id of the last event the page token's page showed, once its signature, expiry and
    filters check."""
    if not page_token:
        return None
    try:
        after = parts.codec.decode("list", page_token, _BINDING, params=query.checksum()).get("a")
    except InvalidParameter:
        after = None
    if not isinstance(after, int) or isinstance(after, bool):
        raise InvalidParameter(
            "page_token is not a next_page_token this server issued for these filters, or it has expired "
            "(they last a day): send the next_page_token of the previous page with the same filters, "
            "or start again without page_token"
        )
    return after


def add_audit_routes(router: APIRouter, parts: AdminParts, admin: Any) -> None:
    @router.get("/audit-events", dependencies=[admin])
    def list_audit_events(
        start_time: Optional[str] = Query(None, description="Epoch ms: events at or after this time"),
        end_time: Optional[str] = Query(None, description="Epoch ms: events before this time"),
        principal: Optional[str] = Query(None, description="A recipient's name, admin, anonymous or unauthenticated"),
        action: Optional[str] = Query(None, description="e.g. queryTable, downloadFile, createShare"),
        share: Optional[str] = Query(None, description="A share's name (any case)"),
        max_results: Optional[str] = Query(None, description=f"1 to {PAGE_LIMIT} (default {PAGE_LIMIT})"),
        page_token: Optional[str] = Query(None, description="The next_page_token of the previous page"),
    ) -> dict:
        """Audit events oldest first, filtered; ``next_page_token`` is given while more remain."""
        query = AuditQuery.parse(start_time, end_time, principal, action, share)
        limit = _max_results(max_results)
        after = _after_id(parts, page_token, query)
        found = parts.catalog.audit_events(
            since_ms=query.start_time,
            until_ms=query.end_time,
            principal=query.principal,
            action=query.action,
            share=query.share,
            after_id=after,
            limit=limit + 1,  # one more tells whether another page follows
        )
        page = found[:limit]
        token = None
        if len(found) > limit:
            token = parts.codec.encode(
                "list", _BINDING, {"a": page[-1][0]}, ttl_ms=_TOKEN_TTL_MS, params=query.checksum()
            )
        return with_token({"events": [audit_event_json(event) for _, event in page]}, token)
