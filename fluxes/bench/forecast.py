"""``fluxes bench forecast``: the cost of one forecast of a loaded instance.

A seeded synthetic instance: ``nodes`` nodes of 32 cores, every node held by a
running job (a mix of 1-, 2-, 4- and 16-node jobs, whole nodes, ends spread over
the next hours), and ``pending`` waiting jobs of the same mix with time limits
from 1 minute to 4 hours. The figures are the wall and CPU time of
:func:`fluxes.forecast.forecast` on it (best of ``runs``), its scheduling
passes, and how many jobs got a start.
"""

from __future__ import annotations

import random
import time
from typing import Any

from fluxes.config import InstanceConfig
from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.forecast.engine import forecast
from fluxes.forecast.model import Running, RuntimeSource, Snapshot, Waiting
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec

#: A fixed instant (the forecasts are of virtual time).
NOW = 1_800_000_000.0
_SIZES = (1, 1, 1, 2, 2, 4, 16)
_LIMITS = (60.0, 300.0, 900.0, 3600.0, 14400.0)


def snapshot(nodes: int = 1024, pending: int = 10_000, seed: int = 1,
             policy: str = "easy") -> Snapshot:
    """The synthetic instance (see the module)."""
    rng = random.Random(seed)
    cores = IDSet.from_ranges([(0, 31)])
    inv = Inventory([Target(r, None, cores, IDSet()) for r in range(nodes)])
    config = InstanceConfig.from_toml(f'[policy.scheduler]\npolicy = "{policy}"\n')
    requests: dict[tuple[int, float], Request] = {}

    def request(size: int, limit: float) -> Request:
        key = (size, limit)
        if key not in requests:
            requests[key] = Request.from_jobspec(Jobspec.from_command(
                ["x"], nnodes=size, ntasks=size, exclusive=True, duration=limit))
        return requests[key]

    pool = ResourcePool(inv, clock=lambda: NOW)
    running: list[Running] = []
    jobid = 1
    while True:
        size = rng.choice(_SIZES)
        limit = rng.choice(_LIMITS)
        t_run = NOW - rng.uniform(0, limit * 0.9)
        try:
            rset = pool.alloc(request(size, limit), jobid, now=t_run, duration=limit)
        except Exception:
            break
        running.append(Running(jobid, rng.randrange(40), rset, t_run, rset.expiration))
        jobid += 1
    waiting = []
    for n in range(pending):
        size, limit = rng.choice(_SIZES), rng.choice(_LIMITS)
        waiting.append(Waiting(jobid, rng.randrange(40), 16, 16, NOW - pending + n,
                               {"duration": limit}, request(size, limit).to_wire()))
        jobid += 1
    history = {u: (rng.uniform(30, 3000), rng.uniform(30, 3000)) for u in range(40)}
    return Snapshot(NOW, config, inv, tuple(running), tuple(waiting), history=history)


def run(nodes: int = 1024, pending: int = 10_000, runs: int = 3, policy: str = "easy",
        runtime: RuntimeSource = "limit", seed: int = 1, job: int | None = None
        ) -> dict[str, Any]:
    """Forecast the synthetic instance ``runs`` times; the figures (see the module).
    ``job``: forecast only the job-th waiting job (1: the first submitted), as ``fluxes
    job forecast`` does (the run stops once it started)."""
    if nodes < 1 or pending < 0 or runs < 1:
        raise ValueError("--nodes and --runs must be >= 1, --pending >= 0")
    if job is not None and not 1 <= job <= pending:
        raise ValueError("--job must be 1 to --pending")
    snap = snapshot(nodes, pending, seed, policy)
    wanted = None if job is None else [snap.waiting[job - 1].id]
    best_wall = best_cpu = float("inf")
    out = None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        out = forecast(snap, runtime, wanted)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    assert out is not None
    started = sum(1 for f in out.jobs.values() if f.t_start is not None)
    return {"nodes": nodes, "running": len(snap.running), "pending": pending,
            "policy": policy, "runtime": runtime, "forecast_s": round(best_wall, 3),
            "cpu_s": round(best_cpu, 3), "passes": out.passes, "started": started,
            "runs": runs, **({"job": job} if job is not None else {})}
