"""GraphPool: today's pool interface on a graph, driven by the scheduler's own policies."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recipe import from_inventory
from fluxes.domain.graph.wants import GraphRequest, graph_request
from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.policy import PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.formats import constraints
from fluxes.formats.rset import ResourceSet
from tests.unit.test_sched_pool import check_holders

CASES = Path(__file__).resolve().parents[1] / "cases" / "graph"

INVENTORY = Inventory.from_config([
    {"hosts": "n[0-3]", "cores": "0-7", "gpus": "0-1", "sockets": 2, "memory": "16G"},
    {"hosts": "n[2-3]", "properties": ["big"]},
])


def pool_of(inv: Inventory = INVENTORY) -> GraphPool:
    return GraphPool(from_inventory(inv), clock=lambda: 0.0)


def medium() -> GraphPool:
    return GraphPool(load_grug((CASES / "medium.graphml").read_text()), clock=lambda: 0.0)


def switch_job(nodes: int, cores: int, duration: float) -> GraphRequest:
    # a slot copy lives below one vertex with cores: 16 cores are two 8-core sockets
    inner: list[dict[str, object]] = (
        [{"type": "socket", "count": cores // 8, "with": [{"type": "core", "count": 8}]}]
        if cores >= 8 else [{"type": "core", "count": cores}])
    spec = {"version": 9999, "resources": [
        {"type": "switch", "count": 1, "with": [
            {"type": "node", "count": nodes, "with": [
                {"type": "slot", "count": 1, "label": "t", "with": inner}]}]}],
        "attributes": {"system": {"duration": duration}}, "tasks": []}
    req = graph_request(spec)
    assert isinstance(req, GraphRequest)
    return req


# -- the basic methods -----------------------------------------------------------------


def test_inventory_of_the_graph() -> None:
    pool = pool_of()
    assert pool.inventory == INVENTORY
    assert str(pool.inventory.rset()) == str(INVENTORY.rset())


def test_alloc_free_and_the_queries() -> None:
    pool = pool_of()
    rset = pool.alloc(Request(nnodes=1, nslots=2, slot_size=2, gpu_per_slot=1, duration=60.0), 7)
    assert str(rset) == "rank0/core[0-3],gpu[0-1]" and rset.expiration == 60.0
    assert pool.jobids() == [7]
    assert str(pool.allocation_of(7)) == str(rset)
    assert pool.counts() == {"nodes": 4, "down": 0, "idle": 3, "cores": 32, "free_cores": 28,
                             "gpus": 8, "free_gpus": 6}
    assert str(pool.allocated()) == "rank0/core[0-3],gpu[0-1]"
    assert str(pool.available()) == "rank0/core[4-7] rank[1-3]/core[0-7],gpu[0-1]"
    with pytest.raises(ValueError, match="alloc: job 7 already has an allocation"):
        pool.alloc(Request(), 7)
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        pool.alloc(Request(), 8, "fastest")
    pool.free(7)
    assert pool.jobids() == [] and pool.counts()["free_cores"] == 32
    with pytest.raises(ValueError, match="free: job 7 has no allocation"):
        pool.free(7)


def test_infeasible_and_insufficient_notes() -> None:
    pool = pool_of()
    with pytest.raises(InfeasibleRequest, match="cannot hold even when empty"):
        pool.check(Request(nnodes=5, duration=1.0))
    with pytest.raises(InfeasibleRequest, match="switch, which the graph has none of"):
        pool.check(switch_job(1, 1, 10.0))
    with pytest.raises(InfeasibleRequest, match=r"no node matches \[nope\]"):
        pool.check(Request(constraint=constraints.parse({"properties": ["nope"]})))
    pool.alloc(Request(nnodes=4, exclusive=True), 1)
    with pytest.raises(InsufficientResources, match="job requests 1 core, 0 are free"):
        pool.alloc(Request(), 2)


def test_constraints_and_placement_policies() -> None:
    pool = pool_of()
    big = Request(constraint=constraints.parse({"properties": ["big"]}))
    assert str(pool.alloc(big, 1)) == "rank2/core0"
    assert str(pool.alloc(Request(), 2, "hinode")) == "rank3/core7"
    assert str(pool.alloc(Request(nslots=2), 3, "best-fit")) == "rank2/core[1-2]"
    assert str(pool.alloc(Request(), 4, "worst-fit")) == "rank0/core0"


def test_drain_keeps_running_work_and_stops_new_work() -> None:
    pool = pool_of()
    pool.alloc(Request(nnodes=1, exclusive=True), 1)
    pool.mark_down("0-2")
    assert str(pool.down) == "0-2" and pool.counts()["down"] == 3
    assert str(pool.available()) == "rank3/core[0-7],gpu[0-1]"
    assert str(pool.available(include_down=True)).startswith("rank[1-3]")
    pool.alloc(Request(nslots=8), 2)
    assert not pool.has_free() or pool.counts()["free_cores"] == 0
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(), 3)
    assert pool.earliest_start(Request(duration=5.0)) == math.inf
    pool.mark_up([1])
    assert str(pool.alloc(Request(), 3)) == "rank1/core0"
    with pytest.raises(ValueError, match=r"mark_down: unknown rank\(s\) 9"):
        pool.mark_down([9])


def test_earliest_start_reservations_and_backfill() -> None:
    pool = pool_of()
    pool.alloc(Request(nnodes=4, exclusive=True, duration=100.0), 1)
    wide = Request(nnodes=2, exclusive=True, duration=50.0)
    assert pool.earliest_start(wide) == 100.0
    rset = pool.alloc(wide, 2, start=100.0)
    assert rset.starttime == 100.0 and pool.reservations() == {2: (100.0, 150.0)}
    assert pool.earliest_start(Request(nnodes=4, exclusive=True, duration=10.0)) == 150.0
    assert pool.earliest_start(Request(nnodes=4, exclusive=True), jobid=2) == 100.0
    pool.free(1)
    # a job may start now only if it ends before the reservation, or elsewhere
    assert str(pool.alloc(Request(nnodes=2, exclusive=True, duration=200.0), 3)) == \
        "rank[2-3]/core[0-7],gpu[0-1]"
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(nnodes=1, exclusive=True, duration=200.0), 4)
    assert str(pool.alloc(Request(nnodes=1, exclusive=True, duration=100.0), 4)) == \
        "rank0/core[0-7],gpu[0-1]"
    pool.cancel_reservation(2)
    with pytest.raises(ValueError, match="has no reservation"):
        pool.cancel_reservation(2)
    pool.alloc(wide, 5, start=300.0)
    pool.clear_reservations()
    assert pool.reservations() == {}
    assert pool.earliest_start(Request(nnodes=5)) is None


def test_allocation_now_replaces_the_jobs_own_reservation() -> None:
    pool = pool_of()
    pool.alloc(Request(nnodes=4, exclusive=True, duration=10.0), 1, start=50.0)
    pool.alloc(Request(nnodes=4, exclusive=True, duration=10.0), 1)
    assert pool.reservations() == {} and pool.jobids() == [1]


def test_set_expiration_moves_when_a_running_job_frees_its_nodes() -> None:
    pool = pool_of()
    pool.alloc(Request(nnodes=4, exclusive=True, duration=100.0), 1)
    wide = Request(nnodes=2, exclusive=True, duration=50.0)
    assert pool.earliest_start(wide) == 100.0
    assert pool.set_expiration(1, 400.0)
    assert pool.earliest_start(wide) == 400.0
    assert pool.allocation_of(1).expiration == 400.0
    with pytest.raises(InsufficientResources):
        pool.alloc(wide, 2, start=100.0)  # planned at the old end: taken till 400 now
    assert pool.set_expiration(1, 50.0)
    assert pool.earliest_start(wide) == 50.0
    assert pool.set_expiration(1, None) and pool.earliest_start(wide) == math.inf
    assert not pool.set_expiration(7, 10.0)
    with pytest.raises(ValueError, match="set_expiration"):
        pool.set_expiration(1, math.nan)


# -- recovery -------------------------------------------------------------------------


def test_adopt_reads_the_scheduling_subgraph_back() -> None:
    pool = medium()
    stored = {1: pool.alloc(switch_job(2, 8, 100.0), 1).dumps(),
              2: pool.alloc(Request(nnodes=1, exclusive=True, duration=50.0), 2).dumps(),
              3: pool.alloc(Request(nslots=3, memory_per_slot=1 << 30), 3).dumps()}
    assert "scheduling" in orjson.loads(stored[1])
    fresh = medium()
    for jobid, text in stored.items():
        fresh.adopt(jobid, text)
    assert fresh.counts() == pool.counts()
    for jobid in stored:
        assert fresh.hold_of(jobid).shown == pool.hold_of(jobid).shown
        assert fresh.hold_of(jobid).amounts == pool.hold_of(jobid).amounts
    assert fresh.hold_of(2).end == 50.0 and fresh.hold_of(3).end == math.inf
    with pytest.raises(ValueError, match=r"adopt: job 9: .* is already held"):
        fresh.adopt(9, stored[2])
    with pytest.raises(ValueError, match="adopt: job 1 already has an allocation"):
        fresh.adopt(1, stored[1])
    bad = orjson.loads(stored[3])
    bad["execution"]["expiration"] = "soon"
    with pytest.raises(ValueError, match=r"adopt: job 8: R: execution\.expiration: expected a"):
        medium().adopt(8, bad)
    bad["scheduling"]["graph"]["nodes"][-1]["metadata"]["paths"]["containment"] = "/elsewhere"
    with pytest.raises(ValueError, match=r"adopt: job 8: vertex .* is not in the graph"):
        medium().adopt(8, orjson.dumps(dict(bad, execution={"R_lite": []})))
    with pytest.raises(ValueError, match="adopt: job 8: R: invalid JSON"):
        medium().adopt(8, "{")


def test_adopt_without_a_subgraph_uses_r_lite() -> None:
    pool = pool_of()
    rset = ResourceSet.from_ranks({0: ("0-1", "0"), 2: ("0-7", "0-1")}, expiration=30.0)
    pool.adopt(4, rset, memory={0: 2 << 30})
    assert pool.counts()["free_cores"] == 22 and pool.counts()["free_gpus"] == 5
    pool.adopt(5, ResourceSet.from_ranks({1: ("0", None)}), exclusive=True)
    assert pool.counts()["idle"] == 1
    with pytest.raises(ValueError, match="adopt: job 6: rank 9 is not in the graph"):
        pool.adopt(6, ResourceSet.from_ranks({9: ("0", None)}))
    with pytest.raises(ValueError, match="adopt: job 6: rank 3 has no core 8"):
        pool.adopt(6, ResourceSet.from_ranks({3: ("8", None)}))


def test_save_and_load() -> None:
    pool = pool_of()
    pool.alloc(Request(nnodes=2, nslots=1, slot_size=3, duration=100.0), 1)
    pool.alloc(Request(nnodes=4, exclusive=True, duration=10.0), 2, start=100.0)
    pool.mark_down("3")
    saved = orjson.loads(orjson.dumps(pool.save()))
    again = GraphPool.load(saved, clock=lambda: 0.0)
    assert again.save() == pool.save()
    assert again.reservations() == {2: (100.0, 110.0)} and str(again.down) == "3"
    with pytest.raises(ValueError, match="pool: expected an object with version 1"):
        GraphPool.load({"version": 2})


# -- the scheduler's policies on a graph pool ------------------------------------------------


WORKLOAD = [Request(nnodes=4, exclusive=True, duration=100.0), Request(nslots=4, duration=10.0),
            Request(nnodes=1, nslots=2, slot_size=2, gpu_per_slot=1, duration=50.0),
            Request(nnodes=2, nslots=1, slot_size=6, duration=30.0)]


def schedule(pool: Any, policy: str) -> list[Any]:
    """Three passes of *policy* over the workload; what each decided."""
    sched = Scheduler(pool, default=QueuePolicy(policy, reservation_depth=4))
    for i in range(16):
        sched.add(PendingJob(i, 16, float(i), 1000, None, WORKLOAD[i % len(WORKLOAD)]))
    out = []
    for now in (0.0, 100.0, 150.0):
        result = sched.schedule(now)
        out.append(([(j, str(rset)) for j, rset in result.allocated], result.reserved,
                    {j: a.get("t_estimate") for j, a in result.annotations.items()}))
        for j, rset in result.allocated:
            if rset.expiration is not None and rset.expiration <= now + 60:
                pool.free(j)
    return out


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_scheduler_decides_as_with_todays_pool(policy: str) -> None:
    graph_pool = schedule(pool_of(), policy)
    assert graph_pool == schedule(ResourcePool(INVENTORY, clock=lambda: 0.0), policy)
    assert any(allocated for allocated, _, _ in graph_pool)
    if policy != "fcfs":
        assert any(reserved for _, reserved, _ in graph_pool)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_scheduler_places_graph_shapes(policy: str) -> None:
    pool = medium()
    sched = Scheduler(pool, default=QueuePolicy(policy))
    jobs = [switch_job(4, 16, 100.0), switch_job(3, 1, 10.0), switch_job(4, 16, 100.0),
            switch_job(4, 16, 100.0), switch_job(4, 16, 100.0), switch_job(1, 1, 10.0)]
    for i, req in enumerate(jobs):
        sched.add(PendingJob(i, 16, float(i), 1000, None, req))
    result = sched.schedule(0.0)
    started = [j for j, _ in result.allocated]
    # 4 switches of 4 nodes: jobs 0, 1 (3 nodes of a switch), 2, 3 start; 4 waits for a
    # whole switch; 5 backfills under switch1's free node, except behind fcfs
    assert started[:4] == [0, 1, 2, 3]
    if policy == "fcfs":
        assert started == [0, 1, 2, 3] and result.reserved == {}
    else:
        assert result.reserved == {4: 10.0} and started[4:] == [5]
    with pytest.raises(InfeasibleRequest, match="even when empty"):
        pool.check(Request(nnodes=17))  # the worker denies such a job before queueing it


def test_graph_request_of_jobspecs() -> None:
    v1 = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 2}]}]}],
          "attributes": {"system": {"duration": 60}}, "tasks": []}
    assert type(graph_request(v1)) is Request
    req = switch_job(2, 4, 30.0)
    assert req.duration == 30.0 and str(req) == "switch[1]->node[2]->slot[1]->core[4]"
    assert req == switch_job(2, 4, 30.0) and hash(req) == hash(switch_job(2, 4, 30.0))
    assert req.placement_key != switch_job(2, 5, 30.0).placement_key
    assert req.placement_key == switch_job(2, 4, 99.0).placement_key
    spec = dict(v1, resources=[{"type": "rack", "count": 1}],
                attributes={"system": {"constraints": {"properties": ["big"]}}})
    assert graph_request(spec).constraint == constraints.parse({"properties": ["big"]})


def test_overdue_allocations_are_planned_as_ended_now() -> None:
    inv = Inventory.from_config([{"hosts": "n0", "cores": "0-1"}])
    for pool in (pool_of(inv), ResourcePool(inv, clock=lambda: 0.0)):
        pool.alloc(Request(nslots=2, duration=10.0), 1, now=0.0)
        with pytest.raises(InsufficientResources):  # job 1 is overdue but holds its cores
            pool.alloc(Request(duration=5.0), 2, now=20.0)
        assert pool.earliest_start(Request(duration=5.0), now=20.0) == 20.0
        assert pool.alloc(Request(duration=5.0), 2, start=20.0, now=20.0).starttime == 20.0
        assert pool.reservations() == {2: (20.0, 25.0)}


def test_holders_name_the_jobs_holding_any_of_an_r() -> None:
    check_holders(pool_of())
