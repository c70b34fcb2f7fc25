"""Parquet-format snapshot lines built columnar, for the server's own (locally served) files.

Per snapshot, the part of each ``file`` line that never changes (id, partition values, size, stats)
is built once with Arrow string kernels and cached. Per request only the URL signatures are
computed, in one tight batch at one signing instant, and cached for that instant's one-minute
window; lines are then joined by Arrow and streamed as slices of one buffer. The bytes are the
same as FileLineMaker's for the same URLs.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltaport.delta import Snapshot
from deltaport.protocol.capabilities import PARQUET
from deltaport.signing.local import LocalFileSigner
from deltaport.signing.sigv4 import uri_encode_path

WINDOW_SECONDS = 60  # URLs signed within one window are identical, so they can be reused


def _escape(values: pa.Array) -> pa.Array | None:
    """JSON string escaping for ``"`` and ``\\``; None when control characters need more."""
    if len(values) and pc.any(pc.match_substring_regex(values, r"[\x00-\x1f]")).as_py():
        return None
    return pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')


def _json_strings(values: pa.Array) -> pa.Array:
    """Each value as a JSON string literal (``null`` for nulls)."""
    escaped = _escape(values)
    if escaped is None:
        return pa.array([orjson.dumps(v).decode() for v in values.to_pylist()], pa.string())
    return pc.fill_null(pc.binary_join_element_wise('"', escaped, '"', ""), "null")


class PreparedFiles:
    """What is cached per snapshot: file ids and encoded URL paths (the Python-loop parts)."""

    def __init__(self, snapshot: Snapshot, id_hash: str) -> None:
        paths = snapshot.files().column("path").combine_chunks()
        raw = paths.to_pylist()
        digest = hashlib.md5 if id_hash == PARQUET else hashlib.sha256
        self.ids = pa.array([digest(p.encode()).hexdigest() for p in raw], pa.string())
        if len(paths) == 0 or pc.all(pc.match_substring_regex(paths, r"^[A-Za-z0-9._~/=-]*$")).as_py():
            # ordinary paths: only '=' differs between the log's encoding and S3's canonical URI
            self.relative_uris = pc.replace_substring(paths, "=", "%3D").cast(pa.binary())
        else:
            self.relative_uris = pa.array([uri_encode_path(unquote(p)).encode() for p in raw], pa.binary())
        self.num_files = len(raw)


def _static(files: pa.Table, ids: pa.Array) -> pa.Array:
    """``","id":…,"partitionValues":…,"size":…[,"stats":…],"expirationTimestamp":`` per file."""
    pv = files.column("partitionValues").combine_chunks()
    if pv.type.num_fields:
        parts = [pc.binary_join_element_wise(orjson.dumps(f.name).decode() + ":", _json_strings(pv.field(i)), "")
                 for i, f in enumerate(pv.type)]
        pv_json = pc.binary_join_element_wise("{", pc.binary_join_element_wise(*parts, ","), "}", "")
    else:
        pv_json = pa.scalar("{}")
    stats = files.column("stats").combine_chunks()
    stats_esc = _escape(stats)
    if stats_esc is None:
        stats_part = pa.array([None if s is None else ',"stats":' + orjson.dumps(s).decode()
                               for s in stats.to_pylist()], pa.string())
    else:
        stats_part = pc.binary_join_element_wise(',"stats":"', stats_esc, '"', "")
    size = pc.cast(files.column("size").combine_chunks(), pa.string())
    return pc.binary_join_element_wise('","id":"', ids, '","partitionValues":', pv_json, ',"size":', size,
                                       pc.fill_null(stats_part, ""), ',"expirationTimestamp":', "")


class ColumnarLines:
    """Caches of prepared files (per snapshot) and signatures (per window), bounded LRU."""

    def __init__(self, max_prepared: int = 4, max_signed: int = 4) -> None:
        self._prepared: OrderedDict = OrderedDict()
        self._signed: OrderedDict = OrderedDict()
        self._max_prepared, self._max_signed = max_prepared, max_signed
        self._lock = threading.Lock()

    def _get(self, cache: OrderedDict, key, limit: int, build):
        with self._lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
        value = build()
        with self._lock:
            cache[key] = value
            while len(cache) > limit:
                cache.popitem(last=False)
        return value

    def lines(self, snapshot: Snapshot, indices: pa.Array, signer: LocalFileSigner, *, expires_in: int, now: float,
              id_hash: str, version: int | None = None, chunk: int = 32768) -> tuple[Iterator[bytes], int | None]:
        """File lines for ``indices`` and the URLs' expiry (ms); built and streamed chunk by chunk."""
        prepared = self._get(self._prepared, (id(snapshot), snapshot.table_uri, snapshot.version, id_hash),
                             self._max_prepared, lambda: PreparedFiles(snapshot, id_hash))
        if len(indices) == 0:
            return iter(()), None
        # sign at the start of the window so URLs repeat within it, unless that would cut a short
        # lifetime by more than a quarter (then sign at now and reuse nothing)
        windowed = expires_in >= 4 * WINDOW_SECONDS
        window = int(now) - int(now) % WINDOW_SECONDS if windowed else int(now)
        prefix = signer.table_uri_prefix.encode()
        idx = pa.array(np.asarray(indices, dtype=np.int64))
        uris = prepared.relative_uris.take(idx)

        def sign(batch: pa.Array):
            query, sigs, expiry = signer.presign_uris(batch.to_pylist(), expires_in=expires_in, now=window)
            return query, pa.array(sigs, pa.string()), expiry

        if windowed and len(idx) == prepared.num_files:  # a whole-table read: reuse this window's signatures
            key = (id(prepared), signer.endpoint, prefix, window, expires_in)
            query, all_sigs, expiry = self._get(self._signed, key, self._max_signed,
                                                lambda: sign(prepared.relative_uris))
            sigs = all_sigs.take(idx)
        else:
            query, sigs, expiry = sign(uris)
        head = '{"file":{"url":"' + signer.endpoint + prefix.decode()
        mid = "?" + query + "&X-Amz-Signature="
        tail = f"{expiry}" + (f',"version":{version}' if version is not None else "") + "}}\n"
        batches = snapshot.files().to_batches()
        bounds = np.cumsum([0] + [b.num_rows for b in batches])
        idx_np = np.asarray(idx)

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(idx), chunk):
                part = idx.slice(start, chunk)
                rows = _take_sorted(batches, bounds, idx_np[start:start + chunk])
                static = _static(rows, prepared.ids.take(part))
                joined = pc.binary_join_element_wise(head, uris.slice(start, chunk).cast(pa.string()), mid,
                                                     sigs.slice(start, chunk), static, tail, "")
                yield _buffer_bytes(joined)

        return chunks(), expiry


def _take_sorted(batches: list[pa.RecordBatch], bounds: np.ndarray, idx: np.ndarray) -> pa.Table:
    """Rows at ascending ``idx`` from a table given as record batches, one take per batch touched.

    (``Table.take`` concatenates every chunk of a many-chunk table first.)
    """
    if len(idx) > 1 and np.any(np.diff(idx) < 0):
        order = np.argsort(idx, kind="stable")
        taken = _take_sorted(batches, bounds, idx[order])
        return taken.take(pa.array(np.argsort(order, kind="stable")))
    which = np.searchsorted(bounds, idx, side="right") - 1
    out = []
    for b in np.unique(which):
        local = idx[which == b] - bounds[b]
        batch = batches[b]
        if len(local) == batch.num_rows:
            out.append(batch)
        elif len(local) and local[-1] - local[0] + 1 == len(local):
            out.append(batch.slice(int(local[0]), len(local)))
        else:
            out.append(batch.take(pa.array(local)))
    return pa.Table.from_batches(out, schema=batches[0].schema)


def _buffer_bytes(lines: pa.Array) -> bytes:
    """The concatenated values of a string array (its value buffer between first and last offset)."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return lines.buffers()[2][offsets[0]:offsets[-1]].to_pybytes()
