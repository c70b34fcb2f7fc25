"""Parquet-format snapshot lines built columnar, for the server's own (locally served) files.

A response is built chunk by chunk in a two-thread pipeline: one thread computes each chunk's file
ids, canonical URIs and URL signatures (the Python-bound part: MD5 and HMAC per file), the other
joins the previous chunk's lines with Arrow string kernels (which release the GIL), and the first
bytes are sent as soon as the first chunk is ready. A whole-table read leaves the snapshot's ids
and URIs and the signing window's signatures cached, so a repeated read in the same one-minute
window only joins. The bytes are the same as FileLineMaker's for the same URLs.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltaport.delta import Snapshot
from deltaport.protocol.capabilities import PARQUET
from deltaport.signing.local import LocalFileSigner
from deltaport.server.pipeline import pipelined
from deltaport.signing.sigv4 import uri_encode_path

try:  # CPython's own MD5/SHA-256 cost half of OpenSSL's per call on short inputs; same digests
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - builds without the module
    _md5 = hashlib.md5
try:
    from _sha256 import sha256 as _sha256_id
except ImportError:  # pragma: no cover
    _sha256_id = hashlib.sha256

WINDOW_SECONDS = 60  # URLs signed within one window are identical, so they can be reused


def _value_bytes(values: pa.Array) -> np.ndarray:
    """The bytes of a string array's values (its data buffer between first and last offset)."""
    if len(values) == 0 or values.buffers()[2] is None:
        return np.empty(0, np.uint8)
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    width = 8 if wide else 4
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64 if wide else np.int32, count=len(values) + 1,
                            offset=values.offset * width)
    return np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]


def _escape(values: pa.Array) -> pa.Array | None:
    """JSON string escaping for ``"`` and ``\\``; None when control characters need more."""
    data = _value_bytes(values)
    if (data < 0x20).any():
        return None
    if (data == 0x5C).any():
        values = pc.replace_substring(values, "\\", "\\\\")
    return pc.replace_substring(values, '"', '\\"')


def _json_strings(values: pa.Array) -> pa.Array:
    """Each value as a JSON string literal (``null`` for nulls)."""
    escaped = _escape(values)
    if escaped is None:
        return pa.array([orjson.dumps(v).decode() for v in values.to_pylist()], pa.string())
    return pc.fill_null(pc.binary_join_element_wise('"', escaped, '"', ""), "null")


def _hash_function(id_hash: str):
    if id_hash == PARQUET:
        return _md5
    return _sha256_id


_ORDINARY_PATH = r"^[A-Za-z0-9._~/=-]*$"  # only '=' differs between the log's encoding and S3's


def _ids_and_uris(paths: pa.Array, id_hash: str) -> tuple[pa.Array, pa.Array, list[bytes]]:
    """Per path: the protocol's file id, and its S3 canonical URI relative to the table's prefix.

    Ids are the MD5 (parquet) or SHA-256 (delta) hex of the path as written in the log. The URIs
    come as an Arrow array (for the lines) and as a list (for signing); the paths are turned into
    Python objects once for both.
    """
    raw = paths.cast(pa.binary()).to_pylist()
    digest = _hash_function(id_hash)
    ids = pa.array([digest(p).hexdigest() for p in raw], pa.string())
    if len(paths) == 0 or pc.all(pc.match_substring_regex(paths, _ORDINARY_PATH)).as_py():
        uris = [p.replace(b"=", b"%3D") for p in raw]
        return ids, pc.replace_substring(paths, "=", "%3D").cast(pa.binary()), uris
    uris = [uri_encode_path(unquote(p.decode())).encode() for p in raw]
    return ids, pa.array(uris, pa.binary()), uris


class PreparedFiles(NamedTuple):
    """What is cached per snapshot: file ids and encoded URL paths (the Python-loop parts)."""

    ids: pa.Array
    relative_uris: pa.Array


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

    def _peek(self, cache: OrderedDict, key):
        with self._lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
        return None

    def _put(self, cache: OrderedDict, key, limit: int, value) -> None:
        with self._lock:
            cache[key] = value
            while len(cache) > limit:
                cache.popitem(last=False)

    def lines(self, snapshot: Snapshot, indices: pa.Array, signer: LocalFileSigner, *, expires_in: int, now: float,
              id_hash: str, version: int | None = None, chunk: int = 32768) -> tuple[Iterator[bytes], int | None]:
        """File lines for ``indices`` and the URLs' expiry (ms), built and streamed chunk by chunk.

        Ids, URIs and signatures are computed per chunk in one thread while another joins the
        lines of the previous chunk, so the first bytes leave at once. A whole-table read fills the
        snapshot's id cache and the window's signature cache as it goes.
        """
        if len(indices) == 0:
            return iter(()), None
        # sign at the start of the window so URLs repeat within it, unless that would cut a short
        # lifetime by more than a quarter (then sign at now and reuse nothing)
        windowed = expires_in >= 4 * WINDOW_SECONDS
        window = int(now) - int(now) % WINDOW_SECONDS if windowed else int(now)
        query, _, expiry = signer.presign_uris([], expires_in=expires_in, now=window)
        prefix = signer.table_uri_prefix.encode()
        idx = pa.array(np.asarray(indices, dtype=np.int64))
        idx_np = np.asarray(idx)
        whole = len(idx) == snapshot.num_files and bool(np.all(idx_np == np.arange(len(idx_np))))
        prepared_key = (id(snapshot), snapshot.table_uri, snapshot.version, id_hash)
        prepared = self._peek(self._prepared, prepared_key)
        signed_key = (prepared_key, signer.endpoint, prefix, window, expires_in)
        signed = self._peek(self._signed, signed_key) if windowed else None
        batches = snapshot.files().to_batches()
        bounds = np.cumsum([0] + [b.num_rows for b in batches])

        def keyed() -> Iterator[tuple]:
            """Per chunk: its rows, ids, URIs and signatures (the Python-bound part)."""
            ids_parts, uri_parts, sig_parts = [], [], []
            for start in range(0, len(idx), chunk):
                part = idx.slice(start, chunk)
                rows = _take_sorted(batches, bounds, idx_np[start:start + chunk])
                uri_list = None
                if prepared is not None:
                    ids, uris = prepared.ids.take(part), prepared.relative_uris.take(part)
                else:
                    ids, uris, uri_list = _ids_and_uris(rows.column("path").combine_chunks(), id_hash)
                if signed is not None:
                    sigs = signed.take(part)
                else:
                    uri_list = uris.to_pylist() if uri_list is None else uri_list
                    _, signatures, _ = signer.presign_uris(uri_list, expires_in=expires_in, now=window)
                    sigs = pa.array(signatures, pa.string())
                if whole:
                    ids_parts.append(ids), uri_parts.append(uris), sig_parts.append(sigs)
                yield rows, ids, uris, sigs
            if whole and prepared is None:
                self._put(self._prepared, prepared_key, self._max_prepared,
                          PreparedFiles(pa.concat_arrays(ids_parts), pa.concat_arrays(uri_parts)))
            if whole and windowed and signed is None:
                self._put(self._signed, signed_key, self._max_signed, pa.concat_arrays(sig_parts))

        head = '{"file":{"url":"' + signer.endpoint + prefix.decode()
        mid = "?" + query + "&X-Amz-Signature="
        tail = f"{expiry}" + (f',"version":{version}' if version is not None else "") + "}}\n"

        def joined(item: tuple) -> bytes:
            """One chunk's lines (the Arrow-bound part, which releases the GIL)."""
            rows, ids, uris, sigs = item
            lines = pc.binary_join_element_wise(head, uris.cast(pa.string()), mid, sigs, _static(rows, ids), tail, "")
            return _buffer_bytes(lines)

        if len(idx) <= chunk:
            return map(joined, keyed()), expiry
        return pipelined(keyed(), joined), expiry


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
    """The concatenated values of a string array, as one bytes object."""
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    return _value_bytes(lines).tobytes()
