"""ISO-8601 times, read one way everywhere: the server's config and requests, the engine's time
travel, the connector's profiles and the admin CLI."""

from __future__ import annotations

import datetime as dt


def iso_to_epoch_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date or time (``Z`` or an offset; naive means UTC).
    Raises ValueError naming the text when it is not one."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return int(parsed.timestamp() * 1000)
