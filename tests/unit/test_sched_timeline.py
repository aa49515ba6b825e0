"""The nodes' ends in time (fluxes.domain.sched.timeline) and what the pool plans with them."""

from __future__ import annotations

import math
from heapq import merge

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.domain.sched.pool import InsufficientResources, ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.timeline import NodeEnds
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet

# (op, rank, job, end): hold or drop a job on a rank, or move a job's end
_OPS = st.lists(st.tuples(st.sampled_from(["hold", "drop", "move"]), st.integers(0, 3),
                          st.integers(0, 5), st.sampled_from([10.0, 20.0, 30.0, math.inf])),
                max_size=40)


@settings(max_examples=300, deadline=None)
@example([("hold", 0, 1, 10.0), ("hold", 0, 2, 20.0), ("drop", 0, 2, 0.0)], 15.0)
@given(_OPS, st.sampled_from([0.0, 10.0, 15.0, 20.0, 30.0, math.inf]))
def test_node_ends_agree_with_a_scan_of_the_owners(ops: list, when: float) -> None:
    ends: dict[int, float] = {}
    owners: dict[int, set[int]] = {}
    nodes = NodeEnds(lambda jobid: ends[jobid])
    for op, r, job, end in ops:
        held = owners.setdefault(r, set())
        if op == "hold" and job not in held and (job not in ends or ends[job] == end
                                                 or not any(job in o for o in owners.values())):
            ends[job] = end
            held.add(job)
            nodes.hold(r, job, end)
        elif op == "drop" and job in held:
            held.discard(job)
            nodes.drop(r, job, ends[job])
        elif op == "move" and job in ends and any(job in o for o in owners.values()):
            ends[job] = end
            nodes.moved(q for q, o in owners.items() if job in o)
    last = {r: max(ends[j] for j in held) for r, held in owners.items() if held}
    assert dict(nodes.last_ends()) == last
    down = {1}
    assert sorted(nodes.idle_by(when, down)) == sorted(r for r, e in last.items()
                                                       if e <= when and r not in down)
    begin = 12.0
    want = sorted((max(e, begin), r) for r, e in last.items()
                  if e < math.inf and r not in down and r in IDSet("0-4"))
    assert list(nodes.times(begin, down, IDSet("0-4"))) == want


def _whole(nnodes: int, duration: float) -> Request:
    return Request.from_jobspec(Jobspec.from_command(["x"], nnodes=nnodes, ntasks=nnodes,
                                                     exclusive=True, duration=duration))


def _scan_walk(pool: ResourcePool, request: Request, begin: float, jobid: int) -> float:
    """The whole-node walk as a scan of every node's last end (what the pool did)."""
    live = pool._state
    ends = sorted(max(e, begin) for r, e in pool._nodes.last_ends().items()
                  if e < math.inf and r not in live.down)
    res_ends = sorted(e for j, (_s, e) in pool.reservations().items()
                      if begin < e < math.inf and j != jobid)
    plan = pool._plan(request)
    for when in sorted(set(merge(ends, res_ends))):
        if len(live.idle) + sum(1 for e in ends if e <= when) < plan.nmin:
            continue
        idle = live.idle | IDSet(r for r, e in pool._nodes.last_ends().items()
                                 if e <= when and r not in live.down)
        if pool._placer.place(live.with_idle(idle), plan, "first-fit",
                              pool._overlay(when, when + request.duration, jobid)):
            return when
    return math.inf


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from([10.0, 25.0, 40.0, 0.0])),
                min_size=1, max_size=8),
       st.integers(1, 6), st.sampled_from([5.0, 30.0]), st.booleans())
def test_whole_node_estimates_agree_with_a_scan(held: list, want: int, length: float,
                                                reserve: bool) -> None:
    """earliest_start of whole nodes reads the nodes' ends in order only until the
    request fits: the same answer as a scan of every node (with a reservation too)."""
    inv = Inventory([Target(r, f"n{r}", IDSet("0-1"), IDSet()) for r in range(6)])
    pool = ResourcePool(inv, clock=lambda: 0.0)
    for jobid, (size, limit) in enumerate(held):
        try:
            pool.alloc(_whole(size, limit), jobid, now=0.0)
        except Exception:
            break
    pool.mark_down("5")
    if reserve:
        when = pool.earliest_start(_whole(2, 20.0), 1.0, jobid=90)
        if when is not None and when < math.inf:
            pool.alloc(_whole(2, 20.0), 90, start=when)
    request = _whole(want, length)
    got = pool.earliest_start(request, 1.0, jobid=91)
    plan = pool._plan(request)
    if plan.note is None and got != 1.0:
        assert got == _scan_walk(pool, request, 1.0, 91)


def test_allocations_r_is_what_from_ranks_builds() -> None:
    cores, gpus = IDSet("0-31"), IDSet("0-1")
    nodes = {3: (cores, gpus), 1: (cores, IDSet()), 7: (IDSet("4"), IDSet())}
    built = ResourceSet.of_parts(nodes, {1: "a1", 3: "a3", 7: "a7"}, {"big": IDSet("1,3")})
    same = ResourceSet.from_ranks(nodes, hostnames={1: "a1", 3: "a3", 7: "a7"},
                                  properties={"big": IDSet("1,3")})
    assert built == same and built.encode() == same.encode()
    assert built.cores(3) == cores and built.cores(3) is not cores  # accessors copy
    assert str(ResourceSet.of_parts({0: (cores, IDSet())}).ranks) == "0"


def test_a_try_refused_by_a_reservation_fits_once_it_is_gone() -> None:
    """Tries refused by counts (idle nodes outside the reservations, the windows'
    overlays kept for a pass) see the reservations change at once."""
    inv = Inventory([Target(r, None, IDSet("0-1"), IDSet()) for r in range(2)])
    pool = ResourcePool(inv, clock=lambda: 0.0)
    pool.alloc(_whole(2, 50.0), 1, start=10.0)
    pool.alloc(_whole(1, 10.0), 9, start=1000.0)  # stays: the reservations never empty
    short, long_ = _whole(1, 5.0), _whole(1, 60.0)
    for _ in range(2):  # asked twice: the second answer is the kept one
        try:
            pool.alloc(long_, 2, now=0.0)
            raise AssertionError("ran into the reservation")
        except InsufficientResources as exc:
            assert "whole node" in str(exc)
    assert pool.alloc(short, 3, now=0.0).ranks == IDSet("0")
    pool.cancel_reservation(1)
    assert pool.alloc(long_, 2, now=0.0).ranks == IDSet("1")
