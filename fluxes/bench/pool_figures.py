"""Measurements of the resource pool, for ``fluxes bench sched`` (or ``python -m``).

Each function builds a synthetic machine, times one workload with
``time.perf_counter`` and returns a dict of figures; :func:`run_all` runs
them all.  Workloads are seeded, so runs are comparable.  Nothing here is
used by the pool itself.
"""

from __future__ import annotations

import random
import time
from typing import Any

from fluxes.domain.sched.errors import InsufficientResources
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request

__all__ = [
    "bench_crowded_earliest_start",
    "bench_earliest_start",
    "bench_easy_pass",
    "bench_exclusive",
    "bench_small_jobs",
    "machine",
    "run_all",
]


def machine(nodes: int, cores: int, gpus: int = 0) -> Inventory:
    """An inventory of *nodes* identical nodes ``node0..`` with *cores* cores, *gpus* gpus."""
    entry: dict[str, Any] = {"hosts": f"node[0-{nodes - 1}]", "cores": f"0-{cores - 1}"}
    if gpus:
        entry["gpus"] = f"0-{gpus - 1}"
    return Inventory.from_config([entry])


def bench_small_jobs(nodes: int = 1024, cores: int = 64, count: int = 50_000,
                     policy: str = "first-fit") -> dict[str, Any]:
    """1-core jobs on a *nodes* x *cores* machine: allocs/s filling it, then free+alloc churn."""
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    req = Request(nslots=1, slot_size=1, duration=3600.0)
    count = min(count, nodes * cores)
    t0 = time.perf_counter()
    for jobid in range(count):
        pool.alloc(req, jobid, policy, now=0.0)
    fill = time.perf_counter() - t0
    rng = random.Random(1)
    live = list(range(count))
    churn = min(count, 20_000)
    t0 = time.perf_counter()
    for jobid in range(count, count + churn):
        victim = live.pop(rng.randrange(len(live)))
        pool.free(victim)
        pool.alloc(req, jobid, policy, now=0.0)
        live.append(jobid)
    cycle = time.perf_counter() - t0
    return {"workload": f"1-core jobs, {nodes}x{cores}, {policy}",
            "allocs_per_s": round(count / fill), "free_alloc_pairs_per_s": round(churn / cycle)}


def bench_exclusive(nodes: int = 8192, cores: int = 64, per_job: int = 4,
                    policy: str = "first-fit") -> dict[str, Any]:
    """*per_job*-node exclusive jobs on *nodes* nodes: allocs/s filling, then churn."""
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    req = Request(nnodes=per_job, exclusive=True, duration=3600.0)
    count = nodes // per_job
    t0 = time.perf_counter()
    for jobid in range(count):
        pool.alloc(req, jobid, policy, now=0.0)
    fill = time.perf_counter() - t0
    rng = random.Random(2)
    live = list(range(count))
    churn = 5_000
    t0 = time.perf_counter()
    for jobid in range(count, count + churn):
        victim = live.pop(rng.randrange(len(live)))
        pool.free(victim)
        pool.alloc(req, jobid, policy, now=0.0)
        live.append(jobid)
    cycle = time.perf_counter() - t0
    return {"workload": f"{per_job}-node exclusive jobs, {nodes} nodes, {policy}",
            "allocs_per_s": round(count / fill), "free_alloc_pairs_per_s": round(churn / cycle)}


def _random_request(rng: random.Random, nodes: int, cores: int, big: bool = True) -> Request:
    """A job of a mixed workload: many small core jobs, some node jobs, a few big ones."""
    kind = rng.random() * (1.0 if big else 0.97)
    duration = float(rng.choice((600, 1800, 3600, 7200, 14400)))
    if kind < 0.6:
        return Request(nslots=rng.choice((1, 1, 2, 4, 8, 16)), slot_size=rng.choice((1, 2, 4)),
                       duration=duration)
    if kind < 0.97:
        return Request(nnodes=rng.choice((1, 2, 4, 8, 16)), exclusive=True, duration=duration)
    return Request(nnodes=rng.randint(nodes // 16, nodes // 2), exclusive=True,
                   duration=duration)


def _busy_pool(nodes: int, cores: int, seed: int,
               fill: float = 1.0) -> tuple[ResourcePool, random.Random]:
    """A pool filled (to about *fill* of its cores) with running jobs of the mixed
    workload, which started in the past and end at random times.
    """
    rng = random.Random(seed)
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    jobid = 0
    misses = 0
    total = nodes * cores
    while misses < 200 and pool.counts()["free_cores"] > total * (1 - fill):
        req = _random_request(rng, nodes, cores, big=False)
        try:
            pool.alloc(req, jobid, now=-rng.uniform(0, req.duration))
            jobid += 1
        except InsufficientResources:
            misses += 1
    return pool, rng


def bench_easy_pass(nodes: int = 1024, cores: int = 64, pending: int = 10_000,
                    seed: int = 3, fill: float = 1.0) -> dict[str, Any]:
    """One EASY backfill pass over *pending* jobs on a busy machine.

    The pass tries each job in order now; the first that does not fit gets a
    reservation at its earliest start; later ones start only if they fit
    now without running into that reservation.
    """
    pool, rng = _busy_pool(nodes, cores, seed, fill)
    queue = [_random_request(rng, nodes, cores) for _ in range(pending)]
    first = 1_000_000
    running = len(pool.jobids())
    t0 = time.perf_counter()
    pool.clear_reservations()
    reserved = False
    started = 0
    estimate_s = 0.0
    for i, req in enumerate(queue):
        jobid = first + i
        try:
            pool.alloc(req, jobid, now=0.0)
            started += 1
        except InsufficientResources:
            if not reserved:
                e0 = time.perf_counter()
                when = pool.earliest_start(req, now=0.0)
                estimate_s = time.perf_counter() - e0
                if when is not None and when != float("inf"):
                    pool.alloc(req, jobid, start=when)
                reserved = True
    elapsed = time.perf_counter() - t0
    return {"workload": f"EASY pass, {pending} pending, {nodes}x{cores} filled to {fill:.0%}"
                        f", {running} running",
            "pass_s": round(elapsed, 4), "started": started,
            "earliest_start_ms": round(estimate_s * 1000, 2)}


def bench_earliest_start(nodes: int = 1024, cores: int = 64, count: int = 200,
                         seed: int = 4) -> dict[str, Any]:
    """Average cost of :meth:`ResourcePool.earliest_start` for blocked mixed jobs."""
    pool, rng = _busy_pool(nodes, cores, seed)
    reqs = [_random_request(rng, nodes, cores) for _ in range(count)]
    t0 = time.perf_counter()
    for req in reqs:
        pool.earliest_start(req, now=0.0)
    elapsed = time.perf_counter() - t0
    return {"workload": f"earliest_start, {nodes}x{cores}, {len(pool.jobids())} running",
            "avg_ms": round(elapsed / count * 1000, 3)}


def bench_crowded_earliest_start(nodes: int = 1024, cores: int = 64,
                                 seed: int = 5) -> dict[str, Any]:
    """The worst case for planning: a machine full of 1-core jobs with random end times.

    A whole-node request must wait for every job on some node to end, so
    earliest_start replays most releases; the reservation that follows
    reuses the state it built.
    """
    rng = random.Random(seed)
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    for jobid in range(nodes * cores):
        pool.alloc(Request(duration=float(rng.randint(60, 86400))), jobid, now=0.0)
    out: dict[str, Any] = {"workload": f"earliest_start + reserve, {nodes}x{cores} full of "
                                       f"{nodes * cores} 1-core jobs"}
    for n in (1, nodes // 2):
        req = Request(nnodes=n, exclusive=True, duration=3600.0)
        t0 = time.perf_counter()
        when = pool.earliest_start(req, now=0.0)
        t1 = time.perf_counter()
        if when is not None and when != float("inf"):
            pool.alloc(req, 10**9 + n, start=when)
        t2 = time.perf_counter()
        pool.clear_reservations()
        out[f"{n}_nodes_estimate_ms"] = round((t1 - t0) * 1000, 1)
        out[f"{n}_nodes_reserve_ms"] = round((t2 - t1) * 1000, 1)
    return out


def run_all() -> list[dict[str, Any]]:
    """Every benchmark with its default sizes."""
    return [
        bench_small_jobs(),
        bench_small_jobs(policy="best-fit"),
        bench_small_jobs(policy="worst-fit"),
        bench_exclusive(),
        bench_exclusive(policy="hinode"),
        bench_easy_pass(),
        bench_easy_pass(fill=0.5),
        bench_earliest_start(),
        bench_crowded_earliest_start(),
    ]


if __name__ == "__main__":  # pragma: no cover - manual use
    for result in run_all():
        print(result)
