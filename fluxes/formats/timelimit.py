"""Job time limits as users type them: flux's ``-t`` and Slurm's ``--time`` forms.

:func:`parse_time_limit` reads, in this order:

* a bare number: **minutes**, as both ``flux submit -t`` and Slurm read it
  (``10`` is ten minutes, ``1.5`` ninety seconds) -- not the seconds a bare
  RFC 23 duration means elsewhere;
* an RFC 23 duration with a unit (``30s``, ``10m``, ``2h``, ``1d``, ``inf``),
  read by :func:`fluxes.formats.fsd.parse_duration`;
* Slurm's clock forms: ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``,
  each part a whole number (``90:00`` is ninety minutes, as in Slurm, which
  bounds no part but the first either).

Errors quote the text as typed, never a converted number of seconds.
"""

from __future__ import annotations

import math
import re

from fluxes.formats.fsd import parse_duration
from fluxes.formats.shown import shown as _show

__all__ = ["parse_time_limit"]

#: A bare decimal number (what flux's ``-t`` takes as minutes); no hex.
_MINUTES = re.compile(r"\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

#: Slurm's forms with a colon or a day part; the groups are the numbers as typed.
_CLOCK = re.compile(r"(?:(?P<days>[0-9]+)-)?(?P<rest>[0-9]+(?::[0-9]+){0,2})")

_FORMS = ("use minutes (10), a duration with a unit (30s, 10m, 2h, 1d) or "
          "Slurm's M:S, H:M:S, D-H, D-H:M, D-H:M:S")


def _clock(text: str) -> float | None:
    """Seconds of a Slurm clock form, or None when ``text`` is not one."""
    match = _CLOCK.fullmatch(text)
    if match is None:
        return None
    days = match["days"]
    parts = [int(p) for p in match["rest"].split(":")]
    if days is None:
        if len(parts) == 1:
            return None  # a bare number: minutes, read elsewhere
        # M:S or H:M:S
        weights: tuple[int, ...] = (60, 1) if len(parts) == 2 else (3600, 60, 1)
    else:
        # D-H, D-H:M, D-H:M:S
        weights = (3600, 60, 1)[:len(parts)]
    seconds = sum(p * w for p, w in zip(parts, weights, strict=True))
    if days is not None:
        seconds += int(days) * 86400
    return float(seconds)


def parse_time_limit(text: str) -> float:
    """The seconds a job time limit ``text`` stands for (0 means no limit).

    A bare number is minutes; an RFC 23 duration with a unit and Slurm's
    ``[D-]H:M:S`` forms are read as such (see the module docstring).
    ``inf`` gives ``math.inf``.  Raises ``ValueError`` naming ``text`` as
    typed: empty, negative, or in none of these forms.
    """
    if not isinstance(text, str):
        raise ValueError(f"time limit must be a string, not {type(text).__name__}")
    shown = _show(text)
    if not text:
        raise ValueError("time limit is empty")
    if text != text.strip():
        raise ValueError(f"invalid time limit {shown}: leading or trailing whitespace")
    if text.startswith("-") and (text[1:2].isdigit() or text[1:2] == "."):
        raise ValueError(f"time limit {shown} is negative")
    if _MINUTES.fullmatch(text):
        minutes = float(text)
        if math.isinf(minutes * 60.0):
            raise ValueError(f"time limit {shown} is too large")
        return minutes * 60.0
    if len(text) > 64:
        # no real limit is this long; it also keeps int() and float() below in range
        raise ValueError(f"invalid time limit {shown}: too long")
    seconds = _clock(text)
    if seconds is not None:
        return seconds
    try:
        return parse_duration(text)
    except ValueError as exc:
        reason = str(exc)
        if "negative" in reason:
            raise ValueError(f"time limit {shown} is negative") from None
        if "too large" in reason:
            raise ValueError(f"time limit {shown} is too large") from None
        raise ValueError(f"invalid time limit {shown}: {_FORMS}") from None
