"""The ``deltaSharing`` PySpark data source: schema, batch reads, change data feed, streams."""

from __future__ import annotations

import sys
import types
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from deltaport.errors import InvalidParameter
from deltaport.spark import planning
from deltaport.spark.fetching import ship_package, workers_elsewhere
from deltaport.spark.filters import filters_to_json_hint
from deltaport.spark.options import ReadOptions
from deltaport.spark.remote import Refresh, batch_request
from deltaport.spark.streaming import DeltaSharingStreamReader
from deltaport.spark.types import arrow_schema, delta_to_spark, with_cdf_columns

__all__ = ["DeltaSharingBatchReader", "DeltaSharingDataSource", "DeltaSharingFilteringReader", "register"]

NAME = "deltaSharing"
_PUSHDOWN_PLANNER = "data_source_pushdown_filters.py"


class DeltaSharingDataSource(DataSource):
    """``spark.read.format("deltaSharing").load("<profile>#<share>.<schema>.<table>")``.

    Options (case-insensitive): versionAsOf, timestampAsOf, readChangeFeed, startingVersion,
    endingVersion, startingTimestamp, endingTimestamp, responseFormat, maxPartitionBytes; for
    streams also maxFilesPerTrigger, maxBytesPerTrigger, maxVersionsPerRpc, ignoreDeletes,
    ignoreChanges, skipChangeCommits, queryTableVersionIntervalSeconds. Any other name is refused
    (``options.DATA_SOURCE``).
    """

    #: Time zone for timestamps given without one (set from the session by :func:`register`).
    session_time_zone = "UTC"

    @classmethod
    def name(cls) -> str:
        return NAME

    def _read_options(self) -> ReadOptions:
        return ReadOptions.parse(self.options, time_zone=self.session_time_zone)

    def schema(self) -> StructType:
        opts = self._read_options()
        with opts.remote.open() as session:
            if opts.read_change_feed:
                info = session.metadata()
            else:
                info = session.metadata(version=opts.version_as_of, timestamp=opts.timestamp_as_of)
        schema = delta_to_spark(info.schema_json)
        return with_cdf_columns(schema) if opts.read_change_feed else schema

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options()
        opts.check_batch()
        # Spark refuses a reader that implements pushFilters unless
        # spark.sql.python.filterPushdown.enabled is set, and calls pushFilters only when it is:
        # hand out the filtering reader only to the planner that pushes filters.
        if _planning_with_filter_pushdown() and not opts.read_change_feed:
            return DeltaSharingFilteringReader(opts, schema)
        return DeltaSharingBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DeltaSharingStreamReader:
        opts = self._read_options()
        opts.check_stream()
        return DeltaSharingStreamReader(opts, schema)


def _planning_with_filter_pushdown() -> bool:
    """True when called from PySpark's filter-pushdown planner (a worker module of its own)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PUSHDOWN_PLANNER):
            return True
        frame = frame.f_back
    return False


class DeltaSharingBatchReader(DataSourceReader):
    """A snapshot (latest, versionAsOf, timestampAsOf) or a change data feed range, read file by file."""

    json_predicate_hints: str | None = None

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.target = arrow_schema(schema)
        self.remote = options.remote

    def partitions(self) -> list[InputPartition]:
        o = self.options
        kind, params = batch_request(o, self.json_predicate_hints)
        with self.remote.open() as session:
            result = getattr(session, kind)(**params)
        self._check_schema(result.table)
        planned = planning.plan_partitions(
            result.files,
            result.table,
            max_partition_bytes=o.max_partition_bytes,
            open_cost_bytes=o.open_cost_bytes,
            refresh=Refresh(self.remote, kind, params),
        )
        # Given no partition, Spark still calls read() once, with a partition of its own: give it an empty one.
        return list(planned) or [planning.FilesPartition(0, (), result.table)]

    def _check_schema(self, table: Any) -> None:
        if self.options.read_change_feed:
            return  # a change feed spans versions: older files are read into the latest schema
        if delta_to_spark(table.schema_json) != self.schema:
            raise InvalidParameter(
                f"The schema or partition columns of the shared table {self.remote.name} have changed since the "
                "DataFrame was created (or a different schema was specified). Please redefine your DataFrame."
            )

    def read(self, partition: InputPartition):
        assert isinstance(partition, planning.FilesPartition)
        return planning.read_partition(partition, self.target, change_feed=self.options.read_change_feed)


class DeltaSharingFilteringReader(DeltaSharingBatchReader):
    """The batch reader, plus Spark's filters sent to the server as ``jsonPredicateHints``.

    Hints are best effort: every filter is returned to Spark, which applies it to the rows read.
    """

    def pushFilters(self, filters: list[Any]) -> list[Any]:
        filters = list(filters)
        if filters:
            # Spark's type names of primitive types are the Delta type names.
            column_types = {f.name: f.dataType.typeName() for f in self.schema.fields}
            self.json_predicate_hints = filters_to_json_hint(filters, column_types)
        return filters


def register(spark: Any) -> type[DeltaSharingDataSource]:
    """Register the ``deltaSharing`` format with ``spark``; returns the registered class.

    Timestamps in options without a zone are read in the session time zone
    (``spark.sql.session.timeZone``) at the time of registration. On a Spark Connect session or
    a cluster, the data source runs in the cluster's Python workers: this process's deltaport is
    shipped to them (:func:`~deltaport.spark.fetching.ship_package`).
    """
    if workers_elsewhere(spark):
        ship_package(spark)
    time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    source = type(
        "DeltaSharingDataSource",
        (DeltaSharingDataSource,),
        {"session_time_zone": time_zone, "__module__": __name__, "__doc__": DeltaSharingDataSource.__doc__},
    )
    spark.dataSource.register(source)
    return source
