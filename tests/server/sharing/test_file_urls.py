"""The server's own file URLs never reach outside a shared table's root, symlinks included."""

from __future__ import annotations

import shutil

import httpx
import orjson
from conftest import TABLES
from servers import RunningServer

from deltaport.server import create_app, parse_config


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
