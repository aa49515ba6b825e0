"""Decoding an event from its stream entry (a job's eventlog, a partition's journal).

Apart from :mod:`fluxes.store.eventstore` (which re-exports it) so that a short
command following a job (``fluxes run``) decodes its eventlog without importing
redis-py (issue 26).
"""

from __future__ import annotations

import math

import orjson

from fluxes.domain.job import events as ev

_NO_CONTEXT_EVENTS: dict[bytes, type[ev.Event]] = {
    cls.name.encode(): cls for cls in (ev.Validate, ev.Invalidate, ev.Depend, ev.FluxRestart,
                                       ev.Start, ev.Free, ev.Clean, ev.Alloc)
}


def decode_entry(name: bytes, ts: bytes, ctx: bytes | None) -> ev.Event:
    """Rebuild an event from its stream fields (``n``, ``t``, ``c``)."""
    if not ctx:
        cls = _NO_CONTEXT_EVENTS.get(name)
        if cls is not None:
            # the common case on the replay path: no context to decode or check
            try:
                stamp = float(ts)
            except (TypeError, ValueError):
                raise ev.EventError(f"{name!r}: bad timestamp {ts!r}") from None
            if 0 <= stamp < math.inf:
                return cls(timestamp=stamp)
    try:
        context = orjson.loads(ctx) if ctx else None
    except orjson.JSONDecodeError as exc:
        raise ev.EventError(f"{name!r}: context is not JSON: {exc}") from None
    try:
        stamp = float(ts)
    except (TypeError, ValueError):
        raise ev.EventError(f"{name!r}: bad timestamp {ts!r}") from None
    return ev.decode(name.decode(), stamp, context)
