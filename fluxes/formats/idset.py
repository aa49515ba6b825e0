"""RFC 22 idsets: sets of non-negative integer ids and their compact string form.

An idset string lists ids in ascending order separated by commas, with runs of
consecutive ids optionally written as ``lo-hi`` and the whole string optionally
wrapped in square brackets, e.g. ``"0-3,7"`` or ``"[0-3,7]"``.

:class:`IDSet` keeps its members as sorted, disjoint, non-adjacent inclusive
ranges in two parallel lists, so a set such as ``0-999999`` costs two list
entries, not a million ints.  See ``docs/formats/idset.md``.

Why one module: it is the one RFC 22 type; its range algebra (union, difference,
intersection) works on the private parallel lists and is hot in the scheduler, so it
stays beside the class.
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate, islice, pairwise
from typing import Self, TypeAlias, cast

from fluxes.formats.shown import shown as _show

__all__ = ["MAX_ID", "IDSet", "IDSetLike"]

#: Largest id accepted.  RFC 22 sets no bound, but flux-core's idsets keep
#: their universe size (a power of two) in a C ``unsigned int``, so no id at
#: or past 2**31 can be stored there: flux itself refuses such ids, and so
#: does fluxes, at every entry point.
MAX_ID = 2**31 - 1

_MAX_DIGITS = len(str(MAX_ID))

# One element: an id or an ``lo-hi`` range, decimal, no leading zeros.  The
# digit count is capped so that huge numbers fail the fast path and get a
# precise message from the diagnostic path instead of a costly int().
_NUM = rf"(?:0|[1-9][0-9]{{0,{_MAX_DIGITS - 1}}})"
_ELEMENT = re.compile(rf"({_NUM})(?:-({_NUM}))?")
_ELEMENT_NC = rf"{_NUM}(?:-{_NUM})?"
_BODY = re.compile(rf"{_ELEMENT_NC}(?:,{_ELEMENT_NC})*")
_BAD_CHAR = re.compile(r"[^0-9,\-]")

IDSetLike: TypeAlias = "IDSet | str | Iterable[int]"
"""Anything :class:`IDSet` accepts: an IDSet, an RFC 22 string or an iterable of ids."""


def _check_int(value: object, what: str) -> int:
    """Return *value* if it is a plain int (not a bool), else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: expected an integer id, got {type(value).__name__}")
    return int(value)  # an int subclass (IntEnum, ...) is stored as a plain int


def _check_id(value: object, what: str) -> int:
    """Return *value* if it is a valid id (int in ``0..MAX_ID``), else raise ValueError."""
    n = _check_int(value, what)
    if n < 0:
        raise ValueError(f"{what}: id {n} is negative")
    if n > MAX_ID:
        raise ValueError(f"{what}: id {n} is out of range 0-{MAX_ID}")
    return n


def _count(lo: list[int], hi: list[int]) -> int:
    """Number of ids in the ranges ``lo[k]..hi[k]``."""
    total: int = sum(map(operator.sub, hi, lo))
    return total + len(lo)


def _diagnose(text: str, body: str, offset: int) -> ValueError:
    """Explain why *body* (``text`` minus brackets, starting at *offset*) is not valid.

    Only called once the fast regular-expression check has failed, so speed
    does not matter here; clarity of the message does.
    """

    def bad(problem: str) -> ValueError:
        return ValueError(f"invalid idset {_show(text)}: {problem}")

    m = _BAD_CHAR.search(body)
    if m is not None:
        ch = m.group()
        pos = m.start() + offset
        if ch == "[" and pos == 0 and "]" not in text:
            return bad("unmatched '['")
        if ch == "]" and pos == len(text) - 1 and "[" not in text:
            return bad("unmatched ']'")
        if ch in "[]":
            return bad(f"bracket {ch!r} at position {pos}; brackets may only surround "
                       "the whole idset")
        if ch.isspace():
            return bad(f"whitespace {ch!r} at position {pos} is not allowed")
        return bad(f"invalid character {ch!r} at position {pos}; only digits, ',' and "
                   "'-' are allowed")
    for element in body.split(","):
        if element == "":
            return bad("empty element (stray ',')")
        parts = element.split("-")
        if len(parts) > 2:
            return bad(f"element {_show(element)} has more than one '-'")
        if parts[0] == "":
            return bad(f"element {_show(element)} has no start (ids cannot be negative)")
        if parts[-1] == "":
            return bad(f"range {_show(element)} has no end")
        for number in parts:
            if len(number) > 1 and number[0] == "0":
                return bad(f"id {_show(number)} has a leading zero")
            if len(number) > _MAX_DIGITS:
                return bad(f"id {number[:20]}{'...' if len(number) > 20 else ''} is out "
                           f"of range 0-{MAX_ID}")
    return bad("malformed")  # pragma: no cover - every failing case is named above


def _decode(text: str) -> tuple[list[int], list[int], int]:
    """Parse an RFC 22 string into ``(starts, ends, count)`` or raise ValueError."""
    body = text
    offset = 0
    if len(text) >= 2 and text[0] == "[" and text[-1] == "]":
        body = text[1:-1]
        offset = 1
    if body == "":
        return [], [], 0
    if _BODY.fullmatch(body) is None:
        raise _diagnose(text, body, offset)
    if "-" not in body:
        # Fast path for long flat lists; on failure the loop below names the
        # offending element.
        ids = list(map(int, body.split(",")))
        if ids[-1] <= MAX_ID and all(map(operator.lt, ids, islice(ids, 1, None))):
            return (*_from_sorted_ids(ids), len(ids))

    starts: list[int] = []
    ends: list[int] = []
    count = 0
    # -2, not -1: id 0 must not look adjacent to a previous element.
    prev_lo = -2
    prev_hi = -2
    for first, last in _ELEMENT.findall(body):
        lo = int(first)
        hi = int(last) if last else lo
        if lo > hi:
            raise ValueError(f"invalid idset {_show(text)}: range '{first}-{last}' is "
                             "descending")
        if hi > MAX_ID:
            raise ValueError(f"invalid idset {_show(text)}: id {hi} is out of range "
                             f"0-{MAX_ID}")
        if lo <= prev_hi:
            element = f"{first}-{last}" if last else first
            if lo < prev_lo:
                raise ValueError(f"invalid idset {_show(text)}: {element!r} is out of "
                                 "ascending order")
            raise ValueError(f"invalid idset {_show(text)}: {element!r} repeats ids "
                             "listed before it")
        if lo == prev_hi + 1:
            # "1-3,4-5" is legal (compression is optional); store it as one run.
            ends[-1] = hi
        else:
            starts.append(lo)
            ends.append(hi)
        count += hi - lo + 1
        prev_lo = lo
        prev_hi = hi
    return starts, ends, count


def _from_sorted_ids(ids: list[int]) -> tuple[list[int], list[int]]:
    """Compress a sorted list of distinct ids into runs."""
    if not ids:
        return [], []
    # Comprehensions over (previous, current) pairs run much faster than an
    # append loop, which matters for lists of a million ids.
    starts = [ids[0]]
    starts += [b for a, b in pairwise(ids) if b - a != 1]
    ends = [a for a, b in pairwise(ids) if b - a != 1]
    ends.append(ids[-1])
    return starts, ends


def _sorted_ids(items: Iterator[object]) -> list[int]:
    """The distinct ids from *items*, sorted; ValueError names the first non-id."""
    values = list(items)
    # Fast path: check types, order and bounds with C-level operations only.
    if set(map(type, values)) <= {int}:
        ids = cast("list[int]", values)
        if not all(map(operator.lt, ids, islice(ids, 1, None))):
            ids = sorted(set(ids))
        if ids:
            _check_id(ids[0], "IDSet")
            _check_id(ids[-1], "IDSet")
        return ids
    # Slow path: bools, int subclasses, or something that is not an id at all.
    return sorted({int(_check_id(n, "IDSet")) for n in values})


# Set operations on canonical run lists (sorted, disjoint, non-adjacent).
#
# Two strategies, chosen by the number of runs on each side:
# - balanced inputs: one linear merge over both lists, O(n + m);
# - lopsided inputs (one side has _SPLICE_RATIO times fewer runs): walk the
#   short list and bisect into the long one, copying untouched stretches of
#   the long list with slices (C speed).  Taking a small allocation out of a
#   big, fragmented pool of free ids then costs O(m log n) Python steps plus a
#   list copy, rather than a Python loop over the whole pool.
_SPLICE_RATIO = 8


def _lopsided(n_short: int, n_long: int) -> bool:
    """Whether bisecting from the short list beats a linear merge."""
    return n_short * _SPLICE_RATIO < n_long


# In-place union and difference with a small right-hand side splice each of
# its runs into the range lists (a bisection and a slice assignment) instead
# of building new lists: growing a fragmented set one id at a time would
# otherwise copy and re-count every run on each step.  Each splice moves the
# list tail in C (like add() and discard()), so past a few dozen runs one
# rebuild is cheaper than many splices.
_SPLICE_IN_PLACE_MAX = 32


def _splice_in_place(n_other: int, n_self: int) -> bool:
    """Whether an in-place union/difference should splice rather than rebuild."""
    return n_other <= _SPLICE_IN_PLACE_MAX and _lopsided(n_other, n_self)


def _union_into(lo: list[int], hi: list[int], blo: list[int], bhi: list[int]) -> int:
    """Add the runs of b to the range lists ``lo``/``hi`` in place; return the ids added."""
    added = 0
    pos = 0
    for b_lo, b_hi in zip(blo, bhi, strict=True):
        # Runs i..j-1 overlap or touch [b_lo, b_hi]; they collapse into one.
        i = bisect_left(hi, b_lo - 1, pos)
        j = bisect_right(lo, b_hi + 1, i)
        if j > i:
            new_lo = min(b_lo, lo[i])
            new_hi = max(b_hi, hi[j - 1])
            added -= sum(hi[i:j]) - sum(lo[i:j]) + (j - i)
        else:
            new_lo, new_hi = b_lo, b_hi
        added += new_hi - new_lo + 1
        lo[i:j] = (new_lo,)
        hi[i:j] = (new_hi,)
        # The merged run may reach into the next run of b: search from it.
        pos = i
    return added


def _difference_into(lo: list[int], hi: list[int], blo: list[int], bhi: list[int]) -> int:
    """Remove the runs of b from the range lists ``lo``/``hi`` in place; return the ids removed."""
    removed = 0
    pos = 0
    for b_lo, b_hi in zip(blo, bhi, strict=True):
        i = bisect_left(hi, b_lo, pos)  # first run ending at or after b_lo
        j = bisect_right(lo, b_hi, i)  # runs i..j-1 start at or before b_hi
        pos = i
        if j == i:
            continue  # this run of b lies in a gap
        first_lo = lo[i]
        last_hi = hi[j - 1]
        removed += sum(hi[i:j]) - sum(lo[i:j]) + (j - i)
        keep_lo: list[int] = []
        keep_hi: list[int] = []
        if first_lo < b_lo:
            keep_lo.append(first_lo)
            keep_hi.append(b_lo - 1)
            removed -= b_lo - first_lo
        if last_hi > b_hi:
            keep_lo.append(b_hi + 1)
            keep_hi.append(last_hi)
            removed -= last_hi - b_hi
        lo[i:j] = keep_lo
        hi[i:j] = keep_hi
    return removed


def _union(alo: list[int], ahi: list[int], blo: list[int],
           bhi: list[int]) -> tuple[list[int], list[int]]:
    """Runs covering the ids of both inputs."""
    if len(blo) > len(alo):
        alo, ahi, blo, bhi = blo, bhi, alo, ahi
    if not blo:
        return alo[:], ahi[:]
    if _lopsided(len(blo), len(alo)):
        return _union_splice(alo, ahi, blo, bhi)
    out_lo: list[int] = []
    out_hi: list[int] = []
    i = j = 0
    na, nb = len(alo), len(blo)
    while i < na or j < nb:
        if j >= nb or (i < na and alo[i] <= blo[j]):
            lo, hi = alo[i], ahi[i]
            i += 1
        else:
            lo, hi = blo[j], bhi[j]
            j += 1
        if out_hi and lo <= out_hi[-1] + 1:
            if hi > out_hi[-1]:  # noqa: PLR1730 - cheaper than max() in this hot loop
                out_hi[-1] = hi
        else:
            out_lo.append(lo)
            out_hi.append(hi)
    return out_lo, out_hi


def _union_splice(alo: list[int], ahi: list[int], blo: list[int],
                  bhi: list[int]) -> tuple[list[int], list[int]]:
    """:func:`_union` for a short list b: walk b, bisect into a."""
    out_lo: list[int] = []
    out_hi: list[int] = []
    pos = 0  # runs of a before pos have been emitted or merged
    for b_lo, b_hi in zip(blo, bhi, strict=True):
        # Runs of a ending before b_lo - 1 neither overlap nor touch this run.
        i = bisect_left(ahi, b_lo - 1, pos)
        out_lo += alo[pos:i]
        out_hi += ahi[pos:i]
        # Runs of a starting up to b_hi + 1 overlap or touch it: merge them in.
        j = bisect_right(alo, b_hi + 1, i)
        lo, hi = b_lo, b_hi
        if j > i:
            lo = min(lo, alo[i])
            hi = max(hi, ahi[j - 1])
        if out_hi and lo <= out_hi[-1] + 1:
            out_hi[-1] = max(out_hi[-1], hi)
        else:
            out_lo.append(lo)
            out_hi.append(hi)
        pos = j
    out_lo += alo[pos:]
    out_hi += ahi[pos:]
    return out_lo, out_hi


def _intersection(alo: list[int], ahi: list[int], blo: list[int],
                  bhi: list[int]) -> tuple[list[int], list[int]]:
    """Runs of the ids present in both inputs."""
    if len(blo) > len(alo):
        alo, ahi, blo, bhi = blo, bhi, alo, ahi
    if _lopsided(len(blo), len(alo)):
        return _intersection_splice(alo, ahi, blo, bhi)
    out_lo: list[int] = []
    out_hi: list[int] = []
    i = j = 0
    na, nb = len(alo), len(blo)
    while i < na and j < nb:
        a_lo, a_hi, b_lo, b_hi = alo[i], ahi[i], blo[j], bhi[j]
        lo = a_lo if a_lo > b_lo else b_lo
        hi = a_hi if a_hi < b_hi else b_hi
        if lo <= hi:
            out_lo.append(lo)
            out_hi.append(hi)
        if a_hi < b_hi:
            i += 1
        else:
            j += 1
    return out_lo, out_hi


def _intersection_splice(alo: list[int], ahi: list[int], blo: list[int],
                         bhi: list[int]) -> tuple[list[int], list[int]]:
    """:func:`_intersection` for a short list b: walk b, bisect into a."""
    out_lo: list[int] = []
    out_hi: list[int] = []
    pos = 0
    for lo, hi in zip(blo, bhi, strict=True):
        i = bisect_left(ahi, lo, pos)  # first run of a ending at or after lo
        j = bisect_right(alo, hi, i)  # runs i..j-1 of a start at or before hi
        if j > i:
            out_lo.append(max(lo, alo[i]))
            out_lo += alo[i + 1:j]
            out_hi += ahi[i:j - 1]
            out_hi.append(min(hi, ahi[j - 1]))
            # Run j-1 of a may reach past hi into the next run of b.
            pos = j - 1
    return out_lo, out_hi


def _difference(alo: list[int], ahi: list[int], blo: list[int],
                bhi: list[int]) -> tuple[list[int], list[int]]:
    """Runs of the ids of the first input that are not in the second."""
    if not alo or not blo:
        return alo[:], ahi[:]
    if _lopsided(len(blo), len(alo)):
        return _difference_few_b(alo, ahi, blo, bhi)
    bisect_b = _lopsided(len(alo), len(blo))
    out_lo: list[int] = []
    out_hi: list[int] = []
    j = 0
    nb = len(blo)
    for lo, hi in zip(alo, ahi, strict=True):
        cur = lo
        # Skip runs of b that end before cur; a run reaching past this run of
        # a stays at j for the next one.
        if bisect_b:
            j = bisect_left(bhi, cur, j)
        else:
            while j < nb and bhi[j] < cur:
                j += 1
        while j < nb and blo[j] <= hi:
            if blo[j] > cur:
                out_lo.append(cur)
                out_hi.append(blo[j] - 1)
            cur = bhi[j] + 1
            if cur > hi:
                break
            j += 1
        if cur <= hi:
            out_lo.append(cur)
            out_hi.append(hi)
    return out_lo, out_hi


def _difference_few_b(alo: list[int], ahi: list[int], blo: list[int],
                      bhi: list[int]) -> tuple[list[int], list[int]]:
    """:func:`_difference` for a short list b: walk b, bisect into a."""
    out_lo: list[int] = []
    out_hi: list[int] = []
    na = len(alo)
    pos = 0  # first run of a not yet emitted ...
    start = alo[0]  # ... and where it starts now, once b may have cut its head off
    for lo, hi in zip(blo, bhi, strict=True):
        i = bisect_left(ahi, lo, pos)  # first run of a ending at or after lo
        if i > pos:
            out_lo.append(start)
            out_lo += alo[pos + 1:i]
            out_hi += ahi[pos:i]
            pos = i
            if pos == na:
                break
            start = alo[pos]
        if start > hi:
            continue  # this run of b lies in a gap of a
        if start < lo:
            out_lo.append(start)
            out_hi.append(lo - 1)
        j = bisect_right(ahi, hi, pos)  # runs pos..j-1 of a end inside this run of b
        if j == na:
            pos = na
            break
        start = max(start if j == pos else alo[j], hi + 1)
        pos = j
    if pos < na:
        out_lo.append(start)
        out_lo += alo[pos + 1:]
        out_hi += ahi[pos:]
    return out_lo, out_hi


class IDSet:
    """A mutable set of non-negative integer ids with RFC 22 string encoding.

    ``IDSet()`` is empty; ``IDSet("0-3,7")`` or ``IDSet("[0-3,7]")`` decodes an
    RFC 22 string; ``IDSet([3, 1, 2])`` takes ids in any order (duplicates are
    fine); ``IDSet(other)`` copies another IDSet.  Invalid input raises
    ValueError with a one-line message.

    Members are kept as sorted, disjoint, non-adjacent inclusive ranges, so
    size and speed depend on the number of runs, not the number of ids:
    ``len`` is O(1), membership O(log r), set algebra at most O(r + s) and
    O(s log r) plus a list copy when one side has far fewer runs; ``|=`` and
    ``-=`` with a few runs on the right edit the lists in place, O(s log r)
    steps and no copy.

    Operators and set methods also accept a string or an iterable of ids as
    the other operand.  ``==`` is only true between IDSets.
    """

    __slots__ = ("_count", "_cum", "_hi", "_lo")

    # Mutable, so unhashable (like ``set``).
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, text: IDSetLike = "") -> None:
        """Build a set from an RFC 22 string, an iterable of ids or another IDSet."""
        self._lo: list[int]
        self._hi: list[int]
        self._count: int
        self._cum: list[int] | None = None
        if isinstance(text, str):
            self._lo, self._hi, self._count = _decode(text)
        elif isinstance(text, IDSet):
            self._lo, self._hi, self._count = text._lo[:], text._hi[:], text._count
        elif isinstance(text, (bytes, bytearray, memoryview)):
            raise ValueError("IDSet: expected an idset string, an iterable of ids or an "
                             f"IDSet, got {type(text).__name__} (decode it to str first)")
        else:
            try:
                items = iter(text)
            except TypeError:
                raise ValueError("IDSet: expected an idset string, an iterable of ids or "
                                 f"an IDSet, got {type(text).__name__}") from None
            ids = _sorted_ids(items)
            self._lo, self._hi = _from_sorted_ids(ids)
            self._count = len(ids)

    # -- construction helpers ------------------------------------------------

    @classmethod
    def _make(cls, lo: list[int], hi: list[int], count: int | None = None) -> Self:
        """Wrap canonical range lists (taken over, not copied) in a new set."""
        obj = cls.__new__(cls)
        obj._lo = lo
        obj._hi = hi
        obj._count = _count(lo, hi) if count is None else count
        obj._cum = None
        return obj

    def _replace(self, ranges: tuple[list[int], list[int]]) -> None:
        """Install new canonical range lists in place."""
        self._lo, self._hi = ranges
        self._count = _count(self._lo, self._hi)
        self._cum = None

    @staticmethod
    def _coerce(other: IDSetLike) -> IDSet:
        """Return *other* as an IDSet, converting strings and iterables."""
        if isinstance(other, IDSet):
            return other
        return IDSet(other)

    @classmethod
    def from_range(cls, lo: int, hi: int) -> Self:
        """The set of ids ``lo..hi`` inclusive; ValueError if ``lo > hi`` or out of bounds."""
        lo = _check_id(lo, "IDSet.from_range")
        hi = _check_id(hi, "IDSet.from_range")
        if lo > hi:
            raise ValueError(f"IDSet.from_range: lo {lo} is greater than hi {hi}")
        return cls._make([lo], [hi], hi - lo + 1)

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[int, int]]) -> Self:
        """The union of inclusive ``(lo, hi)`` ranges, given in any order, overlaps allowed."""
        pairs: list[tuple[int, int]] = []
        try:
            items = iter(ranges)
        except TypeError:
            raise ValueError("IDSet.from_ranges: expected an iterable of (lo, hi) pairs, "
                             f"got {type(ranges).__name__}") from None
        for pair in items:
            if not isinstance(pair, (tuple, list)):
                raise ValueError("IDSet.from_ranges: expected a (lo, hi) pair, got "
                                 f"{type(pair).__name__}")
            if len(pair) != 2:
                raise ValueError("IDSet.from_ranges: expected a (lo, hi) pair, got "
                                 f"{len(pair)} items")
            lo = _check_id(pair[0], "IDSet.from_ranges")
            hi = _check_id(pair[1], "IDSet.from_ranges")
            if lo > hi:
                raise ValueError(f"IDSet.from_ranges: lo {lo} is greater than hi {hi}")
            pairs.append((lo, hi))
        pairs.sort()
        out_lo: list[int] = []
        out_hi: list[int] = []
        for lo, hi in pairs:
            if out_hi and lo <= out_hi[-1] + 1:
                out_hi[-1] = max(out_hi[-1], hi)
            else:
                out_lo.append(lo)
                out_hi.append(hi)
        return cls._make(out_lo, out_hi)

    def copy(self) -> IDSet:
        """An independent copy of this set."""
        return IDSet._make(self._lo[:], self._hi[:], self._count)

    def __copy__(self) -> IDSet:
        """``copy.copy`` must not share the range lists (it would by default)."""
        return self.copy()

    def __deepcopy__(self, memo: dict[int, object]) -> IDSet:
        """Ids are ints, so a deep copy is the same as :meth:`copy`."""
        return self.copy()

    # -- encoding ------------------------------------------------------------

    def encode(self, ranges: bool = True, brackets: bool = False) -> str:
        """The RFC 22 string: ``"0-3,7"``; ``ranges=False`` lists every id.

        With ``brackets=True`` a set of two or more ids is wrapped in ``[...]``;
        a single id or the empty set never is.
        """
        if ranges:
            body = ",".join(str(lo) if lo == hi else f"{lo}-{hi}"
                            for lo, hi in zip(self._lo, self._hi, strict=True))
        else:
            body = ",".join(",".join(map(str, range(lo, hi + 1)))
                            for lo, hi in zip(self._lo, self._hi, strict=True))
        if brackets and self._count > 1:
            return f"[{body}]"
        return body

    def __str__(self) -> str:
        """The default encoding, e.g. ``0-3,7``."""
        return self.encode()

    def __repr__(self) -> str:
        """``IDSet('0-3,7')``."""
        return f"{type(self).__name__}({self.encode()!r})"

    # -- container protocol --------------------------------------------------

    def __len__(self) -> int:
        """Number of ids (O(1))."""
        return self._count

    def __bool__(self) -> bool:
        """True unless empty."""
        return self._count > 0

    def __contains__(self, value: object) -> bool:
        """True if *value* is an id in the set; non-ints are simply not members."""
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        k = bisect_right(self._lo, value) - 1
        return k >= 0 and value <= self._hi[k]

    def __iter__(self) -> Iterator[int]:
        """Ids in ascending order (changes made while iterating are not seen)."""
        for lo, hi in zip(self._lo[:], self._hi[:], strict=True):
            yield from range(lo, hi + 1)

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Maximal runs as inclusive ``(lo, hi)`` pairs in ascending order."""
        yield from zip(self._lo[:], self._hi[:], strict=True)

    def __eq__(self, other: object) -> bool:
        """Same ids as another IDSet (comparison with other types is False)."""
        if not isinstance(other, IDSet):
            return NotImplemented
        return (self._count == other._count and self._lo == other._lo
                and self._hi == other._hi)

    # -- ordered access ------------------------------------------------------

    def first(self) -> int | None:
        """The smallest id, or None if empty."""
        return self._lo[0] if self._lo else None

    def last(self) -> int | None:
        """The largest id, or None if empty."""
        return self._hi[-1] if self._hi else None

    def next(self, value: int) -> int | None:
        """The smallest id greater than *value*, or None."""
        n = _check_int(value, "IDSet.next") + 1
        k = bisect_right(self._lo, n) - 1
        if k >= 0 and n <= self._hi[k]:
            return n
        return self._lo[k + 1] if k + 1 < len(self._lo) else None

    def prev(self, value: int) -> int | None:
        """The largest id smaller than *value*, or None."""
        n = _check_int(value, "IDSet.prev") - 1
        k = bisect_right(self._lo, n) - 1
        if k < 0:
            return None
        return min(n, self._hi[k])

    def _cumulative(self) -> list[int]:
        """``cum[k]`` = number of ids in the runs before run *k* (cached)."""
        if self._cum is None:
            sizes = (hi - lo + 1 for lo, hi in zip(self._lo, self._hi, strict=True))
            self._cum = list(accumulate(sizes, initial=0))[:-1]
        return self._cum

    def nth(self, index: int) -> int:
        """The id at position *index* in ascending order (negative counts from the end).

        Raises IndexError when the set has no such position.
        """
        i = _check_int(index, "IDSet.nth")
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"IDSet.nth: index {index} out of range for {self._count} ids")
        cum = self._cumulative()
        k = bisect_right(cum, i) - 1
        return self._lo[k] + (i - cum[k])

    def first_n(self, n: int) -> IDSet:
        """A new set of the *n* smallest ids; ValueError if fewer than *n* are present."""
        n = _check_int(n, "IDSet.first_n")
        if n < 0:
            raise ValueError(f"IDSet.first_n: count {n} is negative")
        if n > self._count:
            raise ValueError(f"IDSet.first_n: asked for {n} ids but the set has only "
                             f"{self._count}")
        if n == 0:
            return IDSet()
        cum = self._cumulative()
        k = bisect_right(cum, n - 1) - 1
        lo = self._lo[: k + 1]
        hi = self._hi[:k]
        hi.append(self._lo[k] + (n - 1 - cum[k]))
        return IDSet._make(lo, hi, n)

    # -- single-id mutation --------------------------------------------------

    def add(self, value: int) -> None:
        """Add one id (ValueError if it is not an int in ``0..MAX_ID``)."""
        n = _check_id(value, "IDSet.add")
        lo, hi = self._lo, self._hi
        k = bisect_right(lo, n) - 1
        if k >= 0 and n <= hi[k]:
            return
        joins_left = k >= 0 and hi[k] == n - 1
        joins_right = k + 1 < len(lo) and lo[k + 1] == n + 1
        if joins_left and joins_right:
            hi[k] = hi[k + 1]
            del lo[k + 1]
            del hi[k + 1]
        elif joins_left:
            hi[k] = n
        elif joins_right:
            lo[k + 1] = n
        else:
            lo.insert(k + 1, n)
            hi.insert(k + 1, n)
        self._count += 1
        self._cum = None

    def discard(self, value: int) -> None:
        """Remove one id if present (ValueError if it is not an int in ``0..MAX_ID``)."""
        n = _check_id(value, "IDSet.discard")
        lo, hi = self._lo, self._hi
        k = bisect_right(lo, n) - 1
        if k < 0 or n > hi[k]:
            return
        if lo[k] == hi[k]:
            del lo[k]
            del hi[k]
        elif n == lo[k]:
            lo[k] = n + 1
        elif n == hi[k]:
            hi[k] = n - 1
        else:
            lo.insert(k + 1, n + 1)
            hi.insert(k + 1, hi[k])
            hi[k] = n - 1
        self._count -= 1
        self._cum = None

    # -- set algebra -----------------------------------------------------------

    def union(self, other: IDSetLike) -> IDSet:
        """A new set with the ids of both."""
        o = self._coerce(other)
        return IDSet._make(*_union(self._lo, self._hi, o._lo, o._hi))

    def intersection(self, other: IDSetLike) -> IDSet:
        """A new set with the ids present in both."""
        o = self._coerce(other)
        return IDSet._make(*_intersection(self._lo, self._hi, o._lo, o._hi))

    def difference(self, other: IDSetLike) -> IDSet:
        """A new set with the ids of this set that are not in *other*."""
        o = self._coerce(other)
        return IDSet._make(*_difference(self._lo, self._hi, o._lo, o._hi))

    def symmetric_difference(self, other: IDSetLike) -> IDSet:
        """A new set with the ids in exactly one of the two."""
        o = self._coerce(other)
        a = _difference(self._lo, self._hi, o._lo, o._hi)
        b = _difference(o._lo, o._hi, self._lo, self._hi)
        return IDSet._make(*_union(a[0], a[1], b[0], b[1]))

    def update(self, other: IDSetLike) -> None:
        """Add every id of *other* to this set.

        A few runs in *other* are spliced into this set's range lists, so
        that costs O(runs of other x log runs of self) steps, not a rebuild.
        """
        o = self._coerce(other)
        if o is not self and _splice_in_place(len(o._lo), len(self._lo)):
            self._count += _union_into(self._lo, self._hi, o._lo, o._hi)
            self._cum = None
            return
        self._replace(_union(self._lo, self._hi, o._lo, o._hi))

    def intersection_update(self, other: IDSetLike) -> None:
        """Keep only the ids also in *other*."""
        o = self._coerce(other)
        self._replace(_intersection(self._lo, self._hi, o._lo, o._hi))

    def difference_update(self, other: IDSetLike) -> None:
        """Remove every id of *other* from this set.

        As with :meth:`update`, a few runs in *other* are spliced out in place.
        """
        o = self._coerce(other)
        if o is not self and _splice_in_place(len(o._lo), len(self._lo)):
            self._count -= _difference_into(self._lo, self._hi, o._lo, o._hi)
            self._cum = None
            return
        self._replace(_difference(self._lo, self._hi, o._lo, o._hi))

    def symmetric_difference_update(self, other: IDSetLike) -> None:
        """Keep the ids in exactly one of this set and *other*."""
        result = self.symmetric_difference(other)
        self._replace((result._lo, result._hi))

    def __or__(self, other: IDSetLike) -> IDSet:
        """Union; the other operand may also be a string or iterable of ids."""
        return self.union(other)

    def __and__(self, other: IDSetLike) -> IDSet:
        """Intersection; the other operand may also be a string or iterable of ids."""
        return self.intersection(other)

    def __sub__(self, other: IDSetLike) -> IDSet:
        """Difference; the other operand may also be a string or iterable of ids."""
        return self.difference(other)

    def __xor__(self, other: IDSetLike) -> IDSet:
        """Symmetric difference; the other operand may also be a string or iterable."""
        return self.symmetric_difference(other)

    def __ror__(self, other: str | Iterable[int]) -> IDSet:
        """Union with a string or iterable on the left."""
        return self.union(other)

    def __rand__(self, other: str | Iterable[int]) -> IDSet:
        """Intersection with a string or iterable on the left."""
        return self.intersection(other)

    def __rsub__(self, other: str | Iterable[int]) -> IDSet:
        """``other - self`` with a string or iterable on the left."""
        return self._coerce(other).difference(self)

    def __rxor__(self, other: str | Iterable[int]) -> IDSet:
        """Symmetric difference with a string or iterable on the left."""
        return self.symmetric_difference(other)

    def __ior__(self, other: IDSetLike) -> Self:
        """In-place union."""
        self.update(other)
        return self

    def __iand__(self, other: IDSetLike) -> Self:
        """In-place intersection."""
        self.intersection_update(other)
        return self

    def __isub__(self, other: IDSetLike) -> Self:
        """In-place difference."""
        self.difference_update(other)
        return self

    def __ixor__(self, other: IDSetLike) -> Self:
        """In-place symmetric difference."""
        self.symmetric_difference_update(other)
        return self

    # -- comparisons -----------------------------------------------------------

    def issubset(self, other: IDSetLike) -> bool:
        """True if every id of this set is in *other*."""
        o = self._coerce(other)
        if self._count > o._count:
            return False
        olo, ohi = o._lo, o._hi
        for lo, hi in zip(self._lo, self._hi, strict=True):
            k = bisect_right(olo, lo) - 1
            if k < 0 or hi > ohi[k]:
                return False
        return True

    def issuperset(self, other: IDSetLike) -> bool:
        """True if every id of *other* is in this set."""
        return self._coerce(other).issubset(self)

    def isdisjoint(self, other: IDSetLike) -> bool:
        """True if the two sets share no id."""
        o = self._coerce(other)
        alo, ahi, blo, bhi = self._lo, self._hi, o._lo, o._hi
        if len(blo) > len(alo):
            alo, ahi, blo, bhi = blo, bhi, alo, ahi
        for lo, hi in zip(blo, bhi, strict=True):
            i = bisect_left(ahi, lo)
            if i < len(alo) and alo[i] <= hi:
                return False
        return True

    def intersects(self, other: IDSetLike) -> bool:
        """True if the two sets share at least one id."""
        return not self.isdisjoint(other)

    def __le__(self, other: IDSetLike) -> bool:
        """Subset test."""
        return self.issubset(other)

    def __lt__(self, other: IDSetLike) -> bool:
        """Proper-subset test."""
        o = self._coerce(other)
        return self._count < o._count and self.issubset(o)

    def __ge__(self, other: IDSetLike) -> bool:
        """Superset test."""
        return self.issuperset(other)

    def __gt__(self, other: IDSetLike) -> bool:
        """Proper-superset test."""
        o = self._coerce(other)
        return self._count > o._count and o.issubset(self)


def chunks(ids: IDSet, size: int) -> Iterator[IDSet]:
    """``ids`` cut, in order, into sets of at most ``size`` ids (the last may hold fewer);
    built from the runs, never from the ids one by one."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    lo: list[int] = []
    hi: list[int] = []
    room = size
    for run_lo, last in zip(ids._lo, ids._hi, strict=True):
        first = run_lo
        while first <= last:
            end = min(last, first + room - 1)
            lo.append(first)
            hi.append(end)
            room -= end - first + 1
            first = end + 1
            if room == 0:
                yield IDSet._make(lo, hi, size)
                lo, hi, room = [], [], size
    if lo:
        yield IDSet._make(lo, hi, size - room)
