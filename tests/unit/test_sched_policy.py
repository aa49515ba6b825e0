"""Tests for fluxes.domain.sched.policy: fcfs, EASY and conservative passes on hand-built traces.

Time is a fake clock: every pass gets ``now`` explicitly and the pool's clock
stays at 0.  The simulations free each running job exactly at its end time,
as the planner assumes, and check the promises the policies make.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxes.domain.sched import (
    InfeasibleRequest,
    InsufficientResources,
    Inventory,
    Request,
    ResourcePool,
)
from fluxes.domain.sched.planner import BEYOND_DEPTH, NO_ESTIMATE, WAITING, format_time
from fluxes.domain.sched.policy import UNKNOWN_TRIES, PassResult, PendingJob, QueuePolicy, Scheduler
from fluxes.formats.constraints import parse

# -- helpers ------------------------------------------------------------------------------


def pool_of(n: int, cores: int = 4, *extra: dict[str, Any]) -> ResourcePool:
    """n0..n{n-1} with *cores* cores each (plus *extra* entries); the clock stays at 0."""
    entries = [{"hosts": f"n[0-{n - 1}]", "cores": f"0-{cores - 1}"}, *extra]
    return ResourcePool(Inventory.from_config(entries), clock=lambda: 0.0)


def cores(n: int, duration: float = 10.0, **kw: Any) -> Request:
    """n 1-core slots anywhere."""
    return Request(nslots=n, duration=duration, **kw)


def node(n: int = 1, slots: int = 4, duration: float = 10.0, **kw: Any) -> Request:
    """n shared nodes with *slots* 1-core slots each."""
    return Request(nnodes=n, nslots=slots, duration=duration, **kw)


def whole(n: int, duration: float = 10.0, **kw: Any) -> Request:
    """n exclusive nodes."""
    return Request(nnodes=n, exclusive=True, duration=duration, **kw)


def on(rank: int) -> Any:
    """A constraint pinning a request to one rank."""
    return parse({"ranks": [str(rank)]})


def sched_of(pool: ResourcePool, policy: str = "fcfs", **kw: Any) -> Scheduler:
    """A scheduler whose every queue uses *policy*."""
    return Scheduler(pool, default=QueuePolicy(policy, **kw))


def job(jobid: int, request: Request, priority: int = 16, t: float | None = None,
        queue: str | None = None) -> PendingJob:
    """A pending job submitted at *t* (default: its id, so ids give the order)."""
    return PendingJob(jobid, priority, float(jobid if t is None else t), 1000, queue, request)


def started(result: PassResult) -> list[int]:
    """Ids allocated by a pass, in order."""
    return [jobid for jobid, _ in result.allocated]


# -- fcfs ---------------------------------------------------------------------------------


def test_fcfs_starts_in_order_and_blocks_at_the_first_that_does_not_fit() -> None:
    pool = pool_of(2)
    sched = sched_of(pool)
    sched.add(job(1, cores(6)))
    sched.add(job(2, cores(4)))  # 2 cores left: blocks
    sched.add(job(3, cores(1)))  # would fit, but nothing jumps job 2
    result = sched.schedule(0.0)
    assert started(result) == [1]
    assert result.annotations[2] == {
        "reason_pending": "insufficient resources: job requests 4 cores, 2 are free",
        "t_estimate": 10.0}
    assert result.annotations[3] == {"reason_pending": WAITING}
    assert result.reserved == {}
    assert set(sched.pending) == {2, 3}


def test_fcfs_head_reason_names_what_is_missing() -> None:
    pool = pool_of(1, 64)
    sched = sched_of(pool)
    pool.alloc(cores(52, 100.0), 99, now=0.0)
    sched.add(job(1, cores(64)))
    result = sched.schedule(0.0)
    assert result.annotations[1] == {
        "reason_pending": "insufficient resources: job requests 64 cores, 12 are free",
        "t_estimate": 100.0}


def test_fcfs_queue_annotation() -> None:
    pool = pool_of(1)
    sched = sched_of(pool)
    pool.alloc(cores(4, 5.0), 99, now=0.0)
    sched.add(job(1, cores(1), queue="batch"))
    assert sched.schedule(0.0).annotations[1]["queue"] == "batch"


# -- EASY -----------------------------------------------------------------------------------


def easy_trace() -> tuple[ResourcePool, Scheduler]:
    """2 nodes of 4 cores, n0 busy until 100: a big job blocks, small ones backfill."""
    pool = pool_of(2)
    pool.alloc(node(1, 4, 100.0), 99, now=0.0)  # n0
    sched = sched_of(pool, "easy")
    sched.add(job(1, cores(8, 50.0)))       # needs both nodes: reserved at 100
    sched.add(job(2, cores(2, 50.0)))       # ends at 50 < 100: backfills
    sched.add(job(3, cores(2, 200.0)))      # would run into job 1's window
    sched.add(job(4, cores(1, 0.0)))        # unlimited: would run into it forever
    sched.add(job(5, cores(8, 10.0)))       # second blocked job: no reservation under EASY
    return pool, sched


def test_easy_reserves_the_first_blocked_job_and_backfills_around_it() -> None:
    pool, sched = easy_trace()
    result = sched.schedule(0.0)
    assert started(result) == [2]
    assert result.reserved == {1: 100.0}
    assert pool.reservations() == {1: (100.0, 150.0)}
    ann = result.annotations
    assert ann[1]["t_estimate"] == 100.0
    assert ann[1]["reason_pending"].endswith(f"; reserved from {format_time(100.0)}")
    assert format_time(100.0) == "1970-01-01T00:01:40Z"
    for jobid in (3, 4, 5):
        assert "t_estimate" not in ann[jobid]
        assert ann[jobid]["reason_pending"].endswith(
            "; waiting behind reserved higher-priority jobs")


def test_unlimited_jobs_backfill_only_on_resources_no_reservation_needs() -> None:
    # n0, n1 have property x; job 1 wants both and waits for n0 (busy until 100).
    pool = ResourcePool(Inventory.from_config([
        {"hosts": "n[0-1]", "cores": "0-3", "properties": ["x"]},
        {"hosts": "n2", "cores": "0-3"}]), clock=lambda: 0.0)
    pool.alloc(whole(1, 100.0), 99, now=0.0)  # n0
    sched = sched_of(pool, "easy")
    sched.add(job(1, whole(2, 10.0, constraint=parse({"properties": ["x"]}))))
    sched.add(job(2, cores(1, 0.0)))  # unlimited
    sched.add(job(3, cores(1, 0.0)))
    result = sched.schedule(0.0)
    assert result.reserved == {1: 100.0}
    assert started(result) == [2, 3]
    for _, rset in result.allocated:
        assert rset.ranks.encode() == "2"
    assert pool.allocation_of(1).ranks.encode() == "0-1"


def test_easy_with_reservation_depth_zero_reserves_nothing() -> None:
    pool, _ = easy_trace()
    sched = sched_of(pool, "easy", reservation_depth=0)
    sched.add(job(1, cores(8, 50.0)))
    sched.add(job(3, cores(2, 200.0)))
    result = sched.schedule(0.0)
    assert result.reserved == {}
    assert started(result) == [3]  # nothing protects job 1: documented


# -- conservative ------------------------------------------------------------------------------


def three_nodes() -> ResourcePool:
    """n0 busy until 100, n1 until 10, n2 free."""
    pool = pool_of(3)
    pool.alloc(whole(1, 100.0, constraint=on(0)), 90, now=0.0)
    pool.alloc(whole(1, 10.0, constraint=on(1)), 91, now=0.0)
    return pool


def add_conservative_trace(sched: Scheduler) -> None:
    """Job 1 (3 nodes) waits for n0 at 100; job 2 (2 nodes, 50 s) fits n1+n2 from 10 to 60;
    job 3 (1 node, 50 s) fits n2 now without touching job 1, but would delay job 2.
    """
    sched.add(job(1, node(3, 4, 10.0)))
    sched.add(job(2, node(2, 4, 50.0)))
    sched.add(job(3, node(1, 4, 50.0)))


def test_conservative_protects_every_reservation() -> None:
    sched = sched_of(three_nodes(), "conservative")
    add_conservative_trace(sched)
    result = sched.schedule(0.0)
    assert started(result) == []
    assert result.reserved == {1: 100.0, 2: 10.0, 3: 110.0}
    assert result.annotations[3]["t_estimate"] == 110.0


def test_easy_protects_only_the_first() -> None:
    sched = sched_of(three_nodes(), "easy")
    add_conservative_trace(sched)
    result = sched.schedule(0.0)
    assert started(result) == [3]
    assert result.reserved == {1: 100.0}


def test_conservative_reservation_depth_limits_reservations() -> None:
    sched = sched_of(three_nodes(), "conservative", reservation_depth=1)
    add_conservative_trace(sched)
    result = sched.schedule(0.0)
    assert result.reserved == {1: 100.0}
    assert started(result) == [3]
    assert "t_estimate" not in result.annotations[2]


def test_cancelling_a_reserved_job_lets_the_next_move_up() -> None:
    pool = pool_of(1)
    pool.alloc(cores(4, 10.0), 99, now=0.0)
    sched = sched_of(pool, "conservative")
    sched.add(job(1, cores(4, 10.0)))
    sched.add(job(2, cores(4, 10.0)))
    assert sched.schedule(0.0).reserved == {1: 10.0, 2: 20.0}
    assert sched.remove(1) and not sched.remove(1)
    result = sched.schedule(0.0)
    assert result.reserved == {2: 10.0}
    assert result.annotations[2]["t_estimate"] == 10.0
    assert 1 not in result.annotations


# -- priorities, depth, denial, several queues ------------------------------------------------


def test_priority_changes_reorder() -> None:
    pool = pool_of(1)
    pool.alloc(cores(4, 10.0), 99, now=0.0)
    sched = sched_of(pool)
    sched.add(job(1, cores(4)))
    sched.add(job(2, cores(4)))
    first = sched.schedule(0.0).annotations
    assert "t_estimate" in first[1] and first[2] == {"reason_pending": WAITING}
    sched.prioritize(2, 20)
    sched.prioritize(7, 20)  # unknown: ignored
    assert [j.id for j in sched.ordered(None)] == [2, 1]
    second = sched.schedule(0.0).annotations
    assert "t_estimate" in second[2] and second[1] == {"reason_pending": WAITING}
    pool.free(99)
    assert started(sched.schedule(10.0)) == [2]


def test_ties_go_to_the_earlier_submit_then_the_lower_id() -> None:
    pool = pool_of(1)
    sched = sched_of(pool)
    sched.add(job(5, cores(4), t=1.0))
    sched.add(job(3, cores(4), t=2.0))
    sched.add(job(4, cores(4), t=2.0))
    assert [j.id for j in sched.ordered(None)] == [5, 3, 4]
    assert started(sched.schedule(0.0)) == [5]


def test_infeasible_jobs_are_denied_with_the_pool_note() -> None:
    pool = pool_of(1)
    sched = sched_of(pool)
    sched.add(job(1, cores(8)))
    sched.add(job(2, cores(2)))
    result = sched.schedule(0.0)
    assert result.denied == [(1, "job requests 8 cores, only 4 exist")]
    assert started(result) == [2]
    assert not sched.pending


def test_queue_depth_limits_what_a_pass_considers() -> None:
    pool = pool_of(1)
    pool.alloc(cores(4, 10.0), 99, now=0.0)
    sched = sched_of(pool, "easy", queue_depth=2)
    for i in (1, 2, 3):
        sched.add(job(i, cores(1)))
    result = sched.schedule(0.0)
    assert set(result.annotations) == {1, 2} and result.considered == 2
    sched.prioritize(3, 99)
    result = sched.schedule(0.0)
    assert set(result.annotations) == {1, 2, 3}
    assert result.annotations[2] == {"reason_pending": BEYOND_DEPTH}
    # told once: the worker keeps it until the job is considered again
    assert 2 not in sched.schedule(0.0).annotations


def test_queues_are_independent() -> None:
    pool = ResourcePool(Inventory.from_config([
        {"hosts": "a[0-1]", "cores": "0-3", "properties": ["a"]},
        {"hosts": "b[0-1]", "cores": "0-3", "properties": ["b"]}]), clock=lambda: 0.0)
    sched = Scheduler(pool, {"a": QueuePolicy("fcfs"), "b": QueuePolicy("easy")})
    qa, qb = parse({"properties": ["a"]}), parse({"properties": ["b"]})
    pool.alloc(cores(1, 10.0, constraint=qa), 99, now=0.0)
    sched.add(job(1, cores(16, constraint=qa), queue="a"))  # infeasible on a
    sched.add(job(2, cores(8, constraint=qa), queue="a"))   # blocks queue a
    sched.add(job(3, cores(1, constraint=qa), queue="a"))   # would fit, waits (fcfs)
    sched.add(job(4, cores(8, constraint=qb), queue="b"))   # queue b goes on
    sched.add(job(5, cores(4, constraint=qb), queue="b"))   # blocked: reserved (easy)
    result = sched.schedule(0.0)
    assert [j for j, _ in result.denied] == [1]
    assert started(result) == [4]
    assert result.reserved == {5: 10.0}
    assert result.annotations[2]["t_estimate"] == 10.0
    assert sched.policy_of("a").policy == "fcfs" and sched.policy_of("zzz").policy == "fcfs"
    assert result.annotations[3] == {"reason_pending": WAITING, "queue": "a"}


def test_highest_priority_head_goes_first_whatever_its_queue() -> None:
    pool = pool_of(1)
    sched = Scheduler(pool, {"a": QueuePolicy("fcfs"), "b": QueuePolicy("fcfs")})
    sched.add(job(1, cores(4), priority=10, queue="a"))
    sched.add(job(2, cores(4), priority=20, queue="b"))
    result = sched.schedule(0.0)
    assert started(result) == [2]
    assert result.annotations[1]["queue"] == "a"


def test_reservations_of_one_queue_bind_the_others() -> None:
    pool = pool_of(2)
    pool.alloc(node(1, 4, 100.0), 99, now=0.0)
    sched = Scheduler(pool, {"big": QueuePolicy("easy"), "small": QueuePolicy("fcfs")})
    sched.add(job(1, cores(8, 50.0), priority=20, queue="big"))
    sched.add(job(2, cores(2, 200.0), priority=10, queue="small"))  # would delay job 1
    sched.add(job(3, cores(2, 50.0), priority=10, queue="small"))
    result = sched.schedule(0.0)
    assert result.reserved == {1: 100.0}
    assert started(result) == []  # fcfs: job 2 blocks its queue
    assert result.annotations[3] == {"reason_pending": WAITING, "queue": "small"}


def test_unknown_start_uses_no_reservation() -> None:
    pool = pool_of(2)
    pool.alloc(whole(1, 0.0, constraint=on(0)), 98, now=0.0)  # n0 forever
    pool.alloc(whole(1, 10.0, constraint=on(1)), 99, now=0.0)
    sched = sched_of(pool, "easy")
    sched.add(job(1, whole(2)))        # needs n0: no start known
    sched.add(job(2, whole(1, 20.0)))  # gets the reservation instead
    sched.add(job(3, cores(1, 5.0)))   # ends before 10: backfills
    result = sched.schedule(0.0)
    assert result.annotations[1]["reason_pending"].endswith(NO_ESTIMATE)
    assert "t_estimate" not in result.annotations[1]
    assert result.reserved == {2: 10.0}
    assert started(result) == []  # n1 is busy until 10 and n0 forever: nowhere to go


def test_unknown_starts_are_tried_a_bounded_number_of_times() -> None:
    pool = pool_of(1)
    pool.alloc(cores(4, 0.0), 98, now=0.0)
    sched = sched_of(pool, "conservative")
    for i in range(20):
        sched.add(job(i + 1, cores(1, float(i + 1))))  # distinct requests: no shortcut
    result = sched.schedule(0.0)
    reasons = [result.annotations[i + 1]["reason_pending"] for i in range(20)]
    assert sum(r.endswith(NO_ESTIMATE) for r in reasons) == UNKNOWN_TRIES
    assert result.reserved == {}


def test_fcfs_unknown_estimate() -> None:
    pool = pool_of(1)
    pool.alloc(cores(4, 0.0), 98, now=0.0)
    sched = sched_of(pool)
    sched.add(job(1, cores(1)))
    assert sched.schedule(0.0).annotations[1] == {
        "reason_pending": "insufficient resources: job requests 1 cores, 0 are free; "
                          + NO_ESTIMATE}


# -- annotations, interning, bookkeeping ---------------------------------------------------------


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_annotations_are_stable_when_nothing_changes(policy: str) -> None:
    pool = three_nodes()
    sched = sched_of(pool, policy)
    add_conservative_trace(sched)
    sched.add(job(4, cores(2, 0.0)))
    sched.add(job(5, whole(5)))
    sched.schedule(0.0)  # may start jobs: the state changes
    again = sched.schedule(0.0)
    assert not again.allocated
    later = sched.schedule(5.0)  # time moves, nothing ends
    assert later.annotations == again.annotations
    assert set(again.annotations) == set(sched.pending)
    assert later.reserved == again.reserved


def test_requests_are_interned() -> None:
    sched = sched_of(pool_of(1))
    pool = sched.pool
    pool.alloc(cores(4, 10.0), 99, now=0.0)
    for i in range(100):
        sched.add(job(i, cores(2)))
    sched.add(job(100, cores(3)))
    assert sched.requests_held() == 2
    assert len({id(j.request) for j in sched.pending.values()}) == 2
    for i in range(100):
        sched.remove(i)
    assert sched.requests_held() == 1


def test_readding_a_job_replaces_it() -> None:
    sched = sched_of(pool_of(1))
    sched.add(job(1, cores(4), priority=1))
    sched.add(job(1, cores(2), priority=5, queue="q"))
    assert len(sched.pending) == 1
    result = sched.schedule(0.0)
    assert started(result) == [1] and result.allocated[0][1].ncores == 2


def test_many_priority_changes_keep_one_live_entry_per_job() -> None:
    sched = sched_of(pool_of(1))
    sched.pool.alloc(cores(4, 10.0), 99, now=0.0)
    for i in range(10):
        sched.add(job(i, cores(1)))
    for p in range(3000):
        sched.prioritize(p % 10, p)
    order = sched._orders[None]
    assert len(order.heap) <= 2 * 10 + 1024 + 1
    result = sched.schedule(0.0)
    assert result.considered == 10
    assert sched.ordered(None)[0].id == 9


def test_a_failing_pass_loses_no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = pool_of(1)
    sched = sched_of(pool, "easy")
    for i in range(1, 4):
        sched.add(job(i, cores(1)))
    real = pool.alloc
    calls = []

    def flaky(*args: Any, **kw: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real(*args, **kw)

    monkeypatch.setattr(pool, "alloc", flaky)
    with pytest.raises(RuntimeError):
        sched.schedule(0.0)
    monkeypatch.setattr(pool, "alloc", real)
    assert set(sched.pending) == {2, 3}
    assert started(sched.schedule(0.0)) == [2, 3]


@pytest.mark.parametrize("kwargs", [
    {"policy": "lifo"}, {"queue_depth": 0}, {"reservation_depth": -1},
    {"placement": "random"}, {"queue_depth": True}])
def test_bad_queue_policy(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^QueuePolicy\."):
        QueuePolicy(**kwargs)


def test_bad_pending_jobs() -> None:
    sched = sched_of(pool_of(1))
    with pytest.raises(ValueError, match="t_submit"):
        sched.add(PendingJob(1, 16, math.nan, 1, None, cores(1)))
    with pytest.raises(ValueError, match="expected a Request"):
        sched.add(PendingJob(1, 16, 0.0, 1, None, "4 cores"))  # type: ignore[arg-type]
    assert not sched.pending


def test_job_already_holding_an_allocation_is_denied() -> None:
    pool = pool_of(1)
    pool.alloc(cores(1), 1, now=0.0)
    sched = sched_of(pool)
    sched.add(job(1, cores(1)))
    result = sched.schedule(0.0)
    assert result.denied == [(1, "alloc: job 1 already has an allocation")]


# -- simulations: the promises of each policy -------------------------------------------------


@dataclass
class Trace:
    """What a simulation saw."""

    starts: dict[int, float] = field(default_factory=dict)
    first_reserved: dict[int, float] = field(default_factory=dict)
    denied: set[int] = field(default_factory=set)
    passes: int = 0


def simulate(pool: ResourcePool, sched: Scheduler, durations: dict[int, float],
             limit: int = 500) -> Trace:
    """Run passes, moving time to the next end and freeing jobs after *durations*
    (their time limit, or less: a job may end early, never late).

    Checks on the way: every reservation is never later than the job's
    previous one, and a reserved job's t_estimate is its reservation start.
    """
    trace = Trace()
    running: dict[int, float] = {}
    last: dict[int, float] = {}
    now = 0.0
    while sched.pending and trace.passes < limit:
        result = sched.schedule(now)
        trace.passes += 1
        for jobid, rset in result.allocated:
            trace.starts[jobid] = now
            assert rset.starttime == now
            running[jobid] = now + durations[jobid]
        trace.denied.update(j for j, _ in result.denied)
        for jobid, when in result.reserved.items():
            assert when >= now
            assert result.annotations[jobid]["t_estimate"] == when
            assert when <= last.get(jobid, math.inf), (jobid, when, last.get(jobid))
            last[jobid] = when
            trace.first_reserved.setdefault(jobid, when)
        if not sched.pending:
            break
        assert running, "pending jobs but nothing runs: the machine would idle forever"
        now = min(running.values())
        for jobid in [j for j, end in running.items() if end == now]:
            del running[jobid]
            pool.free(jobid)
    assert not sched.pending, "simulation did not finish"
    return trace


NODES = 3
CORES = 4


@st.composite
def workloads(draw: st.DrawFn) -> list[tuple[Request, int]]:
    """Small random workloads (requests with integer durations, priorities)."""
    n = draw(st.integers(1, 12))
    out: list[tuple[Request, int]] = []
    for _ in range(n):
        duration = float(draw(st.integers(1, 20)))
        kind = draw(st.sampled_from(["cores", "node", "whole"]))
        if kind == "cores":
            req = cores(draw(st.integers(1, NODES * CORES)), duration)
        elif kind == "node":
            req = node(draw(st.integers(1, NODES)), draw(st.integers(1, CORES)), duration)
        else:
            req = whole(draw(st.integers(1, NODES)), duration)
        out.append((req, draw(st.sampled_from([16, 16, 16, 10, 20]))))
    return out


def run(policy: str, work: list[tuple[Request, int]], early: list[float] | None = None,
        **kw: Any) -> tuple[Trace, list[int]]:
    """Simulate *work* under *policy* on NODES x CORES; the trace and the queue order.

    *early[i]* (0..1] scales job i's run time: it ends before its limit.
    """
    pool = pool_of(NODES, CORES)
    sched = sched_of(pool, policy, **kw)
    durations = {}
    for i, (req, prio) in enumerate(work, start=1):
        sched.add(job(i, req, priority=prio))
        scale = early[i - 1] if early else 1.0
        durations[i] = max(1.0, float(math.ceil(req.duration * scale)))
    order = [j.id for j in sched.ordered(None)]
    trace = simulate(pool, sched, durations)
    assert len(trace.starts) == len(work)
    return trace, order


SIM = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EARLY = st.lists(st.floats(0.05, 1.0), min_size=12, max_size=12)


@SIM
@given(workloads(), EARLY)
def test_easy_never_delays_the_reserved_job(work: list[tuple[Request, int]],
                                            early: list[float]) -> None:
    # Holds even when jobs end before their time limit.
    trace, _ = run("easy", work, early)
    for jobid, when in trace.first_reserved.items():
        assert trace.starts[jobid] <= when


@SIM
@given(workloads(), st.integers(1, 16))
def test_conservative_never_delays_any_reservation(work: list[tuple[Request, int]],
                                                   depth: int) -> None:
    # Jobs end at their time limits (see the guide for early ends).
    trace, _ = run("conservative", work, reservation_depth=depth)
    for jobid, when in trace.first_reserved.items():
        assert trace.starts[jobid] <= when


@SIM
@given(workloads(), EARLY)
def test_fcfs_keeps_strict_order(work: list[tuple[Request, int]], early: list[float]) -> None:
    trace, order = run("fcfs", work, early)
    times = [trace.starts[j] for j in order]
    assert times == sorted(times)


def test_early_end_lets_a_higher_priority_job_take_a_later_reservation() -> None:
    # The documented limit of re-planning in priority order: job 2 ends early,
    # job 3 (before job 4 in the queue) can then start at once and takes the
    # node that job 4 had reserved.
    pool = pool_of(2, 1)
    sched = sched_of(pool, "conservative")
    sched.add(job(1, whole(1, 10.0)))
    sched.add(job(2, whole(1, 20.0)))
    sched.add(job(3, whole(2, 10.0)))
    sched.add(job(4, whole(1, 5.0)))
    result = sched.schedule(0.0)
    assert started(result) == [1, 2]
    assert result.reserved == {3: 20.0, 4: 10.0}
    pool.free(1)
    pool.free(2)  # ends at 10 instead of 20
    result = sched.schedule(10.0)
    assert started(result) == [3]
    assert result.reserved == {4: 20.0}


# -- the pass's shortcuts change nothing --------------------------------------------------------


def naive_pass(pool: ResourcePool, jobs: list[PendingJob], policy: QueuePolicy,
               now: float) -> tuple[list[tuple[int, str]], dict[int, float]]:
    """The policy written plainly: every job tried, every estimate walked from *now*."""
    pool.clear_reservations()
    started: list[tuple[int, str]] = []
    reserved: dict[int, float] = {}
    blocked = False
    unknown = 0
    for j in jobs:
        if blocked:
            continue
        try:
            rset = pool.alloc(j.request, j.id, policy.placement, now=now)
        except InfeasibleRequest:
            continue
        except InsufficientResources:
            if policy.policy == "fcfs":
                blocked = True
            elif len(reserved) < policy.reservations and unknown < UNKNOWN_TRIES:
                when = pool.earliest_start(j.request, now, jobid=j.id)
                if when is None or when == math.inf:
                    unknown += 1
                else:
                    pool.alloc(j.request, j.id, policy.placement, start=when)
                    reserved[j.id] = when
            continue
        started.append((j.id, rset.dumps()))
    return started, reserved


@st.composite
def busy_states(draw: st.DrawFn) -> tuple[list[tuple[Request, float]], list[Request]]:
    """Running jobs (request, start in the past) and pending requests of a few shapes."""
    shapes = [cores(1), cores(3), cores(6), node(1, 2), node(2, 4), whole(1), whole(2)]
    durations = [0.0, 5.0, 10.0, 30.0]

    def request() -> Request:
        base = draw(st.sampled_from(shapes))
        return Request(nnodes=base.nnodes, nslots=base.nslots, exclusive=base.exclusive,
                       duration=draw(st.sampled_from(durations)))

    running = [(request(), -float(draw(st.integers(0, 4))))
               for _ in range(draw(st.integers(0, 8)))]
    pending = [request() for _ in range(draw(st.integers(1, 25)))]
    return running, pending


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_states(), st.sampled_from(["fcfs", "easy", "conservative"]),
       st.integers(0, 6), st.sampled_from(["first-fit", "best-fit", "hinode"]))
def test_a_pass_matches_the_plain_algorithm(state: tuple[list[tuple[Request, float]],
                                                         list[Request]],
                                            policy: str, depth: int, placement: str) -> None:
    running, pending = state
    pools = [pool_of(NODES, CORES), pool_of(NODES, CORES)]
    for pool in pools:
        for i, (req, start) in enumerate(running):
            try:
                pool.alloc(req, 1000 + i, now=start)
            except InsufficientResources:
                pass  # a random state: what does not fit is left out
    qp = QueuePolicy(policy, reservation_depth=depth, placement=placement)
    sched = Scheduler(pools[0], default=qp)
    for i, req in enumerate(pending):
        sched.add(job(i, req))
    jobs = sched.ordered(None)
    result = sched.schedule(0.0)
    started, reserved = naive_pass(pools[1], jobs, qp, 0.0)
    assert [(j, r.dumps()) for j, r in result.allocated] == started
    assert result.reserved == reserved
    assert pools[0].reservations() == pools[1].reservations()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_states(), st.sampled_from(["fcfs", "easy", "conservative"]),
       st.integers(0, 6))
def test_a_quick_pass_starts_what_a_full_pass_starts(
        state: tuple[list[tuple[Request, float]], list[Request]], policy: str,
        depth: int) -> None:
    running, pending = state
    scheds = []
    for _ in range(2):
        pool = pool_of(NODES, CORES)
        for i, (req, start) in enumerate(running):
            try:
                pool.alloc(req, 1000 + i, now=start)
            except InsufficientResources:
                pass
        sched = Scheduler(pool, default=QueuePolicy(policy, reservation_depth=depth))
        for i, req in enumerate(pending):
            sched.add(job(i, req))
        scheds.append(sched)
    full, quick = scheds[0].schedule(0.0), scheds[1].schedule(0.0, full=False)
    assert [(j, r.dumps()) for j, r in quick.allocated] == \
        [(j, r.dumps()) for j, r in full.allocated]
    assert quick.considered <= full.considered
    assert set(scheds[0].pending) == set(scheds[1].pending)


def test_a_quick_pass_on_a_full_machine_looks_at_nothing() -> None:
    pool = pool_of(1, 2)
    sched = sched_of(pool, "easy")
    for i in range(1, 1001):
        sched.add(job(i, cores(1)))
    assert started(sched.schedule(0.0, full=False)) == [1, 2]
    result = sched.schedule(0.0, full=False)
    assert result.considered == 0 and not result.annotations
    pool.free(1)
    result = sched.schedule(0.0, full=False)
    assert started(result) == [3] and result.considered == 1
    result = sched.schedule(0.0)  # a full pass annotates every job it considers
    assert result.considered == 997 and len(result.annotations) == 997


def test_a_quick_backfill_pass_passes_over_jobs_bigger_than_what_is_free() -> None:
    # 1 of 4 cores free: job 1 (4 cores) is reserved for when the runner ends, jobs
    # 2..500 (2 cores) cannot start and are not looked at, job 501 (1 core, short)
    # backfills; a full pass tells every one of them why it waits.
    def backlog(policy: str) -> Scheduler:
        pool = pool_of(1, 4)
        pool.alloc(cores(3, duration=100.0), 9999, now=0.0)
        sched = sched_of(pool, policy)
        sched.add(job(1, cores(4)))
        for i in range(2, 501):
            sched.add(job(i, cores(2)))
        sched.add(job(501, cores(1, duration=5.0)))
        return sched

    quick = backlog("easy").schedule(0.0, full=False)
    assert started(quick) == [501]
    assert set(quick.annotations) == {1} and quick.reserved == {1: 100.0}
    full = backlog("easy").schedule(0.0)
    assert started(full) == [501] and len(full.annotations) == 500
    # fcfs never passes over a job: the first one that cannot start blocks the queue
    assert started(backlog("fcfs").schedule(0.0, full=False)) == []


def test_a_quick_pass_sees_a_smaller_need_that_came_after_the_last_pass() -> None:
    """The held requests' least needs are kept between passes: a request needing less
    than any before must be seen (a quick pass stops when no need fits what is free)."""
    pool = pool_of(1, cores=4)
    pool.alloc(cores(3), 100, now=0.0)  # one core free
    sched = sched_of(pool, "easy")
    sched.add(PendingJob(1, 10, 0.0, 1, None, cores(2)))
    assert sched.schedule(0.0, full=False).allocated == []
    sched.add(PendingJob(2, 10, 1.0, 1, None, cores(1)))
    assert [j for j, _ in sched.schedule(0.0, full=False).allocated] == [2]
    # and one that is gone no longer counts: nothing left that fits stops the pass
    sched.remove(1)
    pool.free(100)
    sched.add(PendingJob(3, 10, 2.0, 1, None, cores(3)))
    assert [j for j, _ in sched.schedule(0.0, full=False).allocated] == [3]
