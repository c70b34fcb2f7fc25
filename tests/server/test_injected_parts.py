"""The server with its storage, signer and clock injected: an in-memory store and a test signer."""

from __future__ import annotations

import httpx
import orjson
import pytest
from conftest import TABLES
from servers import RunningServer

from deltaport.delta import DeltaTable, SnapshotCache
from deltaport.server import create_app, parse_config
from deltaport.signing import SignedUrl
from deltaport.storage.object_store import ObstoreStore

NOW = 1_800_000_000.0


class _TestSigner:
    """Signs by naming the table and path, so a test can see what was signed and when."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.signed: list[str] = []

    def sign(self, path: str, *, expires_in: int, now: float | None = None) -> SignedUrl:
        self.signed.append(path)
        assert now is not None
        expiry = int((now + expires_in) * 1000)
        return SignedUrl(f"https://files.test/{self.table}/{path}?until={expiry}", expiry)


def _memory_store_with(table_dir):
    """An in-memory object store holding a copy of a corpus table (no file of it on disk is read)."""
    import obstore
    from obstore.store import MemoryStore

    memory = MemoryStore()
    for file in sorted(p for p in table_dir.rglob("*") if p.is_file()):
        obstore.put(memory, file.relative_to(table_dir).as_posix(), file.read_bytes())
    return ObstoreStore("memory:///shared/t", _store=memory)


@pytest.fixture
def app_parts():
    store = _memory_store_with(TABLES / "basic_partitioned")
    opened: list[str] = []
    signers: dict[str, _TestSigner] = {}

    def open_store(location, options):
        opened.append(location)
        return store

    def signer(shared, base_url, who):
        return signers.setdefault(shared.config.name, _TestSigner(shared.config.name))

    config = parse_config(
        {
            "version": 1,
            "shares": [
                {"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": "memory:///shared/t"}]}]}
            ],
            "preSignedUrlTimeoutSeconds": 600,
        }
    )
    app = create_app(config, store=open_store, signer=signer, clock=lambda: NOW)
    running = RunningServer(app)
    try:
        with httpx.Client(base_url=running.url, timeout=30) as client:
            yield client, opened, signers
    finally:
        running.stop()


def test_a_query_reads_the_injected_store_and_signs_with_the_injected_signer(app_parts):
    client, opened, signers = app_parts
    response = client.post(
        "/delta-sharing/shares/s/schemas/d/tables/t/query",
        json={},
        headers={"delta-sharing-capabilities": "includeEndStreamAction=true"},
    )
    assert response.status_code == 200, response.text
    assert opened == ["memory:///shared/t"]
    lines = [orjson.loads(x) for x in response.content.splitlines()]
    files = [x["file"] for x in lines if "file" in x]
    on_disk = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    assert sorted(signers["t"].signed) == sorted(a["path"] for a in on_disk.add_actions(range(on_disk.num_files)))
    assert len(files) == on_disk.num_files
    expiry = int((NOW + 600) * 1000)
    assert all(f["url"].startswith("https://files.test/t/") and f["expirationTimestamp"] == expiry for f in files)
    assert lines[-1]["endStreamAction"]["minUrlExpirationTimestamp"] == expiry
    assert int(response.headers["delta-table-version"]) >= 0


def test_version_and_metadata_come_from_the_injected_store(app_parts):
    client, opened, _ = app_parts
    version = client.get("/delta-sharing/shares/s/schemas/d/tables/t/version")
    metadata = client.get("/delta-sharing/shares/s/schemas/d/tables/t/metadata")
    assert version.status_code == 200 and metadata.status_code == 200
    schema = orjson.loads(orjson.loads(metadata.content.splitlines()[1])["metaData"]["schemaString"])
    on_disk = DeltaTable(str(TABLES / "basic_partitioned"), cache=SnapshotCache()).snapshot()
    assert opened == ["memory:///shared/t"]
    assert [f["name"] for f in schema["fields"]] == on_disk.config.schema.names
    assert version.headers["delta-table-version"] == metadata.headers["delta-table-version"] == str(on_disk.version)
