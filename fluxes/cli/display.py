"""Formatting shared by commands: job ids, times, users, event lines, tables.

``parse_time``/``stream_id_for`` and ``username`` live in the service layer (the web
reads times and names too) and are re-exported here for the commands, imported on
first use (``fluxes submit`` needs only the job ids: start-up time, issue 26).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fluxes.formats import jobid as jobids

if TYPE_CHECKING:
    from fluxes.service.timeparse import parse_time, stream_id_for
    from fluxes.service.users import username

#: The re-exports and the module each comes from.
_LAZY = {"parse_time": "fluxes.service.timeparse", "stream_id_for": "fluxes.service.timeparse",
         "username": "fluxes.service.users"}


def __getattr__(name: str) -> Any:
    """A re-export, imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value

__all__ = ["context_text", "event_line", "fmt_id", "human_event_lines", "parse_time",
           "shown_id", "stream_id_for", "table", "username"]


def fmt_id(jobid: int, form: str = "f58") -> str:
    """A job id in the display encoding (f58 by default, as flux)."""
    return jobids.encode(jobid, form)


def shown_id(jobid: int) -> str:
    """A job id as the user typed it on the command line, else in F58.

    For messages about the id itself (``job 12345 not found``): echoing a
    form the user never wrote would make them wonder which job is meant.
    """
    typed = getattr(jobid, "typed", None)
    return typed if isinstance(typed, str) else fmt_id(jobid)


def context_text(ctx: Mapping[str, Any]) -> str:
    """Context as flux prints it: ``key=value`` with values JSON-encoded."""
    import orjson

    return " ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in ctx.items())


def event_line(timestamp: float, name: str, ctx: Mapping[str, Any] | None) -> str:
    """``1552593348.073045 submit urgency=16 ...`` (flux job eventlog's text form)."""
    line = f"{timestamp:.6f} {name}"
    return f"{line} {context_text(ctx)}" if ctx else line


def human_event_lines(events: Sequence[tuple[float, str, Mapping[str, Any] | None]]) -> list[str]:
    """flux's ``-H`` form: the first event with its date, later ones as +offsets."""
    import datetime as dt

    out = []
    first: float | None = None
    for ts, name, ctx in events:
        if first is None:
            first = ts
            stamp = dt.datetime.fromtimestamp(ts).strftime("%b%d %H:%M")
        else:
            stamp = f"  +{ts - first:.6f}"
        line = f"[{stamp}] {name}"
        out.append(f"{line} {context_text(ctx)}" if ctx else line)
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]],
          right: frozenset[int] = frozenset()) -> list[str]:
    """Left/right aligned text columns (right-aligned where the index is in ``right``)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                 for i, c in enumerate(cells)]
        return " ".join(parts).rstrip()

    return [line(headers), *(line(r) for r in rows)]
