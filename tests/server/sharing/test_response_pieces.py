"""Large response chunks are handed to the HTTP server in bounded pieces, nothing lost or reordered."""

from __future__ import annotations

import asyncio

import numpy as np

from deltaport.server.sharing.replies import _PIECE, _pieces


def _collect(chunks) -> list:
    async def run():
        return [piece async for piece in _pieces(iter(chunks))]

    return asyncio.run(run())


def test_big_chunks_are_split_and_small_ones_pass_whole():
    big = memoryview(np.arange(int(2.5 * _PIECE), dtype=np.int64).astype(np.uint8))
    small = b'{"protocol":{}}\n'
    pieces = _collect([small, big, b"", small])
    assert all(len(p) <= _PIECE for p in pieces)
    assert pieces[0] is small and pieces[-1] is small
    assert len(pieces) == 1 + 3 + 1 + 1
    assert b"".join(pieces) == small + bytes(big) + small
