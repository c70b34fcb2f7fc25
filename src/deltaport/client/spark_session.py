"""The SparkSession a Spark read runs in, found the same way by every entry point."""

from __future__ import annotations

from typing import Any

__all__ = ["active_session", "is_connect"]


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (its client runs here, its cluster elsewhere)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def active_session(what: str, spark: Any = None) -> Any:
    """``spark`` if given, else the session of this thread, else the process's default session (the
    first one the builder made): a thread that did not build the session still finds it."""
    if spark is not None:
        return spark
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ImportError(f"Unable to import pyspark. `{what}` requires PySpark.") from None
    for session_class in (SparkSession, _connect_session_class()):
        if session_class is None:
            continue
        try:
            return session_class.active()
        except Exception:  # PySparkRuntimeError NO_ACTIVE_OR_DEFAULT_SESSION, or no JVM at all
            continue
    raise RuntimeError(
        f"No active SparkSession was found. `{what}` requires running in a PySpark application "
        "(or pass the session as spark=)."
    )


def _connect_session_class() -> Any:
    try:
        from pyspark.sql.connect.session import SparkSession
    except ImportError:  # pyspark without the Spark Connect client's packages
        return None
    return SparkSession
