"""Load smoke test: 64 concurrent connections for about 5 s against a `deltaport serve` process.

Every answer must be a 200 and complete: /version carries its version header, /metadata its two
lines, and every /query answer every file line of the table, the last one whole and parseable
(a response cut short under load would end early or mid-line). The full benchmark is
benchmarks/server_load.py. Time budget: 20 s.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import orjson
from servers import ServeProcess

FILES = 2_000
CONNECTIONS = 64
SECONDS = 5.0
T = "/delta-sharing/shares/s/schemas/d/tables/t"
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _table(root) -> str:
    """A table of FILES live files (log only: /query answers never read the data files)."""
    log = root / "t" / "_delta_log"
    log.mkdir(parents=True)
    actions = [
        {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "load-smoke",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(SCHEMA),
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": 1_700_000_000_000,
            }
        },
    ]
    for i in range(FILES):
        stats = {"numRecords": 10, "minValues": {"id": i * 10}, "maxValues": {"id": i * 10 + 9}, "nullCount": {"id": 0}}
        actions.append(
            {
                "add": {
                    "path": f"part=p{i % 16}/part-{i:05d}.parquet",
                    "partitionValues": {"part": f"p{i % 16}"},
                    "size": 1000 + i,
                    "modificationTime": 1_700_000_000_000,
                    "dataChange": True,
                    "stats": json.dumps(stats),
                }
            }
        )
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    return str(root / "t")


class Incomplete(Exception):
    """An answer that is not a complete 200."""


def _check(route: str, r: httpx.Response) -> None:
    """Raise Incomplete unless ``r`` is a complete 200 answer of ``route``."""

    def need(ok: bool, problem: str) -> None:
        if not ok:
            raise Incomplete(f"{route}: {problem}")

    need(r.status_code == 200, f"status {r.status_code}: {r.text[:300]}")
    need(r.headers.get("delta-table-version") == "0", f"version header {r.headers.get('delta-table-version')}")
    if route == "version":
        return
    body = r.content
    need(body.endswith(b"\n"), f"the answer ends mid-line after {len(body)} bytes")
    lines = [orjson.loads(line) for line in body.splitlines()]
    need("protocol" in lines[0] and "metaData" in lines[1], "no protocol and metaData lines")
    if route == "metadata":
        need(len(lines) == 2, f"{len(lines)} lines")
        return
    files = lines[2:]
    need(len(files) == FILES and all("file" in f for f in files), f"{len(files)} lines after the header")
    need(len({f["file"]["id"] for f in files}) == FILES, "a file is missing or repeated")
    need(bool(files[-1]["file"]["url"]), "the last file line has no URL")


async def _load(url: str) -> tuple[dict[str, int], list[str], set[int]]:
    counts = {"version": 0, "metadata": 0, "query": 0}
    errors: list[str] = []
    served: set[int] = set()  # connections that got at least one answer
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        until = time.monotonic() + SECONDS
        ready = asyncio.Event()

        async def connection(i: int) -> None:
            route = ("version", "metadata", "query")[i % 3]
            await ready.wait()
            while time.monotonic() < until:
                try:
                    if route == "query":
                        r = await client.post(f"{T}/query", json={})
                    else:
                        r = await client.get(f"{T}/{route}")
                    _check(route, r)
                    counts[route] += 1
                    served.add(i)
                except (httpx.HTTPError, Incomplete, ValueError) as exc:
                    errors.append(f"{route}: {type(exc).__name__}: {exc}")

        tasks = [asyncio.create_task(connection(i)) for i in range(CONNECTIONS)]
        ready.set()
        await asyncio.gather(*tasks)
    return counts, errors, served


def test_64_connections_for_5_seconds_all_answers_complete(tmp_path):
    table = _table(tmp_path)
    config = {
        "version": 1,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [{"name": "t", "location": table}]}]}],
    }
    server = ServeProcess(config, tmp_path)
    try:
        _check("query", httpx.post(f"{server.url}{T}/query", json={}, timeout=30))  # cold load out of the way
        started = time.monotonic()
        counts, errors, served = asyncio.run(_load(server.url))
        took = time.monotonic() - started
    finally:
        server.stop()
    assert not errors, f"{len(errors)} errors, e.g. {errors[:3]}"
    assert len(served) == CONNECTIONS, f"only {len(served)} of {CONNECTIONS} connections were answered"
    assert min(counts.values()) >= 3, counts
    assert took < SECONDS + 10, f"the load took {took:.1f} s"
    print(f"answers in {took:.1f} s: {counts}")
