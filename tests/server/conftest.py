"""A running deltaport server over the shared corpus, and a recipient profile for it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from secret_scan import secrets_used

from deltaport.server import create_app, parse_config

TABLES = (
    Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[3] / "shared")).resolve() / "delta-tables"
)

CORPUS = {
    "dv": "table-with-dv-small",
    "dv_cdf": "cdf-table-with-dv",
    "cdf": "cdf-table",
    "cm_name": "cdf-column-mapping-name-mode",
    "cm_id": "cdf-column-mapping-id-mode",
    "ntz": "data-reader-timestamp_ntz",
    "sidecars": "v2-checkpoints-parquet-with-sidecars",
    "multipart": "v1-multi-part-partitioned-struct-stats-only",
    "partitioned": "basic_partitioned",
    "checkpointed": "external-table-different-nullability",
}
TOKEN = "test-token-alice"
OTHER_TOKEN = "test-token-bob"
secrets_used.add(TOKEN, OTHER_TOKEN)  # no log line of the session may hold them


def corpus_config(extra_tables: dict[str, str] | None = None) -> dict:
    tables = [
        {"name": name, "location": str(TABLES / path), "id": f"id-{name}", "historyShared": True}
        for name, path in CORPUS.items()
    ]
    tables.append({"name": "nohistory", "location": str(TABLES / "basic_partitioned"), "id": "id-nohistory"})
    tables.append(
        {"name": "broken", "location": str(TABLES / "crc-malformed"), "id": "id-broken", "historyShared": True}
    )
    for name, path in (extra_tables or {}).items():
        tables.append({"name": name, "location": path, "id": f"id-{name}", "historyShared": True})
    return {
        "version": 1,
        "shares": [
            {"name": "corpus", "schemas": [{"name": "default", "tables": tables}]},
            {
                "name": "other",
                "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            },
        ],
        "recipients": [
            {"name": "alice", "tokens": [TOKEN], "shares": ["corpus"]},
            {"name": "bob", "tokens": [OTHER_TOKEN], "shares": ["other"]},
        ],
        "preSignedUrlTimeoutSeconds": 900,
    }


@pytest.fixture(scope="session")
def server():
    from servers import RunningServer

    from deltaport.cli.serve import _http_protocol

    app = create_app(parse_config(corpus_config()))
    running = RunningServer(app, **_http_protocol(app))  # as `deltaport serve` runs it: file bodies by sendfile
    yield running
    running.stop()


@pytest.fixture(scope="module")
def http(server):
    """An HTTP client of the corpus server, as recipient alice."""
    import httpx

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def profile(server, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("profile") / "alice.share"
    path.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": server.url + "/delta-sharing", "bearerToken": TOKEN})
    )
    return str(path)
