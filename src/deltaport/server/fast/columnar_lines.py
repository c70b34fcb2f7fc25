"""Parquet-format snapshot lines built columnar, for the server's own (locally served) files.

A response is built chunk by chunk in a two-thread pipeline: one thread gets each chunk's file
ids, canonical URIs and URL signatures (MD5 and a keyed BLAKE2b per file, see file_keys), handing
chunks to a keying worker process while it is free and doing the others itself; the other thread
joins finished chunks' lines (by the compiled join where it was built, else by Arrow's string
kernels; both release the GIL), and the first bytes are sent as soon as the first chunk is ready.
A whole-table read leaves the snapshot's ids and URIs and the signing window's signatures cached,
so a repeated read in the same one-minute window only joins. The bytes are the same as
FileLineMaker's for the same URLs: both follow the file line's one field declaration,
``protocol.lines.FILE_FIELDS``.

Fast form of: the per-row parquet-format file lines of
``sharing.translate.FileLineMaker.snapshot_lines``. Held equal by:
tests/server/fast/test_columnar_lines.py.
"""

from __future__ import annotations

import string
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

import deltaport.native as native
from deltaport.delta import Snapshot
from deltaport.protocol import lines as wire
from deltaport.server.fast.file_keys import AS_IS, ENCODE, ORDINARY, FileKeys, KeyingPool, key_packed
from deltaport.server.fast.pipeline import pipelined
from deltaport.signing.local_mac import SIGNATURE_CHARS


@runtime_checkable
class BatchSigner(Protocol):
    """A signer whose URLs share one query string and differ by path and signature only (the
    server's own file URLs): what the column-wise path needs to sign a whole chunk at once."""

    @property
    def endpoint(self) -> str: ...

    @property
    def table_uri_prefix(self) -> str: ...

    def batch_signing(self, *, expires_in: int, now: float | None = None) -> tuple[str, Any, int]: ...


WINDOW_SECONDS = 60  # URLs signed within one window are identical, so they can be reused


def _offsets(values: pa.Array) -> np.ndarray:
    """A string or binary array's value offsets (into its whole data buffer), ``len + 1`` of them."""
    wide = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    return np.frombuffer(
        values.buffers()[1],
        dtype=np.int64 if wide else np.int32,
        count=len(values) + 1,
        offset=values.offset * (8 if wide else 4),
    )


def _value_bytes(values: pa.Array) -> np.ndarray:
    """The bytes of a string array's values (its data buffer between first and last offset)."""
    if len(values) == 0 or values.buffers()[2] is None:
        return np.empty(0, np.uint8)
    offsets = _offsets(values)
    return np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]


def _escape(values: pa.Array) -> pa.Array | None:
    """JSON string escaping for ``"`` and ``\\``; None when control characters need more."""
    data = _value_bytes(values)
    if (data < 0x20).any():
        return None
    if (data == 0x5C).any():
        values = pc.replace_substring(values, "\\", "\\\\")
    return pc.replace_substring(values, '"', '\\"')


_ORDINARY_MARKS = "._~/=-"  # with letters and digits: a path whose log encoding is S3's but for '='
_ORDINARY_PATH = f"^[A-Za-z0-9{_ORDINARY_MARKS}]*$"
_ORDINARY_BYTES = (string.ascii_letters + string.digits + _ORDINARY_MARKS).encode()


def _ordinary(paths: pa.Array) -> bool:
    """Whether every path is of :data:`_ORDINARY_PATH`'s characters only."""
    loops = native.loops
    if loops is not None:
        return loops.only(_value_bytes(paths), _ORDINARY_BYTES)
    return len(paths) == 0 or pc.all(pc.match_substring_regex(paths, _ORDINARY_PATH)).as_py()


#: Chunks a keying worker may hold at once (one being keyed, one waiting), and chunks keyed ahead.
_WORKER_DEPTH = 2
_AHEAD = 4
#: A chunk takes a worker well under a second; one that takes this long is keyed here instead.
_WORKER_TIMEOUT = 30.0


def _fixed_width(text: str, count: int, width: int) -> pa.Array:
    """A string array of ``count`` values of ``width`` characters each, from their concatenation."""
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text.encode())])


def _packed(values: pa.Array) -> tuple[bytes, bytes]:
    """A string or binary array's values as one buffer and int64 offsets from 0 (cheap to send)."""
    offsets = _offsets(values).astype(np.int64)
    return _value_bytes(values).tobytes(), (offsets - offsets[0]).tobytes()


class _Chunk:
    """One chunk of a response on its way: its rows, and its keys or the worker's promise of them."""

    __slots__ = ("ids", "job", "keys", "rows", "sigs", "uris")

    def __init__(self, rows: pa.Table, ids, uris, sigs) -> None:
        self.rows, self.ids, self.uris, self.sigs = rows, ids, uris, sigs
        self.job: tuple | None = None  # (inputs, id kind, URI mode, batch signing): what is keyed
        self.keys: FileKeys | Future | None = None

    def waiting(self) -> bool:
        return isinstance(self.keys, Future) and not self.keys.done()


class PreparedFiles(NamedTuple):
    """What is cached per snapshot: file ids and encoded URL paths (the Python-loop parts)."""

    ids: pa.Array
    relative_uris: pa.Array


class _JsonSafe(NamedTuple):
    """A JSON string's text given as pieces: constants (escaped here, once) and string arrays whose
    values need no escaping (hex ids and signatures, percent-encoded paths)."""

    pieces: tuple[str | pa.Array, ...]


RAW, QUOTED = 0, 1  # a column's values as they are, or each as a JSON string (_native.join's modes)


class _Column(NamedTuple):
    """A string column in a line: its values ``RAW`` or ``QUOTED``; a null is ``null_as``, or
    (None) leaves out the :class:`_Optional` group around it."""

    values: pa.Array
    mode: int
    null_as: str | None = None


class _Optional(NamedTuple):
    """Pieces written only where none of their columns is null (an optional field and its key)."""

    pieces: list


def _rendered(values: pa.Array | pa.ChunkedArray, kind: str, *, nullable: bool) -> list:
    """The pieces of a column's JSON values per row, as the line's field ``kind`` renders them:
    null where a value is null if ``nullable``, else ``null``. Objects are structs of strings."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    null_as = None if nullable else "null"
    if kind == "object":
        parts: list = ["{"]
        for i, f in enumerate(values.type):
            parts += [
                ("," if i else "") + orjson.dumps(f.name).decode() + ":",
                _Column(values.field(i), QUOTED, "null"),
            ]
        return [*parts, "}"]
    if kind == "number":
        return [_Column(pc.cast(values, pa.string()), RAW, null_as)]
    return [_Column(values, QUOTED, null_as)]


def _line_pieces(kind: str, fields: tuple[wire.WireField, ...], values: dict[str, Any]) -> list:
    """Every line of a chunk as one program of pieces (constants, :class:`_Column`,
    :class:`_Optional`), from the line's field declaration and each field's value: a column, a
    constant, or a :class:`_JsonSafe` string. Adjacent constants are joined here."""
    if fields[0].optional:
        raise ValueError(f"the first field of a {kind!r} line must be required, not {fields[0].name!r}")
    pieces: list = ["{" + orjson.dumps(kind).decode() + ":{"]
    for i, f in enumerate(fields):
        if f.key not in values:
            raise ValueError(f"the column-wise {kind!r} line has no value for the field {f.name!r} ({f.key})")
        key, value = ("," if i else "") + orjson.dumps(f.name).decode() + ":", values[f.key]
        if isinstance(value, _JsonSafe):
            pieces += [key + '"']
            pieces += [orjson.dumps(p).decode()[1:-1] if isinstance(p, str) else _Column(p, RAW) for p in value.pieces]
            pieces.append('"')
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            rendered = _rendered(value, f.kind, nullable=f.optional)
            pieces += [_Optional(_merged([key, *rendered]))] if f.optional else [key, *rendered]
        elif value is not None or not f.optional:
            pieces.append(key + orjson.dumps(value).decode())
    pieces.append("}}\n")
    return _merged(pieces)


def _merged(pieces: list) -> list:
    """Pieces with each run of adjacent constants joined into one."""
    out: list = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        else:
            out.append(p)
    return out


def _joined(n: int, pieces: list) -> memoryview:
    """The ``n`` lines of a program of pieces, concatenated: by the compiled join where it was
    built, else by Arrow's kernels (the same bytes; tests/server/fast/test_columnar_lines.py runs
    both)."""
    loops = native.loops
    if loops is None:
        return _buffer_view(pc.binary_join_element_wise(*[_arrow_piece(p) for p in pieces], ""))
    return memoryview(loops.join(n, [_native_piece(p) for p in pieces]))


def _native_piece(p: str | _Column | _Optional) -> bytes | tuple | list:
    if isinstance(p, str):
        return p.encode()
    if isinstance(p, _Optional):
        return [_native_piece(q) for q in p.pieces]
    values = p.values
    valid, _, data = values.buffers()[:3]
    null_as = None if p.null_as is None else p.null_as.encode()
    offsets = _offsets(values).astype(np.int64)
    return (offsets, data or b"", valid if values.null_count else None, values.offset, p.mode, null_as)


def _arrow_piece(p: str | _Column | _Optional) -> str | pa.Array:
    if isinstance(p, str):
        return p
    if isinstance(p, _Optional):
        return pc.fill_null(pc.binary_join_element_wise(*[_arrow_piece(q) for q in p.pieces], ""), "")
    values = p.values
    if p.mode == QUOTED:
        escaped = _escape(values)
        if escaped is None:  # control characters: each value by orjson
            values = pa.array(
                [None if v is None else orjson.dumps(v).decode() for v in values.to_pylist()], pa.string()
            )
        else:
            values = pc.binary_join_element_wise('"', escaped, '"', "")
    return values if p.null_as is None or not values.null_count else pc.fill_null(values, p.null_as)


class ColumnarLines:
    """File lines of plain snapshots, built column-wise. What it reuses between requests (file ids,
    encoded paths, one window's signatures) is kept with the snapshot, inside the cache's bound."""

    def __init__(self, *, pool: KeyingPool | None = None) -> None:
        self.pool = pool

    def lines(
        self,
        snapshot: Snapshot,
        indices: pa.Array,
        signer: BatchSigner,
        *,
        expires_in: int,
        now: float,
        id_hash: str,
        version: int | None = None,
        chunk: int = 32768,
    ) -> tuple[Iterator[memoryview], int | None]:
        """File lines for ``indices`` and the URLs' expiry (ms), built and streamed chunk by chunk.

        Long by choice: one response's two-stage pipeline, whose closures share the response's
        state (caches read and filled, the worker's queue, the signing window); split, that state
        would move into a class with no other use.

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
        query, batch, expiry = signer.batch_signing(expires_in=expires_in, now=window)
        prefix = signer.table_uri_prefix.encode()
        idx = pa.array(np.asarray(indices, dtype=np.int64))
        idx_np = np.asarray(idx)
        whole = len(idx) == snapshot.num_files and bool(np.all(idx_np == np.arange(len(idx_np))))
        prepared_key = ("prepared-files", id_hash)
        prepared = snapshot.cached(prepared_key)
        # one window's signatures per signing endpoint and lifetime: a newer window replaces it
        signed_key = ("signatures", id_hash, signer.endpoint, prefix, expires_in)
        held = snapshot.cached(signed_key) if windowed else None
        signed = held[1] if held is not None and held[0] == window else None
        batches = snapshot.files().to_batches()
        bounds = np.cumsum([0] + [b.num_rows for b in batches])
        pool = self.pool if self.pool is not None and len(idx) > chunk else None

        def start(begin: int) -> _Chunk:
            """A chunk with what the caches hold, and its keying begun (in the worker if it is free)."""
            part = idx.slice(begin, chunk)
            rows = _take_sorted(batches, bounds, idx_np[begin : begin + chunk])
            if prepared is not None:
                c = _Chunk(rows, prepared.ids.take(part), prepared.relative_uris.take(part), None)
                inputs, mode, hash_kind = c.uris, AS_IS, None
            else:
                inputs = rows.column("path").combine_chunks()
                ordinary = _ordinary(inputs)
                uris = pc.replace_substring(inputs, "=", "%3D") if ordinary else None
                c = _Chunk(rows, None, uris, None)
                mode, hash_kind = (ORDINARY if ordinary else ENCODE), id_hash
            if signed is not None:
                c.sigs = signed.take(part)
            if hash_kind is None and c.sigs is not None:
                return c
            c.job = (inputs, hash_kind, mode, batch if c.sigs is None else None)
            if pool is not None and sum(map(_Chunk.waiting, pending)) < _WORKER_DEPTH:
                c.keys = pool.submit(*_packed(inputs), id_hash=hash_kind, uri_mode=mode, batch=c.job[3])
            if c.keys is None:
                c.keys = _key_locally(*c.job)
            return c

        def finish(c: _Chunk) -> tuple:
            if c.job is not None:
                keys = c.keys
                if isinstance(keys, Future):
                    try:
                        keys = keys.result(timeout=_WORKER_TIMEOUT)
                    except Exception as exc:  # the worker died or hangs: key this chunk here
                        assert pool is not None  # only the pool hands out futures
                        pool.failed(exc)
                        keys = _key_locally(*c.job)
                n = c.rows.num_rows
                assert keys is not None
                if keys.ids is not None:
                    c.ids = _fixed_width(keys.ids, n, len(keys.ids) // n if n else 0)
                if keys.uris is not None:
                    c.uris = pa.array(keys.uris, pa.string())
                if keys.signatures is not None:
                    c.sigs = _fixed_width(keys.signatures, n, SIGNATURE_CHARS)
            return c.rows, c.ids, c.uris, c.sigs

        pending: deque[_Chunk] = deque()

        def keyed() -> Iterator[tuple]:
            """Chunks in order, keyed here or by the worker (the Python-bound part)."""
            ids_parts, uri_parts, sig_parts = [], [], []

            def done(c: _Chunk) -> tuple:
                item = finish(c)
                if whole:
                    ids_parts.append(item[1])
                    uri_parts.append(item[2])
                    sig_parts.append(item[3])
                return item

            for begin in range(0, len(idx), chunk):
                pending.append(start(begin))
                while pending and (not pending[0].waiting() or len(pending) > _AHEAD):
                    yield done(pending.popleft())
            while pending:
                yield done(pending.popleft())
            if whole and prepared is None:
                snapshot.remember(prepared_key, PreparedFiles(pa.concat_arrays(ids_parts), pa.concat_arrays(uri_parts)))
            if whole and windowed and signed is None:
                snapshot.remember(signed_key, (window, pa.concat_arrays(sig_parts)), replace=True)

        url_path = signer.endpoint + prefix.decode()
        url_query = "?" + query + "&X-Amz-Signature="

        def joined(item: tuple) -> memoryview:
            """One chunk's lines (the Arrow-bound part, which releases the GIL)."""
            rows, ids, uris, sigs = item
            values = {
                "url": _JsonSafe((url_path, uris, url_query, sigs)),
                "id": _JsonSafe((ids,)),
                "partition_values": rows.column("partitionValues"),
                "size": rows.column("size"),
                "stats": rows.column("stats"),
                "expiration_timestamp": expiry,
                "version": version,
                "timestamp": None,
            }
            return _joined(rows.num_rows, _line_pieces("file", wire.FILE_FIELDS, values))

        if len(idx) <= chunk:
            return map(joined, keyed()), expiry
        return pipelined(keyed(), joined), expiry


def _key_locally(inputs: pa.Array, id_hash: str | None, mode: str, batch) -> FileKeys:
    return key_packed(*_packed(inputs), id_hash, mode, batch)


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


def _buffer_view(lines: pa.Array) -> memoryview:
    """The concatenated values of a string array, without copying them (the view keeps them alive).

    The server sends memoryviews as they are; a copy into bytes would cost a pass over the whole
    response with the GIL held.
    """
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    return memoryview(_value_bytes(lines))  # type: ignore[arg-type]  # numpy arrays export the buffer protocol
