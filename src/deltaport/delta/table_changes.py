"""Per-commit change files, for change data feed and streaming reads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltaport.delta.actions import CommitInfo, Metadata, Protocol, row_to_action
from deltaport.delta.table_config import TableConfig
from deltaport.errors import ChangeDataNotRecorded

#: The row counts a MERGE reports; all zero means it changed no row.
_MERGE_ROW_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


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

    def data_changes(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The commit's adds then removes that change data (``dataChange`` not false), as
        (kind, action): what a streaming read of the commit sees."""
        for kind in ("add", "remove"):
            for action in self.actions(kind, data_change_only=True):
                yield kind, action

    def change_feed(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The commit's change data, as (kind, action): its ``cdc`` files when it wrote any, else
        its data-changing adds and removes (each row of an added file an insert, of a removed one a
        delete), and nothing for a MERGE that changed no row (its file actions are bookkeeping)."""
        if self.has_cdc:
            yield from (("cdc", action) for action in self.actions("cdc"))
        elif not self.is_empty_merge:
            yield from self.data_changes()

    @property
    def is_empty_merge(self) -> bool:
        info = self.commit_info
        if info is None or (info.operation or "").upper() != "MERGE":
            return False
        metrics = info.operation_metrics or {}
        return all(str(metrics.get(key, "")) == "0" for key in _MERGE_ROW_METRICS)


def check_change_data_recorded(start_config: TableConfig, start: int, changes: list[CommitChanges]) -> None:
    """Refuse a change range in which any version (``start``, whose config is ``start_config``, and
    every commit after it) was written without the change data feed enabled."""
    end = changes[-1].version if changes else start
    versions = [(start, start_config), *((c.version, c.config) for c in changes)]
    for version, config in versions:
        if not config.change_data_feed_enabled:
            raise ChangeDataNotRecorded(
                f"Error getting change data for range [{start}, {end}] as change data was not "
                f"recorded for version [{version}]"
            )
