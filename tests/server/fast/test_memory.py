"""The server process's Arrow memory pool (server/fast/memory.py): jemalloc, which gives freed pages
back (the default pool kept them and a loaded server grew), unless the operator chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pyarrow as pa
from conftest import TOKEN, corpus_config
from prometheus_client.parser import text_string_to_metric_families
from secret_scan import secrets_used
from servers import ServeProcess

SCRAPER_TOKEN = "memory-test-metrics-token"
secrets_used.add(SCRAPER_TOKEN, label="the memory test's scraper token")


def _has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def _pool_chosen(env: dict[str, str]) -> tuple[str, str]:
    """(what use_server_pool returned, the pool a fresh allocation then comes from) in a fresh process."""
    code = (
        "import pyarrow as pa\n"
        "from deltaport.server.fast.memory import use_server_pool\n"
        "chosen = use_server_pool()\n"
        "print(chosen, pa.default_memory_pool().backend_name)\n"
    )
    clean = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    chosen, used = out.stdout.split()
    return chosen, used


def test_the_server_pool_is_jemalloc_when_pyarrow_has_it():
    default = subprocess.run(
        [sys.executable, "-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"],
        env={k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = "jemalloc" if _has_jemalloc() else default
    assert _pool_chosen({}) == (expected, expected)


def test_an_operator_s_choice_of_pool_is_kept():
    assert _pool_chosen({"ARROW_DEFAULT_MEMORY_POOL": "system"}) == ("system", "system")


def test_deltaport_serve_allocates_from_it_and_reports_it(tmp_path):
    server = ServeProcess({**corpus_config(), "metricsToken": SCRAPER_TOKEN}, tmp_path)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        query = httpx.post(
            f"{server.url}/delta-sharing/shares/corpus/schemas/default/tables/cdf/query",
            json={},
            headers=headers,
            timeout=30,
        )
        assert query.status_code == 200, query.text
        scraper = {"Authorization": f"Bearer {SCRAPER_TOKEN}"}
        text = httpx.get(f"{server.url}/metrics", headers=scraper, timeout=10).text
    finally:
        server.stop()
    samples = {
        s.labels["pool"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "deltaport_arrow_allocated_bytes"
    }
    pool = "jemalloc" if _has_jemalloc() else pa.default_memory_pool().backend_name
    assert list(samples) == [pool]
    assert samples[pool] > 0  # the cached snapshot lives in it
