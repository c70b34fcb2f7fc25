"""Storage that fails: a transient failure (S3 or Azure down, storage too slow) is a 503 with
Retry-After that names no location, within a bound; other tables keep serving and the event loop
answers meanwhile; the server recovers without a restart when the storage comes back. A damaged
local table (a truncated commit, a corrupt checkpoint, a data file gone) is a 4xx JSON error that
names no path, affects no other table, and goes away when the file is repaired. Time budget: 60 s."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import re
import signal
import threading
import time
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from builders import writable_copy
from conftest import TABLES
from servers import AzuriteServer, MotoServer, RunningServer

from deltaport.server import create_app, parse_config

T = "/delta-sharing/shares/s/schemas/d/tables"
SOURCE = "basic_partitioned"


@pytest.fixture
def moto():
    server = MotoServer()
    yield server
    server.stop()


def _local_and_remote(uri: str, options: dict) -> RunningServer:
    """A server of share s, schema d: table ``remote`` at ``uri``, table ``local`` on local disk."""
    config = {
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
    return RunningServer(create_app(parse_config(config)))


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
    server = _local_and_remote(uri, options)
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


# --- Azure (Azurite) ------------------------------------------------------------------------


#: A store that does not answer is given up on within about 2 s (what an operator sets with
#: storageOptions; the defaults are in storage/object_store.py).
FAST_FAILING = {
    "connect_timeout": "1s",
    "timeout": "2s",
    "retry_config": {"max_retries": 1, "retry_timeout": dt.timedelta(seconds=2)},
}


def _is_unavailable(r: httpx.Response, *hidden: str) -> None:
    assert r.status_code == 503, r.text
    assert int(r.headers["Retry-After"]) > 0
    body = r.json()
    assert set(body) == {"errorCode", "message"} and body["errorCode"] == "TEMPORARILY_UNAVAILABLE", body
    for secret in hidden:
        assert secret not in body["message"], body["message"]


def test_azure_killed_mid_request_is_503_other_tables_serve_and_it_recovers(tmp_path):
    azurite = AzuriteServer(tmp_path / "azurite")
    server = None
    try:
        uri = azurite.upload_dir("flaky", SOURCE, TABLES / SOURCE)
        azurite.stop()  # a clean stop writes Azurite's blob index: the blobs survive the kill below
        azurite.start()
        server = _local_and_remote(uri, {**azurite.storage_options(), **FAST_FAILING})
        hidden = ("flaky", "127.0.0.1", azurite.account, "az://", str(azurite.port))
        with httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.post(f"{T}/remote/query", json={}).status_code == 200
            azurite.proc.send_signal(signal.SIGSTOP)  # Azurite takes the request and never answers...
            in_flight: list[httpx.Response] = []
            request = threading.Thread(target=lambda: in_flight.append(http.post(f"{T}/remote/query", json={})))
            request.start()
            time.sleep(0.5)
            azurite.proc.kill()  # ...and dies while the server waits for its answer
            azurite.proc.wait(10)
            request.join(30)
            _is_unavailable(in_flight[0], *hidden)
            for call in ("version", "metadata", "query"):
                down = http.post(f"{T}/remote/query", json={}) if call == "query" else http.get(f"{T}/remote/{call}")
                _is_unavailable(down, *hidden)
            assert http.post(f"{T}/local/query", json={}).status_code == 200  # the other table serves
            azurite.start()  # same port and folder: the same blobs
            back = http.post(f"{T}/remote/query", json={})
            assert len(_files(back)) == len(_files(http.post(f"{T}/local/query", json={}))) > 0
            assert http.get(f"{T}/remote/metadata").status_code == 200
    finally:
        if server is not None:
            server.stop()
        if azurite.proc.poll() is None:
            azurite.stop()


# --- slow storage ---------------------------------------------------------------------------


class DelayProxy:
    """A TCP proxy on 127.0.0.1 in front of 127.0.0.1:``upstream`` that holds each piece of every
    answer for ``delay`` seconds before passing it on (0: a plain proxy)."""

    def __init__(self, upstream: int) -> None:
        self.upstream, self.delay = upstream, 0.0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        start = asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.server = asyncio.run_coroutine_threadsafe(start, self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delayed: bool) -> None:
            try:
                while data := await src.read(1 << 16):
                    if delayed and self.delay:
                        await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))

    def stop(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def slow_moto(moto):
    """The table on moto, reached through a DelayProxy: (proxy, table URI, storage options)."""
    proxy = DelayProxy(moto.port)
    yield proxy, _upload(moto), {**moto.storage_options(), "endpoint": f"http://127.0.0.1:{proxy.port}"}
    proxy.stop()


def _timed(call) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    r = call()
    return r, time.perf_counter() - started


#: Seconds within which /health answers while another request waits on storage.
PROMPT_S = 0.5

#: A store that does not answer is given up on within about 5 s: long enough that the server's
#: answers while a request waits are told apart from a moment when the machine is too busy to run it.
SLOW_FAILING = {
    **FAST_FAILING,
    "timeout": "5s",
    "retry_config": {"max_retries": 1, "retry_timeout": dt.timedelta(seconds=5)},
}


class Meanwhile:
    """Runs ``slow()`` in a thread and, until it returns, asks /health again and again and the local
    table once: what the server answered while the slow call waited."""

    def __init__(self, http: httpx.Client, slow) -> None:
        self.health: list[float] = []  # seconds of each /health answered before the slow call returned
        self.local: int | None = None  # the local table's status, asked while the slow call waited
        worker = threading.Thread(target=lambda: setattr(self, "slow", _timed(slow)))
        worker.start()
        time.sleep(0.3)  # the slow call is waiting on storage now
        while worker.is_alive():
            health = _timed(lambda: http.get("/health"))[1]
            if self.local is None:
                self.local = http.post(f"{T}/local/query", json={}).status_code
            if worker.is_alive():
                self.health.append(health)
            time.sleep(0.05)
        worker.join()
        self.response, self.took = self.slow

    def check(self) -> None:
        """The server answered while the slow call waited: /health promptly, the local table."""
        prompt = [s for s in self.health if s < PROMPT_S]
        assert len(prompt) >= 3 and self.local == 200, (self.took, self.health, self.local)


def test_slow_storage_answers_or_is_503_within_a_bound_and_the_server_stays_responsive(slow_moto):
    proxy, uri, options = slow_moto
    server = _local_and_remote(uri, {**options, **SLOW_FAILING})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            query = lambda: http.post(f"{T}/remote/query", json={})  # noqa: E731
            proxy.delay = 0.3  # slow, but each storage request answers within its timeout: a cold load
            cold = Meanwhile(http, query)
            assert cold.response.status_code == 200 and cold.took < 10, (cold.response.status_code, cold.took)
            cold.check()
            proxy.delay = 30  # slower than the storage timeout
            hung = Meanwhile(http, query)
            _is_unavailable(hung.response, "flaky", "127.0.0.1")
            assert hung.took < 10, hung.took
            hung.check()
            proxy.delay = 0
            assert query().status_code == 200
    finally:
        server.stop()


def test_requests_queued_on_a_hung_store_all_get_503_at_once_and_other_tables_serve(slow_moto):
    """45 requests wait on one hung table, more than the framework's pool has threads: they hold a
    few threads (the table's gate) and fail together when the request ahead of them times out,
    instead of each waiting out its own timeout in turn; meanwhile the local table has threads."""
    proxy, uri, options = slow_moto
    server = _local_and_remote(uri, {**options, **SLOW_FAILING})
    try:
        with httpx.Client(base_url=server.url, timeout=300) as http:
            assert http.post(f"{T}/remote/query", json={}).status_code == 200
            proxy.delay = 1000
            answers: list[tuple[int, float]] = []
            started = time.perf_counter()

            def ask() -> None:
                r = httpx.post(f"{server.url}{T}/remote/query", json={}, timeout=300)
                answers.append((r.status_code, time.perf_counter() - started))

            waiting = [threading.Thread(target=ask) for _ in range(45)]
            for w in waiting:
                w.start()
            time.sleep(0.3)
            local, local_took = _timed(lambda: http.post(f"{T}/local/query", json={}))
            for w in waiting:
                w.join(300)
            assert local.status_code == 200 and local_took < 3, local_took  # it waited for no timeout
            assert {status for status, _ in answers} == {503} and len(answers) == 45
            # one timeout of 5 s; in turn, each after the one before it timed out, they would take 45 x 5 s
            assert max(took for _, took in answers) < 9, sorted(took for _, took in answers)[-5:]
    finally:
        server.stop()


def test_a_store_that_stops_answering_is_503_within_seconds_by_default(slow_moto):
    """Only the request timeout set: the default retries give up within seconds, not minutes."""
    proxy, uri, options = slow_moto
    server = _local_and_remote(uri, {**options, "connect_timeout": "1s", "timeout": "2s"})
    try:
        with httpx.Client(base_url=server.url, timeout=300) as http:
            assert http.post(f"{T}/remote/query", json={}).status_code == 200
            proxy.delay = 1000
            r, took = _timed(lambda: http.post(f"{T}/remote/query", json={}))
            _is_unavailable(r)
            assert took < 12, took
    finally:
        server.stop()


# --- a damaged local table ------------------------------------------------------------------

CHECKPOINTED = "external-table-different-nullability"  # checkpoint at version 2, named by _last_checkpoint
_PATHLIKE = re.compile(r"(?<![\w.])/(?:tmp|home|root|work|srv|var)/")


def _serve_local(tables: dict[str, str]) -> RunningServer:
    listed = [{"name": n, "location": p, "historyShared": True} for n, p in tables.items()]
    listed.append({"name": "other", "location": str(TABLES / SOURCE)})
    config = {"version": 1, "shares": [{"name": "s", "schemas": [{"name": "d", "tables": listed}]}]}
    return RunningServer(create_app(parse_config(config)))


def _files(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    return sorted(json.loads(line)["file"]["id"] for line in r.text.splitlines() if line.startswith('{"file"'))


def _table_error(r: httpx.Response, status: int, code: str, tmp_path) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"errorCode", "message"} and body["errorCode"] == code, body
    assert str(tmp_path) not in body["message"] and not _PATHLIKE.search(body["message"]), body["message"]
    assert "Retry-After" not in r.headers  # the table's state, not something that passes by itself
    return body["message"]


def _break(path, how: str) -> bytes:
    """Damage a file in place; returns its bytes for the repair."""
    good = path.read_bytes()
    if how == "truncate":  # cut inside a line, as a writer that died mid-write leaves it
        cut = good.index(b"\n", len(good) // 3) - 20
        path.write_bytes(good[:cut])
    else:  # bytes overwritten inside the file
        bad = bytearray(good)
        bad[len(bad) // 3 : len(bad) // 3 + 64] = b"\xff" * 64
        path.write_bytes(bytes(bad))
    return good


def test_a_commit_truncated_mid_json_is_400_until_repaired(tmp_path):
    table = writable_copy(TABLES / SOURCE, tmp_path / "t")
    commit = table / "_delta_log" / f"{1:020d}.json"
    good = _break(commit, "truncate")
    server = _serve_local({"t": str(table)})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            for call in ("metadata", "query"):
                r = http.post(f"{T}/t/query", json={}) if call == "query" else http.get(f"{T}/t/{call}")
                message = _table_error(r, 400, "MALFORMED_REQUEST", tmp_path)
                assert "truncated JSON" in message and f"{1:020d}.json" in message
            assert http.post(f"{T}/other/query", json={}).status_code == 200
            commit.write_bytes(good)
            assert _files(http.post(f"{T}/t/query", json={})) == _files(http.post(f"{T}/other/query", json={}))
    finally:
        server.stop()


def test_a_new_commit_truncated_mid_json_on_a_served_table_is_400_until_repaired(tmp_path):
    table = writable_copy(TABLES / SOURCE, tmp_path / "t")
    commit = table / "_delta_log" / f"{1:020d}.json"
    good = commit.read_bytes()
    commit.unlink()
    server = _serve_local({"t": str(table)})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.get(f"{T}/t/version").headers["Delta-Table-Version"] == "0"
            assert http.post(f"{T}/t/query", json={}).status_code == 200  # version 0 is cached
            commit.write_bytes(good)
            _break(commit, "truncate")
            _table_error(http.post(f"{T}/t/query", json={}), 400, "MALFORMED_REQUEST", tmp_path)
            assert http.post(f"{T}/other/query", json={}).status_code == 200
            commit.write_bytes(good)
            r = http.post(f"{T}/t/query", json={})
            assert r.headers["Delta-Table-Version"] == "1"
            assert _files(r) == _files(http.post(f"{T}/other/query", json={}))
    finally:
        server.stop()


@pytest.mark.parametrize("hint", [True, False], ids=["with-last-checkpoint", "without-last-checkpoint"])
@pytest.mark.parametrize("commits_kept", [True, False], ids=["commits-kept", "commits-cleaned-up"])
def test_a_corrupt_checkpoint(tmp_path, hint, commits_kept):
    """With the commits it covers still in the log, the checkpoint is not needed: the table is
    read from the commits, the same files as the intact table. Without them it is: 400 until the
    checkpoint is repaired."""
    table = writable_copy(TABLES / CHECKPOINTED, tmp_path / "t")
    log = table / "_delta_log"
    checkpoint = log / f"{2:020d}.checkpoint.parquet"
    good = _break(checkpoint, "overwrite")
    if not hint:
        (log / "_last_checkpoint").unlink()
    if not commits_kept:
        for v in range(3):
            (log / f"{v:020d}.json").unlink()
    server = _serve_local({"t": str(table), "intact": str(TABLES / CHECKPOINTED)})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            expected = _files(http.post(f"{T}/intact/query", json={}))
            r = http.post(f"{T}/t/query", json={})
            if commits_kept:
                assert _files(r) == expected
            else:
                message = _table_error(r, 400, "MALFORMED_REQUEST", tmp_path)
                assert "checkpoint" in message and "cannot be read" in message
                _table_error(http.get(f"{T}/t/metadata"), 400, "MALFORMED_REQUEST", tmp_path)
                assert http.post(f"{T}/other/query", json={}).status_code == 200
            checkpoint.write_bytes(good)
            assert _files(http.post(f"{T}/t/query", json={})) == expected
    finally:
        server.stop()


def test_a_data_file_deleted_after_the_query_is_404_until_restored(tmp_path):
    table = writable_copy(TABLES / SOURCE, tmp_path / "t")
    server = _serve_local({"t": str(table)})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            r = http.post(f"{T}/t/query", json={})
            urls = [json.loads(line)["file"]["url"] for line in r.text.splitlines() if line.startswith('{"file"')]
            gone = table / unquote(urlsplit(urls[0]).path.split("/files/", 1)[1].split("/", 1)[1])
            data = gone.read_bytes()
            gone.unlink()
            for method in ("GET", "HEAD"):
                missing = http.request(method, urls[0])
                assert missing.status_code == 404, missing.text
            message = _table_error(http.get(urls[0]), 404, "RESOURCE_DOES_NOT_EXIST", tmp_path)
            assert "not found" in message
            assert all(http.get(u).status_code == 200 for u in urls[1:])  # the table's other files
            assert http.post(f"{T}/other/query", json={}).status_code == 200
            gone.write_bytes(data)
            back = http.get(urls[0])
            assert back.status_code == 200 and back.content == data
    finally:
        server.stop()
