"""The staging cache and the fetcher: keys, folders, eviction, and what bad input gets.

The fetcher runs against the real sharing server of ``conftest.sharing`` (and, for a server
that dies mid-body, a socket that sends half a response), without Spark.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaport.client.errors import ConnectionFailed, FileDownloadError, SharingServerError, UrlExpired
from deltaport.client.retry import RetryPolicy
from deltaport.errors import InvalidParameter
from deltaport.spark.fetching import StageTask, stage_files
from deltaport.spark.options import ReadOptions, StagingOptions
from deltaport.spark.remote import Refresh
from deltaport.spark.staging import (
    LocalArea,
    StagingError,
    evict,
    file_key,
    folder,
    open_area,
    table_key,
)

NO_WAIT = RetryPolicy(max_retries=2, initial_backoff=0.0, sleep=lambda seconds: None)


# --- keys and folders -------------------------------------------------------------------------------


def test_folders_escape_every_special_character_and_name_nulls():
    assert folder([("a", "x/y=z%"), ("b", None), ("c", "2024-01-01T00:00:00.000000Z")]) == (
        "a=x%2Fy%3Dz%25/b=__HIVE_DEFAULT_PARTITION__/c=2024-01-01T00%3A00%3A00.000000Z"
    )
    assert folder([]) == ""


def test_file_keys_tell_deletion_vectors_apart():
    dv = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 4, "cardinality": 1}
    keys = {
        file_key("f", 10),
        file_key("f", 11),
        file_key("g", 10),
        file_key("f", 10, dv),
        file_key("f", 10, {**dv, "offset": 5}),
        file_key("f", 10, dv, None, True),
        file_key("f", 10, None, dv, True),
    }
    assert len(keys) == 7
    assert file_key("f", 10, dv) == file_key("f", 10, dict(dv))
    signed = {
        "storageType": "p",
        "pathOrInlineDv": "https://h/t/dv.bin?X-Amz-Signature=1",
        "offset": 1,
        "sizeInBytes": 4,
        "cardinality": 1,
    }
    resigned = {**signed, "pathOrInlineDv": "https://h/t/dv.bin?X-Amz-Signature=2"}
    assert file_key("f", 10, signed) == file_key("f", 10, resigned)  # URLs are signed anew in every answer
    assert file_key("f", 10, signed) != file_key("f", 10, {**signed, "pathOrInlineDv": "https://h/t/other.bin?x"})
    assert (
        len(
            {
                table_key("http://a/", "s.d.t", "1"),
                table_key("http://b", "s.d.t", "1"),
                table_key("http://a", "s.d.u", "1"),
                table_key("http://a", "s.d.t", "2"),
            }
        )
        == 4
    )
    assert table_key("http://a/", "s.d.t", "1") == table_key("http://a", "s.d.t", "1")


# --- the local area ------------------------------------------------------------------------------------


def _put(area: LocalArea, relpath: str, data: bytes, age: float = 0.0) -> None:
    write = area.write(relpath)
    write.write(data)
    write.commit()
    then = time.time() - age
    os.utime(os.path.join(area.base, relpath), (then, then))


def test_entries_appear_whole_and_are_checked_by_size_or_footer(tmp_path):
    area = LocalArea(str(tmp_path / "cache"))
    area.check_writable()
    write = area.write("t/a.parquet")
    write.write(b"x" * 10)
    assert not area.valid("t/a.parquet", 10)  # not there before the commit
    assert next(p.name for p in (Path(area.base) / "t").iterdir()).startswith(".tmp-")
    write.commit()
    assert area.valid("t/a.parquet", 10) and not area.valid("t/a.parquet", 11)
    footer = b"data" + (4).to_bytes(4, "little") + b"PAR1"
    _put(area, "t/b.rw.parquet", b"PAR1" + footer)
    assert area.valid("t/b.rw.parquet", None)
    with open(os.path.join(area.base, "t/b.rw.parquet"), "r+b") as f:
        f.truncate(9)
    assert not area.valid("t/b.rw.parquet", None)
    aborted = area.write("t/c.parquet")
    aborted.abort()
    assert sorted(p.name for p in (Path(area.base) / "t").iterdir()) == ["a.parquet", "b.rw.parquet"]
    assert oct(os.stat(area.root).st_mode & 0o777) == "0o700"


def test_eviction_by_bytes_then_age_keeping_recent_and_current_entries(tmp_path):
    area = LocalArea(str(tmp_path / "cache"))
    for name, age in (("old", 500), ("older", 600), ("oldest", 700), ("recent", 10), ("current", 800)):
        _put(area, f"t/{name}.parquet", b"x" * 100, age)
    _put(area, "t/.tmp-1234-x.parquet", b"x" * 50, 900)
    result = evict(area, max_bytes=300, max_age_seconds=10_000, grace_seconds=60, keep=["t/current.parquet"])
    left = sorted(e.relpath for e in area.entries())
    assert left == ["t/current.parquet", "t/old.parquet", "t/recent.parquet"]  # the least recently used went
    assert (result.removed_files, result.kept_bytes) == (3, 300)
    evict(area, max_bytes=10_000, max_age_seconds=400, grace_seconds=60, keep=["t/current.parquet"])
    assert sorted(e.relpath for e in area.entries()) == ["t/current.parquet", "t/recent.parquet"]
    evict(area, max_bytes=0, max_age_seconds=0, grace_seconds=60)
    assert [e.relpath for e in area.entries()] == ["t/recent.parquet"]  # used within the grace period


def test_a_process_walks_a_cache_to_evict_once_a_minute_or_when_it_staged_a_twentieth_of_its_limit(tmp_path):
    from deltaport.spark.staging import EVICT_SPACING_S, evict_now_and_then

    area, other = LocalArea(str(tmp_path / "cache")), LocalArea(str(tmp_path / "other"))
    for name in ("a", "b", "c"):
        _put(area, f"t/{name}.parquet", b"x" * 100, 500)
    now = [1000.0]

    def run(target, staged):
        return evict_now_and_then(
            target, staged=staged, max_bytes=2000, max_age_seconds=10, grace_seconds=60, clock=lambda: now[0]
        )

    assert run(area, 0).removed_files == 3  # the first read of a process walks
    _put(area, "t/d.parquet", b"x" * 100, 500)
    now[0] += 1
    assert run(area, 60) is None and run(area, 39) is None  # 99 bytes staged since: under 2000 / 20
    assert run(other, 0) is not None  # each location on its own
    assert run(area, 1).removed_files == 1  # 100 bytes: a twentieth of the limit
    _put(area, "t/e.parquet", b"x" * 100, 500)
    now[0] += EVICT_SPACING_S - 1
    assert run(area, 0) is None
    now[0] += 1
    assert run(area, 0).removed_files == 1  # a minute after the last walk
    assert not list(area.entries())


# --- locations ----------------------------------------------------------------------------------------


def test_locations_that_cannot_be_used_get_one_line_naming_the_fix(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StagingError, match=r"cannot be used .*stagingLocation"):
        open_area(str(blocker / "cache")).check_writable()
    with pytest.raises(StagingError, match="ftp:.*use a local folder, file:, hdfs:, s3a:, abfss: or gs:"):
        open_area("ftp://host/cache")
    monkeypatch.setenv("DELTAPORT_STAGING", str(tmp_path / "from-env"))
    assert open_area(None).root == str(tmp_path / "from-env")
    assert open_area(f"file://{tmp_path}/x").root == f"{tmp_path}/x"
    with pytest.raises(InvalidParameter, match="stagingFetch"):
        StagingOptions.parse({"stagingFetch": "cluster"})
    with pytest.raises(InvalidParameter, match="stagingCacheMaxAge"):
        StagingOptions.parse({"stagingCacheMaxAge": "a week"})


FULL_DISK = r"""
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
from deltaport.spark.staging import LocalArea, StagingError
area = LocalArea(sys.argv[1])
write = area.write("t/big.parquet")
try:
    for _ in range(100):
        write.write(b"x" * 1000)
    write.commit()
except StagingError as exc:
    write.abort()
    print(exc)
"""


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path / "cache")], capture_output=True, text=True, timeout=60
    )
    assert "is full: free some space, lower the cache size (stagingCacheSize)" in out.stdout, out.stderr
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


# --- fetching from the real server ---------------------------------------------------------------------


@pytest.fixture
def plan(sharing):
    remote = ReadOptions.parse({"path": sharing.url("sales")}).remote
    with remote.open() as session:
        files = session.snapshot()
    return files, Refresh(remote, "snapshot", {})


def _tasks(files, actions=None, rewrite=False):
    actions = files.files if actions is None else actions
    return [StageTask(a, f"t/{file_key(a.id, a.size)}.parquet", rewrite) for a in actions]


def test_files_are_staged_complete_and_checked(tmp_path, plan):
    files, refresh = plan
    area = LocalArea(str(tmp_path / "cache"))
    report = stage_files(area, _tasks(files), threads=3, refresh=refresh)
    assert report.files == len(files.files) and report.bytes == sum(a.size for a in files.files)
    assert all(area.valid(t.relpath, t.action.size) for t in _tasks(files))


@pytest.mark.parametrize(("more", "rewrite"), [(1, False), (1, True), (-1, True)], ids=["streamed", "kept", "overflow"])
def test_a_size_that_differs_from_the_answer_is_an_error_and_leaves_nothing(tmp_path, plan, more, rewrite):
    """A file streamed into its entry, or kept whole in memory to be rewritten (a buffer of the
    listed size, which more bytes than listed must not overrun)."""
    files, refresh = plan
    area = LocalArea(str(tmp_path / "cache"))
    wrong = dataclasses.replace(files.files[0], size=files.files[0].size + more)
    with pytest.raises(FileDownloadError, match=r"sent \d+ bytes where the server's answer says .*read the table"):
        stage_files(area, _tasks(files, [wrong], rewrite), threads=1, refresh=refresh)
    assert not list(area.entries())


def test_a_file_to_rewrite_of_another_size_takes_no_memory(tmp_path, plan, monkeypatch):
    """The answer's length is compared with the listed size before a buffer is taken for it."""
    files, refresh = plan
    taken = []
    real = pa.allocate_buffer
    monkeypatch.setattr(pa, "allocate_buffer", lambda size, *a, **k: taken.append(size) or real(size, *a, **k))
    wrong = dataclasses.replace(files.files[0], size=files.files[0].size - 1)
    with pytest.raises(FileDownloadError, match=r"sent \d+ bytes where the server's answer says .*read the table"):
        stage_files(LocalArea(str(tmp_path / "cache")), _tasks(files, [wrong], True), threads=1, refresh=refresh)
    assert files.files[0].size not in taken
    stage_files(LocalArea(str(tmp_path / "cache")), _tasks(files, files.files[:1], True), threads=1, refresh=refresh)
    assert files.files[0].size in taken


def test_a_refused_url_is_renewed_from_the_server(tmp_path, plan, sharing):
    files, refresh = plan
    area = LocalArea(str(tmp_path / "cache"))
    action = files.files[0]
    forged = dataclasses.replace(action, url=action.url.replace("X-Amz-Signature=", "X-Amz-Signature=00"))
    queries = len(sharing.recorder.queries("sales"))
    stage_files(area, _tasks(files, [forged]), threads=1, refresh=refresh)
    assert area.valid(_tasks(files, [forged])[0].relpath, action.size)
    assert len(sharing.recorder.queries("sales")) == queries + 1
    with pytest.raises(UrlExpired, match="cannot be renewed; read the table again"):
        stage_files(LocalArea(str(tmp_path / "other")), _tasks(files, [forged]), threads=1, refresh=None)


def test_a_vanished_file_is_an_error_naming_the_cause(tmp_path, plan):
    files, _refresh = plan
    action = files.files[0]
    gone = dataclasses.replace(action, url=action.url.replace(".parquet?", "-gone.parquet?"))
    with pytest.raises((FileDownloadError, UrlExpired)):
        stage_files(LocalArea(str(tmp_path / "cache")), _tasks(files, [gone]), threads=1, refresh=None)


class HalfServer:
    """An HTTP peer that promises 1,000 bytes and closes after 10: a server dying mid-body."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            self.requests += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)
            conn.close()


def test_a_server_that_dies_mid_body_is_retried_then_an_error_and_leaves_nothing(tmp_path, plan):
    files, _ = plan
    half = HalfServer()
    action = dataclasses.replace(files.files[0], url=f"http://127.0.0.1:{half.port}/f.parquet?sig=1", size=1000)
    area = LocalArea(str(tmp_path / "cache"))
    with pytest.raises(ConnectionFailed, match="after 3 attempts .*check that the sharing server"):
        stage_files(area, _tasks(files, [action]), threads=1, refresh=None, retry=NO_WAIT)
    assert half.requests == 3
    assert not [p for p in Path(area.base).rglob("*") if p.is_file()]
    half.sock.close()


# --- errors before Spark runs ------------------------------------------------------------------------


def test_bad_tables_and_options_are_one_line_before_spark_runs(spark, sharing, tmp_path):
    from deltaport.spark import read_table

    with pytest.raises(SharingServerError, match="404") as caught:
        read_table(spark, sharing.url("no_such_table"), stagingLocation=str(tmp_path))
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidParameter, match="unknown option 'versionAsOff'; did you mean 'versionAsOf'"):
        read_table(spark, sharing.url("sales"), versionAsOff=1)
    with pytest.raises(InvalidParameter, match="startingVersion or startingTimestamp"):
        read_table(spark, sharing.url("sales"), readChangeFeed=True)
    with pytest.raises(StagingError, match="not a folder|cannot be used"):
        blocker = tmp_path / "file"
        blocker.write_text("")
        read_table(spark, sharing.url("sales"), stagingLocation=str(blocker))


def test_a_rewritten_file_keeps_its_text_columns_dictionary_encoded_in_every_row_group(tmp_path):
    """Each row group of the source is read with its own dictionary (in its own order); the copy
    must not fall back to plain strings where they change."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltaport.spark.fetching import staged_copy

    rows, groups = 40_000, 4
    rng = np.random.default_rng(5)
    names = pa.array([f"category_{k:03d}" for k in rng.integers(0, 100, rows)])
    source = pa.table({"id": pa.array(np.arange(rows)), "category": names})
    path = tmp_path / "source.parquet"
    pq.write_table(source, path, row_group_size=rows // groups)
    read = pq.read_table(path, read_dictionary=["category"])
    assert len({str(chunk.dictionary) for chunk in read.column("category").chunks}) > 1  # the case at hand
    kept = read.filter(pa.array(rng.random(rows) > 0.01))

    copy = staged_copy(kept, ["category"])
    meta = pq.read_metadata(pa.BufferReader(copy))
    for group in range(meta.num_row_groups):
        chunk = meta.row_group(group).column(1)
        assert chunk.has_dictionary_page and chunk.total_compressed_size < 2 * meta.row_group(group).num_rows
    back = pq.read_table(pa.BufferReader(copy))
    assert back.column("category").to_pylist() == kept.column("category").to_pylist()
    assert back.column("id").to_pylist() == kept.column("id").to_pylist()


def test_a_rewritten_file_writes_columns_without_nulls_as_required_and_keeps_the_rest():
    """Required columns carry no definition levels (a cheaper write); a column with a null stays
    optional, and field ids and schema metadata survive."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltaport.spark.fetching import staged_copy

    ids = pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"})
    note = pa.field("note", pa.string(), metadata={b"PARQUET:field_id": b"2"})
    pair = pa.field("pair", pa.struct([pa.field("a", pa.int32())]), metadata={b"PARQUET:field_id": b"3"})
    schema = pa.schema([ids, note, pair], metadata={b"origin": b"test"})
    table = pa.table(
        {"id": [1, 2, 3], "note": ["x", None, "z"], "pair": [{"a": 1}, {"a": None}, {"a": 3}]}, schema=schema
    )
    back = pq.read_table(pa.BufferReader(staged_copy(table, ["note"])))
    assert [f.nullable for f in back.schema] == [False, True, False]
    assert back.schema.field("pair").type.field("a").nullable  # a nested field keeps its own
    assert [f.metadata[b"PARQUET:field_id"] for f in back.schema] == [b"1", b"2", b"3"]
    assert back.schema.metadata[b"origin"] == b"test"
    assert back.to_pylist() == table.to_pylist()


def test_a_rewritten_file_that_outgrows_its_buffer_is_written_whole():
    """The copy is written into a buffer of the table's size in memory and some more; one whose
    parquet is larger (here a footer of 12,000 columns for no rows) is written again, whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltaport.spark.fetching import staged_copy

    table = pa.table({f"c{i}": pa.array([], pa.int64()) for i in range(12_000)})
    copy = staged_copy(table, [])
    assert copy.size > table.nbytes + (1 << 20)  # the case at hand
    back = pq.read_table(pa.BufferReader(copy))
    assert back.num_rows == 0 and back.column_names == table.column_names
