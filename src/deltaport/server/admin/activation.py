"""Activation: a new token's link opens a page from which a person downloads the profile file; the
page (or the SDK's ``recipient_activation.retrieve_token``) fetches the credential from the public,
unauthenticated ``/api/2.1/unity-catalog/public/data_sharing_activation/{token}`` — exactly once.

Opening the page does not spend the link (chat apps and mail scanners open links to preview them):
only the download button does. Neither the page nor any log holds the bearer token.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import orjson
from fastapi import FastAPI, Request
from starlette.responses import HTMLResponse, JSONResponse

from deltaport.delta.history import format_ms
from deltaport.errors import ResourceNotFound
from deltaport.server import errors
from deltaport.server.admin.parts import AdminParts
from deltaport.server.ops.request_info import current_request

_NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Delta Sharing: download your profile</title>
<meta name="referrer" content="no-referrer">
<style>body{{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;line-height:1.5}}
button{{font-size:1.1em;padding:.5em 1.2em}}#msg{{margin-top:1em}}</style></head>
<body><h1>Your Delta Sharing profile</h1>
<p>The data provider has shared data with you. Download the profile file (<code>config.share</code>)
and keep it safe: it holds the credential that reads the shares. The link works <b>once</b>.</p>
<button id="get">Download the profile file</button><div id="msg"></div>
<script>
document.getElementById("get").onclick = async function () {{
  this.disabled = true;
  const msg = document.getElementById("msg");
  const r = await fetch({api}, {{cache: "no-store"}});
  const body = await r.json();
  if (!r.ok) {{ msg.textContent = body.message || "The link cannot be used."; return; }}
  const a = document.createElement("a");  // the answer is the profile file itself
  a.href = URL.createObjectURL(new Blob([JSON.stringify(body, null, 2)], {{type: "application/json"}}));
  a.download = "config.share"; a.click();
  msg.textContent = "Downloaded. This link cannot be used again.";
}};
</script></body></html>
"""

ACTIVATION_API = errors.ACTIVATION_API

#: What an activation token looks like; anything else is no link (and is never echoed into a page).
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")


#: Where a recipient opens its activation link: the page that downloads the profile file.
ACTIVATION_PAGE = "/delta_sharing/activate"


def activation_url(base: str, activation_token: str) -> str:
    """The link a recipient opens to download its profile: it ends with the activation token."""
    return f"{base.rstrip('/')}{ACTIVATION_PAGE}/{activation_token}"


def add_activation_routes(app: FastAPI, parts: AdminParts, sharing_endpoint: Callable[[Request], str]) -> None:
    """The public activation routes: on the protocol's listener, where recipients reach the server."""

    @app.get(ACTIVATION_API + "/{activation_token}", include_in_schema=True)
    def retrieve_token(request: Request, activation_token: str) -> JSONResponse:
        recipient, bearer, expires = parts.catalog.activate(activation_token)
        seen = current_request()
        if seen is not None:  # the audit event names who activated
            seen.principal = recipient.name
        parts.reload()  # the new token reads from the next request on
        body = {  # a profile file, as is
            "shareCredentialsVersion": 1,
            "endpoint": sharing_endpoint(request),
            "bearerToken": bearer,
            "expirationTime": format_ms(expires) if expires is not None else None,
        }
        return JSONResponse({k: v for k, v in body.items() if v is not None}, headers=_NO_STORE)

    @app.get(ACTIVATION_PAGE + "/{activation_token}", response_class=HTMLResponse)
    def activation_page(activation_token: str) -> HTMLResponse:
        if not _TOKEN.fullmatch(activation_token):
            raise ResourceNotFound("no such activation link: ask the data provider for a new one")
        api = orjson.dumps(f"{ACTIVATION_API}/{activation_token}").decode()  # a JS string, only [A-Za-z0-9_-/]
        return HTMLResponse(_PAGE.format(api=api), headers=_NO_STORE)
