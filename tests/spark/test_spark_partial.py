"""Staged reads that fetch only the column chunks a query needs (deltaport.spark.partial, .chunks),
against the whole-file read, on a generated table with many row groups and on corpus tables,
served by the real sharing server; the bytes its file GETs sent are counted."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TABLES

from deltaport.client.errors import FileDownloadError, UrlExpired
from deltaport.spark import chunks, read_table, stage
from deltaport.spark.chunks import RECORD_KEY
from deltaport.spark.parquet_footer import I64, decode, encode, put_key_value
from deltaport.spark.partial import TAIL, part_relpath
from deltaport.spark.projection import UnknownColumn

TOKEN = "partial-token"
FILES, ROWS, GROUP = 4, 40_000, 2_000  # 20 row groups per file
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": name, "type": kind, "nullable": True, "metadata": {}}
        for name, kind in [
            ("id", "long"),
            ("value", "double"),
            ("qty", "integer"),
            ("name", "string"),
            ("day", "date"),
            ("flag", "boolean"),
            ("maybe", "integer"),
            ("part", "string"),
        ]
    ],
}


def _rows(i: int, rng: np.random.Generator) -> pa.Table:
    first = i * ROWS
    ids = np.arange(first, first + ROWS, dtype=np.int64)
    maybe = pa.array([None if (k // GROUP) % 3 == 0 else int(k % 7) for k in range(ROWS)], pa.int32())
    return pa.table(
        {
            "id": ids,
            "value": rng.random(ROWS) * 1000,
            "qty": pa.array(rng.integers(0, 1000, ROWS), pa.int32()),
            "name": pa.array([f"name-{k:07d}" for k in ids]),
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(k // 5000)) for k in ids]),
            "flag": pa.array((ids // GROUP) % 2 == 0),
            "maybe": maybe,
        }
    )


def build_table(path: Path) -> None:
    from deltaport.demo import file_stats, write_commit

    rng = np.random.default_rng(3)
    actions = []
    for i in range(FILES):
        rows = _rows(i, rng)
        part = "even" if i % 2 == 0 else "odd"
        relative = f"part={part}/part-{i:05d}-{uuid.uuid4()}.snappy.parquet"
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        # page indexes in half the files: Spark reads them to skip pages within a row group
        pq.write_table(rows, path / relative, row_group_size=GROUP, compression="snappy", write_page_index=i % 2 == 0)
        actions.append(
            {
                "add": {
                    "path": relative,
                    "partitionValues": {"part": part},
                    "size": (path / relative).stat().st_size,
                    "modificationTime": 1_717_236_000_000,
                    "dataChange": True,
                    "stats": file_stats(rows),
                }
            }
        )
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["part"],
        "configuration": {},
        "createdTime": 1_717_236_000_000,
    }
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    write_commit(path, 0, [{"protocol": protocol}, {"metaData": metadata}, *actions])


WIDE = 400  # columns: the footer of 4 row groups of them is longer than the 64 KiB fetched first


def build_wide_table(path: Path) -> None:
    from deltaport.demo import file_stats, write_commit

    rows = pa.table({f"c{i}": pa.array(np.arange(4000, dtype=np.int64) * (i + 1)) for i in range(WIDE)})
    name = "part-00000-wide.snappy.parquet"
    path.mkdir(parents=True)
    pq.write_table(rows, path / name, row_group_size=1000, write_page_index=True)  # more than 64 KiB of them
    add = {"path": name, "partitionValues": {}, "size": (path / name).stat().st_size, "modificationTime": 0}
    add.update({"dataChange": True, "stats": file_stats(rows.select(["c0"]))})
    fields = [{"name": f"c{i}", "type": "long", "nullable": True, "metadata": {}} for i in range(WIDE)]
    metadata = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "partitionColumns": []}
    metadata.update({"schemaString": json.dumps({"type": "struct", "fields": fields}), "configuration": {}})
    protocol = {"minReaderVersion": 1, "minWriterVersion": 2}
    write_commit(path, 0, [{"protocol": protocol}, {"metaData": metadata}, {"add": add}])


class Storage:
    """ASGI middleware before the sharing server: counts the file GETs (and those of several
    ranges) and the body bytes they were sent, and can make the storage misbehave (ignore Range,
    answer only the first of several ranges, as some S3 implementations do, report another file
    size, garble the last bytes of a file)."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests = 0
        self.several = 0  # requests for several ranges
        self.bytes = 0
        self.ignore_range = False
        self.first_range_only = False
        self.size_delta = 0
        self.garble_tail = False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or "/files/" not in scope["path"]:
            return await self.app(scope, receive, send)
        self.requests += 1
        if self.ignore_range:
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"range"]}
        asked = dict(scope["headers"]).get(b"range", b"").decode()
        self.several += "," in asked
        if self.first_range_only and "," in asked:
            asked = asked.split(",")[0]
            scope = {
                **scope,
                "headers": [(k, v) for k, v in scope["headers"] if k != b"range"] + [(b"range", asked.encode())],
            }

        async def counting(message):
            if message["type"] == "http.response.start" and self.size_delta:
                headers = []
                for k, v in message["headers"]:
                    if k.lower() == b"content-range":
                        span, _, total = v.decode().rpartition("/")
                        v = f"{span}/{int(total) + self.size_delta}".encode()
                    headers.append((k, v))
                message = {**message, "headers": headers}
            if message["type"] == "http.response.body":
                body = message.get("body", b"")
                self.bytes += len(body)
                if self.garble_tail and asked and not asked.startswith("bytes=0-") and body:
                    message = {**message, "body": body[:-48] + b"\xff" * 40 + body[-8:]}  # length kept
            await send(message)

        await self.app(scope, receive, counting)


class Served:
    def __init__(self, storage: Storage, profile: Path, tables: dict[str, Path]) -> None:
        self.storage = storage
        self.profile = profile
        self.tables = tables

    def url(self, name: str) -> str:
        return f"{self.profile}#share.default.{name}"

    def total_bytes(self, name: str) -> int:
        return sum(p.stat().st_size for p in self.tables[name].rglob("*.parquet"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from servers import RunningServer

    from deltaport.server import create_app, parse_config

    root = tmp_path_factory.mktemp("partial")
    tables = {"many": root / "many"}
    build_table(tables["many"])
    tables["wide"] = root / "wide"
    build_wide_table(tables["wide"])
    tables.update({"partitioned": TABLES / "basic_partitioned", "cm_name": TABLES / "cdf-column-mapping-name-mode"})
    config = {
        "version": 1,
        "shares": [
            {
                "name": "share",
                "schemas": [
                    {"name": "default", "tables": [{"name": n, "location": str(p)} for n, p in tables.items()]}
                ],
            }
        ],
        "recipients": [{"name": "spark", "tokens": [TOKEN], "shares": ["share"]}],
        "preSignedUrlTimeoutSeconds": 900,
    }
    storage = Storage(create_app(parse_config(config)))
    server = RunningServer(storage)
    profile = root / "profile.share"
    profile.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    yield Served(storage, profile, tables)
    server.stop()


@pytest.fixture
def cache(tmp_path) -> str:
    return str(tmp_path / "staging")


@pytest.fixture(autouse=True)
def small_holes(monkeypatch):
    """The generated table's row groups are small (2,000 rows), so its chunks lie a few KiB apart
    and the default 1 MiB hole would (rightly) fetch each file in one GET: here holes of at most
    4 KiB are bridged, as they would be between the chunks of row groups of real size."""
    monkeypatch.setattr(chunks, "GAP", 4096)


def rows(frame) -> list[tuple]:
    return sorted((tuple(r) for r in frame.collect()), key=repr)


def entries(cache: str, suffix: str) -> list[Path]:
    """Entries named ``*suffix`` (whole-file entries for ``.parquet``, not compact ones)."""
    found = (p for p in Path(cache).rglob(f"*{suffix}") if not p.name.startswith(".tmp"))
    return sorted(p for p in found if suffix != ".parquet" or not p.name.endswith(".part.parquet"))


def whole_read(spark, served, name, tmp_path, columns, where):
    full = read_table(spark, served.url(name), stagingLocation=str(tmp_path / "whole"))
    if where is not None:
        full = full.where(where)
    return full.select(*columns) if columns is not None else full


# --- the same rows as the whole-file read ----------------------------------------------------------

CASES = [
    (["value"], None),
    (["id", "value"], "id < 5000"),
    (["name"], "name >= 'name-0150000' AND name < 'name-0150100'"),
    (["id", "day"], "day = DATE'2024-01-20' OR id IN (7, 99999)"),
    (["qty"], "part = 'odd' AND id > 150000"),
    (["id", "maybe"], "maybe IS NULL AND id BETWEEN 30000 AND 50000"),
    (["id"], "maybe IS NOT NULL AND NOT (id >= 2000)"),
    (["part", "flag"], "flag = false AND value > 990"),
    (None, "id = 12345"),
    (["qty", "id"], "CAST(qty AS long) < 10 OR abs(maybe) = 3"),
]


@pytest.mark.parametrize(("columns", "where"), CASES)
def test_the_dataframe_is_the_whole_reads_where_and_select(spark, served, cache, tmp_path, columns, where):
    ours = read_table(spark, served.url("many"), columns=columns, where=where, stagingLocation=cache)
    expected = whole_read(spark, served, "many", tmp_path, columns, where)
    assert ours.columns == expected.columns
    assert rows(ours) == rows(expected)
    assert entries(cache, ".part.parquet") or not rows(expected), "read from compact entries"


@pytest.mark.parametrize(
    ("name", "columns", "where"),
    [
        ("partitioned", ["letter", "number"], "letter = 'a'"),
        ("partitioned", ["a_float"], "number > 2"),
        ("cm_name", ["Name"], None),
    ],
)
def test_corpus_tables_read_alike(spark, served, cache, tmp_path, name, columns, where):
    ours = read_table(spark, served.url(name), columns=columns, where=where, stagingLocation=cache)
    expected = whole_read(spark, served, name, tmp_path, columns, where)
    assert ours.columns == expected.columns and rows(ours) == rows(expected)


# --- what is fetched --------------------------------------------------------------------------------


def test_one_column_of_many_fetches_a_fraction_then_only_new_chunks_then_nothing(spark, served, cache):
    storage, total = served.storage, served.total_bytes("many")
    storage.bytes = 0
    first = stage(spark, served.url("many"), columns=["value"], stagingLocation=cache)
    assert first.dataframe.count() == FILES * ROWS
    value_bytes = storage.bytes
    assert 0.2 * total < value_bytes < 0.55 * total  # value: random doubles, about a third of the file
    assert first.fetched.bytes == value_bytes and first.fetched.files == FILES

    storage.bytes = storage.requests = storage.several = 0
    second = stage(spark, served.url("many"), columns=["qty"], stagingLocation=cache)
    assert second.dataframe.agg({"qty": "sum"}).collect()[0][0] == sum(
        pq.read_table(p, columns=["qty"]).column(0).to_numpy().sum() for p in served.tables["many"].rglob("*.parquet")
    )
    qty_bytes = sum(
        pq.ParquetFile(p).metadata.row_group(g).column(2).total_compressed_size
        for p in served.tables["many"].rglob("*.parquet")
        for g in range(ROWS // GROUP)
    )
    # the footers were kept, the value chunks copied locally: the qty chunks, in one GET of
    # several ranges per file (each part's boundary and headers under 200 bytes)
    assert qty_bytes < second.fetched.bytes == storage.bytes < qty_bytes + 200 * FILES * (ROWS // GROUP)
    assert storage.requests == storage.several == FILES

    storage.requests = 0
    third = stage(spark, served.url("many"), columns=["value", "qty"], stagingLocation=cache)
    assert third.fetched.files == 0 and storage.requests == 0
    assert third.dataframe.count() == FILES * ROWS


def test_a_filter_on_a_sorted_column_fetches_only_its_row_groups(spark, served, cache):
    """Of the files whose footers rule out every row group only the footer is fetched, and Spark
    is not given them; a second read finds it all in the cache."""
    storage = served.storage
    storage.bytes = 0
    first = stage(spark, served.url("many"), columns=["id", "value"], where="id < 4000", stagingLocation=cache)
    assert first.dataframe.count() == 4000
    footers = FILES * TAIL  # the last 64 KiB of each file
    assert storage.bytes - footers < 0.03 * served.total_bytes("many")  # 2 of 80 row groups, 2 of 7 columns
    kept = sorted(pq.ParquetFile(entry).metadata.num_row_groups for entry in entries(cache, ".part.parquet"))
    assert kept == [2] and first.files == 1 and len(entries(cache, ".footer")) == FILES

    storage.requests = 0
    again = stage(spark, served.url("many"), columns=["id", "value"], where="id < 4000", stagingLocation=cache)
    assert (again.files, again.fetched.files, storage.requests) == (1, 0, 0)
    assert rows(again.dataframe) == rows(first.dataframe)


def test_a_filter_no_row_group_can_pass_reads_no_file(spark, served, cache):
    none = stage(spark, served.url("many"), columns=["id", "part"], where="id < 0", stagingLocation=cache)
    assert none.files == 0 and none.dataframe.count() == 0 and none.dataframe.columns == ["id", "part"]
    assert not entries(cache, ".part.parquet") and len(entries(cache, ".footer")) == FILES


@pytest.mark.parametrize("columns", [[f["name"] for f in SCHEMA["fields"]], ["value", "name", "id"]])
def test_most_of_a_file_fetches_the_whole_file(spark, served, cache, columns):
    frame = read_table(spark, served.url("many"), columns=columns, stagingLocation=cache)
    assert frame.count() == FILES * ROWS
    assert len(entries(cache, ".parquet")) == FILES and not entries(cache, ".part.parquet")


def test_chunks_closer_than_the_hole_are_fetched_by_one_get_and_count_as_fetched(spark, served, cache, monkeypatch):
    monkeypatch.setattr(chunks, "GAP", 1 << 20)
    served.storage.requests = 0
    frame = read_table(spark, served.url("many"), columns=["qty"], stagingLocation=cache)
    assert frame.count() == FILES * ROWS
    assert served.storage.requests == 2 * FILES  # the footer, then the qty chunks and all between
    assert len(entries(cache, ".parquet")) == FILES and not entries(cache, ".part.parquet")


def test_a_whole_file_entry_wins_over_a_compact_one(spark, served, cache):
    read_table(spark, served.url("many"), columns=["value"], stagingLocation=cache).count()
    read_table(spark, served.url("many"), stagingLocation=cache).count()  # whole files
    served.storage.requests = 0
    again = stage(spark, served.url("many"), columns=["qty", "name"], stagingLocation=cache)
    assert again.fetched.files == 0 and served.storage.requests == 0
    assert all(".part." not in f for f in again.dataframe.inputFiles())


# --- what Spark reads of a compact entry -------------------------------------------------------------


def _poison_unfetched(entry: Path) -> None:
    """Make every chunk the entry does not hold claim a terabyte: reading one cannot succeed."""
    data = entry.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    tree = decode(data[-8 - length : -8])
    held = set(json.loads(dict((kv.get(1), kv.get(2)) for kv in tree.get(5).items)[RECORD_KEY.encode()])["leaves"])
    for group in tree.get(4).items:
        for leaf, column in enumerate(group.get(1).items):
            if leaf not in held:
                column.get(3).put(7, I64, 1 << 40)
    footer = encode(tree)
    entry.write_bytes(data[: -8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


def test_spark_never_reads_the_chunks_an_entry_does_not_hold(spark, served, cache, tmp_path):
    where = "id >= 100000 AND id < 110000"
    read_table(spark, served.url("many"), columns=["id", "name"], where=where, stagingLocation=cache).count()
    parts = entries(cache, ".part.parquet")
    for entry in parts:
        _poison_unfetched(entry)
    again = stage(spark, served.url("many"), columns=["id", "name"], where=where, stagingLocation=cache)
    assert again.fetched.files == 0
    assert rows(again.dataframe) == rows(whole_read(spark, served, "many", tmp_path, ["id", "name"], where))
    with pytest.raises(Exception, match="(?i)eof|reach|bound|read|block|size"):  # the poison works
        spark.read.parquet(*[p.as_uri() for p in parts]).select("value").collect()


# --- sparse entries -------------------------------------------------------------------------------


def _footer(data: bytes) -> bytes:
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


def sparse_entries(served, name: str, cache: str) -> list[tuple[Path, bytes, bytes, chunks.Record]]:
    """(entry, its bytes, the original file's bytes, its record) of each sparse entry."""
    originals = [p.read_bytes() for p in served.tables[name].rglob("*.parquet")]
    found = []
    for entry in entries(cache, ".part.parquet"):
        data = entry.read_bytes()
        for original in originals:
            record = chunks.sparse_record(_footer(data), _footer(original))
            if record is not None:
                found.append((entry, data, original, record))
    return found


def held_ranges(original: bytes, record: chunks.Record) -> list[tuple[int, int]]:
    footer = chunks.parse_footer(_footer(original))
    held = [(c.start, c.end) for c in chunks.footer_chunks(footer, record.groups, record.leaves)]
    return [(0, 4), *held, (chunks.data_end(footer), len(original) - 8 - len(footer.raw))]


@pytest.mark.parametrize(
    ("name", "columns", "where", "gets"),
    [
        ("many", ["value"], "value > 990", 2),  # no row group ruled out; page indexes in half the files
        ("wide", ["c7"], "c7 > 100", 3),  # page indexes longer than the last 64 KiB: fetched with the chunks
    ],
)
def test_a_query_needing_every_row_group_makes_sparse_entries_of_the_file_s_own_bytes(
    spark, served, cache, tmp_path, name, columns, where, gets
):
    served.storage.requests = 0
    ours = read_table(spark, served.url(name), columns=columns, where=where, stagingLocation=cache)
    requests = served.storage.requests
    assert rows(ours) == rows(whole_read(spark, served, name, tmp_path, columns, where))
    found = sparse_entries(served, name, cache)
    assert len(found) == len(list(served.tables[name].rglob("*.parquet")))
    assert requests == gets * len(found)  # the last bytes (the footer), then the chunks
    for entry, data, original, record in found:
        assert record.size == len(original) and len(data) == len(original) + len(_footer(data)) - len(_footer(original))
        held = held_ranges(original, record)
        for start, end in held:
            assert data[start:end] == original[start:end]
        footer = len(data) - len(original) + 8 + len(_footer(original))
        on_disk = sum(end - start for start, end in held) + footer + 2 * 4096 * len(held)  # blocks at each end
        assert entry.stat().st_blocks * 512 <= on_disk < 0.9 * len(original)  # the rest is a hole, on disk too
        assert pq.read_table(entry, columns=columns).equals(pq.read_table(io.BytesIO(original), columns=columns))


def test_spark_never_reads_what_a_sparse_entry_does_not_hold(spark, served, cache, tmp_path):
    read_table(spark, served.url("many"), columns=["id", "name"], stagingLocation=cache).count()
    found = sparse_entries(served, "many", cache)
    assert len(found) == FILES
    for entry, data, original, record in found:
        poisoned = bytearray(b"\xff" * len(data))
        poisoned[len(original) - 8 - len(_footer(original)) :] = data[len(original) - 8 - len(_footer(original)) :]
        for start, end in held_ranges(original, record):
            poisoned[start:end] = data[start:end]
        entry.write_bytes(bytes(poisoned))
    where = "id % 7 = 3 OR name LIKE '%99'"
    again = stage(spark, served.url("many"), columns=["id", "name"], where=where, stagingLocation=cache)
    assert again.fetched.files == 0
    assert rows(again.dataframe) == rows(whole_read(spark, served, "many", tmp_path, ["id", "name"], where))
    with pytest.raises(Exception, match="(?i)page|header|read|decod|corrupt|invalid|thrift"):  # the poison works
        spark.read.parquet(*[entry.as_uri() for entry, *_ in found]).select("value").collect()


@pytest.mark.parametrize("damage", ["record", "footer", "truncated", "grown"])
def test_a_damaged_sparse_entry_is_fetched_again(spark, served, cache, damage):
    read_table(spark, served.url("many"), columns=["qty"], stagingLocation=cache).count()
    found = sparse_entries(served, "many", cache)
    assert len(found) == FILES
    for entry, data, _original, _record in found:
        at = {"record": len(data) - 20, "footer": len(data) - 8 - len(_footer(data)) + 10}.get(damage)
        if at is not None:
            entry.write_bytes(data[:at] + bytes([data[at] ^ 0x55]) + data[at + 1 :])
        else:
            entry.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:4] + b"\0" + data[4:])
    again = stage(spark, served.url("many"), columns=["qty"], stagingLocation=cache)
    assert again.fetched.files == FILES
    assert again.dataframe.count() == FILES * ROWS
    assert len(sparse_entries(served, "many", cache)) == FILES


# --- bad input ----------------------------------------------------------------------------------------


def test_a_store_that_ignores_range_gives_whole_files(spark, served, cache):
    served.storage.ignore_range = True
    try:
        frame = read_table(spark, served.url("many"), columns=["id"], where="id < 10", stagingLocation=cache)
        assert sorted(r.id for r in frame.collect()) == list(range(10))
    finally:
        served.storage.ignore_range = False
    assert len(entries(cache, ".parquet")) == FILES and not entries(cache, ".part.parquet")


def test_each_file_s_chunks_come_in_one_get_and_one_at_a_time_from_a_store_that_answers_so(
    spark, served, cache, tmp_path
):
    storage = served.storage
    storage.requests = storage.several = 0
    frame = read_table(spark, served.url("many"), columns=["qty"], stagingLocation=cache)
    assert storage.requests == 2 * FILES and storage.several == FILES  # a footer and one GET of the chunks each
    assert rows(frame) == rows(whole_read(spark, served, "many", tmp_path, ["qty"], None))
    storage.requests = storage.several = 0
    storage.first_range_only = True
    try:
        again = read_table(
            spark, served.url("many"), columns=["qty"], stagingLocation=str(tmp_path / "apart"), stagingThreads=1
        )
        assert rows(again) == rows(frame)
    finally:
        storage.first_range_only = False
    assert storage.several == 1  # refused once (its answer left unread), then asked one range at a time
    assert storage.requests > 2 * FILES


@pytest.mark.parametrize("how", ["size", "footer"])
def test_a_file_changed_since_listing_is_one_line_and_leaves_nothing(spark, served, cache, how):
    storage = served.storage
    if how == "size":
        storage.size_delta = 1
    else:
        storage.garble_tail = True
    try:
        with pytest.raises(FileDownloadError) as caught:
            read_table(spark, served.url("many"), columns=["id"], stagingLocation=cache, stagingThreads=1)
    finally:
        storage.size_delta, storage.garble_tail = 0, False
    message = str(caught.value)
    assert "read the table again" in message and "\n" not in message
    assert not [p for p in Path(cache).rglob("*") if (p.is_file() and "parquet" in p.name) or ".tmp" in p.name]


@pytest.mark.parametrize("damage", ["record", "no record", "truncated"])
def test_a_damaged_compact_entry_is_fetched_again(spark, served, cache, damage):
    where = "flag = true"  # half the row groups of each file: compact entries
    read_table(spark, served.url("many"), columns=["qty"], where=where, stagingLocation=cache).count()
    for entry in entries(cache, ".part.parquet"):
        data = entry.read_bytes()
        if damage == "truncated":
            entry.write_bytes(data[: len(data) // 2])
            continue
        length = int.from_bytes(data[-8:-4], "little")
        tree = decode(data[-8 - length : -8])
        if damage == "record":
            put_key_value(tree, RECORD_KEY, '{"v": 1, "size": "x"')
        else:
            tree.drop(5)
        footer = encode(tree)
        entry.write_bytes(data[: -8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    again = stage(spark, served.url("many"), columns=["qty"], where=where, stagingLocation=cache)
    assert again.fetched.files == FILES
    assert again.dataframe.count() == FILES * ROWS // 2


def test_an_unknown_column_is_one_line_naming_the_columns_before_any_fetch(spark, served, cache):
    served.storage.requests = 0
    with pytest.raises(UnknownColumn) as caught:
        read_table(spark, served.url("many"), columns=["id", "nope"], stagingLocation=cache)
    assert "'nope'" in str(caught.value) and "id, value, qty" in str(caught.value)
    assert served.storage.requests == 0 and not entries(cache, "parquet")
    frame = read_table(spark, served.url("many"), columns=["ID"], where="id < 3", stagingLocation=cache)
    assert frame.columns == ["ID"] and frame.count() == 3  # named as Spark's select names it


def staged_on_executors(spark, served, cache, tmp_path, name: str, columns: list[str], where: str) -> list[tuple]:
    """The rows of a read staged by executors (stagingFetch=spark), checked against the whole read."""
    expected = rows(whole_read(spark, served, name, tmp_path, columns, where))
    on_executors = read_table(
        spark, served.url(name), columns=columns, where=where, stagingLocation=cache, stagingFetch="spark"
    )
    assert rows(on_executors) == expected
    return expected


def test_executors_fetch_chunks_alike_and_load_as_spark_passes_columns_and_where(spark, served, cache, tmp_path):
    import deltaport

    where = "id < 3000 AND qty > 500"
    expected = staged_on_executors(spark, served, cache, tmp_path, "many", ["qty"], where)
    assert sorted(pq.ParquetFile(e).metadata.num_row_groups for e in entries(cache, ".part.parquet")) == [2]
    assert len(entries(cache, ".footer")) == FILES  # the others ruled out by their footers
    url = served.url("many")
    loaded = deltaport.load_as_spark(url, spark=spark, columns=["qty"], where=where, stagingLocation=cache)
    assert loaded.columns == ["qty"] and rows(loaded) == expected


def test_executors_stage_sparse_entries_alike(spark, served, cache, tmp_path):
    # the wide table: its chunks lie far apart even for the executors' default hole (small_holes
    # patches the driver's only); no row group ruled out, page indexes fetched with the chunks
    staged_on_executors(spark, served, cache, tmp_path, "wide", ["c7"], "c7 > 100")
    ((_, data, original, record),) = sparse_entries(served, "wide", cache)
    for start, end in held_ranges(original, record):
        assert data[start:end] == original[start:end]


def test_a_footer_longer_than_the_first_get_takes_a_second(spark, served, cache, tmp_path):
    served.storage.requests = 0
    frame = read_table(spark, served.url("wide"), columns=["c7"], where="c0 >= 3500", stagingLocation=cache)
    assert sorted(r.c7 for r in frame.collect()) == [k * 8 for k in range(3500, 4000)]
    (footer,) = entries(cache, ".footer")
    assert footer.stat().st_size > TAIL
    # the last 64 KiB, the rest of the footer, then c0 and c7 of one row group in one GET of two ranges
    assert served.storage.requests == 3
    (entry,) = entries(cache, ".part.parquet")
    assert pq.ParquetFile(entry).metadata.num_row_groups == 1


def test_a_refused_url_is_renewed_for_the_chunks_too(served, tmp_path):
    import dataclasses

    from deltaport.spark.chunks import Need
    from deltaport.spark.fetching import StageTask, stage_files
    from deltaport.spark.options import ReadOptions
    from deltaport.spark.remote import Refresh
    from deltaport.spark.staging import LocalArea, file_key

    remote = ReadOptions.parse({"path": served.url("many")}).remote
    with remote.open() as session:
        action = session.snapshot().files[0]
    forged = dataclasses.replace(action, url=action.url.replace("X-Amz-Signature=", "X-Amz-Signature=00"))
    assert forged.url != action.url
    task = StageTask(forged, f"t/{file_key(action.id, action.size)}.parquet", False, need=Need(("qty",)))
    with pytest.raises(UrlExpired, match="cannot be renewed"):
        stage_files(LocalArea(str(tmp_path / "other")), [task], threads=1, refresh=None)
    area = LocalArea(str(tmp_path / "cache"))
    report = stage_files(area, [task], threads=1, refresh=Refresh(remote, "snapshot", {}))
    assert report.files == 1 and 0 < report.bytes < action.size / 2
    assert area.size(f"t/{file_key(action.id, action.size)}.part.parquet")


def test_a_side_file_cut_while_a_sparse_entry_is_written_gives_its_bytes_by_a_fetch(served, tmp_path):
    from deltaport.spark.chunks import Need
    from deltaport.spark.fetching import StageTask, stage_files
    from deltaport.spark.options import ReadOptions
    from deltaport.spark.staging import LocalArea, file_key

    class CutSideFile(LocalArea):
        def read(self, relpath: str, offset: int, length: int) -> bytes:
            data = super().read(relpath, offset, length)
            return data[:-1] if relpath.endswith(".footer") and offset > 0 else data

    remote = ReadOptions.parse({"path": served.url("many")}).remote
    with remote.open() as session:
        action = next(f for f in session.snapshot().files if f.partition_values["part"] == "even")  # page indexes
    task = StageTask(action, f"t/{file_key(action.id, action.size)}.parquet", False, need=Need(("qty",)))
    area = CutSideFile(str(tmp_path / "cache"))
    served.storage.requests = 0
    stage_files(area, [task], threads=1, refresh=None)
    assert served.storage.requests == 3  # the last bytes, the chunks, then the page indexes the side file lacked
    original = next(p for p in served.tables["many"].rglob("*.parquet") if p.stat().st_size == action.size).read_bytes()
    entry = Path(area.base, part_relpath(task.relpath)).read_bytes()
    footer = chunks.parse_footer(_footer(original))
    start, end = chunks.data_end(footer), len(original) - 8 - len(footer.raw)
    assert end - start > 1000 and entry[start:end] == original[start:end]
