"""Helpers for tests of `deltaport serve --workers N`: the workers' pids, which of them answered (the
access log names each line's process), and requests each on a new connection."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
from servers import ServeProcess


def worker_pids(server: ServeProcess) -> list[int]:
    """The pids of the supervisor's worker processes."""
    return [child.pid for child in psutil.Process(server.proc.pid).children()]


def wait_for_workers(server: ServeProcess, count: int = 2, seconds: float = 30) -> None:
    """Return once ``count`` workers said they serve (uvicorn's start line, one per worker)."""
    deadline = time.time() + seconds
    while server.log.read_text().count("Application startup complete") < count:
        assert time.time() < deadline, f"{count} workers did not start"
        time.sleep(0.2)


def pids_in_access_log(server: ServeProcess, since: int = 0) -> set[str]:
    """The pids of the workers that wrote an access log line (after the log's first ``since`` characters)."""
    return set(re.findall(r"INFO \[(\d+)\] deltaport\.access", server.log.read_text()[since:]))


def log_mark(server: ServeProcess) -> int:
    """Where the log ends now (for ``since``)."""
    return len(server.log.read_text())


def each_on_a_new_connection(calls: int, call) -> list:
    """``call()`` made ``calls`` times, four at a time (httpx's module functions: a new connection each)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda _: call(), range(calls)))


def answered_by_every_worker(server: ServeProcess, since: int = 0, seconds: float = 5) -> None:
    """Every worker of ``server`` wrote an access log line after ``since`` (a line follows its
    response: wait a little)."""
    deadline = time.time() + seconds
    expected = {str(pid) for pid in worker_pids(server)}
    while (seen := pids_in_access_log(server, since)) != expected:
        assert time.time() < deadline, f"answered by {seen}, workers {expected}"
        time.sleep(0.1)


def on_every_worker(server: ServeProcess, call, calls: int = 12, seconds: float = 20) -> list:
    """``call()`` in batches of ``calls`` on new connections until every worker answered one (which
    worker accepts a connection is the kernel's choice: a batch may reach only one); every answer."""
    mark = log_mark(server)
    deadline = time.time() + seconds
    answers = each_on_a_new_connection(calls, call)
    while True:
        try:
            answered_by_every_worker(server, mark, seconds=0.5)
            return answers
        except AssertionError:
            if time.time() > deadline:
                raise
        answers += each_on_a_new_connection(calls, call)
