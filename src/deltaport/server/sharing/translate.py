"""Delta objects → Delta Sharing wire lines. The only module that sees both sides.

File actions become lines one batch at a time (never the whole response in memory); each URL is
signed as its line is made, and the earliest URL expiry is tracked for ``endStreamAction``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from deltaport.delta import Snapshot
from deltaport.delta.table_config import TableConfig
from deltaport.dv import DeletionVectorDescriptor
from deltaport.errors import UnsupportedOperation
from deltaport.protocol import lines
from deltaport.protocol.capabilities import DELTA, PARQUET, Capabilities
from deltaport.server.fast.columnar_lines import BatchSigner, ColumnarLines
from deltaport.server.fast.file_keys import digest_for


def choose_format(caps: Capabilities, config: TableConfig) -> str:
    """The response format for this client and table; refuses what the client cannot read."""
    needs = [feature.lower() for feature in config.features_beyond_parquet]  # capability names are lower-case
    formats = caps.response_formats
    if len(formats) == 1:
        fmt = formats[0]
    elif DELTA in formats and (needs or config.protocol.min_reader_version > 1 or PARQUET not in formats):
        fmt = DELTA
    else:
        fmt = PARQUET if PARQUET in formats else formats[0]
    if fmt not in (DELTA, PARQUET):
        raise UnsupportedOperation(f"responseformat {fmt!r} is not supported: use parquet or delta")
    missing = needs if fmt == PARQUET else [n for n in needs if not caps.has_reader_feature(n)]
    if missing:
        raise UnsupportedOperation(
            f"Unsupported Delta Table Properties: this table needs the reader feature(s) {', '.join(missing)}, "
            f"which the request did not list. Ask for the delta format with them: 'delta-sharing-capabilities: "
            f"responseformat=delta;readerfeatures={','.join(needs)}' (e.g. use_delta_format=True)."
        )
    return fmt


def file_id(path: str, hash_name: str) -> str:
    return digest_for(hash_name)(path.encode()).hexdigest()


def header_lines(
    config: TableConfig,
    fmt: str,
    *,
    history_shared: bool,
    version: int | None = None,
    size: int | None = None,
    num_files: int | None = None,
    protocol_version: int | None = None,
    placement: Mapping[str, Any] | None = None,
) -> list[bytes]:
    """The protocol and metaData lines (``placement``: :func:`deltaport.protocol.lines.placement`)."""
    md = config.metadata
    if fmt == DELTA:
        return [
            lines.protocol_delta(config.protocol.to_dict(), version=protocol_version),
            lines.metadata_delta(md.to_dict(), version=version, size=size, num_files=num_files, placement=placement),
        ]
    cdf = history_shared and config.change_data_feed_enabled
    schema = lines.clean_schema_for_parquet(config.schema.raw)
    return [
        lines.protocol_parquet(),
        lines.metadata_parquet(
            id=md.id,
            name=md.name,
            description=md.description,
            schema_string=orjson.dumps(schema).decode(),
            partition_columns=md.partition_columns,
            configuration={"enableChangeDataFeed": "true"} if cdf else {},
            version=version,
            size=size,
            num_files=num_files,
            placement=placement,
        ),
    ]


@dataclass
class Expiry:
    """The earliest URL expiry among the lines made so far."""

    min_ms: int | None = None

    def see(self, ms: int) -> None:
        if self.min_ms is None or ms < self.min_ms:
            self.min_ms = ms


class FileLineMaker:
    """Signs and renders file actions for one response."""

    def __init__(
        self,
        *,
        table_uri: str,
        signer: Any,
        expires_in: int,
        fmt: str,
        id_hash: str,
        now: float,
        columnar: ColumnarLines | None = None,
    ) -> None:
        self.table_uri = table_uri.rstrip("/") + "/"
        self.columnar = columnar
        self.signer = signer
        self.expires_in = expires_in
        self.fmt = fmt
        self.id_hash = id_hash
        self.now = now
        self.expiry = Expiry()

    def _relative(self, path: str) -> str:
        if "://" in path:
            if path.startswith(self.table_uri):
                path = path[len(self.table_uri) :]
            else:
                raise UnsupportedOperation("Table contains absolute paths outside its root and cannot be shared")
        return unquote(path)

    def _sign(self, path: str) -> tuple[str, int]:
        signed = self.signer.sign(self._relative(path), expires_in=self.expires_in, now=self.now)
        self.expiry.see(signed.expiration_ms)
        return signed.url, signed.expiration_ms

    def _presign_dv(self, dv: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        if dv.get("storageType") == "i":
            return dv, None
        desc = DeletionVectorDescriptor.from_dict(dv)
        if desc.storage_type == "p":
            raise UnsupportedOperation("Table contains absolute deletion vector paths and cannot be shared")
        url, expiration = self._sign(desc.relative_path())
        return {**dv, "storageType": "p", "pathOrInlineDv": url}, expiration

    def line(
        self, kind: str, action: dict[str, Any], *, version: int | None = None, timestamp: int | None = None
    ) -> bytes:
        """One line for a log action of ``kind`` (add/remove/cdc) in the chosen format."""
        path = action["path"]
        fid = file_id(path, self.id_hash)
        url, expiration = self._sign(path)
        if self.fmt == DELTA:
            out = dict(action)
            out["path"] = url
            if out.get("deletionVector"):
                out["deletionVector"], dv_expiration = self._presign_dv(out["deletionVector"])
                if dv_expiration is not None:  # the line is good until its first URL expires
                    expiration = min(expiration, dv_expiration)
            return lines.file_delta(
                kind, out, id=fid, version=version, timestamp=timestamp, expiration_timestamp=expiration
            )
        if action.get("deletionVector"):
            raise UnsupportedOperation(
                "Deletion Vector property disabled: files with deletion vectors need the "
                "delta response format (responseformat=delta;readerfeatures=deletionvectors)"
            )
        wire_kind = {"add": "add", "remove": "remove", "cdc": "cdf", "file": "file"}[kind]
        return lines.file_parquet(
            wire_kind,
            url=url,
            id=fid,
            partition_values=action.get("partitionValues") or {},
            size=action.get("size") or 0,  # required on the wire; 0 when neither the log nor the table knows it
            stats=action.get("stats") if kind in ("add", "file") else None,
            expiration_timestamp=expiration,
            version=version,
            timestamp=timestamp,
        )

    def snapshot_lines(
        self, snapshot: Snapshot, indices: Any, *, version: int | None = None, batch: int = 2048
    ) -> Iterator[bytes | memoryview]:
        """Lines for the snapshot's files at ``indices``, in chunks of joined lines: exactly
        ``line("file" | "add", action)`` for each, in order.

        When the response is parquet-format lines of plain files (no deletion vectors, no absolute
        paths) and the signer signs in batches, the lines are built column-wise by the maker's
        :class:`ColumnarLines` (the same bytes, tested so, at a fraction of the cost)."""
        if self._columnar_applies(snapshot):
            assert self.columnar is not None
            chunks, expiry_ms = self.columnar.lines(
                snapshot,
                indices,
                self.signer,
                expires_in=self.expires_in,
                now=self.now,
                id_hash=self.id_hash,
                version=version,
            )
            if expiry_ms is not None:
                self.expiry.see(expiry_ms)
            return chunks
        return self._row_lines(snapshot, indices, version=version, batch=batch)

    def _columnar_applies(self, snapshot: Snapshot) -> bool:
        return (
            self.columnar is not None
            and self.fmt == PARQUET
            and isinstance(self.signer, BatchSigner)
            and not snapshot.has_deletion_vectors
            and not snapshot.has_absolute_paths
        )

    def _row_lines(self, snapshot: Snapshot, indices: Any, *, version: int | None, batch: int) -> Iterator[bytes]:
        kind = "add" if self.fmt == DELTA else "file"
        buf: list[bytes] = []
        for action in snapshot.add_actions(indices):
            buf.append(self.line(kind, action, version=version))
            if len(buf) >= batch:
                yield b"".join(buf)
                buf = []
        if buf:
            yield b"".join(buf)
