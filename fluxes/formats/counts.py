"""Resource counts: the RFC 14 ``count`` of a resource vertex, in all its forms.

A count says how many of a resource a job accepts.  Jobspec may write it as

* an integer: exactly that many (``4``);
* an RFC 22 idset string: exactly one of the listed numbers (``"1,3,5-7"``);
* an RFC 45 range string: ``min-max[:operand[:operator]]`` or
  ``min+[:operand[:operator]]``, optionally in brackets (``"2-8:2:*"``);
* a mapping ``{min, max, operator, operand}`` (all but ``min`` optional).

:class:`Count` holds any of these, checks the RFC rules, answers membership
and "largest accepted value not above n" questions for the scheduler, and
encodes back to the compact string.  See ``docs/formats/counts.md``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final

from fluxes.formats.idset import MAX_ID, IDSet
from fluxes.formats.shown import shown as _show

__all__ = ["MAX_COUNT", "OPERATORS", "Count"]

#: Largest count accepted in any form: flux-core stores counts as C
#: ``unsigned int`` and keeps ``UINT_MAX`` for "no upper bound".  Idset
#: counts are also limited by RFC 22 decoding (``fluxes.formats.idset.MAX_ID``, which
#: is smaller); a lone number or ``lo-hi`` above that is read as a range, as
#: flux-core does, so "1-N" means the same however it is read.
MAX_COUNT: Final = 2**32 - 2

#: The RFC 14 operators: the next accepted value after ``v`` is ``v + operand``,
#: ``v * operand`` or ``v ** operand`` respectively.
OPERATORS: Final = ("+", "*", "^")

_MAX_DIGITS = len(str(MAX_COUNT))
_MAX_ID_DIGITS = len(str(MAX_ID))
_DICT_KEYS = ("min", "max", "operator", "operand")

# A count string that is one number or one "lo-hi" run (no leading zeros).
_SIMPLE_RUN = re.compile(r"([1-9][0-9]*)(?:-([1-9][0-9]*))?")

# Loose on purpose: the numbers and operator are checked one by one afterwards
# so that the message can name the offending field.
_RANGE = re.compile(
    r"(?P<min>[0-9]+)(?:-(?P<max>[0-9]+)|(?P<plus>\+))"
    r"(?::(?P<operand>[0-9]+)(?::(?P<operator>.+))?)?",
    re.DOTALL,
)

Runs = tuple[tuple[int, int], ...]


def _check_int(name: str, value: object) -> int:
    """Return ``value`` if it is an int in ``1..MAX_COUNT``; the message names ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} ({value}) must be >= 1")
    if value > MAX_COUNT:
        # A huge int may be too long for str(); its size is enough to say.
        shown = str(value) if value.bit_length() <= 128 else f"{value.bit_length()}-bit integer"
        raise ValueError(f"{name} ({shown}) exceeds the maximum count {MAX_COUNT}")
    return value


def _number(name: str, digits: str, text: str) -> int:
    """Convert a decimal field of a range string, refusing leading zeros and huge values."""
    if len(digits) > 1 and digits[0] == "0":
        raise ValueError(f"invalid range {_show(text)}: {name} {digits!r} has a leading zero")
    if len(digits) > _MAX_DIGITS:
        shown = digits if len(digits) <= 20 else digits[:20] + "..."
        raise ValueError(f"{name} ({shown}) exceeds the maximum count {MAX_COUNT}")
    return _check_int(name, int(digits))


def _next_power(value: int, operand: int, limit: int) -> int:
    """``value ** operand``, or just ``limit + 1`` when that power would exceed ``limit``.

    Computing a power such as ``2 ** 4294967294`` only to compare it with a
    small limit would take minutes and gigabytes; the bit lengths settle it.
    """
    # value >= 2 here, so value ** operand >= 2 ** ((bits - 1) * operand).
    if (value.bit_length() - 1) * operand > limit.bit_length():
        return limit + 1
    return int(value**operand)


def _run_start(run: tuple[int, int]) -> int:
    """Bisection key: the first value of a run."""
    return run[0]


@dataclass(frozen=True, slots=True)
class Count:
    """An immutable RFC 14 resource count: the set of accepted amounts of a resource.

    A *range* count accepts ``min``, then repeatedly applies ``operator`` with
    ``operand`` (``+``: add, ``*``: multiply, ``^``: raise to the power) while
    the result is at most ``max``; ``max=None`` means no upper bound.  A *set*
    count (from an idset string that is not an arithmetic progression, such as
    ``"1,3,4"``) accepts exactly its listed values: its ``operator`` and
    ``operand`` are ``None`` and ``runs`` holds the values as ``(lo, hi)``
    runs.  Build counts with :meth:`decode`; ``Count(min, max, operator,
    operand)`` builds a range directly.  Every rule violation raises
    ``ValueError`` whose message names the field, e.g.
    ``"max (2) is less than min (4)"``.

    Iterating a count yields its accepted values in ascending order.  An
    unbounded count stops at ``MAX_COUNT``, the largest count there is (as
    flux-core's iteration stops at its ``COUNT_MAX``), so ``2+:2`` yields
    2, 4, ..., 2**31; :meth:`values` with a limit stops earlier.  Only ``+``
    ranges may be unbounded: ``2+:2:*`` is refused, as flux refuses it.
    """

    min: int
    max: int | None
    operator: str | None = "+"
    operand: int | None = 1
    runs: Runs | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        """Check the RFC 14 rules for a range count built by the constructor."""
        low = _check_int("min", self.min)
        if self.max is not None:
            high = _check_int("max", self.max)
            if high < low:
                raise ValueError(f"max ({high}) is less than min ({low})")
        if not isinstance(self.operator, str):
            raise ValueError(f"operator must be a string, not {type(self.operator).__name__}")
        if self.operator not in OPERATORS:
            raise ValueError(f"operator {_show(self.operator, 10)} is not one of '+', '*', '^'")
        operand = _check_int("operand", self.operand)
        if self.operator in ("*", "^") and operand < 2:
            raise ValueError(f"operand ({operand}) must be >= 2 for operator '{self.operator}'")
        if self.operator == "^" and low < 2:
            raise ValueError(f"min ({low}) must be >= 2 for operator '^'")
        if self.max is None and self.operator in ("*", "^"):
            # flux refuses these too: a geometric range without a max has no
            # end a scheduler could search towards, only MAX_COUNT.
            raise ValueError(
                f"an unbounded range with operator '{self.operator}' has no end: give a max"
            )
        if low == self.max:
            # A single accepted value is the same count however it was
            # written; normalising keeps equality and encode() round trips exact.
            object.__setattr__(self, "operator", "+")
            object.__setattr__(self, "operand", 1)

    # -- decoding ------------------------------------------------------------

    @classmethod
    def decode(cls, value: object) -> Count:
        """Return the count that a jobspec ``count`` value stands for.

        ``value`` is a positive int (not a bool), an RFC 22 idset string, an
        RFC 45 range string or a mapping with ``min`` and optionally ``max``,
        ``operator`` and ``operand`` (each optional on its own, as in
        flux-core: defaults no upper bound, ``+`` and 1).  A ``Count`` is
        returned unchanged.  Raises ``ValueError`` naming the problem for
        anything else.
        """
        if isinstance(value, Count):
            return value
        if isinstance(value, bool):
            raise ValueError(f"count must be an integer, string or mapping, not bool ({value})")
        if isinstance(value, int):
            n = _check_int("count", value)
            return cls(n, n)
        if isinstance(value, str):
            return cls._decode_string(value)
        if isinstance(value, Mapping):
            return cls._decode_mapping(value)
        raise ValueError(f"count must be an integer, string or mapping, not {type(value).__name__}")

    @classmethod
    def _decode_string(cls, text: str) -> Count:
        """Decode an idset or RFC 45 range string."""
        if not text:
            raise ValueError("count string is empty")
        body = text
        if text.startswith("[") or text.endswith("]"):
            if len(text) < 2 or not (text.startswith("[") and text.endswith("]")):
                raise ValueError(f"invalid count {_show(text)}: unmatched bracket")
            body = text[1:-1]
        if "[" in body or "]" in body:
            raise ValueError(
                f"invalid count {_show(text)}: brackets may only surround the whole count"
            )
        if "+" in body or ":" in body:
            return cls._decode_range(text, body)
        simple = _SIMPLE_RUN.fullmatch(body)
        if simple is not None:
            last = simple[2] or simple[1]
            if len(last) > _MAX_ID_DIGITS or int(last) > MAX_ID:
                # Too large for an idset but fine as a range: flux-core's
                # count_decode() falls back to the range reading the same way.
                if simple[2] is None:
                    n = _number("count", simple[1], text)
                    return cls(n, n)
                return cls(_number("min", simple[1], text), _number("max", simple[2], text))
        # IDSet names the problem itself ("invalid idset '1-': ...").
        ids = IDSet(text)
        if not ids:
            raise ValueError(f"invalid count {_show(text)}: the idset is empty")
        if 0 in ids:
            raise ValueError(f"invalid count {_show(text)}: counts start at 1, not 0")
        return cls._from_runs(tuple(ids.ranges()))

    @classmethod
    def _decode_range(cls, text: str, body: str) -> Count:
        """Decode the RFC 45 range ``body`` (``text`` without its brackets)."""
        match = _RANGE.fullmatch(body)
        if match is None:
            raise ValueError(
                f"invalid range {_show(text)}: expected min-max[:operand[:operator]] "
                "or min+[:operand[:operator]]"
            )
        low = _number("min", match["min"], text)
        high = None if match["plus"] else _number("max", match["max"], text)
        operand = 1 if match["operand"] is None else _number("operand", match["operand"], text)
        operator = "+" if match["operator"] is None else match["operator"]
        if operator not in OPERATORS:
            raise ValueError(f"operator {_show(operator, 10)} is not one of '+', '*', '^'")
        return cls(low, high, operator, operand)

    @classmethod
    def _decode_mapping(cls, mapping: Mapping[object, object]) -> Count:
        """Decode the RFC 14 dictionary form."""
        for key in mapping:
            if key not in _DICT_KEYS:
                shown = _show(key) if isinstance(key, str) else f"of type {type(key).__name__}"
                raise ValueError(f"unknown key {shown} (expected min, max, operator, operand)")
        if "min" not in mapping:
            raise ValueError("missing required key 'min'")
        # flux-core's count_create() defaults operator and operand one by one
        # ({min: 1, max: 3, operand: 2} is 1, 3), so fluxes does too; the
        # rules below still refuse '*' or '^' without an operand of 2 or more.
        low = _check_int("min", mapping["min"])
        high = _check_int("max", mapping["max"]) if "max" in mapping else None
        operator = mapping.get("operator", "+")
        operand = _check_int("operand", mapping.get("operand", 1))
        return cls(low, high, operator, operand)  # type: ignore[arg-type]  # checked there

    @classmethod
    def _from_runs(cls, runs: Runs) -> Count:
        """Build a count from the sorted, disjoint runs of a non-empty idset.

        Sets that are arithmetic progressions (including a single run) become
        ``+`` ranges, so that ``"1-4"``, ``"[1-4]"`` and ``{min: 1, max: 4}``
        are equal counts.
        """
        first, last = runs[0][0], runs[-1][1]
        if len(runs) == 1:
            return cls(first, last)
        step = runs[1][0] - first
        # Only singletons can form a progression with step >= 2.  Runs are
        # bounded by the length of the text, so this loop is cheap.
        if all(lo == hi for lo, hi in runs) and all(b[0] - a[0] == step for a, b in pairwise(runs)):
            return cls(first, last, "+", step)
        count = cls.__new__(cls)
        object.__setattr__(count, "min", first)
        object.__setattr__(count, "max", last)
        object.__setattr__(count, "operator", None)
        object.__setattr__(count, "operand", None)
        object.__setattr__(count, "runs", runs)
        return count

    # -- properties ----------------------------------------------------------

    @property
    def is_fixed(self) -> bool:
        """True if ``min == max``: exactly one amount is acceptable."""
        return self.min == self.max

    @property
    def is_bounded(self) -> bool:
        """True if there is a largest accepted value (``max`` is not None)."""
        return self.max is not None

    # -- queries -------------------------------------------------------------

    def __contains__(self, value: object) -> bool:
        """True if ``value`` is an accepted amount; non-integers and bools are not."""
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if value < self.min or (self.max is not None and value > self.max):
            return False
        if self.runs is not None:
            k = bisect_right(self.runs, value, key=_run_start) - 1
            return value <= self.runs[k][1]
        assert self.operand is not None
        if self.operator == "+":
            return (value - self.min) % self.operand == 0
        if self.operator == "*":
            quotient, remainder = divmod(value, self.min)
            if remainder:
                return False
            while quotient % self.operand == 0:
                quotient //= self.operand
            return quotient == 1
        return self.largest_at_most(value) == value

    def largest_at_most(self, n: int) -> int | None:
        """The largest accepted value that is <= ``n``, or None if ``n < min``.

        The scheduler uses this to take "as many as are available": with ``n``
        resources free, it may allocate ``largest_at_most(n)`` of them.  Costs
        O(1) for ``+``, O(log n) for ``*`` and sets, O(log log n) for ``^``.
        Raises ``ValueError`` if ``n`` is not an integer.
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"largest_at_most needs an integer, not {type(n).__name__}")
        if n < self.min:
            return None
        bound = n if self.max is None else min(n, self.max)
        if self.runs is not None:
            _, hi = self.runs[bisect_right(self.runs, bound, key=_run_start) - 1]
            return min(hi, bound)
        assert self.operand is not None
        if self.operator == "+":
            return self.min + (bound - self.min) // self.operand * self.operand
        best = self.min
        if self.operator == "*":
            while best * self.operand <= bound:
                best *= self.operand
            return best
        while (following := _next_power(best, self.operand, bound)) <= bound:
            best = following
        return best

    def values(self, limit: int | None = None) -> Iterator[int]:
        """Accepted values in ascending order, stopping after ``limit`` if given.

        Without a limit, an unbounded count stops at ``MAX_COUNT``.  The
        values come lazily, one at a time.  Raises ``ValueError`` (at once,
        not on the first ``next``) if ``limit`` is not an int.
        """
        if limit is None:
            limit = MAX_COUNT if self.max is None else self.max
        elif isinstance(limit, bool) or not isinstance(limit, int):
            raise ValueError(f"limit must be an integer, not {type(limit).__name__}")
        elif self.max is not None:
            limit = min(limit, self.max)
        return self._values(limit)

    def _values(self, limit: int) -> Iterator[int]:
        """Generator behind :meth:`values`: accepted values <= ``limit``."""
        if self.runs is not None:
            for lo, hi in self.runs:
                if lo > limit:
                    return
                yield from range(lo, min(hi, limit) + 1)
            return
        assert self.operand is not None
        if self.operator == "+":
            yield from range(self.min, limit + 1, self.operand)
            return
        value = self.min
        while value <= limit:
            yield value
            if self.operator == "*":
                value *= self.operand
            else:
                value = _next_power(value, self.operand, limit)

    def __iter__(self) -> Iterator[int]:
        """Accepted values in ascending order, up to ``MAX_COUNT`` if unbounded."""
        return self.values()

    # -- encoding ------------------------------------------------------------

    def encode(self) -> str:
        """The compact string form: ``"4"``, ``"1-4"``, ``"2+"``, ``"1-9:2"``,
        ``"2-16:2:*"``, ``"2-256:2:^"`` or an idset such as ``"1,3,5-7"``.

        ``Count.decode(c.encode()) == c`` for every count ``c``.
        """
        if self.runs is not None:
            return IDSet.from_ranges(self.runs).encode()
        if self.is_fixed:
            return str(self.min)
        text = f"{self.min}+" if self.max is None else f"{self.min}-{self.max}"
        if self.operator != "+":
            return f"{text}:{self.operand}:{self.operator}"
        if self.operand != 1:
            return f"{text}:{self.operand}"
        return text

    def to_json(self) -> int | str:
        """The value to store as a jobspec ``count``: an int if fixed, else :meth:`encode`."""
        if self.is_fixed:
            return self.min
        return self.encode()

    def __str__(self) -> str:
        """Same as :meth:`encode`."""
        return self.encode()

    def __repr__(self) -> str:
        """``Count.decode('2-8:2:*')``: evaluable and short."""
        return f"Count.decode({self.encode()!r})"
