"""One shared data file → an Arrow table of the shared table's rows.

:func:`read_file` downloads a file from its presigned URL, applies its deletion vector (inline,
or on disk behind a presigned ``storageType "p"`` URL), maps physical column names to logical
ones (column mapping, nested fields included), fills partition columns from the typed partition
values, and casts every column to exactly the type of :attr:`TableInfo.arrow_schema`.
:func:`read_change_file` does the same for change-feed actions and appends ``_change_type``,
``_commit_version`` and ``_commit_timestamp``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltaport.client.download import DEFAULT_DOWNLOAD_RETRY, download, download_into
from deltaport.client.errors import FileDownloadError
from deltaport.client.model import FileAction
from deltaport.client.retry import RetryPolicy
from deltaport.client.schema import CHANGE_COLUMNS, ColumnSpec, TableInfo, parse_partition_value
from deltaport.client.transport import direct_pool, file_http_client
from deltaport.dv import DeletionVectorDescriptor, keep_mask, read_dv

__all__ = [
    "DEFAULT_DOWNLOAD_RETRY",
    "conform",
    "download",
    "download_file",
    "read_change_file",
    "read_file",
    "row_mask",
]

_CHANGE_NAMES = tuple(name for name, _ in CHANGE_COLUMNS)


# --- HTTP -------------------------------------------------------------------------------------------


class _OwnClient:
    """Use the caller's client, or a short-lived one of our own."""

    def __init__(self, http: httpx.Client | None) -> None:
        self.http = http
        self.owned = http is None

    def __enter__(self) -> httpx.Client:
        if self.http is None:
            self.http = file_http_client()
        return self.http

    def __exit__(self, *exc) -> None:
        if self.owned and self.http is not None:
            self.http.close()


def download_file(
    url: str,
    http: httpx.Client,
    file_id: str,
    *,
    allocate: Callable[[int], pa.Buffer] = pa.allocate_buffer,
    retry: RetryPolicy = DEFAULT_DOWNLOAD_RETRY,
) -> pa.Buffer:
    """A whole data file, read straight into ``allocate(length)`` (Arrow memory) when ``http``'s
    connections can be used directly; through ``http`` (a proxy, a redirect) otherwise."""
    pool = direct_pool(http, url)
    if pool is not None:
        data = download_into(url, pool, allocate, retry=retry, file_id=file_id)
        if data is not None:
            return data
    return pa.py_buffer(download(url, http, retry=retry, file_id=file_id))


# --- deletion vectors ------------------------------------------------------------------------------


def _deleted_rows(dv: Mapping[str, Any] | None, http: httpx.Client, file_id: str) -> np.ndarray:
    if not dv:
        return np.empty(0, dtype=np.uint64)
    descriptor = DeletionVectorDescriptor.from_dict(dv)
    if descriptor.storage_type == "u":
        raise FileDownloadError(
            "the server sent a deletion vector with a relative path (storageType 'u'); a "
            "sharing server must presign it (storageType 'p'): ask the data provider",
            http_status=400,
            file_id=file_id,
        )

    def read_range(path: str, offset: int, length: int) -> bytes:
        return download(path, http, byte_range=(offset, length), file_id=file_id)

    return read_dv(descriptor, read_range)


def row_mask(action: FileAction, num_rows: int, http: httpx.Client) -> np.ndarray | None:
    """Rows to keep (None = all): not deleted by the file's DV, and for a paired change-feed
    action, deleted by the paired DV (the rows whose state changed in the commit)."""
    if not action.deletion_vector and not action.paired:
        return None
    keep = keep_mask(_deleted_rows(action.deletion_vector, http, action.id), num_rows)
    if action.paired:
        keep &= ~keep_mask(_deleted_rows(action.paired_deletion_vector, http, action.id), num_rows)
    return keep


# --- type conforming ------------------------------------------------------------------------------

_NESTED = (pa.types.is_struct, pa.types.is_list, pa.types.is_large_list, pa.types.is_map)


def _cast(arr: pa.Array, target: pa.DataType) -> pa.Array:
    if arr.type == target:
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target)
    import pyarrow.compute as pc  # here: most reads cast nothing, and its import takes a tenth of a second

    if pa.types.is_timestamp(target) or pa.types.is_time(target):
        return pc.cast(arr, options=pc.CastOptions(target, allow_time_truncate=True))
    return pc.cast(arr, target)


def _child_index(struct_type: pa.StructType, physical: str, logical: str) -> int:
    for name in (physical, logical):
        i = struct_type.get_field_index(name)
        if i >= 0:
            return i
    lowered = {struct_type.field(i).name.lower(): i for i in range(struct_type.num_fields)}
    return lowered.get(physical.lower(), lowered.get(logical.lower(), -1))


def _conform_array(arr: pa.Array, physical: pa.DataType, logical: pa.DataType) -> pa.Array:
    if arr.type == logical:
        return arr
    if not any(test(logical) for test in _NESTED):
        return _cast(arr, logical)
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), logical)
    if arr.offset:
        arr = pa.concat_arrays([arr])
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(logical) and pa.types.is_struct(arr.type):
        children = []
        for pf, lf in zip(physical, logical):
            i = _child_index(arr.type, pf.name, lf.name)
            children.append(_conform_array(arr.field(i), pf.type, lf.type) if i >= 0 else pa.nulls(len(arr), lf.type))
        return pa.StructArray.from_arrays(children, fields=list(logical), mask=mask)
    if pa.types.is_list(logical) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        values = _conform_array(arr.values, physical.value_type, logical.value_type)
        return pa.ListArray.from_arrays(arr.offsets.cast(pa.int32()), values, type=logical, mask=mask)
    if pa.types.is_map(logical) and pa.types.is_map(arr.type):
        keys = _conform_array(arr.keys, physical.key_type, logical.key_type)
        items = _conform_array(arr.items, physical.item_type, logical.item_type)
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=logical, mask=mask)
    return _cast(arr, logical)


def conform(column: pa.ChunkedArray | pa.Array, physical: pa.DataType, logical: pa.DataType) -> pa.ChunkedArray:
    """A column read by physical names → the logical type (nested fields renamed, types cast)."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column], type=column.type)
    if column.type == logical:
        return column
    return pa.chunked_array([_conform_array(chunk, physical, logical) for chunk in column.chunks], type=logical)


# --- reading ---------------------------------------------------------------------------------------


def _selected(table: TableInfo, columns: Sequence[str] | None) -> list[ColumnSpec]:
    if columns is None:
        return list(table.columns)
    wanted = set()
    for name in columns:
        if name in _CHANGE_NAMES:
            continue
        wanted.add(table.column(name).name)
    return [c for c in table.columns if c.name in wanted]


def _partition_value(spec: ColumnSpec, values: Mapping[str, Any]) -> tuple[bool, Any]:
    for key in (spec.physical_name, spec.name):
        if key in values:
            return True, values[key]
    lowered = {k.lower(): v for k, v in values.items()}
    for key in (spec.physical_name.lower(), spec.name.lower()):
        if key in lowered:
            return True, lowered[key]
    return False, None


def _column_sources(
    names: Sequence[str], specs: Sequence[ColumnSpec], action: FileAction
) -> tuple[dict[str, str], dict[str, str | None]]:
    """The file's column names (by name and lower-cased name), and for each column asked for the
    file's column that holds it (None: a partition value, or a column the file does not have)."""
    file_names: dict[str, str] = {}
    for name in names:
        file_names.setdefault(name, name)
        file_names.setdefault(name.lower(), name)
    sources: dict[str, str | None] = {}
    for spec in specs:
        in_partition = spec.is_partition and _partition_value(spec, action.partition_values)[0]
        sources[spec.name] = None if in_partition else _source_name(spec, file_names)
    return file_names, sources


def _source_name(spec: ColumnSpec, names: Mapping[str, str]) -> str | None:
    """The file's column holding ``spec`` (physical name first, then logical, case-insensitively)."""
    for key in (spec.physical_name, spec.name):
        if key in names:
            return names[key]
    for key in (spec.physical_name.lower(), spec.name.lower()):
        if key in names:
            return names[key]
    return None


def _string_sources(schema: pa.Schema, specs: Sequence[ColumnSpec], sources: Mapping[str, str | None]) -> list[str]:
    """The file's string columns that hold string columns asked for. Read as dictionaries, their
    values are decoded once per distinct string (parquet stores them dictionary-encoded) rather
    than once per row: see :mod:`deltaport.client.frames`, which turns them into pandas columns."""
    names = [sources[spec.name] for spec in specs if pa.types.is_string(spec.type)]
    return [
        name
        for name in dict.fromkeys(names)
        if name is not None
        and len(schema.get_all_field_indices(name)) == 1
        and pa.types.is_string(schema.field(name).type)
    ]


_OPEN: dict[str, Any] = {"coerce_int96_timestamp_unit": "us"}


def _logical(
    specs: Sequence[ColumnSpec],
    sources: Mapping[str, str | None],
    as_dictionaries: Sequence[str],
    data_table: pa.Table | None,
    table: TableInfo,
    action: FileAction,
    num_rows: int,
) -> tuple[list[Any], list[pa.Field]]:
    """The asked-for columns of a file's rows and their fields: read (dictionary columns as they
    were read), partition values, or nulls for a column the file does not have."""
    arrays: list[Any] = []
    fields: list[pa.Field] = []
    for spec in specs:
        source = sources[spec.name]
        field = table.arrow_schema.field(spec.name)
        if source is not None and source in as_dictionaries:
            assert data_table is not None
            arrays.append(data_table.column(source))
            field = field.with_type(data_table.column(source).type)
        elif source is not None:
            assert data_table is not None  # a column was found in the file, so the file was read
            arrays.append(conform(data_table.column(source), spec.physical_type, spec.type))
        elif spec.is_partition:
            arrays.append(_partition_column(spec, action, num_rows))
        else:  # a column the file does not have (added after the file was written)
            arrays.append(pa.nulls(num_rows, spec.type))
        fields.append(field)
    return arrays, fields


def _read(
    action: FileAction,
    table: TableInfo,
    columns: Sequence[str] | None,
    http: httpx.Client | None,
    *,
    change: bool,
    use_threads: bool = True,
    dictionaries: bool = False,
) -> pa.Table:
    specs = _selected(table, columns)
    with _OwnClient(http) as client:
        data = download_file(action.url, client, action.id)
        try:
            pf = pq.ParquetFile(pa.BufferReader(data), **_OPEN)
            file_names, sources = _column_sources(pf.schema_arrow.names, specs, action)
            as_dictionaries = _string_sources(pf.schema_arrow, specs, sources) if dictionaries else []
            if as_dictionaries:  # opened again, its footer as read, to read those as dictionaries
                pf = pq.ParquetFile(
                    pa.BufferReader(data), metadata=pf.metadata, read_dictionary=as_dictionaries, **_OPEN
                )
            to_read = list(dict.fromkeys(s for s in sources.values() if s is not None))
            cdf_column = change and action.change_type == "cdf"
            if cdf_column:
                if "_change_type" not in file_names:
                    raise FileDownloadError(
                        f"change data file {action.id} has no _change_type column", http_status=400, file_id=action.id
                    )
                to_read.append(file_names["_change_type"])
            data_table = pf.read(columns=to_read, use_threads=use_threads) if to_read else None
            num_rows = data_table.num_rows if data_table is not None else pf.metadata.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise FileDownloadError(
                f"file {action.id} is not a readable parquet file ({exc})", http_status=400, file_id=action.id
            ) from None
        del data, pf
        mask = row_mask(action, num_rows, client)
    if mask is not None:
        if data_table is not None:
            data_table = data_table.filter(pa.array(mask))
        num_rows = int(mask.sum())
    arrays, fields = _logical(specs, sources, as_dictionaries, data_table, table, action, num_rows)
    if change:
        change_type = None
        if cdf_column and data_table is not None:
            change_type = data_table.column(file_names["_change_type"]).combine_chunks()
        for field, column in _change_columns(action, columns, change_type, num_rows):
            fields.append(field)
            arrays.append(column)
    if not arrays:  # no column asked for (e.g. a count): keep the row count
        return pa.Table.from_arrays([pa.nulls(num_rows)], names=["_"]).select([])
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _change_columns(
    action: FileAction, columns: Sequence[str] | None, change_type: pa.Array | None, num_rows: int
) -> Iterator[tuple[pa.Field, pa.Array]]:
    """The change feed's columns asked for: ``_change_type`` from the file's own column (a cdc
    file) or the action's kind, and the commit's version and timestamp."""
    wanted = set(_CHANGE_NAMES if columns is None else columns)
    for name, typ in CHANGE_COLUMNS:
        if name not in wanted:
            continue
        if name == "_change_type":
            if change_type is not None:
                column = _cast(change_type, pa.string())
            else:
                column = pa.repeat(pa.scalar(action.change_type, pa.string()), num_rows)
        elif name == "_commit_version":
            column = pa.repeat(pa.scalar(action.version, pa.int64()), num_rows)
        else:
            column = pa.repeat(pa.scalar(action.timestamp, pa.int64()), num_rows)
        yield pa.field(name, typ), column


def _partition_column(spec: ColumnSpec, action: FileAction, num_rows: int) -> pa.Array:
    _, text = _partition_value(spec, action.partition_values)
    try:
        value = parse_partition_value(text, spec.type)
        scalar = pa.scalar(value, spec.type)
    except (ValueError, TypeError, pa.ArrowException) as exc:
        raise FileDownloadError(
            f"partition value {text!r} of column {spec.name!r} in file {action.id} is not a valid {spec.type}: {exc}",
            http_status=400,
            file_id=action.id,
        ) from None
    return pa.repeat(scalar, num_rows)


def read_file(
    action: FileAction, table: TableInfo, *, columns: list[str] | None = None, http: httpx.Client | None = None
) -> pa.Table:
    """Rows of one data file: logical column names in table-schema order (``columns`` selects a
    subset), deletion vector applied, partition columns filled and typed, every column cast to
    exactly its type in ``table.arrow_schema``.

    ``http`` is the client for presigned URLs (never the one that carries the sharing bearer
    token); a short-lived one is made when omitted. Raises :class:`UrlExpired` when the storage
    refuses the URL (ask the server for fresh URLs and call again) and
    :class:`FileDownloadError` for other failures.
    """
    return _read(action, table, columns, http, change=False)


def read_change_file(
    action: FileAction, table: TableInfo, *, columns: list[str] | None = None, http: httpx.Client | None = None
) -> pa.Table:
    """As :func:`read_file`, for a change-feed action, with the table's columns followed by
    ``_change_type`` (string: the file's own column for ``cdf`` files, else ``insert``/``delete``),
    ``_commit_version`` (int64) and ``_commit_timestamp`` (int64, ms): :attr:`TableInfo.change_schema`."""
    if action.change_type is None:
        raise ValueError("read_change_file needs a change-feed action (change_type insert, delete or cdf)")
    return _read(action, table, columns, http, change=True)


def reader_for(change: bool, *, parallel: bool = False, dictionaries: bool = False) -> Callable[..., pa.Table]:
    """:func:`read_file` or :func:`read_change_file`; with ``parallel`` (many files read at once)
    each file is decoded on its caller's thread only: per-column threads would just add overhead.
    With ``dictionaries``, string columns come as dictionary arrays of strings (for
    :func:`deltaport.client.frames.to_pandas`, which expands them)."""
    if not parallel and not dictionaries:
        return read_change_file if change else read_file

    def read(
        action: FileAction, table: TableInfo, *, columns: list[str] | None = None, http: httpx.Client | None = None
    ) -> pa.Table:
        if change and action.change_type is None:
            raise ValueError("a change-feed action is needed (change_type insert, delete or cdf)")
        return _read(action, table, columns, http, change=change, use_threads=not parallel, dictionaries=dictionaries)

    return read
