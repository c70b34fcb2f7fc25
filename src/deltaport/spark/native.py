"""Shared tables read by Spark's own parquet reader: plan through the protocol, stage, read.

:func:`read_table` asks the sharing server which files make up the table (or the change feed),
stages those files in the cache of :mod:`deltaport.spark.staging` (only the ones not staged
yet) and returns ``spark.read.parquet`` over exactly those files, shaped into the table's
logical schema:

* partition columns come from Hive-style folders (``__dp_p<i>=<value>``) typed as the table
  declares them (timestamps as UTC instants), so Spark prunes partitions by itself;
* deletion vectors are applied when a file is staged (the file is rewritten without its
  deleted rows, once per file and DV), and so are type changes Spark cannot read (a column
  widened from byte to decimal is cast);
* column mapping: data columns are read by their physical names and renamed;
* a change feed adds ``_change_type``, ``_commit_version`` and ``_commit_timestamp`` from the
  folders ``__dp_k``, ``__dp_v`` and ``__dp_ts`` (cdc files carry their own ``_change_type``).

Column pruning, filter pushdown into row groups, vectorised decoding and adaptive execution
all come from Spark; Python only plans and moves bytes. Every error is raised here, in one
line, before Spark runs anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from deltaport.client.directory import DIR, directory_only
from deltaport.client.errors import FileDownloadError, SharingServerError
from deltaport.client.model import FileAction
from deltaport.client.schema import ColumnSpec, TableInfo, parse_partition_value
from deltaport.client.sharing import change_feed_options
from deltaport.client.spark_session import active_session, is_connect
from deltaport.errors import DeltaportError, UnsupportedOperation
from deltaport.spark.chunks import Need
from deltaport.spark.directory import access_mode, stage_by_directory
from deltaport.spark.fetching import StageReport, StageTask, on_a_cluster, stage_files, stage_on_executors
from deltaport.spark.options import READ_TABLE, ReadOptions, StagingOptions
from deltaport.spark.partial import covered, footer_relpath, nothing_needed, part_relpath
from deltaport.spark.projection import checked_columns, need_of
from deltaport.spark.remote import Refresh, batch_request
from deltaport.spark.staging import (
    CacheArea,
    LocalArea,
    StagingError,
    evict_now_and_then,
    file_key,
    folder,
    open_area,
    table_key,
)
from deltaport.spark.types import delta_to_spark

__all__ = ["Staged", "load_as_spark", "load_table_changes_as_spark", "read_table", "stage"]

PARTITION_PREFIX = "__dp_p"
VERSION_COLUMN, TIMESTAMP_COLUMN, KIND_COLUMN = "__dp_v", "__dp_ts", "__dp_k"
TYPE_CHANGES = "delta.typeChanges"


@dataclass(frozen=True)
class Staged:
    """A staged read: the DataFrame, and what staging it cost."""

    dataframe: Any
    files: int  # files the DataFrame reads
    fetched: StageReport  # files downloaded by this call (the others were in the cache)
    location: str


@dataclass(frozen=True)
class _Plan:
    table: TableInfo
    files: list[FileAction]
    change_feed: bool
    endpoint: str
    refresh: Refresh


# --- planning ---------------------------------------------------------------------------------------


def _plan(read: ReadOptions, json_hints: str | None) -> _Plan:
    remote = read.remote
    kind, params = batch_request(read, json_hints)
    with remote.open() as session:
        result = getattr(session, kind)(**params)
        endpoint = session.client.endpoint
    return _Plan(result.table, list(result.files), read.read_change_feed, endpoint, Refresh(remote, kind, params))


def _partition_text(spec: ColumnSpec, action: FileAction) -> str | None:
    """A file's partition value as Spark casts it from a folder name back to the column's type."""
    values = action.partition_values
    text = next((values[k] for k in (spec.physical_name, spec.name) if k in values), None)
    try:
        value = parse_partition_value(text, spec.type)
    except (ValueError, TypeError) as exc:
        raise FileDownloadError(
            f"partition value {text!r} of column {spec.name!r} in file {action.id} is not a valid {spec.type}: {exc}",
            http_status=400,
            file_id=action.id,
        ) from None
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        if quote(text or "", safe="") != text:
            raise UnsupportedOperation(
                f"the binary partition value of column {spec.name!r} cannot be staged for "
                "Spark's parquet reader; read the table with spark.read.format('deltaSharing')"
            )
        return text
    return (text or "").strip() if isinstance(value, float) else str(value)


def _folders(plan: _Plan, action: FileAction) -> str:
    values: list[tuple[str, str | None]] = []
    if plan.change_feed:
        values += [
            (VERSION_COLUMN, str(action.version)),
            (TIMESTAMP_COLUMN, str(action.timestamp)),
            (KIND_COLUMN, action.change_type),
        ]
    partitions = [spec for spec in plan.table.columns if spec.is_partition]
    values += [(f"{PARTITION_PREFIX}{i}", _partition_text(spec, action)) for i, spec in enumerate(partitions)]
    return folder(values)


def _widened(table: TableInfo) -> tuple[tuple[str, Any], ...]:
    """(name in the files, type now) of the data columns whose type the table widened."""
    changed = {f["name"] for f in table.schema_json.get("fields", ()) if (f.get("metadata") or {}).get(TYPE_CHANGES)}
    return tuple(
        (spec.physical_name, spec.physical_type)
        for spec in table.columns
        if spec.name in changed and not spec.is_partition
    )


def _tasks(plan: _Plan, table_folder: str, need: Need | None = None) -> list[StageTask]:
    widened = _widened(plan.table)
    tasks = []
    for action in plan.files:
        rewrite = bool(action.deletion_vector) or action.paired or bool(widened)
        key = file_key(action.id, action.size, action.deletion_vector, action.paired_deletion_vector, action.paired)
        name = f"{key}.rw.parquet" if rewrite else f"{key}.parquet"
        relpath = "/".join(p for p in (table_folder, _folders(plan, action), name) if p)
        tasks.append(StageTask(action, relpath, rewrite, widened, None if rewrite else need))
    return tasks


# --- staging ----------------------------------------------------------------------------------------


def _fetch_mode(spark: Any, staging: StagingOptions, area: CacheArea) -> str:
    """``driver`` or ``spark``. Asked from the session's configuration, not its JVM, so that it
    answers alike on classic and Spark Connect sessions; through Connect the cluster fetches
    unless ``stagingFetch=driver`` says the client may (its staging location is the cluster's)."""
    cluster = on_a_cluster(spark)
    if staging.fetch != "auto":
        mode = staging.fetch
    else:
        mode = "spark" if cluster or is_connect(spark) else "driver"
    if cluster and isinstance(area, LocalArea) and staging.location is None:
        raise StagingError(
            "a cluster runs this pipeline, so shared files must be staged where every executor sees "
            "them: set the option stagingLocation to an hdfs:, s3a:, abfss: or gs: URI (or a shared "
            "mount)"
        )
    return mode


def _missing(area: CacheArea, tasks: Sequence[StageTask]) -> list[StageTask]:
    missing, hits = [], []
    for task in tasks:
        if area.valid(task.relpath, None if task.rewrite else task.action.size):
            hits.append(task.relpath)
        elif task.need is not None and covered(area, task.relpath, task.action.size, task.need):
            hits += [part_relpath(task.relpath), footer_relpath(task.relpath)]
        else:
            missing.append(task)
    area.touch(hits)
    return missing


def _read_paths(area: CacheArea, tasks: Sequence[StageTask]) -> list[str]:
    """The entry Spark reads for each task: the whole file when it is staged, else the compact one;
    none for a file of which the query's ``where`` rules out every row group (:func:`nothing_needed`)."""
    paths = []
    for task in tasks:
        if task.need is None or area.valid(task.relpath, task.action.size):
            paths.append(task.relpath)
        elif not nothing_needed(area, task.relpath, task.need):
            paths.append(part_relpath(task.relpath))
    return paths


def _kept(tasks: Sequence[StageTask]) -> list[str]:
    kept = [t.relpath for t in tasks]
    return kept + [f(t.relpath) for t in tasks if t.need is not None for f in (part_relpath, footer_relpath)]


def _stage(
    spark: Any, plan: _Plan, staging: StagingOptions, need: Need | None = None
) -> tuple[CacheArea, str, list[str], StageReport]:
    area = open_area(staging.location)
    area.check_writable()
    mode = _fetch_mode(spark, staging, area)
    table_folder = table_key(plan.endpoint, plan.refresh.remote.name, plan.table.metadata.id)
    tasks = _tasks(plan, table_folder, need)
    missing = _missing(area, tasks)
    if mode == "spark":
        location = staging.location or area.root
        report = stage_on_executors(spark, location, missing, threads=staging.threads, refresh=plan.refresh)
    else:
        report = stage_files(area, missing, threads=staging.threads, refresh=plan.refresh)
    evict_now_and_then(
        area,
        staged=report.bytes,
        max_bytes=staging.cache_max_bytes,
        max_age_seconds=staging.cache_max_age_seconds,
        grace_seconds=staging.cache_grace_seconds,
        keep=_kept(tasks),
    )
    return area, table_folder, _read_paths(area, tasks), report


# --- the DataFrame ----------------------------------------------------------------------------------


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _read_schema(plan: _Plan) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    table = plan.table
    mapping = table.column_mapping_mode in ("name", "id")
    logical = delta_to_spark(table.schema_json)
    physical = delta_to_spark(table.schema_json, physical=mapping)
    fields, partition = [], 0
    for spec, logical_field, physical_field in zip(table.columns, logical.fields, physical.fields):
        if spec.is_partition:
            fields.append(StructField(f"{PARTITION_PREFIX}{partition}", logical_field.dataType))
            partition += 1
        else:
            fields.append(StructField(physical_field.name, physical_field.dataType))
    if plan.change_feed:
        fields += [
            StructField("_change_type", StringType()),
            StructField(VERSION_COLUMN, LongType()),
            StructField(TIMESTAMP_COLUMN, LongType()),
            StructField(KIND_COLUMN, StringType()),
        ]
    return StructType(fields), logical, physical


def _functions(spark: Any) -> Any:
    """The functions of ``spark``'s kind of session (pyspark picks by the environment, and a process
    may hold a classic session and a Spark Connect one)."""
    import importlib

    return importlib.import_module("pyspark.sql.connect.functions" if is_connect(spark) else "pyspark.sql.functions")


def _sources(plan: _Plan, logical: Any, physical: Any) -> list[tuple[str, Any, bool]]:
    """Each logical column's (column read, logical field, whether it is cast to the logical type:
    nested fields renamed to their logical names)."""
    out, partition = [], 0
    for spec, logical_field, physical_field in zip(plan.table.columns, logical.fields, physical.fields):
        if spec.is_partition:
            out.append((f"{PARTITION_PREFIX}{partition}", logical_field, False))
            partition += 1
        else:
            cast = physical_field.dataType.simpleString() != logical_field.dataType.simpleString()
            out.append((physical_field.name, logical_field, cast))
    return out


def _logical_columns(spark: Any, plan: _Plan, logical: Any, physical: Any) -> list[Any]:
    F = _functions(spark)

    columns = []
    for source, logical_field, cast in _sources(plan, logical, physical):
        column = F.col(_quoted(source))
        if cast:
            column = column.cast(logical_field.dataType)
        columns.append(column.alias(logical_field.name, metadata=dict(logical_field.metadata)))
    if plan.change_feed:
        kind = F.col(KIND_COLUMN)
        columns += [
            F.when(kind == "cdf", F.col("_change_type")).otherwise(kind).alias("_change_type"),
            F.col(VERSION_COLUMN).alias("_commit_version"),
            F.timestamp_millis(F.col(TIMESTAMP_COLUMN)).alias("_commit_timestamp"),
        ]
    return columns


#: Spark lists more paths than this with a Spark job (a large part of a second); a local cache's
#: files are listed on the driver in milliseconds instead
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


@contextlib.contextmanager
def _listed_on_the_driver(spark: Any, area: CacheArea, paths: int) -> Iterator[None]:
    """While a classic session resolves a read of ``paths`` local cache entries, Spark lists them
    on the driver. (A Connect session resolves the read later, under its own setting; an object
    store's cache keeps Spark's parallel listing.)"""
    if not isinstance(area, LocalArea) or is_connect(spark):
        yield
        return
    before = spark.conf.get(_LISTING_THRESHOLD, None)
    spark.conf.set(_LISTING_THRESHOLD, str(max(paths, int(before or 32))))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_LISTING_THRESHOLD)
        else:
            spark.conf.set(_LISTING_THRESHOLD, before)


def _dataframe(spark: Any, plan: _Plan, area: CacheArea, relpaths: Sequence[str], table_folder: str) -> Any:
    read_schema, logical, physical = _read_schema(plan)
    reader = spark.read.schema(read_schema)
    if relpaths:
        reader = reader.option("basePath", area.uri(table_folder))
    with _listed_on_the_driver(spark, area, len(relpaths)):
        frame = reader.parquet(*[area.uri(relpath) for relpath in relpaths])
    renames = _plain_renames(plan, logical, physical)
    if renames is None:
        return frame.select(*_logical_columns(spark, plan, logical, physical))
    in_order = not any(spec.is_partition for spec in plan.table.columns)  # Spark reads partition columns last
    if in_order and all(source == name for source, name in renames):  # read as the table has them
        return frame  # no projection: each Spark analysis step costs a read 3-8 ms
    return frame.selectExpr(*[f"{_quoted(source)} AS {_quoted(name)}" for source, name in renames])


def _plain_renames(plan: _Plan, logical: Any, physical: Any) -> list[tuple[str, str]] | None:
    """Each logical column's (column read, its name), in the table's order, when each is only a
    rename (no cast, no column metadata, not a change feed); else None (:func:`_logical_columns`
    makes them)."""
    sources = _sources(plan, logical, physical)
    if plan.change_feed or any(cast or field.metadata for _, field, cast in sources):
        return None
    return [(source, field.name) for source, field, _ in sources]


# --- entry points -----------------------------------------------------------------------------------


def _json_hints(options: Mapping[str, Any], where: str | None) -> str | None:
    explicit = next((str(v) for k, v in options.items() if k.lower() == "jsonpredicatehints"), None)
    if explicit is not None or where is None:
        return explicit
    from deltaport.protocol.hints import expr_to_json, parse_sql_predicates

    expr = parse_sql_predicates(where)
    if expr is None:
        return None
    try:
        return expr_to_json(expr)
    except (ValueError, DeltaportError):
        return None  # a condition the wire cannot say: Spark alone applies it


def stage(
    spark: Any, url: str, *, columns: Sequence[str] | None = None, where: str | None = None, **options: Any
) -> Staged:
    """:func:`read_table`, also telling how many files were fetched and how many were cached."""
    options = dict(options)
    asked = access_mode(options)
    time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    read = ReadOptions.parse(
        {**{k: str(v) for k, v in options.items()}, "path": url}, time_zone=time_zone, accepted=READ_TABLE
    )
    read.check_batch()
    staging = StagingOptions.parse(options)
    staged = _staged_by_urls(spark, read, staging, _json_hints(options, where), asked, columns, where)
    frame = staged.dataframe
    if where is not None:
        frame = frame.where(where)
    if columns is not None:
        checked_columns(columns, frame.columns)
        frame = frame.select(*[_functions(spark).col(_quoted(c)) for c in columns])  # as Spark names them
    return dataclasses.replace(staged, dataframe=frame)


def _staged_by_urls(
    spark: Any,
    read: ReadOptions,
    staging: StagingOptions,
    hints: str | None,
    asked: str | None,
    columns: Sequence[str] | None = None,
    where: str | None = None,
) -> Staged:
    """Staged from the files the server lists; by directory (directory.py) when that is asked, or
    when the table offers only directory access."""
    if asked == DIR:
        return Staged(*stage_by_directory(spark, read, staging, asked))
    try:
        plan = _plan(read, hints)
    except SharingServerError as refused:
        with read.remote.open() as session:
            directory_only(session.client, session.table, asked, refused)
        return Staged(*stage_by_directory(spark, read, staging, asked))
    names = [spec.name for spec in plan.table.columns]
    if plan.change_feed:
        names += ["_change_type", "_commit_version", "_commit_timestamp"]
    columns = checked_columns(columns, names)
    need = None if plan.change_feed else need_of(plan.table, columns, where)
    area, table_folder, relpaths, report = _stage(spark, plan, staging, need)
    return Staged(_dataframe(spark, plan, area, relpaths, table_folder), len(relpaths), report, area.root)


def read_table(
    spark: Any, url: str, *, columns: Sequence[str] | None = None, where: str | None = None, **options: Any
) -> Any:
    """A shared table as a DataFrame read by Spark's own parquet reader.

    ``url`` is ``<profile-file>#<share>.<schema>.<table>``. Options are those of
    ``spark.read.format("deltaSharing")`` for batch reads (``versionAsOf``, ``timestampAsOf``,
    ``readChangeFeed``, ``startingVersion``, ``endingVersion``, ``startingTimestamp``,
    ``endingTimestamp``, ``responseFormat``, share credentials), ``jsonPredicateHints``, and:

    * ``stagingLocation``: where files are staged (default ``$DELTAPORT_STAGING`` or
      ``~/.cache/deltaport/spark``); any URI Spark reads (``file:``, ``hdfs:``, ``s3a:``,
      ``abfss:``, ``gs:``); on a cluster, a location every executor sees;
    * ``stagingCacheSize`` (default ``64g``), ``stagingCacheMaxAge`` (default ``7d``) and
      ``stagingCacheGrace`` (default ``1h``: entries used more recently are never evicted);
    * ``stagingFetch``: ``driver`` (threads on the driver), ``spark`` (a Spark job on the
      executors) or ``auto`` (``spark`` when a cluster runs the pipeline); ``stagingThreads``
      (per fetching process, default 4).

    ``where`` (a Spark SQL condition) is sent to the server as a predicate hint where it can
    be, and applied to the rows. ``columns`` (logical names, partition columns too): the
    DataFrame has only these, in this order (it is ``full.where(where).select(columns)``).

    With ``columns`` and/or ``where``, each file is staged as only what the query needs: its
    footer and the column chunks of the named columns and of those the ``where`` mentions, in
    the row groups whose statistics the ``where`` cannot rule out (spark/partial.py); a later
    query fetches only the chunks the cache does not hold yet. Without either, whole files.
    Change feeds, files with deletion vectors and widened columns are staged whole.

    ``accessMode``: ``dir`` reads a table offered for directory access with delta-rs under the
    temporary credentials the server vends, staged as parquet (spark/directory.py); ``url`` by
    file URLs; unset, by file URLs unless the table offers only directory access.
    """
    return stage(spark, url, columns=columns, where=where, **options).dataframe


def _profile_options(url: str, profile: Any) -> dict[str, str]:
    if profile is None:
        return {}
    if "#" in url:
        raise ValueError(f"Invalid 'url': {url}; with delta_sharing_profile the url is '<share>.<schema>.<table>'")
    fields = (
        ("shareCredentialsVersion", "share_credentials_version"),
        ("type", "type"),
        ("endpoint", "endpoint"),
        ("tokenEndpoint", "token_endpoint"),
        ("clientId", "client_id"),
        ("clientSecret", "client_secret"),
        ("scope", "scope"),
        ("bearerToken", "bearer_token"),
        ("expirationTime", "expiration_time"),
    )
    return {option: str(getattr(profile, attr)) for option, attr in fields if getattr(profile, attr, None) is not None}


def load_as_spark(
    url: str,
    version: int | None = None,
    timestamp: str | None = None,
    delta_sharing_profile: Any = None,
    *,
    spark: Any = None,
    columns: Sequence[str] | None = None,
    where: str | None = None,
    **options: Any,
) -> Any:
    """The official connector's ``load_as_spark``, read by Spark's own parquet reader
    (see :func:`read_table` for the staging options, ``columns`` and ``where``). ``spark``: the
    session; by default the thread's active session, else the process's default one."""
    spark = active_session("load_as_spark", spark)
    options = {**_profile_options(url, delta_sharing_profile), **options}
    if version is not None:
        options["versionAsOf"] = version
    if timestamp is not None:
        options["timestampAsOf"] = timestamp
    return read_table(spark, url, columns=columns, where=where, **options)


def load_table_changes_as_spark(
    url: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    starting_timestamp: str | None = None,
    ending_timestamp: str | None = None,
    delta_sharing_profile: Any = None,
    *,
    spark: Any = None,
    columns: Sequence[str] | None = None,
    where: str | None = None,
    **options: Any,
) -> Any:
    """The official connector's ``load_table_changes_as_spark``, read by Spark's own parquet reader
    (``spark``, ``columns`` and ``where`` as in :func:`load_as_spark`)."""
    spark = active_session("load_table_changes_as_spark", spark)
    changes = change_feed_options(starting_version, ending_version, starting_timestamp, ending_timestamp)
    options = {**_profile_options(url, delta_sharing_profile), **options, **changes}
    return read_table(spark, url, columns=columns, where=where, **options)
