"""What the sharing service's endpoints answer and share: a :class:`Reply`, how a table request is
to be answered (:class:`Answer`), the body of a table response (:func:`stream_body`), and the
parameters and bindings the snapshot query and the change feed read alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from deltaport.delta.history import to_epoch_ms
from deltaport.errors import DeltaportError, InvalidParameter, public_message
from deltaport.protocol import lines
from deltaport.protocol.capabilities import DELTA, PARQUET, Capabilities
from deltaport.server.ops.request_info import FilesServed
from deltaport.server.sharing.registry import Principal, SharedTable
from deltaport.server.sharing.tokens import TokenBinding


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


def binding(who: Principal, shared: SharedTable) -> TokenBinding:
    """What a table's page and refresh tokens are bound to: the recipient and the table."""
    return TokenBinding(who.name, shared.full_name.lower(), shared.config.id)


def page_out_of_range() -> InvalidParameter:
    """A page token that names no page of its query (the reference server's text)."""
    return InvalidParameter("The page token is out of range for this query. Please restart the query.")


def timestamp_ms(value: str, name: str) -> int:
    try:
        if ":" not in value:  # a date alone names no instant
            raise ValueError(value)
        return to_epoch_ms(value)
    except (ValueError, TypeError):
        raise InvalidParameter(
            f"Invalid {name}: {value!r} is not an ISO-8601 timestamp with a zone, e.g. 2024-05-01T00:00:00Z"
        ) from None


@dataclass(frozen=True)
class Answer:
    """How a table request is to be answered: to whom, the client's capabilities, the ``fileidhash``
    it asked for, and the base URL its file URLs are made under."""

    who: Principal
    caps: Capabilities
    id_hash: str | None
    base_url: str


def stream_body(
    head: list[bytes], files: Iterator[bytes | memoryview], tail: Callable[[], bytes] | None, end_stream: bool
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
