"""Listing answers of the wrong shape are refused with MALFORMED_RESPONSE, naming the endpoint and the fault."""

from __future__ import annotations

import httpx
import orjson
import pytest
from client_support import RecordingTransport

from deltaport.client.errors import IncompleteResponse
from deltaport.client.model import Schema, Share, Table
from deltaport.client.rest import RestClient
from deltaport.client.retry import RetryPolicy

PROFILE = {"shareCredentialsVersion": 1, "endpoint": "http://sharing.test/delta-sharing", "bearerToken": "t"}

CALLS = {
    "list_shares": (lambda rest: rest.list_shares(), "GET /shares"),
    "list_schemas": (lambda rest: rest.list_schemas("s"), "GET /shares/s/schemas"),
    "list_tables": (lambda rest: rest.list_tables(Schema("d", "s")), "GET /shares/s/schemas/d/tables"),
    "list_all_tables": (lambda rest: rest.list_all_tables("s"), "GET /shares/s/all-tables"),
}

BAD_LISTINGS = [
    (b'[{"name": "a"}]', "the body is a JSON array, not an object"),
    (b'"items"', "the body is a JSON string, not an object"),
    (b'{"items": "notalist"}', "'items' is a JSON string, not an array"),
    (b'{"items": {"name": "a"}}', "'items' is a JSON object, not an array"),
    (b'{"items": [{"name": "a"}, {"id": "x"}]}', "items[1] has no string 'name'"),
    (b'{"items": [{"name": ""}]}', "items[0] has no string 'name'"),
    (b'{"items": [{"name": 7}]}', "items[0] has no string 'name'"),
    (b'{"items": ["a"]}', "items[0] is a JSON string, not an object"),
    (b'{"items": [null]}', "items[0] is a JSON null, not an object"),
    (b'{"items": [{"name": "a", "id": 5}]}', "items[0].id is a JSON number, not a string"),
    (b'{"items": [{"name": "a", "share": ["s"]}]}', "items[0].share is a JSON array, not a string"),
    (b'{"items": [], "nextPageToken": 3}', "'nextPageToken' is a JSON number, not a string"),
]


def _rest(body: bytes) -> tuple[RestClient, RecordingTransport]:
    transport = RecordingTransport(httpx.MockTransport(lambda r: httpx.Response(200, content=body)))
    return RestClient(PROFILE, transport=transport, retry=RetryPolicy(sleep=lambda s: None)), transport


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(("body", "problem"), BAD_LISTINGS)
def test_malformed_listing_is_one_line_with_the_endpoint(call, body, problem):
    invoke, what = CALLS[call]
    rest, transport = _rest(body)
    with pytest.raises(IncompleteResponse) as err:
        invoke(rest)
    text = str(err.value)
    assert err.value.error_code == "MALFORMED_RESPONSE"
    assert err.value.message == f"the answer to {what} is malformed: {problem}"
    assert text.startswith(f"MALFORMED_RESPONSE (HTTP 200 on {what}): ") and "\n" not in text
    assert "Delta Sharing protocol" in text  # names what to do
    assert len(transport.requests) == 1  # a malformed answer is not retried


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'[{"share": {"name": "s"}}]', "the body is a JSON array, not an object"),
        (b"{}", "'share' is a JSON null, not an object"),
        (b'{"share": "s"}', "'share' is a JSON string, not an object"),
        (b'{"share": {"id": "x"}}', "'share' has no string 'name'"),
        (b'{"share": {"name": "s", "id": 1}}', "'share'.id is a JSON number, not a string"),
    ],
)
def test_malformed_get_share(body, problem):
    rest, _ = _rest(body)
    with pytest.raises(IncompleteResponse) as err:
        rest.get_share("s")
    assert err.value.error_code == "MALFORMED_RESPONSE"
    assert err.value.message == f"the answer to GET /shares/s is malformed: {problem}"


def test_well_formed_listings_still_parse():
    items = [{"name": "t1", "schema": "d", "share": "s", "id": "i1", "shareId": "si"}, {"name": "t2"}]
    rest, _ = _rest(orjson.dumps({"items": items, "nextPageToken": "next"}))
    assert rest.list_shares() == ([Share("t1"), Share("t2")], "next")
    assert rest.list_schemas("s") == ([Schema("t1", "s"), Schema("t2", "s")], "next")
    tables, token = rest.list_tables(Schema("d", "s"))
    assert tables == [Table("t1", "s", "d"), Table("t2", "s", "d")] and token == "next"
    assert (tables[0].id, tables[0].share_id) == ("i1", "si")
    all_tables, _ = rest.list_all_tables("s")
    assert all_tables == [Table("t1", "s", "d"), Table("t2", "s", "")]
    empty, _ = _rest(b'{"nextPageToken": ""}')
    assert empty.list_shares() == ([], None)
    share, _ = _rest(b'{"share": {"name": "s", "id": "x"}}')
    assert share.get_share("s") == Share("s") and share.get_share("s").id == "x"


def test_a_query_id_to_a_synchronous_query_is_malformed():
    status = b'{"queryStatus": {"queryId": "q1", "status": "pending"}}\n'
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=status))
    with (
        RestClient(PROFILE, transport=transport, retry=RetryPolicy(max_retries=0)) as rest,
        pytest.raises(IncompleteResponse) as refused,
    ):
        rest.query_table("s.d.t")
    assert refused.value.error_code == "MALFORMED_RESPONSE"
    assert "not asked to run asynchronously" in str(refused.value)
