"""Staged starts in the scheduler's session (fluxes/domain/sched/staging.py): jobs whose
end is near are freed early, and what is allocated on their cores is staged behind them."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from fluxes import messages as proto
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recipe import from_inventory
from fluxes.domain.sched.policy import QueuePolicy
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.session import NO_STORE, Effects, Item, SessionCore
from fluxes.domain.sched.staging import Staging
from fluxes.sim.workload import Machine

EPOCH = 3
NOW = 1000.0
HORIZON = 0.02


def wire(run: float = 0.001, limit: float = 60.0, cores: int = 1) -> str:
    """The request of a job of ``cores`` cores, simulated for ``run`` s (0: a real one),
    with a time limit of ``limit`` s (0: none)."""
    return Request(nslots=cores, duration=limit, run=run).to_wire()


class Stored:
    """A dict-backed store port: job -> (R, wire request, jobspec)."""

    def __init__(self, rows: dict[int, tuple[bytes | None, str | None, bytes | None]]
                 ) -> None:
        self.rows = rows

    def allocations(self, ids: list[int]) -> list[tuple[bytes | None, str | None,
                                                        bytes | None]]:
        return [self.rows.get(j, (None, None, None)) for j in ids]

    def effective_jobspecs(self, ids: list[int]) -> list[bytes | None]:
        return [None for _ in ids]


def core(cores: int = 1, depth: int = 2, stored: Any = NO_STORE, hello: bool = True,
         **options: Any) -> SessionCore:
    """A staging core on one node of ``cores`` cores, partition 0 in epoch EPOCH."""
    pool = ResourcePool(Machine.uniform(1, cores).inventory, clock=lambda: NOW)
    out = SessionCore(pool, {None: QueuePolicy("fcfs")}, stored=stored,
                      stage_depth=depth, stage_horizon=HORIZON, **options)
    out.begin_epoch(0, EPOCH)
    if hello:
        send(out, proto.HelloReply(alloc=[]))
    return out


def send(c: SessionCore, *msgs: proto.SchedRequest) -> Effects:
    fx = Effects()
    c.handle(0, [Item(EPOCH, m, b"%d-0" % n) for n, m in enumerate(msgs, 1)], fx)
    return fx


def alloc(jobid: int, request: str | None = None) -> proto.Alloc:
    return proto.Alloc(id=jobid, priority=16, userid=1, t_submit=float(jobid),
                       request=request if request is not None else wire())


def successes(fx: Effects) -> dict[int, proto.AllocResponse]:
    return {m.id: m for m in fx.responses.get(0, [])
            if isinstance(m, proto.AllocResponse) and m.type == proto.ALLOC_SUCCESS}


def run_pass(c: SessionCore, now: float = NOW) -> Effects:
    fx = Effects()
    c.schedule(now, fx)
    c.committed(list(fx.r.get(0, {})))
    return fx


def staged(fx: Effects, jobid: int) -> Any:
    ann = successes(fx)[jobid].annotations
    assert ann is not None
    return ann["sched"].get("staged")


def r_of(fx: Effects, jobid: int) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(fx.r[0][jobid])
    return doc


def test_a_job_ending_within_the_horizon_is_freed_early_and_the_next_staged() -> None:
    c = core()
    send(c, alloc(1), alloc(2), alloc(3), alloc(4))
    fx = run_pass(c)
    assert list(successes(fx)) == [1] and staged(fx, 1) is None
    # job 1 ends within the horizon: a pass is owed now, and it stages job 2 behind it
    assert c.due(NOW) and c.next_timer() == pytest.approx(NOW + 0.001 - HORIZON)
    fx = run_pass(c)
    assert list(successes(fx)) == [2]
    assert staged(fx, 2) == {"after": [1], "t_start": pytest.approx(NOW + 0.001)}
    assert set(c.staging.early) == {1} and c.pool.jobids() == [2]
    # depth 2: job 2 (level 1) is freed early in turn, job 3 staged at level 2
    fx = run_pass(c)
    assert list(successes(fx)) == [3]
    assert staged(fx, 3) == {"after": [1, 2], "t_start": pytest.approx(NOW + 0.002)}
    assert c.staging.known[3].level == 2
    # job 3 is at the depth: nobody else is staged, and no pass is owed for it
    assert not c.due(NOW) and (c.next_timer() or 0) >= NOW + 1  # the full pass's
    assert successes(run_pass(c)) == {} and 4 in c.sched.pending


def test_only_jobs_ending_within_the_horizon_are_freed_early() -> None:
    c = core()
    send(c, alloc(1, wire(run=1.0)), alloc(2))
    run_pass(c)
    assert not c.due(NOW) and c.next_timer() == pytest.approx(NOW + 1.0 - HORIZON)
    assert successes(run_pass(c, NOW + 0.5)) == {} and not c.staging.early
    assert c.due(NOW + 1.0 - HORIZON)
    fx = run_pass(c, NOW + 1.0 - HORIZON)
    assert staged(fx, 2) == {"after": [1], "t_start": pytest.approx(NOW + 1.0)}


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_the_depth_bounds_the_jobs_staged_per_core(depth: int) -> None:
    c = core(depth=depth)
    send(c, *(alloc(j) for j in range(1, 8)))
    for _ in range(6):
        run_pass(c)
    assert c.pool.jobids() == [1 + depth] and set(c.staging.early) == set(range(1, 1 + depth))
    assert set(c.sched.pending) == set(range(2 + depth, 8))
    assert not c.due(NOW)


def test_ends_that_are_not_known_are_never_freed_early() -> None:
    c = core()
    send(c, alloc(1, wire(run=0, limit=0)), alloc(2))
    run_pass(c)
    assert c.next_timer() == pytest.approx(NOW + 5)  # the replan only
    assert successes(run_pass(c)) == {} and not c.staging.known


def test_a_time_limit_is_a_known_end() -> None:
    c = core()
    send(c, alloc(1, wire(run=0, limit=0.01)), alloc(2, wire(run=0, limit=0)))
    run_pass(c)
    fx = run_pass(c)
    assert staged(fx, 2) == {"after": [1], "t_start": pytest.approx(NOW + 0.01)}
    # the simulated run time bounds the end when it is the sooner
    c = core()
    send(c, alloc(1, wire(run=5, limit=0.01)), alloc(2, wire(run=0.001, limit=5)))
    run_pass(c)
    assert c.staging.known[1].bound == pytest.approx(NOW + 0.01)


def test_a_staged_jobs_time_limit_counts_from_its_predicted_start() -> None:
    c = core()
    send(c, alloc(1, wire(run=0.005)), alloc(2, wire(run=0.001, limit=60)),
         alloc(3, wire(run=0, limit=0)))
    fx = run_pass(c)
    assert r_of(fx, 1)["execution"]["expiration"] == pytest.approx(NOW + 60)
    fx = run_pass(c)
    execution = r_of(fx, 2)["execution"]
    assert execution["starttime"] == pytest.approx(NOW)
    assert execution["expiration"] == pytest.approx(NOW + 0.005 + 60)
    assert c.pool.allocation_of(2).expiration == pytest.approx(NOW + 0.005 + 60)
    assert c.staging.known[2].bound == pytest.approx(NOW + 0.006)
    # no time limit: nothing to move (job 3 is staged behind job 2)
    fx = run_pass(c)
    assert "expiration" not in r_of(fx, 3)["execution"] or \
        not r_of(fx, 3)["execution"]["expiration"]
    assert staged(fx, 3)["after"] == [1, 2]


def test_the_real_free_of_an_early_freed_job() -> None:
    gate = LimitGate()
    c = core(gate=gate)
    send(c, alloc(1), alloc(2), alloc(3), alloc(4))
    for _ in range(3):
        run_pass(c)
    assert set(c.staging.early) == {1, 2} and c.pool.jobids() == [3]
    assert set(gate.running) == {1, 2, 3}  # freed early, still running
    fx = send(c, proto.Free(id=1))
    assert fx.responses[0] == [proto.FreeResponse(id=1)] and not fx.refused
    assert c.pool.jobids() == [3] and set(gate.running) == {2, 3}
    # job 3 drops to level 1: below the depth, it is freed early and job 4 staged
    assert c.staging.known[3].level == 1 and c.due(NOW)
    fx = run_pass(c)
    assert staged(fx, 4) == {"after": [2, 3], "t_start": pytest.approx(NOW + 0.003)}
    for jobid in (2, 3, 4):
        assert send(c, proto.Free(id=jobid)).responses[0] == [proto.FreeResponse(id=jobid)]
    assert c.pool.jobids() == [] and not c.staging.known and not c.staging.early
    assert not gate.running


def test_a_replayed_alloc_of_an_early_freed_job_is_ignored() -> None:
    c = core()
    send(c, alloc(1), alloc(2))
    run_pass(c)
    run_pass(c)
    fx = send(c, alloc(1))
    assert 1 not in c.sched.pending and fx.log[0][1].startswith("alloc request for a job")


def test_reset_forgets_the_partitions_early_freed_jobs() -> None:
    gate = LimitGate()
    c = core(gate=gate)
    send(c, alloc(1), alloc(2), alloc(3))
    for _ in range(3):
        run_pass(c)
    fx = send(c, proto.Reset())
    assert fx.hellos == [0] and not c.staging.known and not c.staging.early
    assert c.pool.jobids() == [] and not gate.running and not c.sched.pending


def test_take_back_of_a_job_freed_early() -> None:
    c = core()
    send(c, alloc(1), alloc(2))
    run_pass(c)
    run_pass(c)
    assert c.take_back([1]) == [(1, b"-")]
    assert c.pool.jobids() == [2] and not c.staging.early
    assert c.staging.known[2].level == 0


def test_a_moved_expiration_moves_the_bound() -> None:
    c = core()
    send(c, alloc(1, wire(run=0, limit=10)), alloc(2))
    run_pass(c)
    assert not c.due(NOW)
    send(c, proto.Expiration(id=1, expiration=NOW + 0.01))
    assert c.due(NOW)
    assert staged(run_pass(c), 2)["after"] == [1]


def _two_overlapping(c: SessionCore) -> tuple[bytes, bytes]:
    """The R of job 1 and of job 2 staged behind it, as a leader stored them."""
    send(c, alloc(1, wire(run=0.001, limit=60)), alloc(2, wire(run=0.001, limit=60)))
    first = run_pass(c)
    second = run_pass(c)
    return first.r[0][1], second.r[0][2]


def test_a_hello_naming_overlapping_r_adopts_both() -> None:
    r1, r2 = _two_overlapping(core())
    stored = Stored({1: (r1, wire(), None), 2: (r2, wire(), None)})
    gate = LimitGate()
    c = core(stored=stored, hello=False, gate=gate)
    fx = send(c, proto.HelloReply(alloc=[proto.HeldJob(id=1), proto.HeldJob(id=2)]))
    assert fx.responses[0] == [c.ready_message()] and not fx.raises and not fx.log
    assert not fx.resource_events and not c.jobs  # nothing quarantined
    assert c.pool.jobids() == [2] and set(c.staging.early) == {1}
    assert set(gate.running) == {1, 2} and c.staging.known[2].behind == {1}
    # each real free is answered; the core is free after both
    send(c, alloc(3))
    assert send(c, proto.Free(id=1)).responses[0] == [proto.FreeResponse(id=1)]
    assert send(c, proto.Free(id=2)).responses[0] == [proto.FreeResponse(id=2)]
    assert c.pool.jobids() == [] and not c.staging.known
    assert list(successes(run_pass(c, NOW + 1))) == [3]


def test_a_hello_in_the_other_order_and_with_staging_off() -> None:
    r1, r2 = _two_overlapping(core())
    stored = Stored({1: (r1, None, None), 2: (r2, None, None)})
    c = core(stored=stored, hello=False, depth=0)
    fx = send(c, proto.HelloReply(alloc=[proto.HeldJob(id=2), proto.HeldJob(id=1)]))
    assert not fx.raises and c.pool.jobids() == [1] and set(c.staging.early) == {2}
    # R that overlaps nothing held yet does not fit for another reason: still lost
    bad = Stored({7: (r1.replace(b'"0"', b'"5"'), None, None)})
    c = core(stored=bad, hello=False)
    fx = send(c, proto.HelloReply(alloc=[proto.HeldJob(id=7)]))
    assert [r.ids for r in fx.raises[0]] == [[7]]


def test_a_standby_taking_over_with_overlapping_r() -> None:
    r1, r2 = _two_overlapping(core())
    # the standby's warm pool read job 1; job 2 overlapped it and was left to the hello
    pool = ResourcePool(Machine.uniform(1, 1).inventory, clock=lambda: NOW)
    pool.adopt(1, orjson.loads(r1))
    stored = Stored({1: (r1, None, None), 2: (r2, None, None)})
    c = SessionCore(pool, {None: QueuePolicy("fcfs")}, stored=stored, stage_depth=2,
                    stage_horizon=HORIZON, gate=LimitGate())
    c.warm_sizes = {1: (1, 1)}
    c.begin_epoch(0, EPOCH)
    fx = send(c, proto.HelloReply(alloc=[proto.HeldJob(id=1), proto.HeldJob(id=2)]))
    assert fx.readied == [(0, 2, 1)] and not fx.raises
    assert c.pool.jobids() == [2] and set(c.staging.early) == {1}
    # a new epoch's hello keeps an early-freed job it names, forgets one it does not
    for epoch, held, early in ((EPOCH + 1, [1, 2], {1}), (EPOCH + 2, [2], set())):
        c.begin_epoch(0, epoch)
        fx = Effects()
        c.handle(0, [Item(epoch, proto.HelloReply(alloc=[proto.HeldJob(id=j)
                                                         for j in held]))], fx)
        assert not fx.raises and c.pool.jobids() == [2] and set(c.staging.early) == early
    # a reset forgets them all
    send(c, proto.Reset())
    assert not c.staging.known and c.pool.jobids() == []


def test_a_snapshot_may_hold_overlapping_r() -> None:
    r1, r2 = _two_overlapping(core())
    c = core(depth=0)
    c.hold(2, r2, Request.from_wire(wire()))
    c.hold(1, r1)
    assert c.pool.jobids() == [1] and set(c.staging.early) == {2}


def test_a_graph_pool_adopts_overlapping_r_too() -> None:
    r1, r2 = _two_overlapping(core())
    graph = GraphPool(from_inventory(Machine.uniform(1, 1).inventory), clock=lambda: NOW)
    c = SessionCore(graph, {None: QueuePolicy("fcfs")}, graph=True)
    c.hold(1, r1)
    c.hold(2, r2)
    assert graph.jobids() == [2] and set(c.staging.early) == {1}


def test_holds_between_frees_see_the_pool_as_it_is() -> None:
    r1, r2 = _two_overlapping(core())
    c = core(depth=0)
    c.hold(1, r1)
    c.hold(2, r2)
    send(c, proto.Free(id=2))
    c.hold(4, r1)  # fits: job 1 was freed early, job 2 is gone
    c.hold(3, r2)  # overlaps job 4 only (not job 2, freed since the last overlap)
    assert c.pool.jobids() == [3] and set(c.staging.early) == {1, 4}


def test_staging_bookkeeping_alone() -> None:
    staging = Staging(depth=2, horizon=1.0)
    assert staging.due(0.0) == [] and staging.next_due() is None
    pool = ResourcePool(Machine.uniform(1, 2).inventory, clock=lambda: NOW)
    r = pool.alloc(Request(nslots=2), 1)
    assert staging.placed(1, r, 0.0, NOW, None) is None  # no known end: not followed
    assert staging.placed(2, r, 2.0, NOW, NOW + 1) is not None
    assert staging.next_due() == pytest.approx(NOW)
    staging.moved(2, None)
    assert staging.known[2].bound == pytest.approx(NOW + 2)
    assert staging.due(NOW) == [] and staging.due(NOW + 1) == [2]
    staging.free_early(2, r)
    third = staging.placed(3, r, 0.0, NOW, None)
    assert third is not None and third.start == pytest.approx(NOW + 2)
    assert third.bound == math.inf and third.level == 1
    assert staging.freed(2) and staging.known[3].level == 0 and not staging.freed(3)


@pytest.mark.parametrize("order", [(1, 2, 9), (2, 1, 9), (9, 2, 1), (2, 9, 1), (1, 9, 2)])
def test_frees_in_any_order_leave_nothing_behind(order: tuple[int, ...]) -> None:
    # job 9 is staged behind jobs 1 and 2, job 2 behind job 1: the free of job 1 meets
    # job 9 through job 2 too (job ids chosen so that it does so first)
    c = core()
    send(c, alloc(1), alloc(2), alloc(9), alloc(10))
    for _ in range(3):
        run_pass(c)
    assert c.staging.known[9].behind == {1, 2}
    for jobid in order:
        fx = send(c, proto.Free(id=jobid))
        assert not fx.refused and not fx.hellos
        run_pass(c)
    assert 10 in c.pool.jobids() and set(c.staging.known) <= {10}


def test_jobs_ending_before_their_bound_leave_no_heap_behind() -> None:
    staging = Staging(depth=2, horizon=0.02)
    pool = ResourcePool(Machine.uniform(1, 1).inventory, clock=lambda: NOW)
    r = pool.alloc(Request(), 1)
    for jobid in range(1, 10_001):
        # an hour's time limit, ended at once
        assert staging.placed(jobid, r, 0.0, NOW, NOW + 3600) is not None
        assert staging.freed(jobid) is False
    assert len(staging._heap) <= 2 * len(staging.known) + 64
    staging.placed(7, r, 0.0, NOW, NOW + 0.01)
    assert staging.next_due() == pytest.approx(NOW + 0.01 - 0.02)
