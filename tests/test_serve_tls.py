"""`deltaport serve` with ssl.selfSigned: a real HTTPS server process."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

TABLES = Path(os.environ.get("DELTAPORT_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "delta-tables"


def test_serve_self_signed_https(tmp_path):
    from servers import free_port

    port = free_port()
    cfg = {
        "version": 1,
        "host": "127.0.0.1",
        "port": port,
        "ssl": {"selfSigned": True},
        "authorization": {"bearerToken": "tls-token"},
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(TABLES / "basic_partitioned")}]}],
            }
        ],
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(cfg))
    temporary = tmp_path / "tmp"  # where serve writes the certificate and key, until it serves
    temporary.mkdir()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "deltaport"), "serve", "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                r = httpx.get(
                    f"https://127.0.0.1:{port}/delta-sharing/shares",
                    verify=False,
                    headers={"Authorization": "Bearer tls-token"},
                    timeout=2,
                )
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["items"] == [{"name": "s"}]
        cert = ssl.get_server_certificate(("127.0.0.1", port))
        assert "BEGIN CERTIFICATE" in cert
        _connector_trusts_ssl_cert_file(tmp_path, f"https://127.0.0.1:{port}/delta-sharing", cert)
        gone_by = time.time() + 10
        while list(temporary.glob("deltaport-tls-*")):  # read as the server started: the key file goes
            assert time.time() < gone_by, "the self-signed key stayed on disk"
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)


def _connector_trusts_ssl_cert_file(tmp_path: Path, endpoint: str, cert: str) -> None:
    """deltaport's connector (its TLS context is made once per setting) refuses the self-signed
    certificate by default and trusts it once SSL_CERT_FILE names it."""
    import pytest

    from deltaport.client import SharingClient

    profile = tmp_path / "tls.share"
    profile.write_text(f'{{"shareCredentialsVersion": 1, "endpoint": "{endpoint}", "bearerToken": "tls-token"}}')
    bundle = tmp_path / "server.pem"
    bundle.write_text(cert)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("SSL_CERT_FILE", raising=False)
        env.delenv("SSL_CERT_DIR", raising=False)
        with SharingClient(str(profile)) as client, pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            client.list_shares()
        env.setenv("SSL_CERT_FILE", str(bundle))
        with SharingClient(str(profile)) as client:
            assert [s.name for s in client.list_shares()] == ["s"]


def test_serve_refuses_a_bad_config_in_one_line(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text("version: 1\nshares:\n- schemas: []\n")
    out = subprocess.run(
        [str(Path(sys.executable).parent / "deltaport"), "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "'name' in a share must be provided" in out.stderr
    assert "Traceback" not in out.stderr
