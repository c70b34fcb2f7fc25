"""The server's own file URLs never reach outside a shared table's root, symlinks included, and
SigV4 ones issued before their own MAC are still served."""

from __future__ import annotations

import calendar
import shutil
import time
from urllib.parse import parse_qsl, urlsplit

import httpx
import orjson
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config
from deltaport.server.sharing.files import file_url_keys
from deltaport.signing.sigv4 import SigV4Presigner


def test_symlink_out_of_the_table_is_refused(tmp_path):
    table = tmp_path / "t"
    shutil.copytree(TABLES / "basic_partitioned", table)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    victim = next(table.glob("letter=a/*.parquet"))
    victim.unlink()
    victim.symlink_to(secret)
    cfg = parse_config(
        {
            "version": 1,
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}]}],
        }
    )
    server = RunningServer(create_app(cfg))
    try:
        out = [
            orjson.loads(x)
            for x in httpx.post(
                server.url + "/delta-sharing/shares/s/schemas/d/tables/t/query", json={}
            ).content.splitlines()
        ]
        urls = {x["file"]["url"].split("?")[0].rsplit("/", 1)[1]: x["file"]["url"] for x in out[2:]}
        link = urls[victim.name]
        r = httpx.get(link)
        assert r.status_code == 403 and r.json()["errorCode"] == "PERMISSION_DENIED"
        assert b"do not serve" not in r.content
        ok = next(u for name, u in urls.items() if name != victim.name)
        assert httpx.get(ok).status_code == 200
    finally:
        server.stop()


def test_symlinks_that_stay_inside_are_served_and_the_root_may_be_reached_through_one(tmp_path):
    """A link inside the table to another of its files, a linked partition folder inside it, and a
    table whose configured location is itself a link: each file is served whole, with its bytes."""
    real = tmp_path / "real"
    shutil.copytree(TABLES / "basic_partitioned", real)
    linked_file = next(real.glob("letter=a/*.parquet"))
    original = linked_file.read_bytes()
    kept = real / "kept.bin"
    linked_file.rename(kept)
    linked_file.symlink_to(kept)  # a file link that stays inside
    folder = next(p for p in real.glob("letter=*") if p.name != "letter=a")
    moved = real / "moved-folder"
    folder.rename(moved)
    folder.symlink_to(moved, target_is_directory=True)  # a folder link that stays inside
    location = tmp_path / "via-link"
    location.symlink_to(real, target_is_directory=True)
    shares = [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(location)}]}]}]
    server = RunningServer(create_app(parse_config({"version": 1, "shares": shares})))
    try:
        lines = httpx.post(server.url + "/delta-sharing/shares/s/schemas/d/tables/t/query", json={}).content
        files = [orjson.loads(x)["file"] for x in lines.splitlines()[2:]]
        assert len(files) > 2
        for file in files:
            answer = httpx.get(file["url"])
            assert answer.status_code == 200 and len(answer.content) == file["size"], file["url"].split("?")[0]
            if file["url"].split("?")[0].endswith(linked_file.name):
                assert answer.content == original
    finally:
        server.stop()


def test_sigv4_urls_of_a_replica_not_yet_changed_are_served_and_other_algorithms_refused(secrets_used):
    """A replica sharing tokenSecret that still signs file URLs with SigV4 (or a URL issued before
    the change): the server, which signs short URLs, honours it until it expires; an unknown
    algorithm is a 403 naming it."""
    token_secret = "file-url-replica-secret-5d1e"
    secrets_used.add(token_secret, label="a test tokenSecret")
    table = {"name": "t", "location": str(TABLES / "basic_partitioned")}
    shares = [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]
    cfg = parse_config({"version": 1, "tokenSecret": token_secret, "shares": shares})
    server = RunningServer(create_app(cfg))
    try:
        answer = httpx.post(server.url + "/delta-sharing/shares/s/schemas/d/tables/t/query", json={})
        url = orjson.loads(answer.content.splitlines()[2])["file"]["url"]
        assert "X-Amz-Algorithm" not in url and "&X-Amz-Signature=" in url  # the short form
        served = httpx.get(url)
        assert served.status_code == 200
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query))
        signed_at = calendar.timegm(time.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
        secret, access_key = file_url_keys(token_secret.encode(), None)
        old = SigV4Presigner(f"{parts.scheme}://{parts.netloc}", access_key, secret).presign_encoded(
            parts.path, expires_in=int(params["X-Amz-Expires"]), now=signed_at
        )[0]
        assert "X-Amz-Algorithm=AWS4-HMAC-SHA256&" in old and old != url
        again = httpx.get(old)
        assert again.status_code == 200 and again.content == served.content
        assert httpx.get(old.replace("X-Amz-Expires=", "X-Amz-Expires=1")).status_code == 403
        unknown = httpx.get(old.replace("AWS4-HMAC-SHA256", "HMAC-MD5"))
        assert unknown.status_code == 403 and unknown.json()["errorCode"] == "PERMISSION_DENIED"
        assert "unsupported X-Amz-Algorithm 'HMAC-MD5'" in unknown.json()["message"]
    finally:
        server.stop()
