"""RFC 31 job constraints: which execution targets a job may run on.

A constraint is a JSON object with one operator whose value is a list:
``{"properties": ["ssd", "^slowgpu"]}``, ``{"hostlist": ["node[0-3]"]}``,
``{"ranks": ["0-7"]}``, or ``{"and"|"or"|"not": [constraint, ...]}``.
:func:`parse` turns one into an immutable, hashable :class:`Constraint`
whose :meth:`~Constraint.match_ranks` evaluates it against a
:class:`~fluxes.formats.rset.ResourceSet` with idset algebra (no per-rank loop).
See ``docs/formats/constraints.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet, check_property_name
from fluxes.formats.shown import shown as _show

__all__ = ["MAX_DEPTH", "OPERATORS", "Constraint", "and_properties", "parse"]

#: Deepest nesting of constraint objects accepted; deeper input is refused
#: so that evaluation, hashing and printing cannot exhaust the stack.
MAX_DEPTH = 64

#: The operators RFC 31 defines.
OPERATORS = ("properties", "hostlist", "ranks", "and", "or", "not")

_LOGICAL = ("and", "or", "not")

# A path in a message keeps its first and last few levels around "...":
# 64 levels written out would fill several screen lines.
_PATH_HEAD = 3
_PATH_TAIL = 4


class Constraint:
    """A parsed RFC 31 constraint; build one with :func:`parse`.

    Constraints are immutable.  Two constraints that parse to the same
    normal form (properties sorted and de-duplicated, hostlists and idsets
    re-encoded canonically) compare equal and hash alike, so they can key
    a cache of match results.
    """

    __slots__ = ("_hash", "_hosts", "_ids", "args", "op")

    op: str
    args: tuple[Any, ...]
    _hosts: Hostlist | None
    _ids: IDSet | None
    _hash: int

    def __init__(self, op: str, args: tuple[Any, ...],
                 hosts: Hostlist | None = None, ids: IDSet | None = None) -> None:
        """Internal: use :func:`parse`.

        *args* is the normal form: ``((name, negated), ...)`` for properties,
        ``(hostlist_text,)`` for hostlist, ``(idset_text,)`` for ranks and a
        tuple of Constraints for and/or/not.
        """
        if op not in OPERATORS:
            raise ValueError(f"constraint: unknown operator {_show(op)}")
        if op == "ranks" and ids is None:
            ids = IDSet(args[0])
        if op == "hostlist" and hosts is None:
            hosts = Hostlist(args[0])
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "_hosts", hosts)
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_hash", hash((op, args)))

    def __setattr__(self, name: str, value: object) -> None:
        """Constraints are immutable."""
        raise AttributeError("Constraint is immutable")

    def __eq__(self, other: object) -> bool:
        """Same operator and same normalized values."""
        if not isinstance(other, Constraint):
            return NotImplemented
        return self._hash == other._hash and self.op == other.op and self.args == other.args

    def __hash__(self) -> int:
        """Hash of the normal form."""
        return self._hash

    def __repr__(self) -> str:
        """``Constraint({'properties': ['gpu']})``."""
        return f"Constraint({self.to_dict()!r})"

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickle and copy through the normal form."""
        return (parse, (self.to_dict(),))

    # -- output ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The normal form as an RFC 31 object (``parse(c.to_dict()) == c``)."""
        if self.op == "properties":
            return {"properties": [("^" if neg else "") + name for name, neg in self.args]}
        if self.op in ("hostlist", "ranks"):
            return {self.op: [self.args[0]] if self.args[0] else []}
        return {self.op: [child.to_dict() for child in self.args]}

    def __str__(self) -> str:
        """Short human form: ``[gpu&^login]``, ``hostlist=node[0-3]``, ``ranks=0-7``.

        ``&``, ``|`` and ``!`` stand for and, or and not; ``all`` matches
        everything, ``none`` nothing.
        """
        op = self.op
        if op == "properties":
            if not self.args:
                return "all"
            return "[" + "&".join(("^" if neg else "") + n for n, neg in self.args) + "]"
        if op in ("hostlist", "ranks"):
            return f"{op}={self.args[0]}"
        if op == "not":
            if not self.args:
                return "none"
            if len(self.args) == 1:
                only: Constraint = self.args[0]
                return "!" + only._operand()
            return "!(" + "&".join(c._operand() for c in self.args) + ")"
        if not self.args:
            return "all"
        if len(self.args) == 1:
            return str(self.args[0])
        sep = "&" if op == "and" else "|"
        return sep.join(c._operand() for c in self.args)

    def _operand(self) -> str:
        """str(self), parenthesized when it joins several terms with & or |."""
        text = str(self)
        if self.op in ("and", "or") and len(self.args) > 1:
            return f"({text})"
        return text

    # -- evaluation --------------------------------------------------------------

    def match_ranks(self, rset: ResourceSet) -> IDSet:
        """The ranks of *rset* whose execution targets satisfy this constraint."""
        if not isinstance(rset, ResourceSet):
            raise ValueError(f"match_ranks: expected a ResourceSet, got {type(rset).__name__}")
        return self._eval(rset, rset.ranks)

    def _eval(self, rset: ResourceSet, every: IDSet) -> IDSet:
        """Matching ranks, as a new IDSet; *every* is all ranks of *rset* (read-only)."""
        op = self.op
        if op == "properties":
            result = every.copy()
            for name, negated in self.args:
                if not result:
                    break
                having = rset.ranks_with_property(name) | _ranks_named(rset, name)
                if negated:
                    result -= having
                else:
                    result &= having
            return result
        if op == "ranks" and self._ids is not None:
            return every & self._ids
        if op == "hostlist" and self._hosts is not None:
            if not self._hosts or not rset.has_hostnames:
                return IDSet()
            return rset.ranks_for_hosts(self._hosts, ignore_unknown=True)
        if op == "or":
            if not self.args:
                return every.copy()
            result = IDSet()
            for child in self.args:
                result |= child._eval(rset, every)
                if len(result) == len(every):
                    break
            return result
        # "and", and "not" which RFC 31 and flux-core read as "not all of".
        result = every.copy()
        for child in self.args:
            if not result:
                break
            result &= child._eval(rset, every)
        return every - result if op == "not" else result


def _ranks_named(rset: ResourceSet, name: str) -> IDSet:
    """Ranks whose hostname is exactly *name*: a host's name is one of its properties.

    flux-core matches ``{"properties": ["foo5"]}`` on host foo5 (and
    ``^foo5`` on every other host), so fluxes does too.  A name that cannot
    be a single hostname (``n[1-2]``, ``a,b``) names no host.
    """
    if not rset.has_hostnames:
        return IDSet()
    try:
        host = Hostlist([name])
    except ValueError:
        return IDSet()
    return rset.ranks_for_hosts(host, ignore_unknown=True)


# -- parsing -----------------------------------------------------------------------


def parse(obj: Mapping[str, Any] | str | bytes | Constraint) -> Constraint:
    """Parse an RFC 31 constraint from a dict or JSON text.

    ``{}`` is accepted (as flux-core does) and matches everything, like
    ``{"and": []}``.  Bad input raises ValueError naming the place, e.g.
    ``constraint.and[1]: unknown operator 'foo'``.
    """
    if isinstance(obj, Constraint):
        return obj
    value: object = obj
    if isinstance(obj, (str, bytes, bytearray, memoryview)):
        try:
            value = orjson.loads(obj)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"constraint: invalid JSON: {exc}") from None
    return _parse(value, ("constraint",), 1)


def _path(segments: tuple[str, ...]) -> str:
    """``("constraint", ".and[0]", ".not[1]")`` -> ``"constraint.and[0].not[1]"``.

    A deep path keeps its first and last levels with ``...`` between
    (``constraint.not[0].not[0]...not[0].properties[0]``), so that a message
    stays one readable line; the tail still names the exact place.
    """
    if len(segments) <= _PATH_HEAD + _PATH_TAIL + 1:
        return "".join(segments)
    head = "".join(segments[:_PATH_HEAD])
    tail = "".join(segments[-_PATH_TAIL:])
    return f"{head}...{tail.removeprefix('.')}"


def _parse(obj: object, segments: tuple[str, ...], depth: int) -> Constraint:
    """Parse one constraint object found at path *segments*, *depth* levels down."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{_path(segments)}: constraints nested more than {MAX_DEPTH} "
                         "levels deep")
    if not isinstance(obj, Mapping):
        raise ValueError(f"{_path(segments)}: expected an object, got {type(obj).__name__}")
    if not obj:
        return Constraint("and", ())
    if len(obj) > 1:
        names = ", ".join(_show(k, 20) for k in obj)
        raise ValueError(f"{_path(segments)}: expected exactly one operator, "
                         f"got {len(obj)} ({names})")
    ((op, values),) = obj.items()
    if op not in OPERATORS:
        raise ValueError(f"{_path(segments)}: unknown operator {_show(op)} "
                         f"(expected one of {', '.join(OPERATORS)})")
    if not isinstance(values, list | tuple):
        raise ValueError(f"{_path(segments)}: value of {op!r} must be a list, "
                         f"got {type(values).__name__}")

    def item(i: int) -> tuple[str, ...]:
        return (*segments, f".{op}[{i}]")

    leaf = _LEAVES.get(op)
    if leaf is not None:
        return leaf(values, item)
    children = tuple(_parse(value, item(i), depth + 1) for i, value in enumerate(values))
    return Constraint(op, children)


def _parse_properties(values: Sequence[object],
                      item: Callable[[int], tuple[str, ...]]) -> Constraint:
    """The ``properties`` operator's list."""
    props: set[tuple[str, bool]] = set()
    for i, value in enumerate(values):
        props.add(_parse_property(value, _path(item(i))))
    return Constraint("properties", tuple(sorted(props)))


def _parse_ranks(values: Sequence[object], item: Callable[[int], tuple[str, ...]]) -> Constraint:
    """The ``ranks`` operator's list of idset strings (or single ranks as integers).

    RFC 31 asks for values "compatible with" RFC 22 idsets; flux also takes a
    bare integer rank (``{"ranks": [0]}``), so fluxes does too.
    """
    ids = IDSet()
    for i, raw in enumerate(values):
        value = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
        if not isinstance(value, str):
            raise ValueError(f"{_path(item(i))}: expected an idset string or a rank, "
                             f"got {type(value).__name__}")
        try:
            ids |= IDSet(value)
        except ValueError as exc:
            raise ValueError(f"{_path(item(i))}: {exc}") from None
    return Constraint("ranks", (ids.encode(),), ids=ids)


def _parse_hostlist(values: Sequence[object],
                    item: Callable[[int], tuple[str, ...]]) -> Constraint:
    """The ``hostlist`` operator's list of hostlist strings."""
    parts: list[str] = []
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{_path(item(i))}: expected a hostlist string, "
                             f"got {type(value).__name__}")
        try:
            text = str(Hostlist(value))
        except ValueError as exc:
            raise ValueError(f"{_path(item(i))}: {exc}") from None
        if text:
            parts.append(text)
    hosts = Hostlist(",".join(parts))
    return Constraint("hostlist", (str(hosts),), hosts=hosts)


#: operators whose list holds values rather than nested constraints
_LEAVES: dict[str, Callable[[Sequence[object], Callable[[int], tuple[str, ...]]], Constraint]] = {
    "properties": _parse_properties,
    "ranks": _parse_ranks,
    "hostlist": _parse_hostlist,
}


def _parse_property(value: object, where: str) -> tuple[str, bool]:
    """``"ssd"`` -> ("ssd", False); ``"^ssd"`` -> ("ssd", True)."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: property name must be a string, got {type(value).__name__}")
    negated = value.startswith("^")
    name = value[1:] if negated else value
    return check_property_name(name, where), negated


def and_properties(constraint: Mapping[str, Any] | str | None,
                   props: Sequence[str]) -> dict[str, Any]:
    """The logical AND of *constraint* and ``{"properties": props}`` (RFC 33 ``requires``).

    As RFC 33 asks, when *constraint* is itself a ``properties`` constraint
    the new names are appended to its list; otherwise the two are joined
    under ``and`` (extending an existing top-level ``and``).  The input is
    not modified.  ValueError if either part is invalid.
    """
    if isinstance(props, str) or not isinstance(props, Sequence):
        raise ValueError("and_properties: props must be a list of property names")
    for i, value in enumerate(props):
        _parse_property(value, f"and_properties: props[{i}]")
    base: dict[str, Any] = {}
    if constraint is not None:
        if isinstance(constraint, str):
            try:
                loaded = orjson.loads(constraint)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"constraint: invalid JSON: {exc}") from None
        else:
            loaded = constraint
        parse(loaded)
        base = copy.deepcopy(dict(loaded))
    names = list(props)
    if not names:
        return base
    if not base:
        return {"properties": names}
    if "properties" in base:
        current = list(base["properties"])
        return {"properties": current + [p for p in names if p not in current]}
    if "and" in base:
        return {"and": [*base["and"], {"properties": names}]}
    return {"and": [base, {"properties": names}]}
