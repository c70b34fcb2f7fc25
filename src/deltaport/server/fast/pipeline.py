"""A two-stage thread pipeline for building a response while it is being sent.

``pipelined(source, stage)`` runs the ``source`` iterator in one thread and ``stage`` over its
items in another, and yields the stage's results in order. A response body built this way
overlaps its Python-bound part (hashing, signing: the source) with its Arrow-bound part (string
kernels release the GIL: the stage) and with the sending of earlier pieces. Each queue holds at
most ``depth`` items, so memory stays bounded. An exception in either thread is raised to the
consumer at the point it occurred; closing the consumer (a client that disconnects) stops both
threads.

Fast form of: building a response's chunks one after the other (``map(stage, source)``). Held equal
by: tests/server/fast/test_pipeline.py.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")

_DONE = object()
_POLL_SECONDS = 0.1


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _put(q: queue.Queue, item, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _get(q: queue.Queue, stop: threading.Event):
    while not stop.is_set():
        try:
            return q.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
    return _DONE


def pipelined(source: Iterator[T], stage: Callable[[T], U], depth: int = 2) -> Generator[U, None, None]:
    """``map(stage, source)``, with ``source`` and ``stage`` each in its own thread."""
    stop = threading.Event()
    items: queue.Queue = queue.Queue(depth)
    results: queue.Queue = queue.Queue(depth)

    def produce() -> None:
        try:
            for item in source:
                if not _put(items, item, stop):
                    return
            _put(items, _DONE, stop)
        except BaseException as exc:  # handed to the consumer, raised there
            _put(items, _Failed(exc), stop)

    def transform() -> None:
        while True:
            item = _get(items, stop)
            if item is _DONE or isinstance(item, _Failed):
                _put(results, item, stop)
                return
            try:
                out = stage(item)
            except BaseException as exc:
                _put(results, _Failed(exc), stop)
                return
            if not _put(results, out, stop):
                return

    threads = [
        threading.Thread(target=produce, name="deltaport-pipeline-source", daemon=True),
        threading.Thread(target=transform, name="deltaport-pipeline-stage", daemon=True),
    ]

    def consume() -> Generator[U, None, None]:
        for t in threads:
            t.start()
        try:
            while True:
                out = results.get()
                if out is _DONE:
                    return
                if isinstance(out, _Failed):
                    raise out.exc
                yield out
        finally:
            stop.set()
            close = getattr(source, "close", None)
            for t in threads:
                t.join()
            if close is not None:
                close()

    return consume()
