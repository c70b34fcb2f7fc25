"""Query bodies and the capabilities header."""

from __future__ import annotations

import pytest

from deltaport.errors import InvalidParameter, MalformedRequest
from deltaport.protocol.capabilities import Capabilities
from deltaport.protocol.requests import QueryRequest, parse_max_results, parse_version_param


def test_official_client_bodies():
    assert QueryRequest.parse(b"{}") == QueryRequest()
    assert QueryRequest.parse(b'{"limitHint":1}').limit_hint == 1
    assert QueryRequest.parse(b'{"version":"3"}').version == 3  # proto3 JSON: numbers as strings
    assert QueryRequest.parse(b'{"jsonPredicateHints":"{}"}').json_predicate_hints == "{}"
    assert QueryRequest.parse(b'{"idempotencyKey":"k"}').idempotency_key == "k"
    assert QueryRequest.parse(b'{"idempotency_key":"k"}').idempotency_key == "k"  # earlier clients' spelling
    assert b'"idempotencyKey":"k"' in QueryRequest(idempotency_key="k").to_body()  # the protocol's spelling


@pytest.mark.parametrize(
    ("body", "error", "needle"),
    [
        (b"", MalformedRequest, "empty"),
        (b"{", MalformedRequest, "not valid JSON"),
        (b"[]", MalformedRequest, "JSON object"),
        (b'{"version":"x3"}', MalformedRequest, "not a numeric value"),
        (b'{"version":true}', MalformedRequest, "boolean"),
        (b'{"maxFiles":3000000000}', MalformedRequest, "32-bit"),
        (b'{"version":99999999999999999999}', MalformedRequest, "64-bit"),
        (b'{"predicateHints":"a = 1"}', MalformedRequest, "list of strings"),
        (b'{"limit":3}', MalformedRequest, "unknown field"),
        (b'{"version":1,"timestamp":"2020-01-01T00:00:00Z"}', InvalidParameter, "only provide one of"),
        (b'{"version":-1}', InvalidParameter, "^table version cannot be negative.$"),
        (b'{"maxFiles":0}', InvalidParameter, "maxFiles must be positive"),
        (b'{"maxFiles":-1}', InvalidParameter, "maxFiles must be positive"),
        (b'{"includeRefreshToken":true,"version":1}', InvalidParameter, "specific version"),
        (b'{"includeRefreshToken":true,"pageToken":"p"}', InvalidParameter, "first page"),
        (b'{"refreshToken":"r","version":1}', InvalidParameter, "specific version"),
        (b'{"startingVersion":3,"endingVersion":2}', InvalidParameter, "smaller than or equal"),
        (b'{"limitHint":-5}', InvalidParameter, "limitHint cannot be negative"),
        (b'{"includeRefreshToken":"yes"}', MalformedRequest, "true or false"),
    ],
)
def test_bad_bodies(body, error, needle):
    with pytest.raises(error, match=needle):
        QueryRequest.parse(body)


def test_query_params():
    assert parse_max_results(None) == 500
    with pytest.raises(InvalidParameter, match="0 to 500"):
        parse_max_results("501")
    with pytest.raises(InvalidParameter, match="expected a number"):
        parse_max_results("x")
    with pytest.raises(InvalidParameter, match="startingVersion is not a valid number"):
        parse_version_param("startingVersion", "abc")
    # the reference server's texts, exactly
    for name, value, message in [
        ("version", "-1", "version cannot be negative"),
        ("startingVersion", "-1", "startingVersion cannot be negative."),
        ("endingVersion", "-3", "endingVersion cannot be negative."),
        ("version", "9" * 30, "version is not a valid number."),
    ]:
        with pytest.raises(InvalidParameter) as err:
            parse_version_param(name, value)
        assert err.value.message == message
    assert parse_version_param("version", "0") == 0


def test_capabilities_header():
    c = Capabilities.parse("responseformat=delta,parquet;readerfeatures=deletionvectors,columnmapping,timestampntz")
    assert c.response_formats == ("delta", "parquet")
    assert c.has_reader_feature("deletionVectors") and not c.include_end_stream_action
    c = Capabilities.parse("ResponseFormat=Delta;IncludeEndStreamAction=true;junk;a=b=c")
    assert c.response_formats == ("delta",) and c.include_end_stream_action
    assert c.response_header("delta") == "responseformat=delta;includeendstreamaction=true"
    assert Capabilities.parse(None).response_formats == ("parquet",)
