"""resource-query's inspection commands on a graph: ``find``, statuses and properties (pure).

``find EXPR`` selects vertices by predicates joined with ``and`` / ``or``
(``and`` binds tighter), as Fluxion's ``find`` does:

* ``status=up`` / ``status=down``;
* ``sched-now=allocated`` / ``sched-now=free``: an allocation touches the
  vertex (or not);
* ``sched-future=reserved`` / ``sched-future=free``: a reservation does;
* ``type=T``, ``name=N``, ``rank=R``, ``property=KEY`` (or ``KEY=VALUE``).

A selection is shown with its ancestors (as a match is), each vertex as
``name[size:s]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.state import GraphState

__all__ = ["STATUSES", "find", "set_status"]

#: Vertex statuses ``set-status`` knows.
STATUSES: Final = ("up", "down")

Pred = Callable[[int], bool]


def _predicate(g: ResourceGraph, st: GraphState, term: str) -> Pred:
    """One ``key=value`` term as a predicate on vertices; ValueError if unknown."""
    key, sep, value = term.partition("=")
    if not sep or not value:
        raise ValueError(f"find: {term!r} is not KEY=VALUE")
    if key == "status" and value in STATUSES:
        want_down = value == "down"
        return lambda v: st.down[v] == want_down
    if key == "sched-now" and value in ("allocated", "free"):
        want = value == "allocated"
        return lambda v: bool(st.holds[v]) == want
    if key == "sched-future" and value in ("reserved", "free"):
        want = value == "reserved"
        return lambda v: bool(st.resv.get(v)) == want
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
    raise ValueError(f"find: unknown predicate {term!r} (status=up|down, "
                     "sched-now=allocated|free, sched-future=reserved|free, type=, name=, "
                     "rank=, property=)")


def find(g: ResourceGraph, st: GraphState, expr: str) -> dict[int, tuple[int, bool]]:
    """The vertices *expr* selects, with their ancestors, as a listing (size, shared)."""
    words = expr.replace("(", " ").replace(")", " ").split()
    if not words:
        raise ValueError("find: an expression is required")
    alternatives: list[list[Pred]] = [[]]
    expect_term = True
    for word in words:
        if expect_term:
            alternatives[-1].append(_predicate(g, st, word))
        elif word == "or":
            alternatives.append([])
        elif word != "and":
            raise ValueError(f"find: expected 'and' or 'or', got {word!r}")
        expect_term = not expect_term
    if expect_term:
        raise ValueError("find: the expression ends with an operator")
    shown: dict[int, tuple[int, bool]] = {}
    for v in range(len(g)):
        if any(all(p(v) for p in preds) for preds in alternatives):
            shown[v] = (g.sizes[v], False)
            u = g.parent[v]
            while u >= 0 and u not in shown:
                shown[u] = (g.sizes[u], False)
                u = g.parent[u]
    return shown


def set_status(st: GraphState, v: int, status: str) -> None:
    """Mark vertex *v* (with its subtree) up or down: a vertex down is never matched."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r} (expected up or down)")
    st.set_down(v, status == "down")
