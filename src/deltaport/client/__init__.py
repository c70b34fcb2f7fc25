"""deltaport's Delta Sharing connector: the official ``delta_sharing`` API, and more.

``import deltaport as delta_sharing`` (or ``deltaport.client``) works for code written for the official connector::

    client = delta_sharing.SharingClient("config.share")
    client.list_all_tables()
    df = delta_sharing.load_as_pandas("config.share#share.schema.table", limit=10)

Beyond it: polars output (:func:`load_as_polars`), a streaming Arrow reader
(:func:`load_as_arrow_reader`), ``maxFiles`` pagination, presigned URLs refreshed when they
expire mid-read, parallel downloads with bounded memory, retries with backoff, deletion vectors,
column mapping and typed partition values read natively in both response formats, version-2
profiles (bearer token, OAuth client credentials) and a progress bar on long reads.
"""

from deltaport.client.errors import (
    ConnectionFailed,
    FileDownloadError,
    IncompleteResponse,
    InvalidTableUrl,
    ProfileError,
    SharingServerError,
    SpillFailed,
    TokenExpired,
    UrlExpired,
)
from deltaport.client.model import FileAction, Format, Metadata, Protocol, Schema, Share, Table
from deltaport.client.profile import DeltaSharingProfile, parse_url, read_profile
from deltaport.client.reader import read_change_file, read_file
from deltaport.client.rest import ChangesOptions, QueryOptions, RestClient
from deltaport.client.retry import RetryPolicy
from deltaport.client.schema import TableInfo
from deltaport.client.sharing import (
    SharingClient,
    get_table_metadata,
    get_table_protocol,
    get_table_version,
    load_as_arrow,
    load_as_arrow_reader,
    load_as_pandas,
    load_as_polars,
    load_as_spark,
    load_table_changes_as_arrow,
    load_table_changes_as_pandas,
    load_table_changes_as_polars,
    load_table_changes_as_spark,
)

__all__ = [
    "ChangesOptions",
    "ConnectionFailed",
    "DeltaSharingProfile",
    "FileAction",
    "FileDownloadError",
    "Format",
    "IncompleteResponse",
    "InvalidTableUrl",
    "Metadata",
    "ProfileError",
    "Protocol",
    "QueryOptions",
    "RestClient",
    "RetryPolicy",
    "Schema",
    "Share",
    # the official connector's API
    "SharingClient",
    # errors
    "SharingServerError",
    "SpillFailed",
    "Table",
    "TableInfo",
    "TokenExpired",
    "UrlExpired",
    "get_table_metadata",
    "get_table_protocol",
    "get_table_version",
    "load_as_arrow",
    "load_as_arrow_reader",
    "load_as_pandas",
    # extras
    "load_as_polars",
    "load_as_spark",
    "load_table_changes_as_arrow",
    "load_table_changes_as_pandas",
    "load_table_changes_as_polars",
    "load_table_changes_as_spark",
    "parse_url",
    "read_change_file",
    "read_file",
    "read_profile",
]
