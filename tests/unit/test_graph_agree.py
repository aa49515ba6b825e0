"""The graph pool and today's pool agree on node/core/gpu-only jobs (a property test).

Both pools get the same inventory (the graph is generated from it) and the
same random sequence of allocations, frees, drains and start-time questions; they
must agree on feasibility, on success or failure, on the amounts each job
gets and on the totals.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recipe import from_inventory
from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.formats.counts import Count


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    """One to four kinds of nodes: 1-4 of each, 1-8 cores (maybe in 2 sockets), 0-2 gpus."""
    entries = []
    first = 0
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 3))
        cores = draw(st.sampled_from([1, 2, 4, 6, 8]))
        entry: dict[str, Any] = {"hosts": f"n[{first}-{first + count - 1}]",
                                 "cores": f"0-{cores - 1}"}
        gpus = draw(st.integers(0, 2))
        if gpus:
            entry["gpus"] = f"0-{gpus - 1}"
        if cores % 2 == 0 and draw(st.booleans()):
            entry["sockets"] = 2
        entries.append(entry)
        first += count
    return Inventory.from_config(entries)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """A node/core/gpu-only request: fixed counts, or a range of nodes (the most that fit)."""
    least = draw(st.integers(0, 3))
    nnodes: int | Count = least
    exclusive = least > 0 and draw(st.booleans())
    if least and draw(st.booleans()):
        nnodes = Count(least, least + draw(st.integers(1, 3)))
    cores = draw(st.integers(0, 4))
    gpus = draw(st.integers(0, 2))
    if cores == 0 and gpus == 0 and not exclusive:
        cores = 1
    return Request(nnodes=nnodes, nslots=draw(st.integers(1, 3)), slot_size=cores,
                   gpu_per_slot=gpus, exclusive=exclusive,
                   duration=float(draw(st.sampled_from([10, 20, 30]))))


OPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), requests()),
    st.tuples(st.just("free"), st.integers(0, 20)),
    st.tuples(st.just("earliest"), requests()),
    st.tuples(st.just("drain"), st.integers(0, 20)),
), min_size=1, max_size=25)


def outcome(pool: Any, op: str, arg: Any, jobid: int) -> Any:
    """What *pool* answers to one operation (comparable across pools)."""
    if op == "free":
        live = pool.jobids()
        if not live:
            return None
        victim = live[arg % len(live)]
        pool.free(victim)
        return ("freed", victim)
    if op == "drain":
        ranks = list(pool.inventory.ranks)
        rank = ranks[arg % len(ranks)]
        if rank in pool.down:
            pool.mark_up([rank])
        else:
            pool.mark_down([rank])
        return ("down", str(pool.down))
    if op == "earliest":
        try:
            pool.check(arg)
        except InfeasibleRequest:
            return ("infeasible",)
        return ("start", pool.earliest_start(arg))
    try:
        rset = pool.alloc(arg, jobid, "first-fit")
    except InfeasibleRequest:
        return ("infeasible",)
    except InsufficientResources:
        return ("insufficient",)
    return ("ok", rset.nnodes, rset.ncores, rset.ngpus)


@settings(max_examples=150, deadline=None)
@given(inventories(), OPS)
def test_graph_pool_agrees_with_todays_pool(inventory: Inventory, ops: list[Any]) -> None:
    today = ResourcePool(inventory, clock=lambda: 0.0)
    graph = GraphPool(from_inventory(inventory), clock=lambda: 0.0)
    for jobid, (op, arg) in enumerate(ops):
        expected = outcome(today, op, arg, jobid)
        assert outcome(graph, op, arg, jobid) == expected, (op, str(arg))
        assert graph.counts() == today.counts()
