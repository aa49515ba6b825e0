"""RFC 23 Flux Standard Duration (FSD): parse and format time spans.

An FSD is a string ``N[SUFFIX]``: ``N`` is a non-negative number in any form
C99 ``strtod`` accepts and ``SUFFIX`` is one of ``ms``, ``s``, ``m``, ``h``,
``d`` (no suffix means seconds).  ``inf`` and ``infinity`` (any case, no
suffix) mean an unlimited duration.  See ``docs/formats/fsd.md``.
"""

from __future__ import annotations

import math
import re

from fluxes.formats.shown import shown as _show

__all__ = ["UNITS", "format_duration", "parse_duration"]

#: Suffix -> number of seconds in one unit.
UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

# The strtod subject sequence, without the leading whitespace strtod would
# skip: we treat surrounding whitespace as a mistake rather than silently
# accepting it.  [0-9] rather than \d so that non-ASCII digits, which
# Python's float() would happily convert, are refused.
_HEX = r"0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
_DEC = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_INF = r"[iI][nN][fF](?:[iI][nN][iI][tT][yY])?"
_NAN = r"[nN][aA][nN](?:\([0-9A-Za-z_]*\))?"
# Alternation order mirrors strtod's greedy reading: "0x1d" is the hex
# number 0x1d (29 seconds), not 1 day, exactly as in flux-core.
_FSD = re.compile(
    rf"(?P<sign>[+-]?)(?:(?P<hex>{_HEX})|(?P<dec>{_DEC})|(?P<inf>{_INF})|(?P<nan>{_NAN}))"
    r"(?P<unit>.*)",
    re.DOTALL,
)

# Thresholds and divisors used to pick the unit when formatting, largest first.
_FORMAT_UNITS: tuple[tuple[float, str], ...] = (
    (86400.0, "d"),
    (3600.0, "h"),
    (60.0, "m"),
)

_DEFAULT_PRECISION = 6
_MAX_PRECISION = 17


def _int_to_float(value: int) -> float:
    """Convert an integer number of seconds to float, refusing ones too large for a float."""
    try:
        return float(value)
    except OverflowError:
        # str() of such an int may be refused (and is too long anyway); name its size.
        raise ValueError(
            f"duration of {value.bit_length()} bits is too large for a float"
        ) from None


def _check_number(value: float, shown: str) -> float:
    """Return ``value`` as a float if it is a valid duration, else raise ValueError."""
    if math.isnan(value):
        raise ValueError(f"duration {shown} is not a number")
    if value < 0:
        raise ValueError(f"duration {shown} is negative")
    # -0.0 is not negative, but "-0s" would be an odd thing to hand back.
    return value + 0.0


def parse_duration(text: str | float) -> float:
    """Return the number of seconds that the RFC 23 duration ``text`` stands for.

    ``text`` is an FSD string such as ``"30"``, ``"1.5m"``, ``"2h"``, ``"1d"``,
    ``"250ms"`` or ``"inf"``; an ``int`` or ``float`` is taken as seconds.
    The result is finite and >= 0, or ``math.inf``.  Raises ``ValueError`` for
    anything else: negative, NaN, an unknown or misplaced unit, whitespace,
    trailing junk, the empty string, a number too large for a float, a bool,
    or a value of another type.
    """
    if isinstance(text, bool):
        raise ValueError(f"duration must be a string or a number, not bool ({text})")
    if isinstance(text, int):
        return _check_number(_int_to_float(text), str(text))
    if isinstance(text, float):
        return _check_number(text, repr(text))
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string or a number, not {type(text).__name__}")

    return _parse_fsd(text)


def _parse_fsd(text: str) -> float:
    """The seconds of the FSD string ``text`` (see ``parse_duration``)."""
    shown = _show(text)
    if not text:
        raise ValueError("duration is empty")
    if text != text.strip():
        raise ValueError(f"invalid duration {shown}: leading or trailing whitespace")
    match = _FSD.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid duration {shown}: expected a number with optional unit")
    if match["nan"] is not None:
        raise ValueError(f"duration {shown} is not a number")
    negative = match["sign"] == "-"
    unit = match["unit"]
    if match["inf"] is not None:
        if unit:
            raise ValueError(f"invalid duration {shown}: inf/infinity takes no unit")
        if negative:
            raise ValueError(f"duration {shown} is negative")
        return math.inf
    if unit and unit not in UNITS:
        raise ValueError(
            f"invalid duration {shown}: unknown unit {_show(unit, 10)} (use ms, s, m, h or d)"
        )

    number = _fsd_number(match, shown)
    if negative and number != 0:
        raise ValueError(f"duration {shown} is negative")
    # Dividing keeps "3ms" == 0.003 exactly, which multiplying by 0.001 does not.
    seconds = number / 1000.0 if unit == "ms" else number * UNITS.get(unit, 1.0)
    if math.isinf(seconds):
        raise ValueError(f"duration {shown} is too large")
    return seconds + 0.0


def _fsd_number(match: re.Match[str], shown: str) -> float:
    """The finite number (before its unit) of a matched FSD string."""
    if match["hex"] is not None:
        try:
            number = float.fromhex(match["hex"])
        except OverflowError:
            raise ValueError(f"duration {shown} is too large") from None
    else:
        number = float(match["dec"])
    if math.isinf(number):
        raise ValueError(f"duration {shown} is too large")
    return number


def brief_duration(seconds: float, second_digits: int = 1) -> str:
    """``seconds`` for a column or a sentence, in its largest unit with one decimal
    (``4.0m``, ``1.5h``, ``2.0d``), below a minute with ``second_digits`` decimals; a
    negative span (a clock step) shows as none."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.{second_digits}f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def format_duration(seconds: float, precision: int = _DEFAULT_PRECISION) -> str:
    """Return ``seconds`` as a short, human-friendly RFC 23 duration string.

    The unit is the largest of ``d``, ``h``, ``m`` that is not more than the
    value, else ``s``; values below 0.1 s (but not zero) use ``ms``.  The
    number has at most ``precision`` significant digits, written like C's
    ``%g`` (trailing zeros dropped): ``0.001 -> "1ms"``, ``90 -> "1.5m"``,
    ``3600 -> "1h"``, ``0 -> "0s"``, ``inf -> "infinity"`` (as flux-core's
    ``fsd_format_duration``; both ``inf`` and ``infinity`` parse back).  With the default
    precision of 6, ``parse_duration`` of the result is within a relative
    error of 5e-6 of ``seconds``.  Raises ``ValueError`` if ``seconds`` is
    negative, NaN, not a number, or ``precision`` is not in 1..17.
    """
    if isinstance(precision, bool) or not isinstance(precision, int):
        raise ValueError(f"precision must be an integer, not {type(precision).__name__}")
    if not 1 <= precision <= _MAX_PRECISION:
        raise ValueError(f"precision ({precision}) must be between 1 and {_MAX_PRECISION}")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"duration must be a number, not {type(seconds).__name__}")
    if isinstance(seconds, int):
        seconds = _int_to_float(seconds)
    value = _check_number(seconds, repr(seconds))
    if math.isinf(value):
        return "infinity"
    if 0 < value < 0.1:
        # 12.3ms reads better than 0.0123s, and 1.23e-05ms is still parseable.
        return f"{value * 1000.0:.{precision}g}ms"
    for size, suffix in _FORMAT_UNITS:
        if value >= size:
            return f"{value / size:.{precision}g}{suffix}"
    return f"{value:.{precision}g}s"
