"""Shared files fetched into the staging cache: in parallel, streamed, checked, written atomically.

Each file is streamed from its presigned URL straight into its cache entry with the standard
library's ``http.client`` (the socket read and the file write run in C with the GIL released;
Python only hands over 1 MiB chunks; a sparse entry's chunks go from the socket to the file by
``splice``, :mod:`deltaport.client.splicing`), in a pool of threads on the driver, or as a Spark job
whose tasks each stage their share of the files when a cluster runs the pipeline
(:func:`stage_on_executors`: DataFrame operations only, so the same job runs on a classic
session and through Spark Connect; the driver's deltaport is shipped to the executors' Python
as a zip, their Python needs only deltaport's dependencies). A file with a deletion vector is
rewritten without its deleted rows as it is staged (once per file and DV), so that Spark reads
it like any other. A task with a ``need`` fetches only the footer and the column chunks the
query needs (:mod:`deltaport.spark.partial`), through the same threads, retries and renewals.

Failures (:mod:`deltaport.client.download`): 429/5xx and dropped connections are retried with
backoff; a refused URL (expired) is renewed by asking the server for the file list again; a body
whose size is not the size in the server's answer, a missing file or a full disk raise one-line
errors. A failed entry is never left behind: its temporary file is removed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import tempfile
import threading
import time
import uuid
import weakref
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from deltaport.client.download import ConnectionPool, copy_url, retrying
from deltaport.client.errors import ConnectionFailed, FileDownloadError
from deltaport.client.model import FileAction
from deltaport.client.reader import conform, download_file, row_mask
from deltaport.client.renewal import UrlRenewer
from deltaport.client.retry import RetryPolicy
from deltaport.client.spark_session import is_connect
from deltaport.client.transport import file_http_client
from deltaport.spark.chunks import Need
from deltaport.spark.partial import stage_needed
from deltaport.spark.remote import Refresh, renewer_for
from deltaport.spark.staging import CacheArea, StagingError, open_area

__all__ = [
    "StageReport",
    "StageTask",
    "on_a_cluster",
    "ship_package",
    "stage_files",
    "stage_on_executors",
    "staged_copy",
    "workers_elsewhere",
]

DEFAULT_RETRY = RetryPolicy(max_retries=5, initial_backoff=0.2, max_backoff=10.0)


@dataclass(frozen=True)
class StageTask:
    """One file to stage: the action (URL, id, size, DVs) and its place in the cache."""

    action: FileAction
    relpath: str
    rewrite: bool  # rewrite the file while staging: deletion vector(s) applied, widened columns cast
    widened: tuple[tuple[str, pa.DataType], ...] = ()  # (column in the file, the table's type now)
    need: Need | None = None  # only these columns and row groups (spark/partial.py); not with rewrite


@dataclass(frozen=True)
class StageReport:
    files: int  # files fetched
    bytes: int  # bytes downloaded
    seconds: float


# --- one file into the cache ----------------------------------------------------------------------


def _size_error(action: FileAction, got: int) -> FileDownloadError:
    return FileDownloadError(
        f"file {action.id}: the storage sent {got} bytes where the server's answer says "
        f"{action.size}: the file changed after it was listed; read the table again",
        http_status=400,
        file_id=action.id,
    )


def _widen(table: pa.Table, widened: tuple[tuple[str, pa.DataType], ...]) -> pa.Table:
    """Columns written before the table widened their type, cast to the type the table has now
    (Spark's parquet reader widens only some types, e.g. not byte to decimal)."""
    for name, target in widened:
        index = table.schema.get_field_index(name)
        if index >= 0 and not table.schema.field(index).type.equals(target):
            field = table.schema.field(index).with_type(target)
            table = table.set_column(index, field, conform(table.column(index), target, target))
    return table


_PAGE_BYTES = 8 << 20


def _text_columns(schema: pa.Schema) -> list[str]:
    return [
        f.name
        for f in schema
        if pa.types.is_string(f.type)
        or pa.types.is_binary(f.type)
        or pa.types.is_large_string(f.type)
        or pa.types.is_large_binary(f.type)
    ]


def staged_copy(table: pa.Table, text: list[str]) -> pa.Buffer:
    """The parquet bytes of a rewritten file's ``table``, whose ``text`` columns were read as
    dictionaries.

    This copy lives in a local cache and is written on the first read's critical path, so it is
    written for speed: text columns stay dictionary-encoded from the read (no re-hashing), nothing
    else tries a dictionary, pages are large and not compressed, and min/max statistics (which
    Spark uses to skip row groups) are kept for all but text columns, where they cost the most.
    Together a third of the cost of a default write. Each row group was read with its own
    dictionary: they are made one first (remapping indexes, under a millisecond), or the writer
    falls back to plain strings at the first change (half the write's time, and 60 % more bytes
    for Spark to read). Columns without a null in this file are written as required: no definition
    levels to write or read (a third of the write's time; Spark reads them with the table's schema,
    where every column stays nullable). The bytes go into one buffer of the table's size in memory
    and some more, which uncompressed parquet does not outgrow: a growing buffer would copy them at
    each doubling, into fresh pages the kernel zeroes (half the write's time). A file that does
    outgrow it (deeply nested lists' levels could) is written again into a growing one."""
    table = _required_where_full(table.unify_dictionaries())
    options: dict[str, Any] = {
        "compression": "none",
        "use_dictionary": text,
        "write_statistics": [f.name for f in table.schema if f.name not in text],
        "data_page_size": _PAGE_BYTES,
    }
    room = pa.allocate_buffer(table.nbytes + (table.nbytes >> 3) + (1 << 20))
    sink = pa.FixedSizeBufferWriter(room)
    try:
        pq.write_table(table, sink, **options)
        return room.slice(0, sink.tell())
    except OSError:  # "Write out of bounds"
        grown = pa.BufferOutputStream()
        pq.write_table(table, grown, **options)
        return grown.getvalue()


def _required_where_full(table: pa.Table) -> pa.Table:
    """``table`` with each top-level column that holds no null declared non-nullable (metadata only)."""
    schema = pa.schema(
        [
            f.with_nullable(False) if f.nullable and not column.null_count else f
            for f, column in zip(table.schema, table.columns)
        ],
        metadata=table.schema.metadata,
    )
    return table if schema.equals(table.schema, check_metadata=True) else table.cast(schema)


def _rewrite(data: memoryview, task: StageTask, action: FileAction, http: httpx.Client, out: Any) -> None:
    """The file without the rows its deletion vector deletes (or, for a paired change-feed action,
    only the rows whose deletion state changed) and with widened columns cast; schema metadata
    and field ids kept. A file that needs neither is written as it came."""
    source = pa.BufferReader(data)
    text = _text_columns(pq.read_schema(source))
    # pre_buffer: the file is in memory already; coalescing its reads would only copy it again
    table = pq.read_table(source, coerce_int96_timestamp_unit="us", read_dictionary=text, pre_buffer=False)
    mask = row_mask(action, table.num_rows, http)
    changed = _widen(table, task.widened)
    if mask is None and changed is table:
        out.write(data)
        return
    if mask is not None:
        changed = changed.filter(pa.array(mask))
    out.write(memoryview(staged_copy(changed, text)))


def _listed_size(action: FileAction) -> Callable[[int], pa.Buffer]:
    """Arrow memory for a body of the file's listed size; another size is refused before any of
    it is read (a file that changed, or a length no memory should be taken for)."""

    def allocate(length: int) -> pa.Buffer:
        if length != action.size:
            raise _size_error(action, length)
        return pa.allocate_buffer(length)

    return allocate


def _write_once(
    area: CacheArea, task: StageTask, action: FileAction, http: httpx.Client, pool: ConnectionPool, retry: RetryPolicy
) -> int:
    if task.need is not None and not task.rewrite:
        return stage_needed(area, task.relpath, action, task.need, pool)
    write = area.write(task.relpath)
    try:
        if task.rewrite:
            whole = download_file(action.url, http, action.id, allocate=_listed_size(action), retry=retry)
            got = whole.size
            if got != action.size:  # came through httpx (a proxy, a redirect)
                raise _size_error(action, got)
            _rewrite(memoryview(whole), task, action, http, write)
        else:
            got = copy_url(action.url, write, pool=pool, file_id=action.id)
            if got != action.size:
                raise _size_error(action, got)
    except BaseException:
        write.abort()
        raise
    write.commit()
    return got


def stage_one(
    area: CacheArea,
    task: StageTask,
    *,
    http: httpx.Client,
    pool: ConnectionPool,
    renewer: UrlRenewer,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> int:
    """Stage one file: retries transient failures, renews refused URLs; returns bytes fetched."""

    def attempt(action: FileAction) -> int:
        write = functools.partial(_write_once, area, task, action, http, pool, retry)
        return retrying(write, retry, what=f"file {action.id}", url=action.url, file_id=action.id)

    return renewer.read(task.action, attempt)


def stage_files(
    area: CacheArea,
    tasks: Sequence[StageTask],
    *,
    threads: int,
    refresh: Refresh | None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> StageReport:
    """Stage ``tasks`` with ``threads`` threads; the first failure stops the rest and is raised."""
    started = time.perf_counter()
    if not tasks:
        return StageReport(0, 0, 0.0)
    renewer = renewer_for(refresh)
    connections = ConnectionPool(timeout=300.0, max_idle_per_host=max(32, threads))
    with (
        file_http_client(pool=connections) as http,
        ThreadPoolExecutor(max(1, min(threads, len(tasks))), thread_name_prefix="deltaport-stage") as pool,
    ):
        # Rewrites first: their CPU then overlaps the plain files' downloads instead of trailing them.
        ordered = sorted(tasks, key=lambda task: not task.rewrite)
        futures = [
            pool.submit(stage_one, area, task, http=http, pool=connections, renewer=renewer, retry=retry)
            for task in ordered
        ]
        try:
            fetched = sum(f.result() for f in futures)
        finally:
            for future in futures:
                future.cancel()
    return StageReport(len(tasks), fetched, time.perf_counter() - started)


# --- as a Spark job ---------------------------------------------------------------------------------

#: what each fetching task reports: files and bytes it fetched, or the error it met (pickled)
REPORT_SCHEMA = "files long, bytes long, error binary"


def _report_batch(files: int, fetched: int, error: bytes | None) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"files": [files], "bytes": [fetched], "error": [error]},
        schema=pa.schema([("files", pa.int64()), ("bytes", pa.int64()), ("error", pa.binary())]),
    )


def _pickled(exc: Exception) -> bytes:
    try:
        return pickle.dumps(exc)
    except Exception:  # an exception that does not pickle: its type and message still go back
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def _stage_slice(
    location: str, threads: int, refresh: Refresh | None, tasks: Sequence[StageTask], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """One Spark task: stage the tasks whose indexes its rows hold. An error is reported, not
    raised, so that Spark does not retry what stage_files already retried, and so that the driver
    raises it as it is."""
    indexes = [i for batch in batches for i in batch.column(0).to_pylist()]
    if not indexes:
        return
    try:
        report = stage_files(open_area(location), [tasks[i] for i in indexes], threads=threads, refresh=refresh)
    except ConnectionFailed as exc:
        where = ConnectionFailed(
            f"{exc}; the cluster's executors fetch the shared files, so they must reach the sharing "
            "server's file URLs (or fetch on the driver with stagingFetch=driver)"
        )
        yield _report_batch(0, 0, _pickled(where))
        return
    except Exception as exc:
        yield _report_batch(0, 0, _pickled(exc))
        return
    yield _report_batch(report.files, report.bytes, None)


def _mixed(tasks: Sequence[StageTask]) -> list[StageTask]:
    """Largest, smallest, second largest, ...: Spark deals the indexes out in contiguous ranges,
    so each range holds large and small files alike."""
    ordered = sorted(tasks, key=lambda t: -t.action.size)
    mixed = []
    while ordered:
        mixed.append(ordered.pop(0))
        if ordered:
            mixed.append(ordered.pop())
    return mixed


@functools.cache
def _package_zip() -> str:
    """The deltaport package as a zip the executors' Python can import, named by its content (so
    that a session never meets two different files of one name), made once per process."""
    import deltaport

    package = Path(deltaport.__file__).parent
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    folder = Path(tempfile.gettempdir()) / f"deltaport-ship-{os.getuid() if hasattr(os, 'getuid') else 0}"
    folder.mkdir(mode=0o700, exist_ok=True)
    target = folder / f"deltaport-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        tmp = folder / f"{_TMP}{uuid.uuid4().hex}.zip"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, f"deltaport/{path.relative_to(package).as_posix()}")
        os.replace(tmp, target)
    return str(target)


_TMP = ".tmp-"
_shipped: weakref.WeakSet = weakref.WeakSet()
_shipping = threading.Lock()


def on_a_cluster(spark: Any) -> bool:
    """Whether a cluster runs the session (a master that is not ``local``). Asked from the
    session's configuration, not its JVM, so that classic and Connect sessions answer alike."""
    return not str(spark.conf.get("spark.master", "local")).startswith("local")


def workers_elsewhere(spark: Any) -> bool:
    """Whether the session's Python workers may run another environment than this process: a
    Spark Connect session, or a cluster."""
    return is_connect(spark) or on_a_cluster(spark)


def ship_package(spark: Any) -> None:
    """Make the driver's deltaport the one the session's Python workers import (once per session):
    ``addArtifacts(pyfile=True)`` works on classic and Spark Connect sessions alike, and puts the
    zip before the workers' own packages."""
    with _shipping:  # reads on several threads of one session ship it once (a second add fails)
        if spark in _shipped:
            return
        spark.addArtifacts(_package_zip(), pyfile=True)
        _shipped.add(spark)


def _job_failed(exc: Exception) -> Exception:
    """A failed fetching job: one line naming the fix when the workers cannot import what the
    fetch needs; any other failure as Spark raised it."""
    text = str(exc)
    missing = re.search(r"(?:ModuleNotFoundError|ImportError): (.*)", text)
    if missing is None:
        return exc
    return StagingError(
        f"the cluster's Python workers cannot run the fetch ({missing.group(1).strip()}): install "
        "deltaport's dependencies (pip install 'deltaport[spark]') in the Python the executors run "
        "(PYSPARK_PYTHON), or fetch on the driver with stagingFetch=driver"
    )


def stage_on_executors(
    spark: Any, location: str, tasks: Sequence[StageTask], *, threads: int, refresh: Refresh | None
) -> StageReport:
    """Stage ``tasks`` as a Spark job of DataFrame operations only (so it runs on classic and Spark
    Connect sessions): ``spark.range`` over the tasks' indexes, split by Spark over the cluster's
    cores, and a ``mapInArrow`` whose tasks each fetch their share into ``location``, which every
    executor must see. The first error a task met is raised here."""
    started = time.perf_counter()
    if not tasks:
        return StageReport(0, 0, 0.0)
    ship_package(spark)
    mixed = _mixed(tasks)
    job = functools.partial(_stage_slice, location, threads, refresh, mixed)
    try:
        rows = spark.range(len(mixed)).mapInArrow(job, REPORT_SCHEMA).collect()
    except Exception as exc:
        raise _job_failed(exc) from None
    for row in rows:
        if row["error"] is not None:
            raise pickle.loads(row["error"])
    return StageReport(sum(r["files"] for r in rows), sum(r["bytes"] for r in rows), time.perf_counter() - started)
