"""A real deltaport server (loaded from a config file it re-reads) with local tables copied from the
shared corpus, and credentials of its S3 face minted for recipients."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import httpx
import yaml
from secret_scan import secrets_used

from deltaport.server.s3face.credentials import FaceCredentials, face_location
from deltaport.server.sharing.registry import Registry
from deltaport.server.sharing.tokens import TokenCodec
from deltaport.server.sources.config import load_config
from deltaport.signing.vending import TemporaryCredentials
from deltaport.storage.locations import Location

CORPUS = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[4] / "shared")) / "delta-tables"
TABLES = {"dv": "table-with-dv-small", "cm": "cdf-column-mapping-name-mode", "part": "basic_partitioned"}
ALICE, BOB, ALICE_OLD = "face-token-alice", "face-token-bob", "face-token-alice-old"
secrets_used.add(ALICE, BOB, ALICE_OLD)
BUCKET = "deltaport"
logging.getLogger("botocore").setLevel(logging.INFO)  # its DEBUG lines hold the client's own credentials


def face_config(root: Path, *, alice_tokens=(ALICE, ALICE_OLD), alice_shares=("dir",)) -> dict:
    access = {"accessModes": ["url", "dir"], "historyShared": True}
    tables = [{"name": name, "location": str(root / name), **access} for name in TABLES]
    return {
        "version": 1,
        "tokenSecret": "face-test-secret",
        "catalogPollSeconds": 0.1,
        "shares": [
            {"name": "dir", "schemas": [{"name": "s", "tables": tables}]},
            {
                "name": "other",
                "schemas": [{"name": "s", "tables": [{"name": "t", "location": str(root / "other"), **access}]}],
            },
        ],
        "recipients": [
            {"name": "alice", "tokens": list(alice_tokens), "shares": list(alice_shares)},
            {"name": "bob", "tokens": [BOB], "shares": ["other"]},
        ],
    }


class Face:
    """``deltaport serve`` as its own process (delta-rs's reader holds the GIL while it waits for
    bytes, so a server in a thread of the test process would never answer), its config file
    (rewritten to revoke), and credentials minted here with the same ``tokenSecret``: stateless,
    so the server honours them as if it had minted them itself."""

    def __init__(self, root: Path) -> None:
        from servers import ServeProcess

        self.root = root
        self.config = face_config(root)
        self.server = ServeProcess(self.config, root)
        self.url = self.server.url
        self.path = root / "serve.yaml"

    def write(self, config: dict) -> None:
        self.path.write_text(yaml.safe_dump({**config, "host": "127.0.0.1", "port": self.server.port}))

    def reload(self, config: dict, until) -> None:
        """Rewrite the config file and wait until the server serves it (``until()`` true)."""
        self.write(config)
        deadline = time.time() + 10
        while not until():
            assert time.time() < deadline, "the server did not take the new config"
            time.sleep(0.05)

    def mint(self, table: str, *, token: str = ALICE, share: str = "dir", sub: str = "", lifetime: int | None = None):
        """Credentials for ``table`` as the server's endpoint answers them; with a ``lifetime``
        other than the server's, minted here as the server would mint them (same ``tokenSecret``)."""
        if lifetime is None:
            return self._asked(table, token=token, share=share, sub=sub)
        config = load_config(self.path)
        registry = Registry(config, TokenCodec(config.token_secret or b""))
        who = registry.authenticate(f"Bearer {token}", int(time.time() * 1000))
        shared = registry.table(who, share, "s", table)
        location = face_location(shared, BUCKET)
        if sub:
            location = Location(location.scheme, location.authority, f"{location.path}/{sub}")
        creds = FaceCredentials(config.token_secret).mint(
            table=shared, who=who, location=location, endpoint=self.url, lifetime_seconds=lifetime, now=time.time()
        )
        secrets_used.add(creds.values["secretAccessKey"], creds.values["sessionToken"], label="face credentials")
        return creds

    def _asked(self, table: str, *, token: str, share: str, sub: str) -> TemporaryCredentials:
        url = f"{self.url}/delta-sharing/shares/{share}/schemas/s/tables/{table}/temporary-table-credentials"
        body = {"location": f"s3://{BUCKET}/{share}/s/{table}/{sub}"} if sub else None
        answer = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        got = answer.json()["credentials"]
        values = got["awsTempCredentials"]
        secrets_used.add(values["secretAccessKey"], values["sessionToken"], label="face credentials")
        return TemporaryCredentials(got["location"], "aws", values, got["expirationTime"])


def running_face(tmp_path_factory):
    """A module's ``face`` fixture: the server over copies of the tables, stopped at the end."""
    root = tmp_path_factory.mktemp("face")
    for name, source in TABLES.items():
        shutil.copytree(CORPUS / source, root / name, symlinks=True)
    shutil.copytree(CORPUS / "basic_partitioned", root / "other")
    running = Face(root)
    yield running
    running.server.stop()


def storage_options(creds) -> dict[str, str]:
    """delta-rs's options for face credentials, as the connector maps them."""
    from deltaport.client.directory import storage_options as mapped

    return mapped(creds)


def s3_client(creds):
    import boto3
    from botocore.config import Config

    v = creds.values
    return boto3.client(
        "s3",
        endpoint_url=v["endpoint"],
        aws_access_key_id=v["accessKeyId"],
        aws_secret_access_key=v["secretAccessKey"],
        aws_session_token=v["sessionToken"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
