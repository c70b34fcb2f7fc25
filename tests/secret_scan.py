"""Secrets the test suite uses, and a scan of everything the suite logged (and the output of the
server processes it started) for them.

The root conftest installs :data:`capture` on the root logger for the whole session and fails the
run when :func:`find_leaks` finds a registered secret in a captured line. Tests register the secrets
they use with ``secrets_used.add(...)`` (or the ``secrets_used`` fixture), and hand the captured
stdout/stderr of a server process they started to :func:`add_process_output`. A leak is reported
by where it was seen (logger or process) and which secret it was by label, never the secret itself.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class SecretRegistry:
    """Secrets (bearer tokens, signing keys) the suite uses, each with a label safe to print."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}

    def add(self, *secrets: str, label: str = "a bearer token") -> None:
        for secret in secrets:
            if len(secret) < 6:  # short strings occur in ordinary text: they would be false alarms
                raise ValueError(f"a secret to scan for must be at least 6 characters ({label})")
            self._labels.setdefault(secret, label)

    def items(self) -> list[tuple[str, str]]:
        return list(self._labels.items())

    def __contains__(self, secret: object) -> bool:
        return secret in self._labels

    def __len__(self) -> int:
        return len(self._labels)


class LogCapture(logging.Handler):
    """Keeps every record it sees as (logger name, text), the exception and stack text included.

    Identical lines are kept once with a count, so a long session's repeated access-log lines cost
    little memory."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: Counter[tuple[str, str]] = Counter()
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: scan what it holds
            text = f"{record.msg!r} {record.args!r}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + record.stack_info
        with self._guard:
            self.lines[(record.name, text)] += 1

    def add_output(self, source: str, text: str) -> None:
        """Output that did not go through logging (a subprocess's stdout/stderr), under ``source``."""
        with self._guard:
            for line in text.splitlines():
                self.lines[(source, line)] += 1


@dataclass(frozen=True)
class Leak:
    source: str  # the logger's name, or "process:<what>" for a server process's output
    secret_label: str
    lines: int

    def __str__(self) -> str:
        return f"{self.source}: {self.lines} line(s) contain {self.secret_label}"


def find_leaks(lines: Iterable[tuple[tuple[str, str], int]], secrets: SecretRegistry) -> list[Leak]:
    """Every (source, secret) pair where a captured line of ``source`` contains the secret."""
    known = secrets.items()
    found: Counter[tuple[str, str]] = Counter()
    for (source, text), count in lines:
        for secret, label in known:
            if secret in text:
                found[(source, label)] += count
    return [Leak(source, label, n) for (source, label), n in sorted(found.items())]


#: The session's registry and capture (installed by the root conftest).
secrets_used = SecretRegistry()
capture = LogCapture()


def add_process_output(source: str, text: str) -> None:
    """Hand the captured stdout/stderr of a server process to the session's scan."""
    capture.add_output(f"process:{source}", text)
