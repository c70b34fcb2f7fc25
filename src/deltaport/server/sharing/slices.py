"""Partition slices: the part of a shared table one recipient may read.

A shared table's ``partitions`` (catalog/served.py) say which partitions recipients see: OR over
partitions of AND over conditions, each condition a partition column, an operator (``EQUAL`` or
SQL ``LIKE`` with ``%`` and ``_``) and either a static value or a recipient property. A
:class:`Slice` is that spec resolved for one recipient; it is the one owner of the rule, and every
way to a table's files goes through it: snapshot queries, streaming queries and the change data
feed (:meth:`Slice.mask` over the files' partition values), and the server's own file URLs (which
carry :attr:`Slice.digest`, so a URL stops working when the recipient's slice changes).

Partition values are compared as the text the Delta log holds (``2024-01-31``, ``42``). A
condition on a column that is not a partition column, on a null partition value, or on a
property the recipient does not have matches nothing: a slice never lets more through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaport.catalog.model import PartitionOp, PartitionValue
from deltaport.delta import TableConfig


@dataclass(frozen=True)
class Condition:
    column: str  # the logical partition column, as the share names it
    op: PartitionOp
    value: str | None  # None: a recipient property the recipient does not have

    def matches(self, values: pa.Array) -> np.ndarray:
        """Which of ``values`` (the column's partition values) meet the condition."""
        if self.value is None:
            return np.zeros(len(values), dtype=bool)
        text = values.cast(pa.string())
        hit = pc.equal(text, self.value) if self.op is PartitionOp.EQUAL else pc.match_like(text, self.value)
        return np.asarray(pc.fill_null(hit, False), dtype=bool)


@dataclass(frozen=True)
class Slice:
    """One recipient's rows of a table: OR over ``partitions`` of AND over their conditions."""

    partitions: tuple[tuple[Condition, ...], ...]

    @property
    def digest(self) -> str:
        """Names this slice (not the recipient) in the server's own file URLs."""
        text = repr([[(c.column.lower(), c.op.value, c.value) for c in p] for p in self.partitions])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def mask(self, config: TableConfig, partition_values: Callable[[str], pa.Array], n: int) -> np.ndarray:
        """Which of ``n`` files (whose ``partitionValues`` under a physical column name
        ``partition_values`` returns) lie in the slice, for a table as ``config`` describes it."""
        physical = {c.lower(): p for c, p in zip(config.partition_columns, config.physical_partition_columns)}
        keep = np.zeros(n, dtype=bool)
        for partition in self.partitions:
            inside = np.ones(n, dtype=bool)
            for condition in partition:
                name = physical.get(condition.column.lower())
                if name is None:  # not a partition column of the table (any more): nothing
                    inside[:] = False
                    break
                inside &= condition.matches(partition_values(name))
            keep |= inside
        return keep

    def mask_of_struct(self, config: TableConfig, struct: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """:meth:`mask` over files whose partition values are one Arrow struct column."""
        whole = struct.combine_chunks() if isinstance(struct, pa.ChunkedArray) else struct

        def column(name: str) -> pa.Array:
            if pa.types.is_struct(whole.type) and whole.type.get_field_index(name) >= 0:
                return whole.field(name)
            return pa.nulls(len(whole), pa.string())

        return self.mask(config, column, len(whole))

    def mask_of_actions(self, config: TableConfig, actions: Sequence[Mapping[str, object]]) -> np.ndarray:
        """:meth:`mask` over file actions in log form (their ``partitionValues`` dicts)."""

        def column(name: str) -> pa.Array:
            return pa.array([_partition_value(a, name) for a in actions], pa.string())

        return self.mask(config, column, len(actions))


def _partition_value(action: Mapping[str, object], name: str) -> str | None:
    values = action.get("partitionValues")
    value = values.get(name) if isinstance(values, Mapping) else None
    return None if value is None else str(value)


def slice_for(partitions: Sequence[Sequence[PartitionValue]], properties: Mapping[str, str]) -> Slice | None:
    """The slice of a table shared with ``partitions`` for a recipient with ``properties``; None
    when the table is shared whole."""
    if not partitions:
        return None

    def value(v: PartitionValue) -> str | None:
        return v.value if v.recipient_property_key is None else properties.get(v.recipient_property_key)

    return Slice(tuple(tuple(Condition(v.name, v.op, value(v)) for v in partition) for partition in partitions))
