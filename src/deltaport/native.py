"""The compiled per-file loops (``deltaport._native``, built from ``_native.c`` by setup.py), or None.

They are optional: an install without a C compiler has none, and every caller then makes the same
bytes with hashlib and Arrow's string kernels. ``DELTAPORT_NATIVE=0`` turns them off (to compare
the two, or to rule them out); the keying worker inherits it.

Import it as ``import deltaport.native as native`` and read ``native.loops`` at each call (tests
swap it). ``from deltaport import native`` would first ask the package for the attribute, and the
package's ``__getattr__`` loads the connector to look for it.
"""

from __future__ import annotations

import os
from types import ModuleType

#: Whether ``DELTAPORT_NATIVE=0`` turned the loops off.
turned_off: bool = os.environ.get("DELTAPORT_NATIVE", "1") == "0"


def _load() -> ModuleType | None:
    if turned_off:
        return None
    try:
        from deltaport import _native
    except ImportError:
        return None
    return _native


#: The module, or None where it was not built or is turned off.
loops: ModuleType | None = _load()
