"""Rules that always hold on a graph, whatever jobs come and go (a property test).

Random resources trees (any types, slots, exclusive flags, ranges) are
allocated with random policies, reserved at their earliest start when they
do not fit, cancelled, partly released (ranks), given again as an R
(resource-query's ``update``, refused when it collides), and hosts drained
and undrained, on our three graphs.
After every step:

* a job holds (lists in its R, is charged for) only vertices of the types its
  jobspec names, never more of a type than its counts allow (a vertex named
  exclusively with nothing below it is held whole); its R's cores and gpus,
  and its ``scheduling`` subgraph, are exactly those;
* a vertex held exclusively, and everything below it, is touched by no other
  job whose window overlaps;
* the units held on a vertex at any time fit its size;
* the free and up totals kept per subtree are those of the vertices;
* a reservation at the earliest start found always succeeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.jgf import subgraph
from fluxes.domain.graph.match import make_hold, parse_prune
from fluxes.domain.graph.output import rset_of
from fluxes.domain.graph.recovery import picks_of_graph
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import Want, parse_resources
from fluxes.domain.sched.errors import InfeasibleRequest

CASES = Path(__file__).resolve().parents[1] / "cases" / "graph"
GRAPHS = {name: load_grug((CASES / f"{name}.graphml").read_text())
          for name in ("resv", "tiny", "medium")}
LEAVES = ("core", "gpu", "memory", "ssd", "node")
INNER = ("cluster", "rack", "switch", "node", "socket", "slot")
COUNTS = st.one_of(st.integers(1, 3), st.just("1,3"),
                   st.builds(lambda hi: {"min": 1, "max": hi}, st.integers(1, 6)),
                   st.just({"min": 1, "max": 8, "operator": "*", "operand": 2}))


def vertex(kind: str, count: Any, exclusive: bool | None, children: list[Any]
           ) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "count": count}
    if exclusive is not None:
        out["exclusive"] = exclusive
    if children:
        out["with"] = children
    return out


#: Shapes real jobs have, mixed in so that they meet often.
TYPICAL = st.sampled_from([
    vertex("slot", 1, None, [vertex("core", 4, None, [])]),
    vertex("node", 1, True, [vertex("core", 1, None, [])]),
    vertex("node", 1, None, [vertex("slot", 2, None, [vertex("core", 3, None, [])])]),
    vertex("node", 2, None, [vertex("slot", 1, None, [vertex("core", 2, None, [])])]),
    vertex("slot", 2, None, [vertex("node", 1, None, [])]),
    vertex("switch", 1, None, [vertex("node", 2, None, [vertex("core", 2, None, [])])]),
])

RANDOM = st.recursive(
    st.builds(vertex, st.sampled_from(LEAVES), COUNTS, st.none() | st.booleans(), st.just([])),
    lambda kids: st.builds(vertex, st.sampled_from(INNER), COUNTS, st.none() | st.booleans(),
                           st.lists(kids, min_size=1, max_size=2)),
    max_leaves=5)
# typical shapes three times in four: what makes jobs meet
TREES = st.one_of(TYPICAL, TYPICAL, TYPICAL, RANDOM)
JOB = st.tuples(st.just("job"), TREES,
                st.sampled_from(["low", "high", "first", "best", "worst", "lonodex", "hinodex",
                                 "lonode", "hinode", "locality", "variation"]),
                st.sampled_from([10.0, 50.0, 100.0]))

STEPS = st.lists(st.one_of(
    JOB, JOB, JOB,
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(st.just("drain"), st.integers(0, 40)),
    st.tuples(st.just("partial"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("update"), st.integers(0, 40), st.sampled_from([0.0, 20.0])),
), min_size=1, max_size=20)


def most(wants: Sequence[Want], mult: float = 1.0) -> dict[str, float]:
    """The most vertices of each type a resources tree can name."""
    out: dict[str, float] = {}
    for w in wants:
        n = mult * (math.inf if w.count.max is None else w.count.max)
        if w.exclusive and not w.children:
            out["*"] = math.inf  # named with nothing below: held whole, any type below
        if not w.is_slot:
            out[w.type] = out.get(w.type, 0.0) + n
        for kind, k in most(w.children, n).items():
            out[kind] = out.get(kind, 0.0) + k
    return out


def check(t: Traverser, named: dict[int, dict[str, float]]) -> None:
    """The rules of the module docstring."""
    g, state = t.graph, t.state
    holds = list(t.allocs.values()) + list(t.resvs.values())
    touched = {h.jobid: set(h.touched) for h in holds}
    for h in holds:
        bound = named[h.jobid]
        kinds: dict[str, int] = {}
        for v in h.amounts:
            kinds[g.types[v]] = kinds.get(g.types[v], 0) + 1
        for kind, n in kinds.items():
            assert not bound or "*" in bound or n <= bound.get(kind, 0), (h.jobid, kind, n,
                                                                             bound)
        # the R itself (what the scheduler reports and accounting charges) holds no more
        rset = rset_of(g, h, scheduling=True)
        if bound and "*" not in bound:
            assert rset.ncores <= bound.get("core", 0) and rset.ngpus <= bound.get("gpu", 0)
        paths = {n["metadata"]["paths"]["containment"]
                 for n in rset.encode()["scheduling"]["graph"]["nodes"]}
        assert paths == {g.path(v) for v in h.shown}
        for v in h.touched:
            # allocations hold from now until their end; reservations their window
            others = [o for o in holds if o is not h and v in touched[o.jobid]
                      and (o.start if o.reserved else 0.0) < h.end
                      and (h.start if h.reserved else 0.0) < o.end]
            # exclusive: listed so, or closed below an exclusive vertex
            if v not in h.shown or h.shown[v][1]:
                assert not others, (h.jobid, g.path(v), [o.jobid for o in others])
            held = h.blocked.get(v, 0) + sum(o.blocked.get(v, 0) for o in others)
            assert held <= g.sizes[v] or len(others) > 1, g.path(v)
    for kind, col in state.free.items():
        assert col[0] == sum(g.sizes[v] - state.used[v] for v in range(len(g))
                             if g.types[v] == kind and not state.down[v])
    for kind, col in state.upcap.items():
        assert col[0] == sum(g.sizes[v] for v in range(len(g))
                             if g.types[v] == kind and not state.down[v])


def partial(t: Traverser, pick: int, rank: int) -> None:
    """Release one rank of an allocation (a partial cancel)."""
    held = sorted(t.allocs)
    if not held:
        return
    jobid = held[pick % len(held)]
    ranks = sorted({t.graph.rank_of(v) for v in t.allocs[jobid].shown} - {-1})
    if ranks:
        found = t.release_ranks(jobid, [ranks[rank % len(ranks)]])
        assert found is not None
        assert found[1] == (len(ranks) == 1) == (jobid not in t.allocs)


def update(t: Traverser, named: dict[int, dict[str, float]], jobid: int, pick: int,
           start: float) -> None:
    """Give the R of a job held again, as a new job: it must not collide."""
    held = sorted(t.allocs) + sorted(t.resvs)
    if not held:
        return
    src = held[pick % len(held)]
    hold = t.allocs.get(src) or t.resvs[src]
    g = t.graph
    picks = picks_of_graph(g, subgraph(g, hold.shown), "update")
    copy = make_hold(g, picks, jobid, start, start + 10.0, False)
    named[jobid] = named[src]
    if t.update(copy, 0.0) is None:
        assert jobid in (t.resvs if start > 0 else t.allocs)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_holds_never_collide(name: str, steps: list[Any]) -> None:
    graph = GRAPHS[name]
    t = Traverser(graph)
    named: dict[int, dict[str, float]] = {}
    for jobid, step in enumerate(steps):
        if step[0] == "job":
            _, tree, policy, length = step
            try:
                wants = parse_resources([tree])
                needs = t.compile(wants)
            except (InfeasibleRequest, ValueError):
                continue
            # node-exclusive policies hold each node whole, as Fluxion's list them
            named[jobid] = {} if policy.endswith("nodex") else most(wants)
            if t.allocate(needs, jobid, 0.0, length, policy) is None:
                found = t.earliest(needs, jobid, 0.0, length, "low")
                if found is not None and found[0] > 0.0:
                    assert t.reserve_at(needs, jobid, found[0], length, "low") is not None
        elif step[0] == "cancel":
            held = sorted(t.allocs) + sorted(t.resvs)
            if held:
                t.cancel(held[step[1] % len(held)])
        elif step[0] == "partial":
            partial(t, step[1], step[2])
        elif step[0] == "update":
            update(t, named, jobid, step[1], step[2])
        else:
            host = graph.hosts[step[1] % len(graph.hosts)]
            t.state.set_down(host, not t.state.down[host])
        check(t, named)


def outcomes(t: Traverser, steps: list[Any]) -> list[Any]:
    """What each step gives on *t*: the holds (vertices, amounts, window) or None."""
    out: list[Any] = []
    for jobid, step in enumerate(steps):
        if step[0] == "job":
            _, tree, policy, length = step
            try:
                needs = t.compile(parse_resources([tree]))
            except (InfeasibleRequest, ValueError):
                continue
            hold = t.allocate(needs, jobid, 0.0, length, policy)
            if hold is None:
                found = t.earliest(needs, jobid, 0.0, length, policy)
                if found is not None and found[0] > 0.0:
                    hold = t.reserve_at(needs, jobid, found[0], length, policy)
            out.append(None if hold is None else (hold.start, hold.end, hold.shown,
                                                  hold.amounts, hold.blocked))
            out.append(t.satisfiable(needs))
        elif step[0] == "cancel":
            held = sorted(t.allocs) + sorted(t.resvs)
            if held:
                t.cancel(held[step[1] % len(held)])
        elif step[0] == "drain":
            host = t.graph.hosts[step[1] % len(t.graph.hosts)]
            t.state.set_down(host, not t.state.down[host])
    return out


@pytest.mark.parametrize("name", sorted(GRAPHS))
@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.one_of(JOB, JOB, JOB, st.tuples(st.just("cancel"), st.integers(0, 40)),
                                st.tuples(st.just("drain"), st.integers(0, 40))),
                      min_size=1, max_size=16))
def test_prune_filters_change_no_result(name: str, steps: list[Any]) -> None:
    """resource-query's -p: pruning by every type, by Fluxion's default (cores), by
    nodes at racks only, or not at all, matches the same vertices."""
    graph = GRAPHS[name]
    expected = outcomes(Traverser(graph), steps)
    for spec in ("none", "ALL:core", "rack:node,switch:node"):
        assert outcomes(Traverser(graph, parse_prune(spec)), steps) == expected, spec


def test_prune_filters_parse_as_fluxion_writes_them() -> None:
    assert parse_prune("ALL:core,rack:node,switch:node") == (
        ("core", None), ("node", frozenset({"rack", "switch"})))
    assert parse_prune("rack:core,ALL:core") == (("core", None),)
    assert parse_prune("none") == parse_prune("") == ()
    for bad in ("core", "ALL:", ":core", "a:b:c"):
        with pytest.raises(ValueError, match="expected HL:LL"):
            parse_prune(bad)
