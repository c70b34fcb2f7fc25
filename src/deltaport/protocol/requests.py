"""Request bodies and query parameters, validated before any work is done."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from deltaport.errors import InvalidParameter, MalformedRequest

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

_VERSION = {"type": "integer", "format": "int64", "minimum": 0, "maximum": INT64_MAX}
_TEXT = {"type": "string"}
_FLAG = {"type": "boolean"}

#: The body of ``POST .../query`` as a JSON schema: the protocol's fields, each as the server reads it
#: (numbers may also come as numeric strings; booleans as "true"/"false"). The API document declares it.
QUERY_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "QueryTableRequest",
    "additionalProperties": False,
    "properties": {
        "predicateHints": {"type": "array", "items": _TEXT},
        "jsonPredicateHints": _TEXT,
        "limitHint": _VERSION,
        "version": _VERSION,
        "timestamp": _TEXT,
        "startingVersion": _VERSION,
        "endingVersion": _VERSION,
        "maxFiles": {"type": "integer", "format": "int32", "minimum": 1, "maximum": INT32_MAX},
        "pageToken": _TEXT,
        "includeRefreshToken": _FLAG,
        "refreshToken": _TEXT,
        "includeHistoricalProtocol": _FLAG,
        "idempotencyKey": _TEXT,
    },
}

_QUERY_FIELDS = {
    *QUERY_BODY_SCHEMA["properties"],
    "idempotency_key",  # the snake-case spelling deltaport's own clients sent before
    # declared by the protocol's proto, accepted and unused
    "queryDeltaLog",
    "requested_columns",
    "requestedColumns",
}


_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")


def _whole_number(text: str) -> int:
    """The integer ``text`` spells in ASCII digits, with an optional sign and surrounding blanks.

    Python's ``int`` also reads ``1_000`` and digits of other scripts (``'٣'`` is 3): a client
    sending those means no number, so they raise ValueError like any other non-number."""
    stripped = text.strip()
    if not _WHOLE_NUMBER.fullmatch(stripped):
        raise ValueError(f"not a whole number: {text!r}")
    return int(stripped)


def _int(body: dict[str, Any], key: str, *, bits: int = 64) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise MalformedRequest(f"'{key}' must be a number, not a boolean")
    if isinstance(value, str):
        try:
            value = _whole_number(value)
        except ValueError:
            raise MalformedRequest(f"'{key}' must be a number: not a numeric value: {body[key]!r}") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise MalformedRequest(f"'{key}' must be a whole number, not {value}")
        value = int(value)
    if not isinstance(value, int):
        raise MalformedRequest(f"'{key}' must be a number, not {type(value).__name__}")
    limit = INT64_MAX if bits == 64 else INT32_MAX
    if value > limit or value < -limit - 1:
        raise MalformedRequest(f"'{key}' is out of range: it must fit in a {bits}-bit integer")
    return value


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MalformedRequest(f"'{key}' must be true or false, not {value!r}")


def _str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedRequest(f"'{key}' must be a string, not {type(value).__name__}")
    return value


@dataclass(frozen=True)
class QueryRequest:
    predicate_hints: tuple[str, ...] = ()
    json_predicate_hints: str | None = None
    limit_hint: int | None = None
    version: int | None = None
    timestamp: str | None = None
    starting_version: int | None = None
    ending_version: int | None = None
    max_files: int | None = None
    page_token: str | None = None
    include_refresh_token: bool = False
    refresh_token: str | None = None
    include_historical_protocol: bool = False
    idempotency_key: str | None = None

    @classmethod
    def parse(cls, raw: bytes) -> QueryRequest:
        if not raw or not raw.strip():
            raise MalformedRequest("the query body is empty: send a JSON object, at least {}")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise MalformedRequest(f"the query body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise MalformedRequest("the query body must be a JSON object")
        unknown = sorted(set(body) - _QUERY_FIELDS)
        if unknown:
            raise MalformedRequest(
                f"unknown field(s) {unknown} in the query body; valid fields are "
                + ", ".join(sorted(_QUERY_FIELDS - {"queryDeltaLog", "requested_columns", "requestedColumns"}))
            )
        hints = body.get("predicateHints")
        if hints is not None and (not isinstance(hints, list) or not all(isinstance(h, str) for h in hints)):
            raise MalformedRequest(
                "Expected an array for repeated field predicateHints of QueryTableRequest: "
                "'predicateHints' must be a list of strings"
            )
        req = cls(
            predicate_hints=tuple(hints or ()),
            json_predicate_hints=_str(body, "jsonPredicateHints"),
            limit_hint=_int(body, "limitHint"),
            version=_int(body, "version"),
            timestamp=_str(body, "timestamp"),
            starting_version=_int(body, "startingVersion"),
            ending_version=_int(body, "endingVersion"),
            max_files=_int(body, "maxFiles", bits=32),
            page_token=_str(body, "pageToken"),
            include_refresh_token=_bool(body, "includeRefreshToken"),
            refresh_token=_str(body, "refreshToken"),
            include_historical_protocol=_bool(body, "includeHistoricalProtocol"),
            idempotency_key=_str(body, "idempotencyKey") or _str(body, "idempotency_key"),
        )
        req.validate()
        return req

    def validate(self) -> None:
        given = [
            k
            for k, v in (
                ("version", self.version),
                ("timestamp", self.timestamp),
                ("startingVersion", self.starting_version),
            )
            if v is not None
        ]
        if len(given) > 1:
            raise InvalidParameter("Please only provide one of: version,timestamp,startingVersion")
        if self.version is not None and self.version < 0:
            raise InvalidParameter("table version cannot be negative.")
        if self.starting_version is not None and self.starting_version < 0:
            raise InvalidParameter("startingVersion cannot be negative.")
        if self.ending_version is not None and self.ending_version < 0:
            raise InvalidParameter("endingVersion cannot be negative.")
        if self.limit_hint is not None and self.limit_hint < 0:
            raise InvalidParameter("limitHint cannot be negative.")
        if self.max_files is not None and self.max_files <= 0:
            raise InvalidParameter("maxFiles must be positive.")
        specific = self.specific_version
        if self.include_refresh_token and specific:
            raise InvalidParameter("includeRefreshToken cannot be used when querying a specific version.")
        if self.include_refresh_token and self.page_token:
            raise InvalidParameter("includeRefreshToken must be used in the first page request.")
        if self.refresh_token and specific:
            raise InvalidParameter("refreshToken cannot be used when querying a specific version.")
        if self.refresh_token and self.page_token:
            raise InvalidParameter("refreshToken must be used in the first page request.")
        if (
            self.starting_version is not None
            and self.ending_version is not None
            and self.starting_version > self.ending_version
        ):
            raise InvalidParameter(
                f"startingVersion({self.starting_version}) must be smaller than or equal to "
                f"endingVersion({self.ending_version})."
            )

    def to_body(self) -> bytes:
        """The JSON body a client sends: only the fields that are set (``{}`` when none are)."""
        pairs = (
            ("predicateHints", list(self.predicate_hints) or None),
            ("jsonPredicateHints", self.json_predicate_hints),
            ("limitHint", self.limit_hint),
            ("version", self.version),
            ("timestamp", self.timestamp),
            ("startingVersion", self.starting_version),
            ("endingVersion", self.ending_version),
            ("maxFiles", self.max_files),
            ("pageToken", self.page_token),
            ("includeRefreshToken", self.include_refresh_token or None),
            ("refreshToken", self.refresh_token),
            ("includeHistoricalProtocol", self.include_historical_protocol or None),
            ("idempotencyKey", self.idempotency_key),
        )
        return orjson.dumps({k: v for k, v in pairs if v is not None})

    @property
    def specific_version(self) -> bool:
        """A version, timestamp or starting version was asked for (not the latest snapshot)."""
        return self.version is not None or self.timestamp is not None or self.starting_version is not None

    def checksum_params(self) -> dict[str, Any]:
        """The parameters a later page must repeat (maxFiles may change between pages)."""
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "startingVersion": self.starting_version,
            "endingVersion": self.ending_version,
            "predicateHints": list(self.predicate_hints),
            "jsonPredicateHints": self.json_predicate_hints,
            "limitHint": self.limit_hint,
            "includeHistoricalProtocol": self.include_historical_protocol,
        }


@dataclass(frozen=True)
class ChangesRequest:
    """The query parameters of ``GET .../changes``, validated."""

    starting_version: int | None = None
    ending_version: int | None = None
    starting_timestamp: str | None = None
    ending_timestamp: str | None = None
    include_historical_metadata: bool = False
    include_historical_protocol: bool = False
    max_files: int | None = None
    page_token: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str | None]) -> ChangesRequest:
        req = cls(
            starting_version=parse_version_param("startingVersion", params.get("startingVersion")),
            ending_version=parse_version_param("endingVersion", params.get("endingVersion")),
            starting_timestamp=params.get("startingTimestamp"),
            ending_timestamp=params.get("endingTimestamp"),
            include_historical_metadata=parse_bool_param(params.get("includeHistoricalMetadata")),
            include_historical_protocol=parse_bool_param(params.get("includeHistoricalProtocol")),
            max_files=_positive_param("maxFiles", params.get("maxFiles")),
            page_token=params.get("pageToken"),
        )
        req.validate()
        return req

    def validate(self) -> None:
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise InvalidParameter(
                "Multiple starting arguments provided for CDF read. Please provide one of "
                "either startingTimestamp or startingVersion."
            )
        if self.ending_version is not None and self.ending_timestamp is not None:
            raise InvalidParameter(
                "Multiple ending arguments provided for CDF read. Please provide one of either "
                "endingTimestamp or endingVersion."
            )
        if self.starting_version is None and self.starting_timestamp is None:
            raise InvalidParameter("No startingVersion or startingTimestamp provided for CDF read.")
        for name, value in (("startingTimestamp", self.starting_timestamp), ("endingTimestamp", self.ending_timestamp)):
            if value is not None and not value.strip():
                raise InvalidParameter(
                    f"Invalid {name}: it is empty; give an ISO-8601 timestamp with a zone, e.g. "
                    f"2024-05-01T00:00:00Z, or leave {name} out"
                )

    def checksum_params(self, starting_version: int) -> dict[str, Any]:
        """The parameters a later page must repeat, with the starting version the first page
        resolved (maxFiles may change between pages)."""
        return {
            "startingVersion": starting_version,
            "endingVersion": self.ending_version,
            "startingTimestamp": self.starting_timestamp,
            "endingTimestamp": self.ending_timestamp,
            "includeHistoricalMetadata": self.include_historical_metadata,
            "includeHistoricalProtocol": self.include_historical_protocol,
        }


def _positive_param(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = _whole_number(value)
    except ValueError:
        raise InvalidParameter(
            f"expected a number but the string didn't have the appropriate format: {name}={value!r}"
        ) from None
    if number <= 0:
        raise InvalidParameter(f"{name} must be positive.")
    return number


def parse_version_param(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = _whole_number(value)
    except ValueError:
        raise InvalidParameter(f"{name} is not a valid number.") from None
    if number > INT64_MAX:  # does not fit a long: the reference cannot parse it either
        raise InvalidParameter(f"{name} is not a valid number.")
    if number < 0:
        # the reference server's texts: /metadata's "version", and the body fields' "startingVersion ..."
        raise InvalidParameter("version cannot be negative" if name == "version" else f"{name} cannot be negative.")
    return number


def parse_bool_param(value: str | None) -> bool:
    """Lenient, as the reference: 'true' in any case is true, anything else false."""
    return value is not None and value.strip().lower() == "true"


def parse_max_results(value: str | None) -> int:
    if value is None:
        return 500
    try:
        number = _whole_number(value)
    except ValueError:
        raise InvalidParameter(
            f"expected a number but the string didn't have the appropriate format: maxResults={value!r}"
        ) from None
    if not 0 <= number <= 500:
        raise InvalidParameter("Acceptable values of 'maxResults' are 0 to 500, inclusive. (Default: 500)")
    return number
