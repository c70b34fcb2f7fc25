"""File ids, canonical URIs and URL signatures for a response's files.

A file's id is the MD5 (parquet) or SHA-256 (delta) hex of its path as written in the log, and
each URL carries its own signature (a keyed BLAKE2b, ``signing.local_mac``): a few hashing calls
per file, a large part of a large response's CPU time (compiled in ``deltaport._native`` where it
was built). :func:`key_files` does that work for one chunk of files;
:class:`KeyingPool` runs it in a second process for some chunks, so it proceeds on another core
while this process joins lines and sends them. The worker is spawned (never forked from a threaded
server), imports only this module and the signing code, and is handed plain bytes: paths, and the
day's derived MAC key, never the server's secret.

Fast form of: hashing each file's id and signing its URL one by one as its line is made
(``FileLineMaker``). Held equal by: tests/server/fast/test_file_keys.py.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import multiprocessing
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple
from urllib.parse import unquote

import deltaport.native as native
from deltaport.protocol.capabilities import PARQUET
from deltaport.signing.local_mac import MacBatch
from deltaport.signing.sigv4 import uri_encode_path

try:  # CPython's own MD5/SHA-256 cost half of OpenSSL's per call on short inputs; same digests
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - builds without the module
    _md5 = hashlib.md5
try:
    from _sha256 import sha256 as _sha256_id
except ImportError:  # pragma: no cover
    _sha256_id = hashlib.sha256

log = logging.getLogger(__name__)

#: How a chunk's inputs become canonical URIs (relative to the table's URL prefix).
ORDINARY = "ordinary"  # log paths of unreserved characters and '=': only '=' is encoded
ENCODE = "encode"  # any other log paths: percent-decoded, then S3-encoded segment by segment
AS_IS = "as-is"  # the inputs are canonical URIs already (cached from an earlier response)


class FileKeys(NamedTuple):
    """One chunk's keys: ids and signatures concatenated (each fixed-width), URIs if computed."""

    ids: str | None
    signatures: str | None
    uris: list[bytes] | None


def digest_for(id_hash: str):
    """The hash constructor of a file-id kind: MD5 for ``parquet``, SHA-256 for ``delta``."""
    return _md5 if id_hash == PARQUET else _sha256_id


def key_files(paths: list[bytes], *, id_hash: str | None, uri_mode: str, batch: MacBatch | None) -> FileKeys:
    """Ids (when ``id_hash`` is given), signatures (when ``batch`` is) and, unless ``ORDINARY``, URIs."""
    ids = None
    if id_hash is not None:
        digest = digest_for(id_hash)
        ids = "".join([digest(p).hexdigest() for p in paths])
    if uri_mode == AS_IS:
        uris = paths
    elif uri_mode == ORDINARY:
        uris = [p.replace(b"=", b"%3D") for p in paths]
    else:
        uris = [uri_encode_path(unquote(p.decode())).encode() for p in paths]
    signatures = batch.sign(uris) if batch is not None else None
    return FileKeys(ids, signatures, uris if uri_mode == ENCODE else None)


def key_packed(data: bytes, offsets: bytes, id_hash: str | None, uri_mode: str, batch: MacBatch | None) -> FileKeys:
    """:func:`key_files` on paths packed as one buffer and their int64 offsets (cheap to send, and
    cheaper to split than an Arrow array is to turn into Python objects).

    With the compiled loops (``deltaport.native``), MD5 ids and the signatures of ordinary or
    cached URIs are made without a Python object per file: about 0.6 µs a file instead of 1 µs.
    """
    loops = native.loops
    if loops is not None and uri_mode != ENCODE and id_hash in (None, PARQUET):
        ids = loops.md5_each(data, offsets).hex() if id_hash is not None else None
        signatures = None if batch is None else batch.sign_packed(loops, data, offsets, encode_eq=uri_mode == ORDINARY)
        return FileKeys(ids, signatures, None)
    ends = memoryview(offsets).cast("q")
    paths = [data[a:b] for a, b in itertools.pairwise(ends)]
    return key_files(paths, id_hash=id_hash, uri_mode=uri_mode, batch=batch)


def _ready() -> int:
    return os.getpid()


#: The worker's allocators, read by its interpreter and C library when it starts. Each chunk makes
#: and drops some 100,000 small objects and a few buffers of megabytes; with pymalloc's arenas and
#: glibc's default thresholds those pages go back to the system and fault in again for the next
#: chunk (about 200,000 page faults and 0.4 s of system time per million files). Plain malloc with
#: raised thresholds keeps them: the worker holds at most a few chunks' worth.
WORKER_ALLOCATOR = {
    "PYTHONMALLOC": "malloc",
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 20),
}
_environ_lock = threading.Lock()


@contextmanager
def _spawn_environment(settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in the environment while a child is spawned (those the operator set are kept),
    then the environment as it was."""
    with _environ_lock:
        added = {k: v for k, v in settings.items() if k not in os.environ}
        os.environ.update(added)
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)


class KeyingPool:
    """Worker processes for :func:`key_files`; start() spawns them in the background.

    ``submit`` returns None when the pool is not running (not started, still starting, closed or
    broken); the caller then does the work itself, so a failed worker costs speed, never a response.
    """

    def __init__(self, processes: int) -> None:
        self.processes = max(0, int(processes))
        self._executor: ProcessPoolExecutor | None = None
        self._started: Future | None = None
        self._broken = False
        self._lock = threading.Lock()
        self.submitted = 0  # chunks handed to a worker (for tests and diagnostics)

    def start(self) -> None:
        with self._lock:
            if self.processes == 0 or self._executor is not None:
                return
            self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
            with _spawn_environment(WORKER_ALLOCATOR):  # a submit spawns a process while none is idle
                started = [self._executor.submit(_ready) for _ in range(self.processes)]
            self._started = started[0]

    @property
    def running(self) -> bool:
        started = self._started
        return not self._broken and started is not None and started.done() and started.exception() is None

    def submit(
        self, data: bytes, offsets: bytes, *, id_hash: str | None, uri_mode: str, batch: MacBatch | None
    ) -> Future | None:
        executor = self._executor
        if not self.running or executor is None:
            return None
        try:
            future = executor.submit(key_packed, data, offsets, id_hash, uri_mode, batch)
        except Exception as exc:  # BrokenProcessPool, or shut down meanwhile
            self.failed(exc)
            return None
        self.submitted += 1
        return future

    def failed(self, exc: BaseException) -> None:
        """Stop using the pool after a worker failure; responses go on without it."""
        if not self._broken:
            self._broken = True
            log.warning("file keying worker failed (%s: %s); continuing in the server process", type(exc).__name__, exc)

    def close(self) -> None:
        with self._lock:
            executor, self._executor, self._started = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        executor = self._executor
        return sorted(getattr(executor, "_processes", None) or {}) if executor is not None else []
