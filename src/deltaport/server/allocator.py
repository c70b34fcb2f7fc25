"""The allocator settings that keep a long-running server's memory level.

A large /query response is built from multi-megabyte buffers, on several threads. With glibc's
defaults, every thread may get an arena of its own (8 per core), blocks over the mmap threshold
are mmapped but the threshold rises each time one is freed (up to 32 MiB), after which the buffers
come from the arenas and leave holes between long-lived small blocks; Arrow's default pool
(mimalloc) keeps what it frees for reuse as well. Under sustained load (64 connections, a third
of them asking for 10,000-file responses) the server's RSS grew by ~20 MB a minute, with Python's
objects and Arrow's live allocations both flat.

So the server runs with at most two malloc arenas, a fixed 4 MiB mmap threshold (buffers above it
go back to the system when freed) and a 128 MiB trim threshold (the heap is not shrunk and grown
again on every large response, which a fixed mmap threshold would otherwise cause: +30 % CPU per
/query), and Arrow on the system allocator. Measured on a 10,000-file table, in process: RSS level
at ~400 MB for three minutes of mixed load where the defaults climbed from 570 to 670 MB, at the
same CPU per /query (benchmarks/server_load.py runs the server as deployed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("deltaport.server")

#: mallopt parameters (malloc.h) and the values the server runs with; the environment variables
#: carry the same settings to processes this one starts (the keying worker).
SETTINGS = (
    (-8, "MALLOC_ARENA_MAX", 2),  # M_ARENA_MAX
    (-3, "MALLOC_MMAP_THRESHOLD_", 4 << 20),  # M_MMAP_THRESHOLD: fixed, no dynamic rise
    (-1, "MALLOC_TRIM_THRESHOLD_", 128 << 20),  # M_TRIM_THRESHOLD
)


def settle_allocators() -> bool:
    """Apply :data:`SETTINGS` and put Arrow on the system allocator, for this process and the
    processes it starts; False (and nothing changed) where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    for param, env, value in SETTINGS:
        if not mallopt(param, value):
            log.warning("could not set the allocator's %s; memory may grow under load", env)
            return False
        os.environ.setdefault(env, str(value))
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    return True
