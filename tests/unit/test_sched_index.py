"""The scheduler's per-queue indexes: SortedKeys, and the quick pass that reads the
rest of its depth request by request (``Scheduler._backfill``) against the job-by-job
loop it replaces."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.sched import policy as policy_mod
from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.ordered import SortedKeys
from fluxes.domain.sched.policy import PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request

NODES, CORES = 4, 4


def _pool() -> ResourcePool:
    entries = [{"hosts": f"n[0-{NODES - 1}]", "cores": f"0-{CORES - 1}"}]
    return ResourcePool(Inventory.from_config(entries), clock=lambda: 0.0)


# -- SortedKeys ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), max_size=3000),
       st.integers(0, 3000), st.integers(0, 3000))
def test_sorted_keys_match_a_sorted_list(ops: list[tuple[bool, int]], low: int,
                                         high: int) -> None:
    keys, model = SortedKeys(), set()
    for adding, key in ops:
        if adding and key not in model:
            keys.add(key)
            model.add(key)
        elif not adding:
            assert keys.remove(key) == (key in model)
            model.discard(key)
    ordered = sorted(model)
    assert list(keys) == ordered and len(keys) == len(ordered)
    for k in (0, len(ordered) // 2, len(ordered) - 1):
        if 0 <= k < len(ordered):
            assert keys.kth(k) == ordered[k]
    with pytest.raises(IndexError):
        keys.kth(len(ordered))
    assert list(keys.between(low, high)) == [k for k in ordered if low < k <= high]
    assert list(keys.between(None, high)) == [k for k in ordered if k <= high]
    for bound in (None, low, high):
        assert keys.first_between(bound, high) == next(keys.between(bound, high), None)


def test_sorted_keys_split_into_chunks() -> None:
    keys = SortedKeys()
    for k in range(5000, 0, -1):
        keys.add(k)
    assert len(keys._chunks) > 1 and list(keys) == list(range(1, 5001))
    assert keys.kth(4321) == 4322
    for k in range(1, 5001, 2):
        assert keys.remove(k)
    assert list(keys.between(100, 110)) == [102, 104, 106, 108, 110]


# -- the indexed quick pass against the job-by-job loop ------------------------------------

_SHAPES = [Request(nslots=1), Request(nslots=3), Request(nnodes=1, nslots=2),
           Request(nnodes=2, nslots=4), Request(nnodes=1, exclusive=True),
           Request(nnodes=2, exclusive=True), Request(nslots=40)]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Running jobs, pending jobs over two queues (a few shapes and lengths, one never
    possible), and a script of frees and priority changes between quick passes."""
    def request() -> Request:
        base = draw(st.sampled_from(_SHAPES))
        return Request(nnodes=base.nnodes, nslots=base.nslots, exclusive=base.exclusive,
                       duration=draw(st.sampled_from([0.0, 5.0, 10.0, 30.0])))

    running = [request() for _ in range(draw(st.integers(0, 8)))]
    pending = [(request(), draw(st.integers(0, 3)), draw(st.sampled_from([None, "b"])))
               for _ in range(draw(st.integers(1, 40)))]
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 3)),
                          max_size=12))
    return {"running": running, "pending": pending, "steps": steps,
            "policies": (draw(st.sampled_from(["easy", "conservative", "fcfs"])),
                         draw(st.sampled_from(["easy", "conservative"]))),
            "depth": draw(st.integers(1, 12)), "reservations": draw(st.integers(0, 3))}


def _build(sc: dict[str, Any], gate: LimitGate | None = None) -> Scheduler:
    pool = _pool()
    for i, req in enumerate(sc["running"]):
        try:
            pool.alloc(req, 1000 + i, now=-1.0)
        except (InsufficientResources, InfeasibleRequest):
            pass
    a, b = sc["policies"]
    queues = {None: QueuePolicy(a, queue_depth=sc["depth"],
                                reservation_depth=sc["reservations"]),
              "b": QueuePolicy(b, queue_depth=sc["depth"] + 2, placement="best-fit")}
    sched = Scheduler(pool, queues, gate=gate)
    for i, (req, prio, queue) in enumerate(sc["pending"]):
        sched.add(PendingJob(i, prio, float(i // 3), 1000, queue, req))
    return sched


def _step(sched: Scheduler, free: bool, jobid: int, prio: int, cancel: bool) -> None:
    """One step of a scenario: a running job freed (a pending one canceled if
    ``cancel``), or a job's priority changed."""
    pool = sched.pool
    assert isinstance(pool, ResourcePool)
    if not free:
        sched.prioritize(jobid, prio)
    elif jobid in pool.jobids():
        pool.free(jobid)
    elif cancel:
        sched.remove(jobid)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_indexed_quick_pass_starts_what_the_loop_starts(sc: dict[str, Any]) -> None:
    indexed, loop = _build(sc), _build(sc)
    now = 0.0
    for free, jobid, prio in [(False, 0, 0), *sc["steps"]]:
        for sched in (indexed, loop):
            _step(sched, free, jobid, prio, cancel=False)
        got = indexed.schedule(now, full=False)
        saved = policy_mod.INDEXED_REQUESTS
        policy_mod.INDEXED_REQUESTS = -1  # type: ignore[misc]  # the loop all the way
        try:
            want = loop.schedule(now, full=False)
        finally:
            policy_mod.INDEXED_REQUESTS = saved  # type: ignore[misc]
        assert [(j, r.dumps()) for j, r in got.allocated] == \
            [(j, r.dumps()) for j, r in want.allocated]
        assert got.denied == want.denied
        assert got.reserved == want.reserved
        assert got.considered <= want.considered
        # it annotates only jobs the loop annotated, and says the same of them
        assert {j: want.annotations.get(j) for j in got.annotations} == got.annotations
        assert set(indexed.pending) == set(loop.pending)
        now += 1.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_with_a_start_gate_no_index_is_kept_and_passes_start_the_same(
        sc: dict[str, Any]) -> None:
    # a gate rules the request-by-request backfill out, so its indexes are not kept
    # (they cost every add and answer); a gate that refuses nothing (no limits) then
    # starts what the indexed passes start, through frees, priority changes and cancels
    gated, plain = _build(sc, LimitGate()), _build(sc)
    now = 0.0
    for n, (free, jobid, prio) in enumerate([(False, 0, 0), *sc["steps"]]):
        for sched in (gated, plain):
            _step(sched, free, jobid, prio, cancel=n % 3 == 0)
        full = n % 4 == 3
        got, want = gated.schedule(now, full=full), plain.schedule(now, full=full)
        assert [(j, r.dumps()) for j, r in got.allocated] == \
            [(j, r.dumps()) for j, r in want.allocated]
        assert got.denied == want.denied and got.reserved == want.reserved
        assert set(gated.pending) == set(plain.pending)
        assert not gated._ranks and not gated._shapes
        now += 1.0
