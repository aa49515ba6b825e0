"""``fluxes bench sched``: the scheduler's policies and pool at cluster sizes (pure Python).

No Redis: the figures are those of :class:`~fluxes.domain.sched.policy.Scheduler`
passes over a :class:`~fluxes.domain.sched.pool.ResourcePool`, as the scheduler
worker runs them.  Workloads are seeded, so runs are comparable; times are
``time.perf_counter`` wall clock on whatever else the machine is doing.

Figures (keys of :func:`run`):

* ``alloc_1core_per_s``: 1-core jobs started by passes (queue depth 1,000)
  filling a ``nodes`` x ``cores`` machine; ``pool_alloc_1core_per_s`` is
  the pool alone;
* ``alloc_exclusive_per_s``: 4-node exclusive jobs filling ``big_nodes``
  nodes, same way;
* ``easy_pass_s`` / ``conservative_pass_s`` / ``fcfs_pass_s``: one pass
  over ``pending`` 1-core jobs (all considered) on the machine full of
  1-core jobs with random end times; ``*_crowded_mixed_pass_s``: the same
  machine, a mixed workload; ``*_crowded_wide_pass_s``: the same machine,
  every job asking for 4 shared nodes of all their cores (the planner's
  worst case); ``*_mixed_pass_s`` / ``*_mixed_half_pass_s``: a mixed
  workload on a machine full (half full) of mixed jobs;
* ``pending_1m_bytes_per_job``, ``pending_1m_add_per_s``,
  ``pending_1m_pass_s``: a Scheduler holding ``million`` pending jobs of a
  few shapes (memory by tracemalloc), and one EASY pass over them;
* ``recovery_s``: a fresh pool adopting the stored R (JSON) of ``running``
  allocations, as the worker does after a hello.

:func:`run_graph` (``fluxes bench sched --graph``) measures the graph pool
(:class:`~fluxes.domain.graph.pool.GraphPool`) on a ``racks`` x
``nodes_per_rack`` graph of 2 sockets x ``cores / 2`` cores: 1-core jobs
started by EASY passes and by the pool alone, and the recovery of
``running`` stored allocations (R with its ``scheduling`` subgraph); and
the scheduler worker's extra work on a graph: ``graph_lead_load_s`` (the
recorded JGF, ``graph_recorded_bytes`` of it, read into a pool when a
scheduler starts leading) and ``graph_worker_alloc_1core_per_s`` (passes of
1-core jobs with each R encoded, subgraph included, as the worker writes it;
``graph_worker_r_bytes_1core`` bytes each).
"""

from __future__ import annotations

import gc
import os
import random
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from fluxes.bench.pool_figures import _busy_pool, _random_request, bench_small_jobs, machine
from fluxes.domain.sched.errors import InsufficientResources
from fluxes.domain.sched.policy import PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.formats.rset import ResourceSet

__all__ = ["run", "run_graph"]

_FIRST_PENDING = 10**7


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of *fn* (garbage collection settled first)."""
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _drain(sched: Scheduler) -> int:
    """Run passes at time 0 until nothing more starts; how many jobs started."""
    total = 0
    while sched.pending:
        started = len(sched.schedule(0.0).allocated)
        if not started:
            break
        total += started
    return total


def fill_rate(nodes: int, cores: int, request: Request, count: int) -> tuple[float, int]:
    """Allocations per second of *count* pending *request* jobs started by EASY passes."""
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    sched = Scheduler(pool, default=QueuePolicy("easy"))
    for i in range(count):
        sched.add(PendingJob(i, 16, float(i), 1000, None, request))
    elapsed, started = _timed(lambda: _drain(sched))
    return started / elapsed, started


def full_of_small_jobs(nodes: int, cores: int, seed: int) -> ResourcePool:
    """A machine whose every core runs a 1-core job ending at a random time (1 min..1 day)."""
    rng = random.Random(seed)
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    req = Request(duration=3600.0)
    for jobid in range(nodes * cores):
        pool.alloc(req, jobid, now=0.0, duration=float(rng.randint(60, 86400)))
    return pool


def pass_time(pool: ResourcePool, requests: list[Request], policy: str,
              depth: int = 16) -> dict[str, Any]:
    """One pass of *policy* over *requests* (all considered): seconds and outcome."""
    sched = Scheduler(pool, default=QueuePolicy(policy, queue_depth=max(len(requests), 1),
                                                reservation_depth=depth))
    for i, req in enumerate(requests):
        sched.add(PendingJob(_FIRST_PENDING + i, 16, float(i), 1000, None, req))
    elapsed, result = _timed(lambda: sched.schedule(0.0))
    # leave the pool as it was for the next measurement
    for jobid, _ in result.allocated:
        pool.free(jobid)
    pool.clear_reservations()
    return {"s": elapsed, "started": len(result.allocated), "reserved": len(result.reserved)}


def _rss() -> int | None:
    """This process's resident set size in bytes (Linux), None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def pending_memory(count: int, pool: ResourcePool, seed: int) -> dict[str, Any]:
    """Memory and add rate of *count* pending jobs, and EASY passes over them on *pool*.

    Memory is the growth of the resident set (run this first in a fresh
    process: memory freed earlier would be reused and hide some growth);
    where that is unknown, tracemalloc's count (which slows adding ~5x).
    """
    rng = random.Random(seed)
    shapes = [Request(nslots=n, duration=float(d)) for n in (1, 2, 4, 16)
              for d in (600, 3600)] + [Request(nnodes=n, exclusive=True, duration=3600.0)
                                       for n in (1, 4)]
    gc.collect()
    before = _rss()
    if before is None:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    sched = Scheduler(pool, default=QueuePolicy("easy"))
    t0 = time.perf_counter()
    for i in range(count):
        # A fresh (equal) Request per job, as the worker parses each jobspec:
        # the scheduler interns them.
        shape = shapes[rng.randrange(len(shapes))]
        req = Request(nnodes=shape.nnodes, nslots=shape.nslots, exclusive=shape.exclusive,
                      duration=shape.duration)
        sched.add(PendingJob(_FIRST_PENDING + i, rng.randint(0, 31), 1.7e9 + i, 1000, None,
                             req))
    add_s = time.perf_counter() - t0
    if before is None:
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        method = "tracemalloc"
    else:
        used = (_rss() or 0) - before
        method = "rss"
    elapsed, _ = _timed(lambda: sched.schedule(0.0))
    again, _ = _timed(lambda: sched.schedule(0.0))
    return {"bytes_per_job": used / count, "bytes": used, "method": method,
            "add_per_s": count / add_s, "pass_s": elapsed, "second_pass_s": again,
            "requests_held": sched.requests_held()}


def _running_request(rng: random.Random) -> Request:
    """A running job of a busy cluster: mostly a few cores, some shared or whole nodes."""
    duration = float(rng.choice((600, 1800, 3600, 7200, 14400)))
    kind = rng.random()
    if kind < 0.8:
        return Request(nslots=rng.choice((1, 1, 2, 4, 8)), duration=duration)
    if kind < 0.98:
        return Request(nnodes=1, nslots=8, duration=duration)
    return Request(nnodes=rng.choice((1, 2)), exclusive=True, duration=duration)


def recovery(nodes: int, cores: int, running: int, seed: int) -> dict[str, Any]:
    """Seconds for a fresh pool to adopt the stored R of *running* allocations.

    Timed as the worker recovers: parse each stored R (JSON) and adopt it.
    """
    rng = random.Random(seed)
    pool = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
    stored: list[tuple[int, str, bool]] = []
    jobid = 0
    misses = 0
    while len(stored) < running and misses < 100:
        req = _running_request(rng)
        try:
            rset = pool.alloc(req, jobid, now=-rng.uniform(0, req.duration))
        except InsufficientResources:
            misses += 1
            continue
        stored.append((jobid, rset.dumps(), req.exclusive))
        jobid += 1

    def adopt_all() -> ResourcePool:
        fresh = ResourcePool(machine(nodes, cores), clock=lambda: 0.0)
        for jid, text, exclusive in stored:
            fresh.adopt(jid, ResourceSet(text), exclusive=exclusive)
        return fresh

    elapsed, fresh = _timed(adopt_all)
    assert fresh.counts() == pool.counts()
    return {"s": elapsed, "allocations": len(stored)}


def run(nodes: int = 1024, cores: int = 64, big_nodes: int = 8192, pending: int = 10_000,
        million: int = 1_000_000, running: int = 10_000, seed: int = 1) -> dict[str, Any]:
    """Measure and return the figures (see the module docstring)."""
    figures: dict[str, Any] = {"machine": f"{nodes}x{cores}"}
    # First, while the process holds little: the memory figure is a growth.
    full = full_of_small_jobs(nodes, cores, seed)
    mem = pending_memory(million, full, seed)
    figures["pending_1m_jobs"] = million
    figures["pending_1m_bytes_per_job"] = mem["bytes_per_job"]
    figures["pending_1m_mib"] = mem["bytes"] / 2**20
    figures["pending_1m_memory_method"] = mem["method"]
    figures["pending_1m_add_per_s"] = mem["add_per_s"]
    figures["pending_1m_pass_s"] = mem["pass_s"]
    figures["pending_1m_second_pass_s"] = mem["second_pass_s"]
    figures["pending_1m_requests_held"] = mem["requests_held"]
    del mem
    gc.collect()

    count = min(nodes * cores, 65_536)
    rate, started = fill_rate(nodes, cores, Request(duration=3600.0), count)
    figures["alloc_1core_per_s"] = rate
    figures["alloc_1core_jobs"] = started
    figures["pool_alloc_1core_per_s"] = bench_small_jobs(nodes, cores, 20_000)["allocs_per_s"]
    rate, started = fill_rate(big_nodes, cores, Request(nnodes=4, exclusive=True,
                                                        duration=3600.0), big_nodes // 4)
    figures["alloc_exclusive_per_s"] = rate
    figures["alloc_exclusive_jobs"] = started

    figures["pending"] = pending
    ones = [Request(duration=3600.0)] * pending
    for policy in ("easy", "conservative", "fcfs"):
        figures[f"{policy}_pass_s"] = pass_time(full, ones, policy)["s"]
    # The same crowded machine, blocked jobs of the mixed workload; then the
    # planner's worst case: every blocked job wants 4 whole-but-shared nodes,
    # which only free up after most of the 65,536 small jobs have ended.
    rng = random.Random(seed)
    mixed = [_random_request(rng, nodes, cores) for _ in range(pending)]
    wide = [Request(nnodes=4, nslots=cores, duration=3600.0)] * pending
    for policy in ("easy", "conservative"):
        figures[f"{policy}_crowded_mixed_pass_s"] = pass_time(full, mixed, policy)["s"]
        figures[f"{policy}_crowded_wide_pass_s"] = pass_time(full, wide, policy)["s"]

    for fill in (1.0, 0.5):
        busy, rng = _busy_pool(nodes, cores, seed, fill)
        mixed = [_random_request(rng, nodes, cores) for _ in range(pending)]
        tag = "mixed" if fill == 1.0 else "mixed_half"
        figures[f"{tag}_running"] = len(busy.jobids())
        for policy in ("easy", "conservative"):
            out = pass_time(busy, mixed, policy)
            figures[f"{policy}_{tag}_pass_s"] = out["s"]
            figures[f"{policy}_{tag}_started"] = out["started"]

    rec = recovery(nodes, cores, running, seed)
    figures["recovery_allocations"] = rec["allocations"]
    figures["recovery_s"] = rec["s"]
    return figures


def _graph(racks: int, per_rack: int, cores: int) -> Any:
    """cluster0 -> rack[racks] -> node[per_rack] -> socket[2] -> core[cores / 2]."""
    from fluxes.domain.graph.recipe import Level, generate

    return generate(Level("cluster", children=(Level("rack", racks, children=(
        Level("node", per_rack, id_scope=1, children=(
            Level("socket", 2, children=(Level("core", cores // 2, id_scope=1),)),)),)),)))


def run_graph(racks: int = 32, nodes_per_rack: int = 32, cores: int = 64,
              running: int = 10_000, seed: int = 1) -> dict[str, Any]:
    """Measure the graph pool (see the module docstring)."""
    from fluxes.domain.graph.pool import GraphPool

    nodes = racks * nodes_per_rack
    elapsed, graph = _timed(lambda: _graph(racks, nodes_per_rack, cores))
    figures: dict[str, Any] = {"graph": f"{racks} racks x {nodes_per_rack} nodes x {cores} cores",
                               "graph_vertices": len(graph), "graph_build_s": elapsed}
    count = min(nodes * cores, 65_536)
    req = Request(duration=3600.0)
    pool = GraphPool(graph, clock=lambda: 0.0)
    sched = Scheduler(pool, default=QueuePolicy("easy"))
    for i in range(count):
        sched.add(PendingJob(i, 16, float(i), 1000, None, req))
    elapsed, started = _timed(lambda: _drain(sched))
    figures["graph_alloc_1core_per_s"] = started / elapsed
    figures["graph_alloc_1core_jobs"] = started
    alone = GraphPool(graph, clock=lambda: 0.0)
    n = min(count, 20_000)

    def allocs() -> None:
        for jobid in range(n):
            alone.alloc(req, jobid, now=0.0)

    elapsed, _ = _timed(allocs)
    figures["graph_pool_alloc_1core_per_s"] = n / elapsed

    def churn() -> None:
        for jobid in range(n):
            alone.free(jobid)
            alone.alloc(req, n + jobid, now=0.0)

    elapsed, _ = _timed(churn)
    figures["graph_pool_free_alloc_pairs_per_s"] = n / elapsed

    figures.update(_graph_worker_path(graph, req, min(count, 20_000)))

    rng = random.Random(seed)
    busy = GraphPool(graph, clock=lambda: 0.0)
    stored: list[tuple[int, str]] = []
    misses = 0
    while len(stored) < running and misses < 100:
        shape = _running_request(rng)
        try:
            rset = busy.alloc(shape, len(stored), now=-rng.uniform(0, shape.duration))
        except InsufficientResources:
            misses += 1
            continue
        stored.append((len(stored), rset.dumps()))

    def adopt_all() -> GraphPool:
        fresh = GraphPool(graph, clock=lambda: 0.0)
        for jobid, text in stored:
            fresh.adopt(jobid, text)
        return fresh

    elapsed, fresh = _timed(adopt_all)
    assert fresh.counts() == busy.counts()
    figures["graph_recovery_allocations"] = len(stored)
    figures["graph_recovery_s"] = elapsed
    return figures


def _graph_worker_path(graph: Any, req: Request, n: int) -> dict[str, Any]:
    """What the scheduler worker adds on a graph: reading the recorded graph when it
    leads, and encoding each allocation (R with its subgraph, summary, ranks, nodelist)."""
    import orjson

    from fluxes.domain.graph.jgf import write_jgf
    from fluxes.domain.graph.table import pool_of_table

    recorded = orjson.dumps({"scheduling": write_jgf(graph)})
    elapsed, pool = _timed(lambda: pool_of_table(orjson.loads(recorded), clock=lambda: 0.0))
    out: dict[str, Any] = {"graph_recorded_bytes": len(recorded), "graph_lead_load_s": elapsed}
    sched = Scheduler(pool, default=QueuePolicy("easy"))
    for i in range(n):
        sched.add(PendingJob(i, 16, float(i), 1000, None, req))
    sizes: list[int] = []

    def drain_and_encode() -> int:
        total = 0
        while sched.pending:
            allocated = sched.schedule(0.0).allocated
            if not allocated:
                break
            for jobid, rset in allocated:
                # as the session core does when the pool has no cached shape
                assert pool.shape_of(jobid) is None
                sizes.append(len(rset.dumps()))
                rset.summary(), str(rset.ranks), str(rset.hostlist)
            total += len(allocated)
        return total

    elapsed, started = _timed(drain_and_encode)
    out["graph_worker_alloc_1core_per_s"] = started / elapsed
    out["graph_worker_r_bytes_1core"] = sum(sizes) // max(len(sizes), 1)
    return out


if __name__ == "__main__":  # pragma: no cover - manual use
    for key, value in run().items():
        print(f"{key:<28} {value:,.3f}" if isinstance(value, float) else f"{key:<28} {value}")
