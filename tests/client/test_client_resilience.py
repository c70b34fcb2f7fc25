"""Pagination, URL refresh, retries and refusing partial results."""

from __future__ import annotations

import json
import re
import time

import httpx
import orjson
import pytest
from client_support import TOKEN, RecordingTransport, frame_rows, server_config, write_profile

import deltaport.client as ds
from deltaport.client.errors import ConnectionFailed, IncompleteResponse, SharingServerError
from deltaport.client.retry import RetryPolicy
from deltaport.server import create_app, parse_config

pytest_plugins = ["client_fixtures"]

FAST = RetryPolicy(initial_backoff=0.001, max_backoff=0.01)


def _is_query(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/query")


def _is_file(request: httpx.Request) -> bool:
    return "/files/" in request.url.path


def _bodies(recording: RecordingTransport) -> list[dict]:
    return [orjson.loads(r.content) for r in recording.requests if _is_query(r)]


def _real(recording: RecordingTransport, request: httpx.Request) -> tuple[httpx.Response, list[bytes]]:
    response = recording.inner.handle_request(request)
    body = b"".join(response.stream)
    return response, [line for line in body.split(b"\n") if line]


def _ndjson(response: httpx.Response, lines: list[bytes]) -> httpx.Response:
    headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
    return httpx.Response(200, headers=headers, content=b"\n".join(lines) + b"\n")


# --- pagination -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "max_files"), [("sidecars", 2), ("demo_sales", 2), ("built_dv", 1)])
def test_max_files_pages_give_the_unpaged_result(table_url, recording, name, max_files):
    whole = ds.load_as_pandas(table_url(name))
    paged = ds.load_as_pandas(table_url(name), max_files=max_files, transport=recording)
    assert frame_rows(paged, paged.columns) == frame_rows(whole, whole.columns)
    bodies = _bodies(recording)
    assert len(bodies) >= 2, "several pages were requested"
    assert all(b["maxFiles"] == max_files for b in bodies)
    assert "pageToken" not in bodies[0] and all("pageToken" in b for b in bodies[1:])
    assert bodies[0].get("includeRefreshToken") is True and not any("includeRefreshToken" in b for b in bodies[1:])


def test_changes_pages_give_the_unpaged_result(table_url, recording):
    whole = ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0)
    paged = ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0, max_files=2, transport=recording)
    assert frame_rows(paged, paged.columns) == frame_rows(whole, whole.columns)
    pages = [r for r in recording.requests if r.url.path.endswith("/changes")]
    assert len(pages) >= 3
    assert all(r.url.params["maxFiles"] == "2" for r in pages)
    assert all("pageToken" in r.url.params for r in pages[1:])


def test_capabilities_ask_for_end_stream_actions(table_url, recording):
    ds.load_as_pandas(table_url("partitioned"), transport=recording)
    query = next(r for r in recording.requests if _is_query(r))
    assert "includeendstreamaction=true" in query.headers["delta-sharing-capabilities"]
    assert "responseformat=delta,parquet" in query.headers["delta-sharing-capabilities"]


def test_a_missing_last_page_is_an_error(table_url, recording):
    def drop_end_stream(request):
        response, lines = _real(recording, request)
        assert b"endStreamAction" in lines[-1]
        return _ndjson(response, lines[:-1])

    recording.add_rule(lambda r: _is_query(r) and "pageToken" in orjson.loads(r.content), drop_end_stream)
    with pytest.raises(IncompleteResponse) as err:
        ds.load_as_pandas(table_url("sidecars"), max_files=2, transport=recording)
    assert "endStreamAction" in str(err.value) and "INCOMPLETE_RESPONSE" in str(err.value)


def test_a_response_cut_before_its_end_stream_action_is_an_error(table_url, recording):
    def drop_tail(request):
        response, lines = _real(recording, request)
        return _ndjson(response, lines[:-2])  # the last file line and the endStreamAction are gone

    recording.add_rule(_is_query, drop_tail, times=100)
    with pytest.raises(IncompleteResponse, match="cut short"):
        ds.load_as_pandas(table_url("demo_sales"), transport=recording)


def test_end_stream_error_message_raises(table_url, recording):
    def fail_mid_stream(request):
        response, lines = _real(recording, request)
        error = orjson.dumps({"endStreamAction": {"errorMessage": "INTERNAL_ERROR: the store went away"}})
        return _ndjson(response, [*lines[:3], error])

    recording.add_rule(_is_query, fail_mid_stream)
    with pytest.raises(IncompleteResponse) as err:
        ds.load_as_pandas(table_url("demo_sales"), transport=recording)
    assert err.value.error_code == "INTERNAL_ERROR"
    assert "the store went away" in str(err.value)


def test_a_body_cut_by_the_network_is_retried(table_url, recording):
    class Broken(httpx.SyncByteStream):
        def __init__(self, first: bytes) -> None:
            self.first = first

        def __iter__(self):
            yield self.first
            raise httpx.ReadError("connection reset by peer")

    def cut(request):
        response, lines = _real(recording, request)
        return httpx.Response(
            200,
            headers={
                k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")
            },
            stream=Broken(b"\n".join(lines[:2]) + b"\n"),
        )

    recording.add_rule(_is_query, cut)
    df = ds.load_as_pandas(table_url("demo_sales"), transport=recording, retry=FAST)
    assert len(df) == len(ds.load_as_pandas(table_url("demo_sales")))
    assert recording.count("POST", "/query") == 2


# --- URL refresh ------------------------------------------------------------------------------------------


def _forbidden(request):
    return httpx.Response(
        403, content=b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
    )


def test_refused_file_url_is_refreshed_with_the_refresh_token(table_url, recording):
    recording.add_rule(_is_file, _forbidden)
    df = ds.load_as_pandas(table_url("demo_sales"), transport=recording)
    assert frame_rows(df, df.columns) == frame_rows(ds.load_as_pandas(table_url("demo_sales")), df.columns)
    bodies = _bodies(recording)
    assert len(bodies) == 2
    assert bodies[0]["includeRefreshToken"] is True and "refreshToken" not in bodies[0]
    assert bodies[1]["refreshToken"]


def test_refused_dv_url_is_refreshed(table_url, recording):
    recording.add_rule(lambda r: _is_file(r) and "deletion_vector" in r.url.path, _forbidden)
    df = ds.load_as_pandas(table_url("built_dv"), transport=recording)
    assert len(df) == 17
    assert sum("refreshToken" in b for b in _bodies(recording)) == 1


def test_time_travel_reads_refresh_by_querying_again(table_url, recording):
    recording.add_rule(_is_file, _forbidden)
    df = ds.load_as_pandas(table_url("partitioned"), version=0, transport=recording)
    assert len(df) == len(ds.load_as_pandas(table_url("partitioned"), version=0))
    bodies = _bodies(recording)
    assert bodies == [{"version": 0}, {"version": 0}]


def test_changes_refresh_by_querying_again(table_url, recording):
    recording.add_rule(_is_file, _forbidden, times=2)
    df = ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0, transport=recording)
    assert len(df) == len(ds.load_table_changes_as_pandas(table_url("cdf"), starting_version=0))
    assert recording.count("GET", "/changes") >= 2


def test_urls_about_to_expire_are_refreshed_before_use(table_url, recording):
    # every URL lives 900 s; a 10,000 s margin treats them all as expiring
    df = ds.load_as_pandas(table_url("demo_sales"), refresh_margin_seconds=10_000, transport=recording)
    assert len(df) == len(ds.load_as_pandas(table_url("demo_sales")))
    assert any("refreshToken" in b for b in _bodies(recording))


def test_a_url_refused_every_time_gives_up_with_a_clear_error(table_url, recording):
    recording.add_rule(_is_file, _forbidden, times=1000)
    with pytest.raises(ds.UrlExpired, match="refused the presigned URL .* 4 times"):
        ds.load_as_pandas(table_url("partitioned"), transport=recording)


@pytest.fixture(scope="module")
def short_url_server(table_paths, tmp_path_factory):
    from servers import RunningServer

    config = server_config({"demo_sales": table_paths["demo_sales"]}, preSignedUrlTimeoutSeconds=1)
    running = RunningServer(create_app(parse_config(config)))
    path = write_profile(tmp_path_factory.mktemp("short") / "p.share", running.url + "/delta-sharing")
    yield f"{path}#corpus.default.demo_sales"
    running.stop()


def test_really_expired_urls_are_refreshed(short_url_server, recording):
    """URLs that live one second, and a first download delayed past that: the server refuses it.

    The delta format is asked for because the server signs parquet-format URLs of whole-table reads
    at the start of a one-minute window (so one-second URLs would be born expired)."""
    state = {"delayed": False}

    def slow_first(request):
        state["delayed"] = True
        time.sleep(1.5)
        return recording.inner.handle_request(request)

    recording.add_rule(_is_file, slow_first)
    df = ds.load_as_pandas(
        short_url_server, use_delta_format=True, refresh_margin_seconds=0, max_workers=1, transport=recording
    )
    assert state["delayed"] and len(df) == 240
    assert any("refreshToken" in b for b in _bodies(recording))


# --- retries ----------------------------------------------------------------------------------------------


def test_503_twice_then_200_succeeds(table_url, recording):
    recording.add_rule(
        _is_query, lambda r: httpx.Response(503, json={"errorCode": "INTERNAL_ERROR", "message": ""}), times=2
    )
    df = ds.load_as_pandas(table_url("partitioned"), transport=recording, retry=FAST)
    assert len(df) == 6
    assert recording.count("POST", "/query") == 3


def test_429_honours_retry_after(table_url, recording):
    slept = []
    policy = RetryPolicy(initial_backoff=0.001, max_backoff=0.5, sleep=slept.append)
    recording.add_rule(_is_query, lambda r: httpx.Response(429, headers={"Retry-After": "1"}))
    assert len(ds.load_as_pandas(table_url("partitioned"), transport=recording, retry=policy)) == 6
    assert slept == [0.5]  # Retry-After, capped at max_backoff


def test_backoff_doubles():
    policy = RetryPolicy()
    assert [policy.delay(i) for i in range(4)] == [0.1, 0.2, 0.4, 0.8]
    assert RetryPolicy(max_backoff=1).delay(10) == 1


def test_400_is_not_retried_and_names_the_error(table_url, recording):
    recording.add_rule(
        _is_query,
        lambda r: httpx.Response(400, json={"errorCode": "INVALID_PARAMETER_VALUE", "message": "bad thing"}),
        times=5,
    )
    with pytest.raises(SharingServerError) as err:
        ds.load_as_pandas(table_url("partitioned"), transport=recording, retry=FAST)
    assert recording.count("POST", "/query") == 1
    text = str(err.value)
    assert "INVALID_PARAMETER_VALUE" in text and "bad thing" in text and "\n" not in text
    assert err.value.http_status == 400 and err.value.error_code == "INVALID_PARAMETER_VALUE"
    assert err.value.message == "bad thing"


def test_server_errors_carry_code_message_and_fix(table_url, recording):
    with pytest.raises(SharingServerError) as err:
        ds.load_as_pandas(table_url("nohistory"), version=0, transport=recording)
    assert err.value.error_code == "INVALID_PARAMETER_VALUE"
    assert "history sharing is not enabled" in str(err.value)
    assert recording.count("POST", "/query") == 1
    with pytest.raises(SharingServerError) as err:
        ds.load_as_pandas(table_url("no_such_table"))
    assert err.value.http_status == 404 and "RESOURCE_DOES_NOT_EXIST" in str(err.value)
    assert "list_all_tables" in str(err.value)
    with pytest.raises(SharingServerError, match="UNSUPPORTED_OPERATION") as err:
        ds.load_as_pandas(table_url("dv"), use_delta_format=False)
    assert "deletionvectors" in str(err.value)


def test_retries_run_out_on_persistent_5xx(table_url, recording):
    recording.add_rule(
        _is_query, lambda r: httpx.Response(500, json={"errorCode": "INTERNAL_ERROR", "message": ""}), times=100
    )
    with pytest.raises(SharingServerError) as err:
        ds.load_as_pandas(
            table_url("partitioned"), transport=recording, retry=RetryPolicy(max_retries=3, initial_backoff=0.001)
        )
    assert recording.count("POST", "/query") == 4
    assert err.value.http_status == 500 and "retry later" in str(err.value)


def test_connection_errors_after_the_endpoint_answered_are_retried_then_reported(table_url, recording):
    from deltaport.client.rest import RestClient

    def refuse(request):
        raise httpx.ConnectError("connection refused")

    profile, _, name = table_url("partitioned").rpartition("#")
    with RestClient(profile, transport=recording, retry=FAST) as rest:
        rest.list_shares()  # the read began: the endpoint answered
        recording.add_rule(lambda r: r.url.path.endswith("/metadata"), refuse, times=2)
        assert rest.metadata(name).table_info()
    assert recording.count("GET", "/metadata") == 3
    retry = RetryPolicy(max_retries=2, initial_backoff=0.001)
    with RestClient(profile, transport=recording, retry=retry, answered=True) as rest:
        recording.add_rule(lambda r: r.url.path.endswith("/metadata"), refuse, times=100)
        with pytest.raises(ConnectionFailed, match="after 3 attempt"):
            rest.metadata(name)


def test_file_downloads_are_retried(table_url, recording):
    recording.add_rule(_is_file, lambda r: httpx.Response(503), times=2)
    assert len(ds.load_as_pandas(table_url("partitioned"), transport=recording)) == 6
    recording.add_rule(_is_file, lambda r: httpx.Response(404), times=1)
    with pytest.raises(ds.FileDownloadError, match="not found"):
        ds.load_as_pandas(table_url("partitioned"), transport=recording)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://127.0.0.1:{closed}/delta-sharing", "the connection was refused"),
        ("http://nonexistent.invalid/delta-sharing", "the host name does not resolve"),
    ],
    ids=["closed port", "unresolvable host"],
)
def test_a_wrong_endpoint_fails_the_first_request_at_once(tmp_path, endpoint, reason, caplog):
    endpoint = endpoint.format(closed=_closed_port())  # chosen now: a port picked at collection may be taken since
    path = write_profile(tmp_path / "p.share", endpoint)
    started = time.monotonic()
    with caplog.at_level("INFO", logger="deltaport.client"), pytest.raises(ConnectionFailed) as err:
        ds.load_as_pandas(f"{path}#share.schema.table")  # the default policy: 10 retries over ~80 s
    assert time.monotonic() - started < 10
    assert str(err.value) == (
        f"cannot reach the sharing server at {endpoint}: {reason}; check the profile's endpoint and that the "
        "server is up"
    )
    # not retried, so the client said nothing about waiting (a server of another test may still log)
    assert not [r for r in caplog.records if r.name.startswith("deltaport.client")]
    with pytest.raises(ConnectionFailed, match="check the profile's endpoint"):
        ds.SharingClient(path).list_shares()


def test_a_wrong_token_endpoint_fails_the_first_token_request_at_once(tmp_path, caplog):
    from deltaport.client.auth import clear_oauth_cache

    clear_oauth_cache()
    token_endpoint = f"http://127.0.0.1:{_closed_port()}/oauth/token"
    path = write_profile(
        tmp_path / "oauth.share",
        "http://127.0.0.1:9/delta-sharing",
        shareCredentialsVersion=2,
        type="oauth_client_credentials",
        tokenEndpoint=token_endpoint,
        clientId="client-1",
        clientSecret="s3cret",
        bearerToken=None,
    )
    started = time.monotonic()
    with caplog.at_level("INFO", logger="deltaport.client"), pytest.raises(ConnectionFailed) as err:
        ds.load_as_pandas(f"{path}#share.schema.table")
    assert time.monotonic() - started < 10
    assert str(err.value) == (
        f"cannot reach the OAuth token endpoint at {token_endpoint}: the connection was refused; check the "
        "profile's tokenEndpoint and that the server is up"
    )
    assert not [r for r in caplog.records if r.name.startswith("deltaport.client")]
    clear_oauth_cache()


def test_503_a_few_times_then_200_succeeds_saying_once_what_it_waits_for(table_url, recording, caplog):
    recording.add_rule(
        _is_query, lambda r: httpx.Response(503, json={"errorCode": "INTERNAL_ERROR", "message": ""}), times=3
    )
    with caplog.at_level("INFO", logger="deltaport.client"):
        df = ds.load_as_pandas(table_url("partitioned"), transport=recording, retry=FAST)
    assert len(df) == 6 and recording.count("POST", "/query") == 4
    said = [r for r in caplog.records if r.name == "deltaport.client"]
    assert len(said) == 1 and said[0].levelname == "INFO"
    message = said[0].getMessage()
    assert re.fullmatch(
        r"POST /shares/\S+/query: the server answered HTTP 503; waiting for the server to recover: "
        r"up to 10 more attempt\(s\) over at most 0\.\d+ s",
        message,
    )
    assert TOKEN not in message and "?" not in message


def test_a_server_that_answered_then_refuses_is_waited_for(table_url, recording, caplog):
    from deltaport.client.rest import RestClient

    profile = table_url("partitioned").rpartition("#")[0]
    with RestClient(profile, transport=recording, retry=FAST) as rest:
        rest.list_shares()

        def refuse(request):
            raise httpx.ConnectError("[Errno 111] Connection refused")

        recording.add_rule(lambda r: r.url.path.endswith("/shares"), refuse, times=2)
        with caplog.at_level("INFO", logger="deltaport.client"):
            assert rest.list_shares()
    said = [r.getMessage() for r in caplog.records if r.name == "deltaport.client"]
    assert len(said) == 1
    assert said[0].startswith(
        "GET /shares: ConnectError: [Errno 111] Connection refused; waiting for the server to recover: up to 10 "
        "more attempt(s) over at most 0."
    )


def test_profile_json_on_the_wire_is_never_logged(table_url, recording):
    ds.load_as_pandas(table_url("partitioned"), transport=recording)
    file_requests = [r for r in recording.requests if _is_file(r)]
    assert file_requests and all("authorization" not in {k.lower() for k in r.headers} for r in file_requests)
    assert json.loads(json.dumps({"ok": True}))
