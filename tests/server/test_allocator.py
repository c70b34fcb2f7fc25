"""The allocator settings that keep the server's memory level: large blocks stay mmapped (and so
go back to the system when freed) after one has been freed, which glibc's default does not do;
Arrow allocates with the system allocator; processes the server starts get the same settings."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import ctypes, sys
from deltaport.server.allocator import settle_allocators

class Info(ctypes.Structure):
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in names.split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "settled":
    assert settle_allocators()
first = bytearray(8 << 20)
del first  # glibc's default now raises its mmap threshold above 8 MiB
second = bytearray(8 << 20)
print(libc.mallinfo2().hblkhd >= 8 << 20)
"""


def _mmapped_after_a_free(mode: str) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env)
    return out.stdout.strip() == "True"


def test_large_blocks_stay_mmapped_once_settled():
    assert not _mmapped_after_a_free("default")  # the behaviour the setting is for
    assert _mmapped_after_a_free("settled")


def test_arrow_and_started_processes_get_the_settings(monkeypatch):
    import pyarrow as pa

    from deltaport.server.allocator import SETTINGS, settle_allocators

    for _, env, _ in SETTINGS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    before = pa.default_memory_pool()
    try:
        assert settle_allocators()
        assert pa.default_memory_pool().backend_name == "system"
        assert {env: os.environ[env] for _, env, _ in SETTINGS} == {env: str(v) for _, env, v in SETTINGS}
        assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    finally:
        pa.set_memory_pool(before)
