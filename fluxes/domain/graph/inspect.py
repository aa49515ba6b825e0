"""resource-query's inspection commands on a graph: ``find``, statuses and properties (pure).

``find EXPR`` selects vertices by predicates joined with ``and`` / ``or``
(``and`` binds tighter, and is implied between adjacent terms; parentheses
group), as Fluxion's ``find`` does:

* ``status=up`` / ``status=down``;
* ``sched-now=allocated`` / ``sched-now=free``: an allocation takes units of
  the vertex, one its jobspec named (one only passed through, as a rack
  above a job's node, or only closed below an exclusive vertex, is free,
  as in Fluxion's planners);
* ``sched-future=reserved`` / ``sched-future=free``: a reservation does;
* ``type=T``, ``name=N``, ``names=HOSTLIST`` (``core[0-3]``), ``rank=R``,
  ``property=KEY`` (or ``KEY=VALUE``);
* ``jobid-alloc=J`` / ``jobid-span=J``: allocation J takes units of it;
  ``jobid-reserved=J``: reservation J does; ``jobid-tag=J``: job J touches it.

Predicate values are read in any case (``status=UP``).  A selection is
shown with its ancestors (as a match is), in the session's format, every
vertex as Fluxion's ``find`` prints it: ``name[size:x]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.state import GraphState, Hold
from fluxes.formats.hostlist import Hostlist

__all__ = ["STATUSES", "find", "set_status"]

#: Vertex statuses ``set-status`` knows.
STATUSES: Final = ("up", "down")

Pred = Callable[[int], bool]


class _Index:
    """Per vertex, the jobs taking units of it now (allocations) or later
    (reservations), and the jobs touching it at all: what Fluxion's planners and
    tags hold (a vertex only closed below an exclusive one, or passed through, has
    no span)."""

    def __init__(self, jobs: Iterable[Hold]) -> None:
        self.now: dict[int, set[int]] = {}
        self.later: dict[int, set[int]] = {}
        self.tags: dict[int, set[int]] = {}
        for hold in jobs:
            spans = self.later if hold.reserved else self.now
            for v, amount in hold.amounts.items():
                if amount:
                    spans.setdefault(v, set()).add(hold.jobid)
            for v in hold.shown:
                self.tags.setdefault(v, set()).add(hold.jobid)


def _predicate(g: ResourceGraph, st: GraphState, ix: _Index, term: str) -> Pred:
    """One ``key=value`` term as a predicate on vertices; ValueError if unknown."""
    key, sep, value = term.partition("=")
    if not sep or not value:
        raise ValueError(f"find: invalid criteria: {term!r} is not KEY=VALUE")
    lower = value.lower()
    if key == "status" and lower in STATUSES:
        want_down = lower == "down"
        return lambda v: st.down[v] == want_down
    if key == "sched-now" and lower in ("allocated", "free"):
        want = lower == "allocated"
        return lambda v: (v in ix.now) == want
    if key == "sched-future" and lower in ("reserved", "free"):
        want = lower == "reserved"
        return lambda v: (v in ix.later) == want
    if key.startswith("jobid-"):
        return _jobid_predicate(ix, key, value)
    if key == "names":
        try:
            names = frozenset(Hostlist(value))
        except ValueError as exc:
            raise ValueError(f"find: invalid criteria: names={value!r}: {exc}") from None
        return lambda v: g.names[v] in names
    if key == "type":
        return lambda v: g.types[v] == value
    if key == "name":
        return lambda v: g.names[v] == value
    if key == "rank":
        try:
            rank = int(value)
        except ValueError:
            raise ValueError(f"find: rank={value!r} is not a number") from None
        return lambda v: g.rank_of(v) == rank
    if key == "property":
        name, _, val = value.partition("=")
        return lambda v: name in (g.props[v] or {}) and (
            not val or (g.props[v] or {}).get(name) == val)
    raise ValueError(f"find: invalid criteria: unknown predicate {term!r} (status=up|down, "
                     "sched-now=allocated|free, sched-future=reserved|free, type=, name=, "
                     "names=, jobid-alloc=, jobid-span=, jobid-tag=, jobid-reserved=, "
                     "rank=, property=)")


def _parse(g: ResourceGraph, st: GraphState, ix: _Index, tokens: list[str]) -> Pred:
    """The predicate of a tokenized expression: ``or`` binds loosest, then ``and``
    (also implied between adjacent terms), then parentheses."""
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def alternatives() -> Pred:
        nonlocal pos
        parts = [conjunction()]
        while peek() == "or":
            pos += 1
            parts.append(conjunction())
        return parts[0] if len(parts) == 1 else lambda v: any(p(v) for p in parts)

    def conjunction() -> Pred:
        nonlocal pos
        parts = [factor()]
        while peek() not in (None, "or", ")"):
            if peek() == "and":
                pos += 1
            parts.append(factor())
        return parts[0] if len(parts) == 1 else lambda v: all(p(v) for p in parts)

    def factor() -> Pred:
        nonlocal pos
        word = peek()
        if word is None or word in ("and", "or", ")"):
            raise ValueError("find: invalid criteria: expected a predicate"
                             + ("" if word is None else f", got {word!r}"))
        pos += 1
        if word != "(":
            return _predicate(g, st, ix, word)
        inner = alternatives()
        if peek() != ")":
            raise ValueError("find: invalid criteria: unbalanced parentheses")
        pos += 1
        return inner

    pred = alternatives()
    if pos != len(tokens):
        raise ValueError(f"find: invalid criteria: unexpected {tokens[pos]!r}")
    return pred


def _jobid_predicate(ix: _Index, key: str, value: str) -> Pred:
    """``jobid-alloc=J`` / ``jobid-span=J`` (allocation J takes units of the vertex),
    ``jobid-reserved=J`` (reservation J does), ``jobid-tag=J`` (job J touches it)."""
    try:
        jobid = int(value)
    except ValueError:
        raise ValueError(f"find: invalid criteria: {key}={value!r} is not a job id") from None
    empty: frozenset[int] = frozenset()
    if key in ("jobid-alloc", "jobid-span"):
        return lambda v: jobid in ix.now.get(v, empty)
    if key == "jobid-reserved":
        return lambda v: jobid in ix.later.get(v, empty)
    if key == "jobid-tag":
        return lambda v: jobid in ix.tags.get(v, empty)
    raise ValueError(f"find: invalid criteria: unknown predicate {key}")


def find(g: ResourceGraph, st: GraphState, expr: str, jobs: Iterable[Hold] = ()
         ) -> dict[int, tuple[int, bool]]:
    """The vertices *expr* selects, with their ancestors, as a listing (size, exclusive);
    *jobs*: the allocations and reservations held (for ``sched-*`` and ``jobid-*``)."""
    tokens = expr.replace("(", " ( ").replace(")", " ) ").split()
    if not tokens:
        raise ValueError("find: an expression is required")
    pred = _parse(g, st, _Index(jobs), tokens)
    shown: dict[int, tuple[int, bool]] = {}
    for v in range(len(g)):
        if pred(v):
            shown[v] = (g.sizes[v], True)
            u = g.parent[v]
            while u >= 0 and u not in shown:
                shown[u] = (g.sizes[u], True)
                u = g.parent[u]
    return shown


def set_status(st: GraphState, v: int, status: str) -> None:
    """Mark vertex *v* (with its subtree) up or down: a vertex down is never matched."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r} (expected up or down)")
    st.set_down(v, status == "down")
