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
    """The cached per-snapshot parts of parquet-format file lines."""

    def __init__(self, snapshot: Snapshot, id_hash: str) -> None:
        files = snapshot.files()
        paths = files.column("path").combine_chunks()
        raw = paths.to_pylist()
        digest = hashlib.md5 if id_hash == PARQUET else hashlib.sha256
        ids = pa.array([digest(p.encode()).hexdigest() for p in raw], pa.string())
        self.relative_uris = [uri_encode_path(unquote(p)).encode() for p in raw]
        pv = files.column("partitionValues").combine_chunks()
        if pv.type.num_fields:
            parts = []
            for i, field in enumerate(pv.type):
                key = orjson.dumps(field.name).decode()
                parts.append(pc.binary_join_element_wise(key + ":", _json_strings(pv.field(i)), ""))
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
        stats_part = pc.fill_null(stats_part, "")
        size = pc.cast(files.column("size").combine_chunks(), pa.string())
        self.static = pc.binary_join_element_wise('","id":"', ids, '","partitionValues":', pv_json, ',"size":', size,
                                                  stats_part, ',"expirationTimestamp":', "")
        self.num_files = len(raw)


class ColumnarLines:
    """Caches of prepared files (per snapshot) and signatures (per window), bounded LRU."""

    def __init__(self, max_prepared: int = 8, max_signed: int = 8) -> None:
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
              id_hash: str, version: int | None = None, chunk: int = 8192) -> tuple[Iterator[bytes], int | None]:
        """File lines for ``indices`` and the earliest URL expiry (ms), streamed in chunks."""
        prepared = self._get(self._prepared, (id(snapshot), snapshot.table_uri, snapshot.version, id_hash),
                             self._max_prepared, lambda: PreparedFiles(snapshot, id_hash))
        if len(indices) == 0:
            return iter(()), None
        window = int(now) - int(now) % WINDOW_SECONDS
        prefix = signer.table_uri_prefix.encode()
        all_files = len(indices) == prepared.num_files
        idx = np.asarray(indices, dtype=np.int64)

        def sign(uris):
            return signer.presign_uris([prefix + u for u in uris], expires_in=expires_in, now=window)

        if all_files:
            key = (id(prepared), signer.endpoint, prefix, window, expires_in)
            query, sigs, expiry = self._get(self._signed, key, self._max_signed,
                                            lambda: _as_arrow(sign(prepared.relative_uris)))
            if len(idx) != len(sigs) or not np.array_equal(idx, np.arange(len(idx))):
                sigs = sigs.take(pa.array(idx))
        else:
            query, sigs, expiry = _as_arrow(sign([prepared.relative_uris[i] for i in idx]))
        uris = pa.array([prepared.relative_uris[i] for i in idx] if not all_files or not _is_identity(idx)
                        else prepared.relative_uris, pa.binary()).cast(pa.string())
        head = '{"file":{"url":"' + signer.endpoint + prefix.decode()
        tail = f"{expiry}" + (f',"version":{version}' if version is not None else "") + "}}\n"
        joined = pc.binary_join_element_wise(head, uris, "?" + query + "&X-Amz-Signature=", sigs,
                                             prepared.static.take(pa.array(idx)), tail, "")
        return _chunks(joined, chunk), expiry


def _is_identity(idx: np.ndarray) -> bool:
    return bool(len(idx) == 0 or (idx[0] == 0 and idx[-1] == len(idx) - 1 and np.all(np.diff(idx) == 1)))


def _as_arrow(result):
    query, sigs, expiry = result
    return query, pa.array(sigs, pa.string()), expiry


def _chunks(lines: pa.Array, chunk: int) -> Iterator[bytes]:
    """The joined lines as byte chunks: slices of the string array's value buffer."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    data = lines.buffers()[2]
    for start in range(0, len(lines), chunk):
        stop = min(start + chunk, len(lines))
        yield data[offsets[start]:offsets[stop]].to_pybytes()
