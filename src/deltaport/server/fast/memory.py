"""The server process's Arrow memory pool.

A long-running server builds large Arrow buffers (file lines, key columns) on several threads and
frees them moments later. pyarrow's default pool on Linux (mimalloc) keeps much of what that
pattern frees, so a server under steady load grows for minutes. jemalloc's pool gives freed pages
back to the system once they have been unused for :data:`DECAY_MS`: long enough that a busy server
reuses them instead of faulting fresh pages in for every response (with pyarrow's default of 0,
/version and /metadata lost up to a fifth of their requests/s under mixed load), short enough that
the process stays level. Measured with benchmarks/server_load.py and benchmarks/server_query.py.

An operator's ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is; a pyarrow built without jemalloc
keeps its default.

Fast form of: pyarrow's default memory pool. Held equal by: tests/server/fast/test_memory.py.
"""

from __future__ import annotations

import os

import pyarrow as pa

#: How long jemalloc keeps freed pages before returning them to the system.
DECAY_MS = 5000


def use_server_pool() -> str:
    """Make jemalloc (with :data:`DECAY_MS`) Arrow's default pool in this process, unless the
    environment chose one or this pyarrow lacks it. Returns the backend now in use."""
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.jemalloc_set_decay_ms(DECAY_MS)  # before the pool's first allocation: it applies to new arenas
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:
            pass
    return pa.default_memory_pool().backend_name
