"""What a match gives back: the RFC 20 R (with its ``scheduling`` subgraph) and the text forms.

* :func:`rset_of` builds R from a :class:`~fluxes.domain.graph.state.Hold`: the
  cores and gpus per host rank (their ``id``\\ s), the hosts' names as
  ``nodelist``, their properties, ``starttime`` / ``expiration``; with
  ``scheduling=True`` the result is a :class:`GraphR`, whose
  :meth:`~GraphR.encode` adds the JGF of every vertex the job touches
  (``size`` = the units held, ``exclusive``), which is what a restarted
  scheduler reads back;
* :func:`simple_lines` / :func:`pretty_lines`: Fluxion's ``simple`` and
  ``pretty_simple`` listings: each vertex as 6 spaces, 3 dashes per depth
  (the root at depth 1) and ``name[amount:x]`` (exclusive) or
  ``name[amount:s]`` (shared), the deepest vertices of a branch before their
  parent (``simple``), or the root first with ``exclusive``/``shared``
  spelled out (``pretty_simple``).
"""

from __future__ import annotations

from typing import Any

from fluxes.domain.graph.jgf import subgraph
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.state import Hold
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet, check_property_name

__all__ = ["GraphR", "pretty_lines", "rset_of", "simple_lines"]


class GraphR(ResourceSet):
    """An R that also carries RFC 20's ``scheduling`` key (a JGF subgraph)."""

    __slots__ = ("scheduling",)

    scheduling: dict[str, Any] | None

    def encode(self) -> dict[str, Any]:
        """The R document, with ``scheduling`` when this set carries one."""
        doc = super().encode()
        graph = getattr(self, "scheduling", None)
        if graph is not None:
            doc["scheduling"] = graph
        return doc

    def copy(self) -> ResourceSet:
        """An independent copy that keeps the scheduling subgraph."""
        out = super().copy()
        if isinstance(out, GraphR):
            out.scheduling = getattr(self, "scheduling", None)
        return out


def _ranks(g: ResourceGraph, hold: Hold) -> dict[int, tuple[list[int], list[int]]]:
    """rank -> (core ids, gpu ids) the hold takes."""
    out: dict[int, tuple[list[int], list[int]]] = {}
    types, ids = g.types, g.ids
    for v, amount in hold.amounts.items():
        if not amount:
            continue
        t = types[v]
        if t not in {"core", "gpu"}:
            continue
        rank = g.rank_of(v)
        if rank < 0:
            continue
        pair = out.get(rank)
        if pair is None:
            pair = out[rank] = ([], [])
        (pair[0] if t == "core" else pair[1]).append(ids[v])
    return out


def rset_of(g: ResourceGraph, hold: Hold, scheduling: bool = False) -> ResourceSet:
    """The R of *hold* (a :class:`GraphR` with the subgraph when *scheduling*)."""
    per_rank = _ranks(g, hold)
    ranks = {r: (IDSet(c), IDSet(gp)) for r, (c, gp) in per_rank.items()}
    hosts = {r: g.names[g.rank_host[r]] for r in ranks}
    props: dict[str, list[int]] = {}
    for r in ranks:
        for name in g.props[g.rank_host[r]] or ():
            try:
                check_property_name(name)
            except ValueError:
                continue  # graph properties need not be R property names
            props.setdefault(name, []).append(r)
    start = hold.start
    end = None if hold.end == float("inf") else hold.end
    try:
        rset = ResourceSet.from_ranks(ranks, hostnames=hosts or None,
                                      properties={k: IDSet(v) for k, v in props.items()},
                                      starttime=start, expiration=end)
    except ValueError:
        # vertex names that are no valid hostnames: R without a nodelist
        rset = ResourceSet.from_ranks(ranks, starttime=start, expiration=end)
    if not scheduling:
        return rset
    out = GraphR.__new__(GraphR)
    for slot in ResourceSet.__slots__:
        setattr(out, slot, getattr(rset, slot))
    out.scheduling = subgraph(g, hold.shown)
    return out


def _post_order(g: ResourceGraph, shown: dict[int, tuple[int, bool]]) -> list[int]:
    """The shown vertices, each after its shown descendants (children in graph order)."""
    out: list[int] = []
    stack: list[int] = []
    end = g.end
    for v in sorted(shown):
        while stack and v >= end[stack[-1]]:
            out.append(stack.pop())
        stack.append(v)
    while stack:
        out.append(stack.pop())
    return out


def simple_lines(g: ResourceGraph, hold: Hold) -> list[str]:
    """Fluxion's ``simple`` listing of *hold* (deepest first)."""
    shown = hold.shown
    depth, names = g.depth, g.names
    return [f"      {'---' * depth[v]}{names[v]}[{shown[v][0]}:{'x' if shown[v][1] else 's'}]"
            for v in _post_order(g, shown)]


def pretty_lines(g: ResourceGraph, hold: Hold) -> list[str]:
    """Fluxion's ``pretty_simple`` listing of *hold* (the root first, words spelled out)."""
    shown = hold.shown
    depth, names = g.depth, g.names
    return [f"      {'---' * depth[v]}{names[v]}[{shown[v][0]}:"
            f"{'exclusive' if shown[v][1] else 'shared'}]"
            for v in reversed(_post_order(g, shown))]
