"""Small, valid Delta tables for demos, written with pyarrow alone (no Delta library needed).

:func:`build_demo_tables` creates three sample tables: ``sales`` (partitioned, with a partition
delete), ``events_cdf`` (change data feed, with an update and a delete) and ``customers_dv``
(deletion vectors, on disk and inline). Behind it, :class:`_TableWriter` writes snappy parquet
data files, ``_change_data`` files, deletion vectors and JSON commits laid out as Spark lays them
out. It is a single-writer tool for small tables, not a general Delta writer.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaport.dv import inline_dv, write_dv_file

__all__ = ["DEMO_TABLES", "build_demo_tables"]

#: Name -> one-line description of every demo table.
DEMO_TABLES = {
    "sales": "orders partitioned by region: two appends, then the 'latam' partition deleted",
    "events_cdf": "change data feed: two inserts, an update and a delete (_change_data files)",
    "customers_dv": "deletion vectors: rows deleted with an on-disk DV, then with an inline DV",
}

BASE_TIME_MS = 1_717_236_000_000  # 2024-06-01T10:00:00Z: version v is committed v hours later
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
ENGINE_INFO = "deltaport-demo"

# Characters Spark escapes as %XX in partition directory names (ExternalCatalogUtils).
_SPARK_ESCAPED = frozenset(map(chr, range(1, 32))) | frozenset("\"#%'*/:=?\\\x7f{[]^")
# Characters java.net.URI leaves as they are in a path: Delta stores file paths as URI strings.
_URI_SAFE = "/-_.!~*'();:@&=+$,"

_DELTA_TYPES = {
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.binary(): "binary",
    pa.date32(): "date",
    pa.timestamp("us", tz="UTC"): "timestamp",
}
_STRING_STATS_LIMIT = 32  # Spark truncates longer strings in stats; this writer leaves them out


# --- log building blocks ----------------------------------------------------------------------


def schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of ``metaData`` (Spark's JSON schema form) for a flat Arrow schema."""
    fields = []
    for f in schema:
        if f.type not in _DELTA_TYPES:
            raise TypeError(f"column {f.name!r}: type {f.type} is not supported by the demo writer")
        fields.append({"name": f.name, "type": _DELTA_TYPES[f.type], "nullable": f.nullable, "metadata": {}})
    return orjson.dumps({"type": "struct", "fields": fields}).decode()


def escape_path_name(text: str) -> str:
    """Escape a partition column name or value for a directory name, as Spark does."""
    return "".join(f"%{ord(c):02X}" if c in _SPARK_ESCAPED else c for c in text)


def partition_string(value: Any) -> str | None:
    """A partition value as the string stored in ``partitionValues`` (None for null and '')."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        raise TypeError("timestamp partition columns are not supported by the demo writer")
    return str(value)


def partition_dir(columns: Sequence[str], values: Mapping[str, str | None]) -> str:
    """Hive-style ``col=value/...`` directory of one partition (unescaped on-disk name)."""

    def folder_value(value: str | None) -> str:
        return HIVE_NULL if value is None else escape_path_name(value)

    return "/".join(f"{escape_path_name(c)}={folder_value(values[c])}" for c in columns)


def _stat_value(value: Any, round_up: bool = False) -> Any:
    if isinstance(value, dt.datetime):  # stats keep milliseconds: a max is rounded up, never down
        value = value.astimezone(dt.timezone.utc)
        if round_up and value.microsecond % 1000:
            value += dt.timedelta(microseconds=1000 - value.microsecond % 1000)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def file_stats(rows: pa.Table, tight_bounds: bool | None = None) -> str:
    """The ``stats`` JSON string of a data file: numRecords, minValues, maxValues, nullCount."""
    mins, maxs, nulls = {}, {}, {}
    for name, column in zip(rows.column_names, rows.columns):
        nulls[name] = column.null_count
        t = column.type
        if not (
            pa.types.is_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_string(t)
            or pa.types.is_date(t)
            or pa.types.is_timestamp(t)
        ):
            continue
        extremes = pc.min_max(column)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if low is None or (pa.types.is_string(t) and max(len(low), len(high)) > _STRING_STATS_LIMIT):
            continue
        mins[name], maxs[name] = _stat_value(low), _stat_value(high, round_up=True)
    stats: dict[str, Any] = {"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    if tight_bounds is not None:
        stats["tightBounds"] = tight_bounds
    return orjson.dumps(stats).decode()


def write_commit(table: str | os.PathLike[str], version: int, actions: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``_delta_log/<version>.json`` atomically (temp file, then rename); never overwrites."""
    log = Path(table) / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    final = log / f"{version:020d}.json"
    if final.exists():
        raise FileExistsError(f"commit {version} already exists: {final}")
    tmp = log / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(b"".join(orjson.dumps(a) + b"\n" for a in actions))
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


# --- the writer -------------------------------------------------------------------------------


@dataclass
class _LiveFile:
    add: dict[str, Any]
    rows: pa.Table  # every row of the file, partition columns included
    deleted: frozenset[int] = frozenset()  # row indexes removed by a deletion vector


class _TableWriter:
    """Writes one new table commit by commit and remembers its live files.

    The ``add``/``cdc``/``remove``/``rewrite``/``delete_with_dv`` methods write files and return
    actions for the next commit; :meth:`commit` writes them (with protocol and metaData at
    version 0). File names come from a seeded RNG, commit timestamps from :data:`BASE_TIME_MS`.
    """

    def __init__(
        self,
        path: Path,
        schema: pa.Schema,
        *,
        protocol: Mapping[str, Any],
        partition_by: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        seed: int = 0,
    ) -> None:
        self.path = path
        self.schema = schema
        self.schema_string = schema_string(schema)  # refuses unsupported types before any write
        self.partition_by = list(partition_by)
        self.protocol = dict(protocol)
        self.configuration = dict(configuration or {})
        self.rng = random.Random(seed)
        self.version = -1
        self.live: dict[str, _LiveFile] = {}
        self._file_counts: dict[str, int] = {}
        self.tight_bounds = True if self.configuration.get("delta.enableDeletionVectors") == "true" else None
        self.table_id = self._uuid()

    @property
    def commit_time(self) -> int:
        """Timestamp (ms) of the commit being prepared."""
        return BASE_TIME_MS + (self.version + 1) * 3_600_000

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _write_parquet(self, rows: pa.Table, folder: str, kind: str) -> tuple[str, int, int]:
        """Write a snappy parquet file under ``folder``: (log path, size, mtime in ms)."""
        index = self._file_counts[kind] = self._file_counts.get(kind, -1) + 1
        name = f"{kind}-{index:05d}-{self._uuid()}.c000.snappy.parquet"
        relative = f"{folder}/{name}" if folder else name
        full = self.path / relative
        full.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, full, compression="snappy")
        st = full.stat()
        return quote(relative, safe=_URI_SAFE), st.st_size, st.st_mtime_ns // 1_000_000

    def _by_partition(self, rows: pa.Table) -> list[tuple[dict[str, str | None], pa.Table]]:
        """Split rows by partition values, in order of first appearance."""
        if not self.partition_by:
            return [({}, rows)]
        keys = list(zip(*(map(partition_string, rows.column(c).to_pylist()) for c in self.partition_by)))
        return [
            (dict(zip(self.partition_by, key)), rows.filter(pa.array([k == key for k in keys])))
            for key in dict.fromkeys(keys)
        ]

    def add(self, rows: pa.Table) -> list[dict[str, Any]]:
        """Write ``rows`` as data files (one per partition); their add actions."""
        rows = rows.select(self.schema.names).cast(self.schema)
        actions = []
        for values, part in self._by_partition(rows):
            data = part.drop_columns(self.partition_by)
            path, size, mtime = self._write_parquet(data, partition_dir(self.partition_by, values), "part")
            add = {
                "path": path,
                "partitionValues": values,
                "size": size,
                "modificationTime": mtime,
                "dataChange": True,
                "stats": file_stats(data, self.tight_bounds),
            }
            self.live[path] = _LiveFile(add, part)
            actions.append({"add": add})
        return actions

    def cdc(self, rows: pa.Table, change_types: Sequence[str]) -> list[dict[str, Any]]:
        """Write change rows (table columns + ``_change_type``) under ``_change_data``; cdc actions."""
        rows = (
            rows.select(self.schema.names)
            .cast(self.schema)
            .append_column("_change_type", pa.array(change_types, pa.string()))
        )
        actions = []
        for values, part in self._by_partition(rows):
            folder = "/".join(filter(None, ["_change_data", partition_dir(self.partition_by, values)]))
            path, size, _ = self._write_parquet(part.drop_columns(self.partition_by), folder, "cdc")
            actions.append({"cdc": {"path": path, "partitionValues": values, "size": size, "dataChange": False}})
        return actions

    def remove(self, path: str) -> dict[str, Any]:
        """The remove action of live file ``path`` (which stops being live)."""
        add = self.live.pop(path).add
        remove = {
            "path": path,
            "deletionTimestamp": self.commit_time,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": add["partitionValues"],
            "size": add["size"],
        }
        if "deletionVector" in add:
            remove["deletionVector"] = add["deletionVector"]
        return {"remove": remove}

    def rows_of(self, path: str) -> pa.Table:
        """The rows of live file ``path`` that its deletion vector (if any) keeps."""
        f = self.live[path]
        return f.rows.filter(pa.array([i not in f.deleted for i in range(f.rows.num_rows)])) if f.deleted else f.rows

    def rewrite(self, path: str, rows: pa.Table) -> list[dict[str, Any]]:
        """Copy-on-write: remove live file ``path`` and add ``rows`` as its replacement."""
        return [self.remove(path), *self.add(rows)]

    def delete_with_dv(self, path: str, row_indexes: Iterable[int], *, inline: bool) -> list[dict[str, Any]]:
        """Delete rows of live file ``path`` by row index with a deletion vector (on disk or inline).

        The file is removed and re-added with the DV (merged with any DV it had) and stats
        marked ``tightBounds: false``.
        """
        f = self.live[path]
        deleted = f.deleted | frozenset(int(i) for i in row_indexes)
        descriptor = inline_dv(sorted(deleted)) if inline else write_dv_file(self.path, sorted(deleted))
        stats = orjson.loads(f.add["stats"])
        stats["tightBounds"] = False
        add = dict(f.add, dataChange=True, stats=orjson.dumps(stats).decode(), deletionVector=descriptor.to_dict())
        actions = [self.remove(path), {"add": add}]
        self.live[path] = _LiveFile(add, f.rows, deleted)
        return actions

    def commit(
        self,
        operation: str,
        actions: Sequence[Mapping[str, Any]],
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, int] | None = None,
    ) -> int:
        """Write the next commit: commitInfo, (protocol, metaData at version 0), ``actions``."""
        counts = {
            f"num{name}": sum(kind in a for a in actions)
            for name, kind in (("AddedFiles", "add"), ("RemovedFiles", "remove"), ("AddedChangeFiles", "cdc"))
        }
        info = {
            "timestamp": self.commit_time,
            "operation": operation,
            "operationParameters": dict(parameters or {}),
            **({"readVersion": self.version} if self.version >= 0 else {}),
            "isolationLevel": "Serializable",
            "isBlindAppend": all("add" in a for a in actions),
            "operationMetrics": {k: str(v) for k, v in {**counts, **(metrics or {})}.items()},
            "engineInfo": ENGINE_INFO,
        }
        head: list[Mapping[str, Any]] = [{"commitInfo": info}]
        if self.version < 0:
            head += [
                {"protocol": self.protocol},
                {
                    "metaData": {
                        "id": self.table_id,
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": self.schema_string,
                        "partitionColumns": self.partition_by,
                        "configuration": self.configuration,
                        "createdTime": self.commit_time,
                    }
                },
            ]
        write_commit(self.path, self.version + 1, [*head, *actions])
        self.version += 1
        self._file_counts.clear()
        return self.version


# --- the demo tables --------------------------------------------------------------------------

SALES_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("order_date", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
SALES_REGIONS = ("europe", "north america", "asia/pacific", "latam")  # region = REGIONS[order_id % 4]
EVENTS_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.int32())])
CUSTOMERS_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("country", pa.string())])
COUNTRIES = ("DE", "FR", "US", "JP", "BR")


def sales_rows(first: int, last: int) -> pa.Table:
    """Orders ``first..last``; every 50th order has a null amount."""
    rows = []
    for i in range(first, last + 1):
        day = dt.date(2024, 1, 1) + dt.timedelta(days=i // 4)
        rows.append(
            {
                "order_id": i,
                "region": SALES_REGIONS[i % 4],
                "amount": None if i % 50 == 0 else round(5 + (i * 7919) % 20000 / 100, 2),
                "order_date": day,
                "ts": dt.datetime(day.year, day.month, day.day, 8 + i % 10, i * 7 % 60, tzinfo=dt.timezone.utc),
            }
        )
    return pa.Table.from_pylist(rows, SALES_SCHEMA)


def events_rows(ids: Iterable[int]) -> pa.Table:
    """Players ``ids`` with their initial scores (``id * 37 % 100``)."""
    return pa.Table.from_pylist(
        [{"id": i, "name": f"player_{i:02d}", "score": i * 37 % 100} for i in ids], EVENTS_SCHEMA
    )


def customers_rows(ids: Iterable[int]) -> pa.Table:
    """Customers ``ids``; country is ``COUNTRIES[id % 5]``."""
    return pa.Table.from_pylist(
        [{"id": i, "name": f"customer_{i:02d}", "country": COUNTRIES[i % 5]} for i in ids], CUSTOMERS_SCHEMA
    )


def _build_sales(path: Path) -> None:
    """v0 orders 1..200, v1 orders 201..320 (4 files each, one per region), v2 delete 'latam'."""
    w = _TableWriter(
        path, SALES_SCHEMA, partition_by=["region"], seed=101, protocol={"minReaderVersion": 1, "minWriterVersion": 2}
    )
    params = {"mode": "Append", "partitionBy": '["region"]'}
    w.commit("WRITE", w.add(sales_rows(1, 200)), {**params, "mode": "ErrorIfExists"}, {"numOutputRows": 200})
    w.commit("WRITE", w.add(sales_rows(201, 320)), params, {"numOutputRows": 120})
    gone = [p for p, f in w.live.items() if f.add["partitionValues"]["region"] == "latam"]
    deleted = sum(w.live[p].rows.num_rows for p in gone)
    w.commit(
        "DELETE", [w.remove(p) for p in gone], {"predicate": "[\"(region = 'latam')\"]"}, {"numDeletedRows": deleted}
    )


def _build_events_cdf(path: Path) -> None:
    """v0 ids 1..10, v1 ids 11..20, v2 score += 100 where id % 5 = 0, v3 delete score < 20."""
    w = _TableWriter(
        path,
        EVENTS_SCHEMA,
        seed=202,
        configuration={"delta.enableChangeDataFeed": "true"},
        protocol={"minReaderVersion": 1, "minWriterVersion": 4},
    )
    for mode, ids in (("ErrorIfExists", range(1, 11)), ("Append", range(11, 21))):
        w.commit("WRITE", w.add(events_rows(ids)), {"mode": mode, "partitionBy": "[]"}, {"numOutputRows": 10})
    _change_rows(
        w, "UPDATE", '["((id % 5) = 0)"]', lambda r: r["id"] % 5 == 0, lambda r: {**r, "score": r["score"] + 100}
    )
    _change_rows(w, "DELETE", '["(score < 20)"]', lambda r: r["score"] < 20, None)


def _change_rows(
    w: _TableWriter,
    operation: str,
    predicate: str,
    match: Callable[[dict], bool],
    update: Callable[[dict], dict] | None,
) -> None:
    """Copy-on-write UPDATE (``update`` given) or DELETE of matching rows, with cdc files."""
    actions: list[dict[str, Any]] = []
    changed = 0
    for path in list(w.live):
        rows = w.rows_of(path).to_pylist()
        hits = [r for r in rows if match(r)]
        if not hits:
            continue
        changed += len(hits)
        if update is None:
            kept, cdc_rows, kinds = [r for r in rows if not match(r)], hits, ["delete"] * len(hits)
        else:
            kept = [update(r) if match(r) else r for r in rows]
            cdc_rows = hits + [update(r) for r in hits]
            kinds = ["update_preimage"] * len(hits) + ["update_postimage"] * len(hits)
        actions += w.rewrite(path, pa.Table.from_pylist(kept, w.schema))
        actions += w.cdc(pa.Table.from_pylist(cdc_rows, w.schema), kinds)
    w.commit(
        operation,
        actions,
        {"predicate": predicate},
        {"numDeletedRows" if update is None else "numUpdatedRows": changed},
    )


def _build_customers_dv(path: Path) -> None:
    """v0 ids 1..10 and 11..20 (two files), v1 on-disk DV deleting ids 2, 5, 8, v2 inline DV: id 16."""
    w = _TableWriter(
        path,
        CUSTOMERS_SCHEMA,
        seed=303,
        configuration={"delta.enableDeletionVectors": "true"},
        protocol={
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        },
    )
    actions = w.add(customers_rows(range(1, 11))) + w.add(customers_rows(range(11, 21)))
    first, second = (a["add"]["path"] for a in actions)
    w.commit("WRITE", actions, {"mode": "ErrorIfExists", "partitionBy": "[]"}, {"numOutputRows": 20})
    w.commit(
        "DELETE",
        w.delete_with_dv(first, [1, 4, 7], inline=False),
        {"predicate": '["id IN (2, 5, 8)"]'},
        {"numDeletedRows": 3, "numDeletionVectorsAdded": 1},
    )
    w.commit(
        "DELETE",
        w.delete_with_dv(second, [5], inline=True),
        {"predicate": '["(id = 16)"]'},
        {"numDeletedRows": 1, "numDeletionVectorsAdded": 1},
    )


def _clear(path: Path) -> None:
    """Remove an earlier demo table at ``path``; refuse to delete anything that is not a Delta table."""
    if path.is_dir() and not path.is_symlink() and ((path / "_delta_log").is_dir() or not any(path.iterdir())):
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        raise FileExistsError(f"{path} exists and is not a Delta table; not overwriting it")


def build_demo_tables(root: str | os.PathLike[str]) -> dict[str, str]:
    """Create the demo tables under ``root`` (replacing earlier ones); name -> absolute path."""
    base = Path(root).resolve()
    base.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, build in (
        ("sales", _build_sales),
        ("events_cdf", _build_events_cdf),
        ("customers_dv", _build_customers_dv),
    ):
        path = base / name
        _clear(path)
        path.mkdir()
        build(path)
        out[name] = str(path)
    return out
