"""Per-commit change files, for change data feed and streaming reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltaport.delta.actions import CommitInfo, Metadata, Protocol, row_to_action
from deltaport.delta.table_config import TableConfig


@dataclass(frozen=True, eq=False)
class CommitChanges:
    """The actions of one commit. ``config`` is the protocol + metadata in effect after it."""

    version: int
    timestamp: int | None
    adds: pa.Table
    removes: pa.Table
    cdcs: pa.Table
    protocol: Protocol | None
    metadata: Metadata | None
    commit_info: CommitInfo | None
    config: TableConfig

    @property
    def has_cdc(self) -> bool:
        return self.cdcs.num_rows > 0

    def actions(self, kind: str, *, data_change_only: bool = False) -> Iterator[dict[str, Any]]:
        """File actions of one kind ("add", "remove", "cdc") as dicts in log form."""
        table = {"add": self.adds, "remove": self.removes, "cdc": self.cdcs}[kind]
        for row in table.to_pylist():
            if data_change_only and kind != "cdc" and row.get("dataChange") is False:
                continue
            yield row_to_action(row)
