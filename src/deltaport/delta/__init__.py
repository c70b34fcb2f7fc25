"""The Delta log engine: snapshots, history and changes of Delta tables. Knows nothing of sharing."""

from deltaport.delta.cache import SnapshotCache
from deltaport.delta.snapshot import Snapshot
from deltaport.delta.table import DeltaTable
from deltaport.delta.table_changes import CommitChanges
from deltaport.delta.table_config import TableConfig

__all__ = ["CommitChanges", "DeltaTable", "Snapshot", "SnapshotCache", "TableConfig"]
