"""deltaport: Delta Sharing, whole, in Python.

The package's top level is the recipient's connector, so code written for the official
``delta_sharing`` package runs unchanged after ``import deltaport as delta_sharing``::

    import deltaport as delta_sharing

    client = delta_sharing.SharingClient("config.share")
    df = delta_sharing.load_as_pandas("config.share#share.schema.table")

The names are those of :mod:`deltaport.client`, imported on first use, so a server process that
never reads a share does not load the connector; ``load_as_spark`` and
``load_table_changes_as_spark`` are :mod:`deltaport.spark.native`'s, which read with Spark's own
parquet reader.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _client():
    import importlib

    return importlib.import_module("deltaport.client")


#: read by Spark's own parquet reader (:mod:`deltaport.spark.native`), not the Python data source
_SPARK_NAMES = ("load_as_spark", "load_table_changes_as_spark")


def __getattr__(name: str):
    if name in _SPARK_NAMES:
        import importlib

        return getattr(importlib.import_module("deltaport.spark.native"), name)
    client = _client() if not name.startswith("_") and name != "client" else None
    if client is not None and name in client.__all__:
        return getattr(client, name)
    raise AttributeError(f"module 'deltaport' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_client().__all__))
