"""RFC 29 hostlists: ordered lists of hostnames and their compact string form.

A hostlist string is a comma separated list of expressions
``prefix[idlist]suffix`` such as ``"node[1-3,5],login0"`` or
``"foo[0-4]-eth2"``; each component is optional and ``""`` is the empty list.

:class:`Hostlist` stores its hosts as *runs*: a prefix, a suffix and a range
of consecutive numbers printed with a minimum width, so ``node[0-99999]`` is
one small tuple, not 100,000 strings.  The encoding follows flux-core: only a
trailing number is written in brackets (``foo[1,3]-bar`` is written back as
``foo1-bar,foo3-bar``).  See ``docs/formats/hostlist.md``.

Why one module: it is the RFC 29 type with its parser and encoder, as idset.py is for
RFC 22; the parser, the encoder and the list operations all work on the private run
representation.
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import ClassVar, NamedTuple, SupportsIndex, TypeAlias, overload

from fluxes.formats.shown import shown as _show

__all__ = ["MAX_DIGITS", "MAX_RANGE", "Hostlist", "HostlistLike"]

#: Most hosts one ``lo-hi`` range in a hostlist string may name.  flux-core
#: refuses larger ranges too; the cap keeps a typo such as ``n[0-10000000000]``
#: from creating a list nobody can iterate.
MAX_RANGE = 1 << 20

#: Most digits in one id of an idlist.  Longer digit runs inside plain
#: hostnames are fine; they are kept as text, never converted to numbers.
MAX_DIGITS = 64

# Most ids fluxes writes inside one pair of brackets: flux-core cannot read
# more (its MAX_RANGES), so a longer group is continued in a new expression.
_MAX_GROUP = 10240

HostlistLike: TypeAlias = "Hostlist | str | Iterable[str]"
"""Anything :class:`Hostlist` accepts: a Hostlist, an RFC 29 string or hostnames."""

# Every character a hostlist string may contain: printable ASCII but space.
_BAD_CHAR = re.compile(r"[^\x21-\x7e]")
# A single hostname: the above minus the special characters '[', ']' and ','.
_HOSTNAME = re.compile(r"[\x21-\x2b\x2d-\x5a\x5c\x5e-\x7e]+")
# One expression, stopping at the next top-level comma.
_EXPR = re.compile(r"([^\[\],]*)(?:\[([^\[\]]*)\]([^\[\],]*))?")
_ID_ELEMENT = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_DIGITS = re.compile(r"([0-9]+)")


class _Run(NamedTuple):
    """Consecutive hosts ``prefix + number + suffix`` for numbers ``lo..hi``.

    ``width`` is the minimum number of digits (zero padded); width 1 means no
    padding.  ``width == 0`` marks a literal host: the whole name is ``prefix``.
    A run is normalised so that ``width > 1`` only if ``lo`` really needs
    leading zeros, so two runs with the same prefix and suffix that print the
    same hosts compare equal.
    """

    prefix: str
    suffix: str
    lo: int
    hi: int
    width: int


def _is_padded(digits: str) -> bool:
    """True if a digit string has a leading zero (``"0"`` itself does not)."""
    return len(digits) > 1 and digits[0] == "0"


def _width_of(digits: str) -> int:
    """Minimum width implied by a digit string: its length if zero padded, else 1."""
    return len(digits) if _is_padded(digits) else 1


def _new_run(prefix: str, suffix: str, lo: int, hi: int, width: int) -> _Run:
    """``_Run(...)`` without the NamedTuple constructor's argument handling (2x faster)."""
    return tuple.__new__(_Run, (prefix, suffix, lo, hi, width))


def _make_run(prefix: str, suffix: str, lo: int, hi: int, width: int) -> _Run:
    """Build a numeric run, dropping a width that no number in it needs."""
    if width > 1 and len(str(lo)) >= width:
        width = 1
    return _new_run(prefix, suffix, lo, hi, width)


def _literal(host: str) -> _Run:
    """A run holding the single host *host*, with no number part."""
    return _Run(host, "", 0, 0, 0)


def _run_len(run: _Run) -> int:
    """Number of hosts in *run*."""
    return 1 if run.width == 0 else run.hi - run.lo + 1


def _host(run: _Run, value: int) -> str:
    """The host of *run* whose number is *value*."""
    if run.width == 0:
        return run.prefix
    return run.prefix + str(value).zfill(run.width) + run.suffix


def _iter_run(run: _Run, start: int = 0) -> Iterator[str]:
    """Hosts of *run*, skipping the first *start* of them."""
    if run.width == 0:
        if start == 0:
            yield run.prefix
        return
    prefix, suffix, width = run.prefix, run.suffix, run.width
    if width == 1:
        for value in range(run.lo + start, run.hi + 1):
            yield f"{prefix}{value}{suffix}"
    else:
        for value in range(run.lo + start, run.hi + 1):
            yield prefix + str(value).zfill(width) + suffix


def _middle_digits(host: str, prefix: str, suffix: str) -> str | None:
    """Digits between *prefix* and *suffix* in *host*, or None if it is not so framed."""
    end = len(host) - len(suffix)
    if end <= len(prefix) or not host.startswith(prefix) or not host.endswith(suffix):
        return None
    middle = host[len(prefix):end]
    if len(middle) > MAX_DIGITS or not middle.isdigit():
        return None
    return middle


def _offset_in_run(run: _Run, host: str) -> int:
    """Position of *host* in *run*, or -1."""
    if run.width == 0:
        return 0 if host == run.prefix else -1
    middle = _middle_digits(host, run.prefix, run.suffix)
    if middle is None:
        return -1
    value = int(middle)
    if run.lo <= value <= run.hi and str(value).zfill(run.width) == middle:
        return value - run.lo
    return -1


def _default_run(host: str) -> _Run:
    """Run for a lone host: its last digit run is the number, like flux-core does."""
    parts = _DIGITS.split(host)
    for i in range(len(parts) - 2, 0, -2):
        digits = parts[i]
        if len(digits) <= MAX_DIGITS:
            value = int(digits)
            return _make_run("".join(parts[:i]), "".join(parts[i + 1:]), value, value,
                             _width_of(digits))
    return _literal(host)


def _trailing_run(host: str) -> _Run:
    """Run for *host* as flux-core writes it: only a trailing digit run is a number.

    ``foo12`` is ``foo`` + 12; ``foo1-bar`` and ``foo`` have no number and
    are written as they are, never inside brackets.
    """
    end = len(host)
    start = end
    while start > 0 and host[start - 1].isdigit():
        start -= 1
    if start == end or end - start > MAX_DIGITS:
        return _literal(host)
    digits = host[start:]
    return _make_run(host[:start], "", int(digits), int(digits), _width_of(digits))


def _shared_frame(first: str, second: str) -> tuple[str, str, str, str] | None:
    """Split two hosts that differ in exactly one digit run around that run.

    Returns ``(prefix, suffix, first_digits, second_digits)`` so that, e.g.,
    ``foo0-eth2`` and ``foo1-eth2`` can share one run in memory (the encoding
    still writes them one by one, as flux-core does: see ``_flux_runs``).
    """
    a = _DIGITS.split(first)
    b = _DIGITS.split(second)
    if len(a) != len(b):
        return None
    found = -1
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            if i % 2 == 0 or found >= 0:
                return None
            found = i
    if found < 0 or len(a[found]) > MAX_DIGITS or len(b[found]) > MAX_DIGITS:
        return None
    return "".join(a[:found]), "".join(a[found + 1:]), a[found], b[found]


def _elements(run: _Run) -> list[str]:
    """Idlist elements (``"5"``, ``"08-12"``) for a numeric run.

    A run longer than MAX_RANGE is cut into pieces, so the string reads back.
    """
    result: list[str] = []
    lo, width = run.lo, run.width
    while lo <= run.hi:
        hi = min(run.hi, lo + MAX_RANGE - 1)
        text = str(lo).zfill(width)
        result.append(text if lo == hi else f"{text}-{str(hi).zfill(width)}")
        lo = hi + 1
    return result


def _same_group(first: str, run: _Run, other: _Run) -> bool:
    """Can *other* join the ``[...]`` that *run* (first id printed *first*) opened?

    It needs the same prefix and suffix.  An id without leading zeros is read
    back with the width of the first id, so it must be at least that long.
    """
    if other.width == 0 or other.prefix != run.prefix or other.suffix != run.suffix:
        return False
    lo = str(other.lo).zfill(other.width)
    return _is_padded(lo) or not _is_padded(first) or len(lo) >= len(first)


def _natural_key(host: str) -> str:
    """Sort key: text compared as text, digit runs by printed length, then value.

    ``n9`` sorts before ``n10``, and ``n1``, ``n2`` before ``n01``: as in
    flux-core, a zero-padded number sorts by its width first, after every
    number written with fewer digits (``[0-20],015`` sorts to ``0..20,015``).
    Without leading zeros, length-then-value is plain numeric order.  The
    key is one string so that sorting compares in C: a text token ends with
    ``\x00`` (lower than any hostname character, so ``a`` < ``ab``); a digit
    token is ``chr(1 + length) + digits``, which orders as above without
    int(), cheap even for very long digit runs.  Both kinds delimit
    themselves, so tokens of two keys always line up.
    """
    parts = _DIGITS.split(host)
    for i in range(1, len(parts), 2):
        digits = parts[i]
        parts[i] = f"{chr(1 + len(digits))}{digits}"
    for i in range(0, len(parts), 2):
        parts[i] += "\x00"
    return "".join(parts)


def _check_hostname(host: object, what: str) -> str:
    """Return *host* if it is a valid single hostname, else raise ValueError."""
    if not isinstance(host, str):
        raise ValueError(f"{what}: expected a hostname string, got {type(host).__name__}")
    if _HOSTNAME.fullmatch(host):
        return host
    if host == "":
        raise ValueError(f"{what}: empty hostname")
    bad = _BAD_CHAR.search(host)
    if bad:
        raise ValueError(f"{what}: hostname {_show(host)} contains whitespace or a "
                         f"non-printable or non-ASCII character {bad.group()!r}")
    raise ValueError(f"{what}: hostname {_show(host)} contains one of '[', ']' or ','")


def _diagnose_structure(text: str, match: re.Match[str]) -> ValueError:
    """Explain why the expression matched by *match* is not followed by ',' or the end."""
    end = match.end()
    where = f"invalid hostlist {_show(text)}"
    if text[end] == "]":
        return ValueError(f"{where}: unbalanced ']' at position {end}")
    # text[end] == "["
    if match.group(2) is not None:
        return ValueError(f"{where}: more than one '[...]' in one expression "
                          f"(second '[' at position {end})")
    close = text.find("]", end + 1)
    nested = text.find("[", end + 1)
    if close < 0:
        return ValueError(f"{where}: unbalanced '[' at position {end}")
    if 0 <= nested < close:
        return ValueError(f"{where}: nested '[' at position {nested}")
    return ValueError(f"{where}: '[' at position {end} is not closed before the next ','")


def _parse_idlist(text: str, ids: str) -> list[tuple[int, int, int]]:
    """Parse the inside of ``[...]`` into ``(lo, hi, width)`` triples or raise ValueError.

    RFC 29: leading zeros on the first id set the width of every id in the
    list (``[005,4]`` is 005,004).  An id that has its own leading zeros keeps
    its own width (``[0-9,015]``), which is how flux-core prints such lists.
    """
    where = f"invalid hostlist {_show(text)}"
    if ids == "":
        raise ValueError(f"{where}: empty '[]'")
    result: list[tuple[int, int, int]] = []
    list_width = 1
    for element in ids.split(","):
        match = _ID_ELEMENT.fullmatch(element)
        if match is None:
            if element == "":
                raise ValueError(f"{where}: empty id in '[{_show(ids)[1:-1]}]'")
            if "-" in element:
                raise ValueError(f"{where}: {_show(element)} is not a range 'lo-hi' of "
                                 "non-negative decimal ids")
            raise ValueError(f"{where}: {_show(element)} is not a non-negative decimal id")
        lo_text, hi_text = match.groups()
        if len(lo_text) > MAX_DIGITS or (hi_text is not None and len(hi_text) > MAX_DIGITS):
            raise ValueError(f"{where}: id in {_show(element)} has more than {MAX_DIGITS} digits")
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise ValueError(f"{where}: range {_show(element)} is descending")
        if hi - lo + 1 > MAX_RANGE:
            raise ValueError(f"{where}: range {_show(element)} has {hi - lo + 1} hosts, "
                             f"more than the maximum {MAX_RANGE}")
        if not result:
            list_width = _width_of(lo_text)
        width = len(lo_text) if _is_padded(lo_text) else list_width
        result.append((lo, hi, width))
    return result


class Hostlist:
    """An ordered list of hostnames (duplicates allowed) with RFC 29 encoding.

    ``Hostlist("node[1-3,5],login0")`` decodes a hostlist string;
    ``Hostlist(["node1", "node2"])`` takes hostnames one by one;
    ``Hostlist(other)`` copies another Hostlist.  ``str()`` gives the compact
    encoding, keeping order and zero padding.  Invalid input raises ValueError.
    """

    __slots__ = ("_count", "_encoded", "_lookup", "_runs", "_starts")

    # Mutable, so not hashable.
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __init__(self, text: HostlistLike = "") -> None:
        """Decode *text*: an RFC 29 string, an iterable of hostnames or a Hostlist."""
        self._runs: list[_Run] = []
        self._starts: list[int] = []  # index of the first host of each run
        self._count = 0
        self._encoded: str | None = None
        self._lookup: dict[str, int] | None = None
        if isinstance(text, Hostlist):
            self._runs = list(text._runs)
            self._starts = list(text._starts)
            self._count = text._count
            self._encoded = text._encoded
        elif isinstance(text, str):
            self._decode(text)
        else:
            self._extend_names(text, "Hostlist")

    # ----------------------------------------------------------------------
    # building

    def _add(self, run: _Run) -> None:
        """Append *run*, merging it into the last run when the hosts continue it."""
        runs = self._runs
        if runs and run.width:
            last = runs[-1]
            if (last.width and last.hi + 1 == run.lo and last.prefix == run.prefix
                    and last.suffix == run.suffix
                    and (last.width == run.width
                         or len(str(run.lo)) >= max(last.width, run.width))):
                runs[-1] = _new_run(last.prefix, last.suffix, last.lo, run.hi, last.width)
                self._count += run.hi - run.lo + 1
                return
        self._starts.append(self._count)
        runs.append(run)
        self._count += _run_len(run)

    def _push_host(self, host: str) -> None:
        """Append one (valid) hostname, choosing how it is split for good compression."""
        runs = self._runs
        if runs:
            prefix, suffix, lo, hi, width = last = runs[-1]
            if width:
                # Does the host continue the frame of the last run?  (Inlined
                # _middle_digits(): this is the hot path of long lists.)
                end = len(host) - len(suffix)
                if end > len(prefix) and host.startswith(prefix) and host.endswith(suffix):
                    middle = host[len(prefix):end]
                    if middle.isdigit() and len(middle) <= MAX_DIGITS:
                        value = int(middle)
                        if value == hi + 1 and (len(middle) == width or (
                                len(middle) > width and middle[0] != "0")):
                            runs[-1] = _new_run(prefix, suffix, lo, value, width)
                            self._count += 1
                            return
                        self._add(_make_run(prefix, suffix, value, value, _width_of(middle)))
                        return
            if width == 0 or lo == hi:
                frame = _shared_frame(_host(last, lo), host)
                if frame is not None:
                    prefix, suffix, old, new = frame
                    value = int(old)
                    # Same host, new split: lengths and starts are unchanged.
                    runs[-1] = _make_run(prefix, suffix, value, value, _width_of(old))
                    value = int(new)
                    self._add(_make_run(prefix, suffix, value, value, _width_of(new)))
                    return
        self._add(_default_run(host))

    def _decode(self, text: str) -> None:
        """Append the hosts of the RFC 29 string *text* or raise ValueError."""
        bad = _BAD_CHAR.search(text)
        if bad:
            raise ValueError(f"invalid hostlist {_show(text)}: whitespace or non-printable "
                             f"or non-ASCII character {bad.group()!r} at position "
                             f"{bad.start()}")
        if "[" not in text and "]" not in text:
            # No ranges at all, e.g. a long list of plain names: skip the regex.
            for name in text.split(","):
                if name:
                    self._push_host(name)
            return
        pos = 0
        size = len(text)
        while pos <= size:
            match = _EXPR.match(text, pos)
            assert match is not None  # every group is optional
            end = match.end()
            if end < size and text[end] != ",":
                raise _diagnose_structure(text, match)
            prefix, ids, suffix = match.groups()
            if ids is None:
                if prefix:
                    self._push_host(prefix)
            else:
                for lo, hi, width in _parse_idlist(text, ids):
                    self._add(_make_run(prefix, suffix, lo, hi, width))
            pos = end + 1

    def _extend_names(self, names: object, what: str) -> None:
        """Append hostnames from an iterable or raise ValueError."""
        if isinstance(names, (bytes, bytearray)) or not isinstance(names, Iterable):
            raise ValueError(f"{what}: expected a hostlist string, a Hostlist or an "
                             f"iterable of hostnames, got {type(names).__name__}")
        valid = _HOSTNAME.fullmatch
        for name in names:
            if not (isinstance(name, str) and valid(name)):
                _check_hostname(name, what)  # raises, naming the problem
            self._push_host(name)

    @staticmethod
    def _coerce(hosts: HostlistLike, what: str) -> Hostlist:
        """Return *hosts* as a Hostlist (itself if it already is one)."""
        if isinstance(hosts, Hostlist):
            return hosts
        result = Hostlist()
        if isinstance(hosts, str):
            result._decode(hosts)
        else:
            result._extend_names(hosts, what)
        return result

    def _take(self, other: Hostlist) -> None:
        """Replace this list's contents with those of *other* (a fresh list)."""
        self._runs = other._runs
        self._starts = other._starts
        self._count = other._count
        self._encoded = None
        self._lookup = None

    # ----------------------------------------------------------------------
    # encoding

    def __str__(self) -> str:
        """The compact RFC 29 encoding, e.g. ``"node[01-10],login0"``."""
        if self._encoded is None:
            self._encoded = self._encode()
        return self._encoded

    def _flux_runs(self) -> list[_Run]:
        """The runs as flux-core frames the hosts: the number is a trailing digit run.

        Runs with a suffix (``foo[1-3]-bar``, kept so decoding stays small)
        are split host by host, so ``foo1-bar`` is written as it is and
        ``a1b2,a2b2,a2b3`` as ``a1b2,a2b[2-3]``, which is what flux-core writes.
        """
        runs = self._runs
        if all(run.width == 0 or not run.suffix for run in runs):
            return runs
        framed = Hostlist()
        for run in runs:
            if run.width and run.suffix:
                for host in _iter_run(run):
                    framed._add(_trailing_run(host))
            else:
                framed._add(run)
        return framed._runs

    def _encode(self) -> str:
        """Build the encoding: neighbouring runs of one frame share a ``[...]``."""
        out: list[str] = []
        runs = self._flux_runs()
        i = 0
        while i < len(runs):
            run = runs[i]
            i += 1
            if run.width == 0:
                out.append(run.prefix)
                continue
            first = str(run.lo).zfill(run.width)
            if run.lo == run.hi and not (i < len(runs) and _same_group(first, run, runs[i])):
                out.append(run.prefix + first + run.suffix)
                continue
            elements = _elements(run)
            while (i < len(runs) and len(elements) < _MAX_GROUP
                   and _same_group(first, run, runs[i])):
                elements += _elements(runs[i])
                i += 1
            out.append(f"{run.prefix}[{','.join(elements)}]{run.suffix}")
        return ",".join(out)

    def __repr__(self) -> str:
        """``Hostlist('node[1-3]')``."""
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[type[Hostlist], tuple[str]]:
        """Pickle as the encoded string."""
        return (Hostlist, (str(self),))

    # ----------------------------------------------------------------------
    # sequence protocol

    def __len__(self) -> int:
        """Number of hosts, duplicates included."""
        return self._count

    def __iter__(self) -> Iterator[str]:
        """The hosts in order."""
        for run in self._runs:
            yield from _iter_run(run)

    def _iter_from(self, index: int) -> Iterator[str]:
        """The hosts from position *index* (``0 <= index <= len``) on."""
        k = bisect_right(self._starts, index) - 1
        if k < 0:
            return
        yield from _iter_run(self._runs[k], index - self._starts[k])
        for run in self._runs[k + 1:]:
            yield from _iter_run(run)

    def _nth(self, index: int) -> str:
        """Host at position *index*, which must be in range."""
        k = bisect_right(self._starts, index) - 1
        run = self._runs[k]
        return _host(run, run.lo + index - self._starts[k])

    @overload
    def __getitem__(self, index: SupportsIndex) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Hostlist: ...

    def __getitem__(self, index: SupportsIndex | slice) -> str | Hostlist:
        """``x[i]`` is a host (negative counts from the end); ``x[a:b:c]`` a Hostlist."""
        if isinstance(index, slice):
            return self._slice(index)
        try:
            i = operator.index(index)
        except TypeError:
            raise ValueError(f"Hostlist index must be an integer or a slice, "
                             f"got {type(index).__name__}") from None
        n = self._count
        if not -n <= i < n:
            raise IndexError(f"Hostlist index {i} out of range for {n} hosts")
        return self._nth(i + n if i < 0 else i)

    def _slice(self, index: slice) -> Hostlist:
        """Hosts selected by a slice, as a new Hostlist."""
        try:
            start, stop, step = index.indices(self._count)
        except TypeError:
            raise ValueError("Hostlist slice indices must be integers or None") from None
        result = Hostlist()
        if step != 1:
            for i in range(start, stop, step):
                result._push_host(self._nth(i))
            return result
        if start >= stop:
            return result
        k = bisect_right(self._starts, start) - 1
        runs, starts = self._runs, self._starts
        while k < len(runs) and starts[k] < stop:
            run = runs[k]
            if run.width == 0:
                result._add(run)
            else:
                lo = run.lo + max(start - starts[k], 0)
                hi = run.lo + min(stop - starts[k], _run_len(run)) - 1
                result._add(_make_run(run.prefix, run.suffix, lo, hi, run.width))
            k += 1
        return result

    def __eq__(self, other: object) -> bool:
        """Two Hostlists are equal if they hold the same hosts in the same order."""
        if not isinstance(other, Hostlist):
            return NotImplemented
        if self._count != other._count:
            return False
        if self._runs == other._runs:
            return True
        return all(a == b for a, b in zip(self, other, strict=True))

    # ----------------------------------------------------------------------
    # searching

    def _find(self, host: str) -> int:
        """Index of the first *host* (a valid hostname), or -1."""
        if self._lookup is None:
            if len(self._runs) <= 8:
                # Few runs: scanning them beats building a dict of every host.
                for start, run in zip(self._starts, self._runs, strict=True):
                    offset = _offset_in_run(run, host)
                    if offset >= 0:
                        return start + offset
                return -1
            lookup: dict[str, int] = {}
            for i, name in enumerate(self):
                lookup.setdefault(name, i)
            self._lookup = lookup
        return self._lookup.get(host, -1)

    def find(self, host: str) -> int:
        """Index of the first occurrence of *host*, or -1 if it is not in the list.

        Raises ValueError if *host* is not a single valid hostname.
        """
        return self._find(_check_hostname(host, "Hostlist.find"))

    def __contains__(self, host: object) -> bool:
        """``host in x``: False for anything that is not a hostname in the list."""
        if not isinstance(host, str) or not _HOSTNAME.fullmatch(host):
            return False
        return self._find(host) >= 0

    def index(self, hosts: HostlistLike) -> list[int]:
        """Indexes of the first occurrence of each host named in *hosts*, in order.

        *hosts* is a hostlist string (``"n[1-2]"``), hostnames or a Hostlist.
        Raises ValueError naming the hosts that are not in the list.
        """
        wanted = self._coerce(hosts, "Hostlist.index")
        result: list[int] = []
        missing = Hostlist()
        for host in wanted:
            i = self._find(host)
            if i < 0:
                missing._push_host(host)
            else:
                result.append(i)
        if missing:
            missing.uniq()
            raise ValueError(f"Hostlist.index: not in the hostlist: {_show(str(missing))}")
        return result

    # ----------------------------------------------------------------------
    # changing

    def append(self, hosts: HostlistLike) -> int:
        """Add the hosts of *hosts* (string, hostnames or Hostlist) at the end.

        Returns the number of hosts added.  On ValueError nothing is added.
        """
        other = self._coerce(hosts, "Hostlist.append")
        before = self._count
        for run in list(other._runs):  # a copy: x.append(x) must not loop forever
            self._add(run)
        self._encoded = None
        if self._lookup is not None:
            lookup = self._lookup
            for i, name in enumerate(self._iter_from(before), start=before):
                lookup.setdefault(name, i)
        return self._count - before

    def delete(self, hosts: HostlistLike) -> int:
        """Remove every occurrence of each host named in *hosts*; return how many went."""
        targets = set(self._coerce(hosts, "Hostlist.delete"))
        if not targets or not self._count:
            return 0
        result = Hostlist()
        removed = 0
        for run in self._runs:
            if run.width == 0:
                if run.prefix in targets:
                    removed += 1
                else:
                    result._add(run)
                continue
            # Cost min(run length, number of targets) per run: linear overall.
            if _run_len(run) <= len(targets):
                hits = [v for v in range(run.lo, run.hi + 1) if _host(run, v) in targets]
            else:
                offsets = {_offset_in_run(run, host) for host in targets}
                offsets.discard(-1)
                hits = sorted(run.lo + offset for offset in offsets)
            if not hits:
                result._add(run)
                continue
            removed += len(hits)
            lo = run.lo
            for value in hits:
                if value > lo:
                    result._add(_make_run(run.prefix, run.suffix, lo, value - 1, run.width))
                lo = value + 1
            if lo <= run.hi:
                result._add(_make_run(run.prefix, run.suffix, lo, run.hi, run.width))
        if removed:
            self._take(result)
        return removed

    def _sorted_hosts(self) -> list[_Run]:
        """Every host as a one-host run (in its run's frame), in natural order."""
        entries = [(_natural_key(name), k, offset)
                   for k, run in enumerate(self._runs)
                   for offset, name in enumerate(_iter_run(run))]
        entries.sort()
        result: list[_Run] = []
        for _, k, offset in entries:
            run = self._runs[k]
            value = run.lo + offset
            result.append(run if run.width == 0
                          else _make_run(run.prefix, run.suffix, value, value, run.width))
        return result

    def _sorted(self, unique: bool) -> None:
        """Sort hosts in natural order, dropping repeats if *unique*."""
        runs = self._runs
        # Hosts within a run are already in order, so when the runs, sorted
        # by their first host, do not overlap, ordering the runs is enough.
        firsts = [_natural_key(_host(run, run.lo)) for run in runs]
        order = sorted(range(len(runs)), key=firsts.__getitem__)
        sequence: list[_Run] = [runs[k] for k in order]
        previous_last = ""
        for k in order:
            if firsts[k] < previous_last:
                sequence = self._sorted_hosts()
                break
            run = runs[k]
            previous_last = firsts[k] if run.lo == run.hi else _natural_key(_host(run, run.hi))
        result = Hostlist()
        last_host: str | None = None
        for piece in sequence:
            run = piece
            first = _host(run, run.lo)
            single = run.width == 0 or run.lo == run.hi
            # Sorted, so a repeat can only be the first host of the next run.
            if unique and first == last_host:
                if single:
                    continue
                run = _make_run(run.prefix, run.suffix, run.lo + 1, run.hi, run.width)
                single = run.lo == run.hi
                first = _host(run, run.lo)
            if single:
                # A lone host may fit its new neighbours better in another split.
                result._push_host(first)
                last_host = first
            else:
                result._add(run)
                last_host = _host(run, run.hi)
        self._take(result)

    def sort(self) -> None:
        """Sort in natural order: text by text, numbers by value (``n9`` before ``n10``).

        As in flux-core, a zero-padded number sorts after every number written
        with fewer digits: ``n1``, ``n2``, ``n01``.
        """
        self._sorted(unique=False)

    def uniq(self) -> None:
        """Sort in natural order (see :meth:`sort`) and drop repeated hosts."""
        self._sorted(unique=True)

    def copy(self) -> Hostlist:
        """An independent copy."""
        return Hostlist(self)

    def __copy__(self) -> Hostlist:
        """Support :func:`copy.copy`."""
        return Hostlist(self)

    def __deepcopy__(self, memo: dict[int, object]) -> Hostlist:
        """Support :func:`copy.deepcopy` (runs are immutable, so a copy is deep)."""
        return Hostlist(self)
