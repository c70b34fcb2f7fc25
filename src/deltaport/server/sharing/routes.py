"""The protocol's endpoints under the server's prefix: listing shares, schemas and tables; a table's
version, metadata, files (/query, and an asynchronous query's /queries/{queryId}) and change data
feed (/changes). Each asks the app's
:class:`~deltaport.server.sharing.service.SharingService` (``app.state.service``) and renders its
reply; /version and /metadata go through ``app.state.table_calls``, which the hot paths call too.
"""

from __future__ import annotations

import functools
from typing import Optional

from fastapi import Header, Request
from starlette.responses import Response

from deltaport.server.ops import api_doc
from deltaport.server.routing import RouteTable
from deltaport.server.sharing.params import QUERY_CHECK
from deltaport.server.sharing.replies import reply_response
from deltaport.server.sharing.service import SharingService

#: A table's path under the prefix.
TABLE = "/shares/{share}/schemas/{schema}/tables/{table}"

router = RouteTable()


def _service(request: Request) -> SharingService:
    service: SharingService = request.app.state.service
    return service


@router.get("/shares", tags=["shares"], dependencies=QUERY_CHECK)
def list_shares(
    request: Request,
    maxResults: Optional[str] = None,
    pageToken: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    return reply_response(service.list_shares(service.principal(authorization), maxResults, pageToken))


@router.get("/shares/{share}", tags=["shares"], dependencies=QUERY_CHECK)
def get_share(share: str, request: Request, authorization: Optional[str] = Header(None)) -> Response:
    service = _service(request)
    return reply_response(service.get_share(service.principal(authorization), share))


@router.get("/shares/{share}/schemas", tags=["shares"], dependencies=QUERY_CHECK)
def list_schemas(
    share: str,
    request: Request,
    maxResults: Optional[str] = None,
    pageToken: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    return reply_response(service.list_schemas(service.principal(authorization), share, maxResults, pageToken))


@router.get("/shares/{share}/schemas/{schema}/tables", tags=["shares"], dependencies=QUERY_CHECK)
def list_tables(
    share: str,
    schema: str,
    request: Request,
    maxResults: Optional[str] = None,
    pageToken: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    who = service.principal(authorization)
    return reply_response(service.list_tables(who, share, schema, maxResults, pageToken))


@router.get("/shares/{share}/all-tables", tags=["shares"], dependencies=QUERY_CHECK)
def list_all_tables(
    share: str,
    request: Request,
    maxResults: Optional[str] = None,
    pageToken: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    return reply_response(service.list_all_tables(service.principal(authorization), share, maxResults, pageToken))


@router.get(TABLE + "/version", tags=["tables"], dependencies=QUERY_CHECK)
async def table_version(
    share: str,
    schema: str,
    table: str,
    request: Request,
    startingTimestamp: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    query, headers = {"startingTimestamp": startingTimestamp}, {"authorization": authorization}
    return await request.app.state.table_calls.version(share, schema, table, query, headers)


@router.head(TABLE, tags=["tables"], dependencies=QUERY_CHECK)
async def table_version_head(
    share: str,
    schema: str,
    table: str,
    request: Request,
    startingTimestamp: Optional[str] = None,
    authorization: Optional[str] = Header(None),
) -> Response:
    query, headers = {"startingTimestamp": startingTimestamp}, {"authorization": authorization}
    return await request.app.state.table_calls.version(share, schema, table, query, headers, head=True)


@router.get(TABLE + "/metadata", tags=["tables"], dependencies=QUERY_CHECK)
async def metadata(
    share: str,
    schema: str,
    table: str,
    request: Request,
    version: Optional[str] = None,
    timestamp: Optional[str] = None,
    authorization: Optional[str] = Header(None),
    delta_sharing_capabilities: Optional[str] = Header(None),
) -> Response:
    query = {"version": version, "timestamp": timestamp}
    headers = {"authorization": authorization, "delta-sharing-capabilities": delta_sharing_capabilities}
    return await request.app.state.table_calls.metadata(share, schema, table, query, headers)


@router.post(TABLE + "/query", tags=["tables"], openapi_extra={"requestBody": api_doc.query_body()})
async def query(
    share: str,
    schema: str,
    table: str,
    request: Request,
    authorization: Optional[str] = Header(None),
    delta_sharing_capabilities: Optional[str] = Header(None),
    fileidhash: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    body = await request.body()
    reply = await request.app.state.table_calls.off_loop(
        service.query,
        service.principal(authorization),
        share,
        schema,
        table,
        body,
        delta_sharing_capabilities,
        fileidhash,
        str(request.base_url),
    )
    return reply_response(reply)


@router.post(TABLE + "/queries/{query_id}", tags=["tables"])
async def query_info(
    share: str,
    schema: str,
    table: str,
    query_id: str,
    request: Request,
    authorization: Optional[str] = Header(None),
    delta_sharing_capabilities: Optional[str] = Header(None),
    fileidhash: Optional[str] = Header(None),
) -> Response:
    """An asynchronous query's status (``queryStatus``: pending or failed), or once planned its
    result, as ``/query`` answers it; the body may give ``maxFiles`` and ``pageToken``."""
    service = _service(request)
    body = await request.body()
    who = service.principal(authorization)
    reply = await request.app.state.table_calls.off_loop(
        service.query_info,
        who,
        share,
        schema,
        table,
        query_id,
        body,
        delta_sharing_capabilities,
        fileidhash,
        str(request.base_url),
    )
    return reply_response(reply)


@router.post(
    TABLE + "/temporary-table-credentials", tags=["tables"], openapi_extra={"requestBody": api_doc.credentials_body()}
)
async def temporary_table_credentials(
    share: str, schema: str, table: str, request: Request, authorization: Optional[str] = Header(None)
) -> Response:
    """Credentials that read the table's directory (or the ``location`` the body names under it)
    until ``expirationTime``: for tables shared with ``dir`` in their ``accessModes``."""
    service = _service(request)
    body = await request.body()
    who = service.principal(authorization)
    endpoint = service.config.public_url or str(request.base_url)
    reply = await request.app.state.table_calls.off_loop(
        service.table_credentials, who, share, schema, table, body, endpoint.rstrip("/")
    )
    return reply_response(reply)


@router.get(TABLE + "/changes", tags=["tables"], dependencies=QUERY_CHECK)
async def changes(
    share: str,
    schema: str,
    table: str,
    request: Request,
    startingVersion: Optional[str] = None,
    endingVersion: Optional[str] = None,
    startingTimestamp: Optional[str] = None,
    endingTimestamp: Optional[str] = None,
    includeHistoricalMetadata: Optional[str] = None,
    includeHistoricalProtocol: Optional[str] = None,
    maxFiles: Optional[str] = None,
    pageToken: Optional[str] = None,
    authorization: Optional[str] = Header(None),
    delta_sharing_capabilities: Optional[str] = Header(None),
    fileidhash: Optional[str] = Header(None),
) -> Response:
    service = _service(request)
    params = {
        "startingVersion": startingVersion,
        "endingVersion": endingVersion,
        "startingTimestamp": startingTimestamp,
        "endingTimestamp": endingTimestamp,
        "includeHistoricalMetadata": includeHistoricalMetadata,
        "includeHistoricalProtocol": includeHistoricalProtocol,
        "maxFiles": maxFiles,
        "pageToken": pageToken,
    }
    who = service.principal(authorization)
    reply = await request.app.state.table_calls.off_loop(
        functools.partial(service.changes, fileidhash=fileidhash),
        who,
        share,
        schema,
        table,
        params,
        delta_sharing_capabilities,
        str(request.base_url),
    )
    return reply_response(reply)
