"""A table at one version: protocol, metadata and the live files (an Arrow table)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaport.delta.actions import Metadata, Protocol, row_to_action
from deltaport.delta.replay import KEY, any_absolute
from deltaport.delta.schema import Schema
from deltaport.delta.table_config import TableConfig


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Immutable: safe to share between concurrent requests."""

    table_uri: str
    version: int
    config: TableConfig
    live: pa.Table  # canonical add columns + ``_key``
    timestamp: int | None  # commit time of ``version`` in ms
    #: Values computed from this snapshot (parsed stats, prepared file ids): they live and die with
    #: it and count in its :attr:`nbytes`, so the snapshot cache's bound covers them.
    _derived: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _derived_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def cached(self, key: Hashable) -> Any:
        """The value remembered under ``key``, or None."""
        return self._derived.get(key)

    def remember(self, key: Hashable, value: Any, *, replace: bool = False) -> Any:
        """Keep ``value`` with this snapshot under ``key``; unless ``replace``, the first kept wins."""
        with self._derived_lock:
            if replace:
                self._derived[key] = value
                return value
            return self._derived.setdefault(key, value)

    def derived(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per snapshot and key (concurrent first calls may both compute)."""
        if key in self._derived:
            return self._derived[key]
        return self.remember(key, compute())

    @property
    def protocol(self) -> Protocol:
        return self.config.protocol

    @property
    def metadata(self) -> Metadata:
        return self.config.metadata

    @property
    def schema(self) -> Schema:
        return self.config.schema

    @property
    def partition_columns(self) -> list[str]:
        return self.config.partition_columns

    @property
    def num_files(self) -> int:
        return int(self.live.num_rows)

    @cached_property
    def size_in_bytes(self) -> int:
        if self.live.num_rows == 0:
            return 0
        return int(pc.sum(self.live.column("size")).as_py() or 0)

    @cached_property
    def has_absolute_paths(self) -> bool:
        """Some live file is named by an absolute URI rather than a path relative to the root."""
        return self.num_files > 0 and any_absolute(self.live.column("path"))

    @cached_property
    def has_deletion_vectors(self) -> bool:
        return self.num_files > 0 and self.live.column("deletionVector").null_count != self.num_files

    @property
    def nbytes(self) -> int:
        """Arrow bytes held: the live files and everything derived from them."""
        with self._derived_lock:
            derived = list(self._derived.values())
        return int(self.live.nbytes) + sum(_nbytes(v) for v in derived)

    def files(self) -> pa.Table:
        """The live add actions as Arrow, in the log's field names (no internal columns)."""
        return self.live.drop_columns([c for c in self.live.column_names if c.startswith("_")])

    def add_actions(
        self, indices: Sequence[int] | pa.Array | None = None, *, batch_size: int = 4096
    ) -> Iterator[dict[str, Any]]:
        """Add actions as dicts in log form, for the rows at ``indices`` (all when None).

        Rows are converted in batches, so a caller streaming a response holds one batch at a time.
        """
        table = self.files()
        if indices is not None:
            table = table.take(indices if isinstance(indices, pa.Array) else pa.array(indices, pa.int64()))
        for batch in table.to_batches(max_chunksize=batch_size):
            for row in batch.to_pylist():
                yield row_to_action(row)

    def summary(self) -> dict[str, Any]:
        """A short description of the snapshot (for humans and the inspect command)."""
        return {
            "table": self.table_uri,
            "version": self.version,
            "timestamp": self.timestamp,
            "protocol": self.protocol.to_dict(),
            "features": self.config.features,
            "id": self.metadata.id,
            "name": self.metadata.name,
            "schema": [{"name": f.name, "type": f.type, "nullable": f.nullable} for f in self.schema.fields],
            "partitionColumns": self.partition_columns,
            "configuration": dict(self.metadata.configuration),
            "numFiles": self.num_files,
            "sizeInBytes": self.size_in_bytes,
            "createdTime": self.metadata.created_time,
        }


def _nbytes(value: Any) -> int:
    if isinstance(value, (pa.Array, pa.ChunkedArray, pa.Table, pa.RecordBatch)):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return 0


__all__ = ["KEY", "Snapshot"]
