"""Parse ``_delta_log`` file names once: commits, checkpoints of every kind, compaction, CRC."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from deltaport.storage.base import FileInfo

LOG_DIR = "_delta_log"
SIDECAR_DIR = "_delta_log/_sidecars"
LAST_CHECKPOINT = "_delta_log/_last_checkpoint"


class LogFileKind(Enum):
    COMMIT = "commit"
    CHECKPOINT_CLASSIC = "checkpoint"  # NNN.checkpoint.parquet
    CHECKPOINT_MULTIPART = "multipart"  # NNN.checkpoint.PPPPPPPPPP.TTTTTTTTTT.parquet
    CHECKPOINT_V2 = "v2"  # NNN.checkpoint.<uuid>.(json|parquet)
    COMPACTED = "compacted"  # NNN.MMM.compacted.json
    CRC = "crc"


_PATTERNS = [
    (re.compile(r"^(\d{20})\.json$"), LogFileKind.COMMIT),
    (re.compile(r"^(\d{20})\.checkpoint\.parquet$"), LogFileKind.CHECKPOINT_CLASSIC),
    (re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$"), LogFileKind.CHECKPOINT_MULTIPART),
    (re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$"), LogFileKind.CHECKPOINT_V2),
    (re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$"), LogFileKind.COMPACTED),
    (re.compile(r"^(\d{20})\.crc$"), LogFileKind.CRC),
]


@dataclass(frozen=True, slots=True)
class LogFile:
    """A recognised file in ``_delta_log``."""

    kind: LogFileKind
    version: int
    info: FileInfo
    part: int = 1
    num_parts: int = 1
    end_version: int | None = None  # compaction files cover version..end_version
    fmt: str = "json"  # json | parquet

    @property
    def path(self) -> str:
        return self.info.path

    @property
    def is_checkpoint(self) -> bool:
        return self.kind in (
            LogFileKind.CHECKPOINT_CLASSIC,
            LogFileKind.CHECKPOINT_MULTIPART,
            LogFileKind.CHECKPOINT_V2,
        )


def parse_log_file(info: FileInfo) -> LogFile | None:
    """A LogFile for a listed ``_delta_log`` entry, or None for anything else (temp files, dirs)."""
    name = info.name
    for pattern, kind in _PATTERNS:
        m = pattern.match(name)
        if not m:
            continue
        version = int(m.group(1))
        if kind is LogFileKind.CHECKPOINT_MULTIPART:
            part, parts = int(m.group(2)), int(m.group(3))
            if not 1 <= part <= parts:
                return None
            return LogFile(kind, version, info, part=part, num_parts=parts, fmt="parquet")
        if kind is LogFileKind.CHECKPOINT_V2:
            return LogFile(kind, version, info, fmt=m.group(3))
        if kind is LogFileKind.COMPACTED:
            return LogFile(kind, version, info, end_version=int(m.group(2)))
        if kind is LogFileKind.CHECKPOINT_CLASSIC:
            return LogFile(kind, version, info, fmt="parquet")
        return LogFile(kind, version, info)
    return None
