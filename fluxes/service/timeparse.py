"""Times as users type them: ``--since``/``--until`` of the CLI, ``?at=`` of the web."""

from __future__ import annotations

import datetime as dt
import math
import time

from fluxes.formats.fsd import parse_duration


def parse_time(text: str) -> float:
    """A UNIX time, an ISO 8601 date/time, or ``-FSD`` (that long ago)."""
    text = text.strip()
    if text.startswith("-"):
        return time.time() - parse_duration(text[1:])
    try:
        value = float(text)
        if math.isfinite(value):
            return value
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"invalid time {text!r} (want a UNIX time, an ISO date, or -DURATION)")\
            from None
    return when.timestamp()


def stream_id_for(text: str) -> str:
    """A stream id from a stream id (``1700000000000-0``) or any :func:`parse_time` form."""
    head, sep, tail = text.partition("-")
    if sep and head.isdigit() and tail.isdigit():
        return text
    return f"{int(parse_time(text) * 1000)}-0"
