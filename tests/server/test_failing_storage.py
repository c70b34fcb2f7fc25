"""Storage that fails: a transient failure is a 503 with Retry-After that names no location, other
tables keep serving, and the server recovers without a restart when the storage comes back."""

from __future__ import annotations

import datetime as dt
import logging

import httpx
import pytest
from conftest import TABLES
from servers import MotoServer, RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables"
SOURCE = "basic_partitioned"


@pytest.fixture
def moto():
    server = MotoServer()
    yield server
    server.stop()


def _upload(moto: MotoServer) -> str:
    return moto.upload_dir("flaky", SOURCE, TABLES / SOURCE).replace("s3://", "s3a://")


def test_storage_down_is_503_other_tables_serve_and_it_recovers(moto, caplog):
    uri = _upload(moto)
    options = {
        **moto.storage_options(),
        "connect_timeout": "1s",
        "timeout": "2s",
        "retry_config": {"max_retries": 1, "retry_timeout": dt.timedelta(seconds=2)},
    }
    config = parse_config(
        {
            "version": 1,
            "storageOptions": options,
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {
                            "name": "d",
                            "tables": [
                                {"name": "remote", "location": uri},
                                {"name": "local", "location": str(TABLES / SOURCE)},
                            ],
                        }
                    ],
                }
            ],
        }
    )
    server = RunningServer(create_app(config))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.get(f"{T}/remote/version").status_code == 200
            moto.stop()
            with caplog.at_level(logging.WARNING, logger="deltaport.server"):
                for call in ("version", "metadata"):
                    down = http.get(f"{T}/remote/{call}")
                    assert down.status_code == 503, down.text
                    assert int(down.headers["Retry-After"]) > 0
                    body = down.json()
                    assert set(body) == {"errorCode", "message"} and body["errorCode"] == "TEMPORARILY_UNAVAILABLE"
                    assert "flaky" not in body["message"] and "127.0.0.1" not in body["message"]
                down = http.post(f"{T}/remote/query", json={})
                assert down.status_code == 503 and down.headers["Retry-After"]
            assert "flaky" in caplog.text  # the operator is told which table
            assert http.post(f"{T}/local/query", json={}).status_code == 200  # the other table serves
            moto.start()
            _upload(moto)
            back = http.post(f"{T}/remote/query", json={})
            assert back.status_code == 200
            assert sum(line.startswith('{"file"') for line in back.text.splitlines()) > 0
    finally:
        server.stop()


def test_missing_object_is_not_transient(moto):
    uri = _upload(moto)
    moto.client().delete_object(Bucket="flaky", Key=f"{SOURCE}/_delta_log/{0:020d}.json")
    config = parse_config(
        {
            "version": 1,
            "storageOptions": moto.storage_options(),
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "remote", "location": uri}]}]}],
        }
    )
    server = RunningServer(create_app(config))
    try:
        r = httpx.post(f"{server.url}{T}/remote/query", json={}, timeout=60)
        assert 400 <= r.status_code < 500 and "Retry-After" not in r.headers
    finally:
        server.stop()
