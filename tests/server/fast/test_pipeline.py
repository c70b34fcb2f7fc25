"""The two-thread response pipeline: order, errors where they happen, and clean stops."""

from __future__ import annotations

import threading

import pytest

from deltaport.server.fast.pipeline import pipelined


def _pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("deltaport-pipeline")]


def test_results_in_order_and_complete():
    assert list(pipelined(iter(range(1000)), lambda x: x * x)) == [x * x for x in range(1000)]
    assert list(pipelined(iter(()), str)) == []
    assert not _pipeline_threads()


def test_source_error_is_raised_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise ValueError("bad log line")

    out = []
    with pytest.raises(ValueError, match="bad log line"):
        for x in pipelined(source(), lambda x: x + 10):
            out.append(x)  # noqa: PERF402  # what came before the error, item by item
    assert out == [11, 12]
    assert not _pipeline_threads()


def test_stage_error_is_raised_in_order():
    def stage(x):
        if x == 3:
            raise KeyError("three")
        return x

    out = []
    with pytest.raises(KeyError):
        for x in pipelined(iter(range(10)), stage):
            out.append(x)  # noqa: PERF402  # what came before the error, item by item
    assert out == [0, 1, 2]


def test_closing_the_consumer_stops_both_threads_and_closes_the_source():
    closed = threading.Event()
    produced = []

    def source():
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    it = pipelined(source(), lambda x: x, depth=2)
    assert next(it) == 0
    it.close()  # a client that disconnects after the first piece
    assert closed.is_set()
    assert len(produced) < 10  # bounded read-ahead, not the whole source
    assert not _pipeline_threads()


def test_source_runs_ahead_while_the_stage_works():
    second_started = threading.Event()
    overlapped = []

    def source():
        yield 0
        second_started.set()
        yield 1

    def stage(x):
        if x == 0:
            # a serial map only resumes the source after this stage returns: the wait would time out
            overlapped.append(second_started.wait(timeout=10))
        return x

    assert list(pipelined(source(), stage)) == [0, 1]
    assert overlapped == [True]
