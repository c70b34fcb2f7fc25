"""File ids and URL signatures, in the server process and in a keying worker process."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import time

import numpy as np
import pyarrow as pa
import pytest
from conftest import TABLES

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.demo import build_demo_tables
from deltaport.server.fast.columnar_lines import ColumnarLines
from deltaport.server.fast.file_keys import (
    AS_IS,
    ENCODE,
    ORDINARY,
    WORKER_ALLOCATOR,
    KeyingPool,
    key_files,
    key_packed,
)
from deltaport.server.sharing.translate import FileLineMaker
from deltaport.signing import LocalFileSigner
from deltaport.signing.local_mac import SIGNATURE_CHARS

NOW = 1_700_000_040.0  # the start of a signing window
SIGNER = LocalFileSigner("http://127.0.0.1:9/delta-sharing", "k" * 24, "AK", b"s" * 32)

pytestmark = pytest.mark.usefixtures("either_loops")  # each test with and without deltaport._native


def _running(pool: KeyingPool, timeout: float = 60) -> KeyingPool:
    pool.start()
    deadline = time.monotonic() + timeout
    while not pool.running:
        assert time.monotonic() < deadline, "the keying worker did not start"
        time.sleep(0.05)
    return pool


@pytest.fixture(scope="module")
def pool():
    p = _running(KeyingPool(1))
    yield p
    p.close()


def _row_lines(snap, id_hash="parquet", now=NOW) -> bytes:
    maker = FileLineMaker(
        table_uri=snap.table_uri, signer=SIGNER, expires_in=900, fmt="parquet", id_hash=id_hash, now=now
    )
    return b"".join(maker.snapshot_lines(snap, pa.array(range(snap.num_files), pa.int64())))


def _lines(columnar: ColumnarLines, snap, id_hash="parquet", now=NOW, chunk=2) -> bytes:
    chunks, _ = columnar.lines(
        snap, pa.array(range(snap.num_files), pa.int64()), SIGNER, expires_in=900, now=now, id_hash=id_hash, chunk=chunk
    )
    return b"".join(chunks)


@pytest.mark.parametrize("id_hash", ["parquet", "delta"])
def test_lines_keyed_by_the_worker_are_the_row_lines(pool, id_hash):
    snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    before = pool.submitted
    assert _lines(ColumnarLines(pool=pool), snap, id_hash) == _row_lines(snap, id_hash)
    assert pool.submitted > before  # small chunks: some of them went to the worker


def test_encoded_paths_keyed_by_the_worker(pool, tmp_path):
    snap = DeltaTable(build_demo_tables(tmp_path)["sales"], cache=SnapshotCache()).snapshot()
    assert snap.num_files > 2  # 'asia/pacific', 'north america': paths that need S3 encoding
    before = pool.submitted
    assert _lines(ColumnarLines(pool=pool), snap, chunk=1) == _row_lines(snap)
    assert pool.submitted > before


def test_a_new_signing_window_resigns_cached_uris_in_the_worker(pool):
    snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    columnar = ColumnarLines(pool=pool)
    assert _lines(columnar, snap) == _row_lines(snap)  # fills the snapshot's id and URI cache
    before = pool.submitted
    assert _lines(columnar, snap, now=NOW + 60) == _row_lines(snap, now=NOW + 60)
    assert pool.submitted > before


def test_a_dead_worker_costs_speed_not_the_response(caplog):
    broken = _running(KeyingPool(1))
    try:
        for pid in broken.worker_pids():
            os.kill(pid, signal.SIGKILL)
        snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
        with caplog.at_level(logging.WARNING, logger="deltaport.server.fast.file_keys"):
            assert _lines(ColumnarLines(pool=broken), snap) == _row_lines(snap)
        assert not broken.running
        assert "continuing in the server process" in caplog.text
        assert _lines(ColumnarLines(pool=broken), snap) == _row_lines(snap)  # and after
    finally:
        broken.close()


def test_a_hung_worker_is_not_waited_for(monkeypatch):
    from deltaport.server.fast import columnar_lines

    monkeypatch.setattr(columnar_lines, "_WORKER_TIMEOUT", 0.5)
    hung = _running(KeyingPool(1))
    pids = hung.worker_pids()
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        snap = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
        started = time.monotonic()
        assert _lines(ColumnarLines(pool=hung), snap) == _row_lines(snap)
        assert time.monotonic() - started < 10
        assert not hung.running
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        hung.close()


def test_workers_start_with_their_allocator_settings_and_the_server_keeps_its_own(monkeypatch):
    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "12345")  # an operator's setting wins
    before = dict(os.environ)
    two = _running(KeyingPool(2))
    try:
        assert os.environ == before
        executor = two._executor
        assert executor is not None
        for _ in range(4):  # both processes answer (a busy one leaves the next call to the other)
            assert executor.submit(os.getenv, "PYTHONMALLOC").result(timeout=60) == WORKER_ALLOCATOR["PYTHONMALLOC"]
            assert executor.submit(os.getenv, "MALLOC_TRIM_THRESHOLD_").result(timeout=60) == "12345"
        assert len(two.worker_pids()) == 2
    finally:
        two.close()


def test_no_processes_means_no_worker():
    idle = KeyingPool(0)
    idle.start()
    assert not idle.running and idle.worker_pids() == []
    assert idle.submit(b"a", b"", id_hash="parquet", uri_mode=ORDINARY, batch=None) is None
    idle.close()


def test_key_files_gives_log_path_digests_and_url_signatures():
    paths = [b"part=1/a.parquet", b"b%20c/d.parquet"]
    query, batch, _ = SIGNER.batch_signing(expires_in=900, now=NOW)
    md5 = key_files(paths, id_hash="parquet", uri_mode=ENCODE, batch=batch)
    assert md5.ids == "".join(hashlib.md5(p).hexdigest() for p in paths)
    assert md5.uris == [b"part%3D1/a.parquet", b"b%20c/d.parquet"]
    for plain, i in (("part=1/a.parquet", 0), ("b c/d.parquet", 1)):
        url = SIGNER.sign(plain, expires_in=900, now=NOW).url
        signature = md5.signatures[SIGNATURE_CHARS * i : SIGNATURE_CHARS * (i + 1)]
        assert url.endswith("?" + query + "&X-Amz-Signature=" + signature)
    sha = key_files(paths, id_hash="delta", uri_mode=ORDINARY, batch=None)
    assert sha.ids == "".join(hashlib.sha256(p).hexdigest() for p in paths)
    assert sha.signatures is None and sha.uris is None
    again = key_files(md5.uris, id_hash=None, uri_mode=AS_IS, batch=batch)
    assert again.ids is None and again.signatures == md5.signatures


@pytest.mark.parametrize(("mode", "id_hash"), [(ENCODE, "parquet"), (ORDINARY, "delta"), (AS_IS, None)])
def test_the_workers_keys_are_those_made_in_process(pool, mode, id_hash):
    paths = [b"part-00000-1a2b-c000.snappy.parquet", b"region=europe/part-00001.parquet", b"a%20b/c%3Ad.parquet"]
    data = b"".join(paths)
    offsets = np.cumsum([0] + [len(p) for p in paths], dtype=np.int64).tobytes()
    _, batch, _ = SIGNER.batch_signing(expires_in=900, now=NOW)
    future = pool.submit(data, offsets, id_hash=id_hash, uri_mode=mode, batch=batch)
    assert future is not None
    here = key_packed(data, offsets, id_hash, mode, batch)
    assert future.result(timeout=60) == here
    assert here.signatures is not None and len(here.signatures) == SIGNATURE_CHARS * len(paths)
