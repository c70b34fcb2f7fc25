"""Shared Delta tables in PySpark, no JVM jar: Spark's own parquet reader, or a Python data source.

Batch reads are staged and read by Spark's own parquet reader (:mod:`deltaport.spark.native`):

>>> import deltaport.spark
>>> df = deltaport.spark.read_table(spark, "profile.share#share.schema.table", versionAsOf=3)

The Python data source ``deltaSharing`` (:mod:`deltaport.spark.source`) streams, and reads where
no staging location is allowed:

>>> deltaport.spark.register(spark)
>>> spark.readStream.format("deltaSharing").load("profile.share#share.schema.table")

Batch snapshots (``versionAsOf``, ``timestampAsOf``), the change data feed (``readChangeFeed``)
and Structured Streaming (``spark.readStream.format("deltaSharing")``) are supported; filters
are sent to the server as ``jsonPredicateHints`` when
``spark.sql.python.filterPushdown.enabled`` is true.
"""

from deltaport.spark.fetching import ship_package
from deltaport.spark.native import load_as_spark, load_table_changes_as_spark, read_table, stage
from deltaport.spark.source import DeltaSharingDataSource, register

__all__ = [
    "DeltaSharingDataSource",
    "load_as_spark",
    "load_table_changes_as_spark",
    "read_table",
    "register",
    "ship_package",
    "stage",
]
