"""PySpark Python data source ``deltaSharing``: read shared Delta tables with Spark, no JVM jar.

>>> from deltaport.spark import register
>>> register(spark)
>>> spark.read.format("deltaSharing").load("profile.share#share.schema.table")

Batch snapshots (``versionAsOf``, ``timestampAsOf``), the change data feed (``readChangeFeed``)
and Structured Streaming (``spark.readStream.format("deltaSharing")``) are supported; filters
are sent to the server as ``jsonPredicateHints`` when
``spark.sql.python.filterPushdown.enabled`` is true.
"""

from deltaport.spark.source import DeltaSharingDataSource, register

__all__ = ["DeltaSharingDataSource", "register"]
