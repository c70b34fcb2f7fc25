"""A check, and the ordered lists checks are registered in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from deltaport.conformance.discovery import Target

#: A check: returns a short note when it passes, raises Failed or Skipped otherwise.
CheckFunction = Callable[[Target], Optional[str]]


@dataclass(frozen=True)
class Check:
    name: str
    section: str  # the protocol section it tests, named as the protocol documents name it
    run: CheckFunction


class Checks(list[Check]):
    """Checks in the order they were registered: the order they run and print."""

    def check(self, name: str, section: str) -> Callable[[CheckFunction], CheckFunction]:
        def register(fn: CheckFunction) -> CheckFunction:
            self.append(Check(name, section, fn))
            return fn

        return register
