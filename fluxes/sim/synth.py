"""Seeded synthetic SWF traces: the speed figure's workload and the tests' larger inputs.

Real traces come from the Parallel Workloads Archive, which this machine
cannot reach; this generator draws a workload with the traits that make
scheduling hard, from a seed (the same seed gives the same trace):

* sizes: a third of the jobs serial, the rest mostly powers of two up to a
  quarter of the machine, some odd sizes;
* run times log-uniform from 10 s to 24 h (many short jobs, a long tail);
* estimates (requested times) 1 to 5 times the run time, rounded up to 5
  minutes, a fifth of them nearly exact; 4% of the jobs run past their
  estimate (they are killed at it);
* arrivals a Poisson process whose rate gives the ``load`` asked for (the
  work offered over the machine's capacity);
* users 1..``users`` with a few heavy ones, 10% of jobs in queue 2 (small,
  short), statuses 90% completed, 7% failed, 3% canceled.
"""

from __future__ import annotations

import math
import random
from typing import Final

__all__ = ["START", "synthetic_swf"]

#: The synthetic log's time 0 (2026-01-01T00:00:00Z).
START: Final = 1_767_225_600


def synthetic_swf(jobs: int, cores: int, seed: int = 1, load: float = 0.85,
                  users: int = 40) -> str:
    """The text of an SWF trace of ``jobs`` jobs for a machine of ``cores`` processors."""
    if jobs < 1 or cores < 1:
        raise ValueError("synthetic trace: jobs and cores must be >= 1")
    if not 0 < load <= 10:
        raise ValueError("synthetic trace: load must be in (0, 10]")
    rng = random.Random(seed)
    biggest = max(1, cores // 4)
    powers = [2 ** k for k in range(1, int(math.log2(biggest)) + 1)] or [1]
    weights = [1.0 / (k + 1) for k in range(len(powers))]
    heavy = [1.0 / (u + 1) ** 0.8 for u in range(users)]
    rows: list[list[float]] = []
    for _ in range(jobs):
        queue = 2 if rng.random() < 0.10 else 1
        draw = rng.random()
        if draw < 1 / 3:
            procs = 1
        elif draw < 0.9:
            procs = rng.choices(powers, weights)[0]
        else:
            procs = rng.randint(2, biggest) if biggest > 2 else biggest
        low, high = (10.0, 1800.0) if queue == 2 else (10.0, 86400.0)
        if queue == 2:
            procs = min(procs, 16, cores)
        runtime = float(int(math.exp(rng.uniform(math.log(low), math.log(high)))))
        if rng.random() < 0.2:
            estimate = runtime * rng.uniform(1.0, 1.1)
        else:
            estimate = runtime * rng.uniform(1.0, 5.0)
        requested = float(min(math.ceil(estimate / 300.0) * 300, 48 * 3600))
        if rng.random() < 0.04:
            runtime = requested * 1.1  # wants more than it asked for: killed at its limit
        status = rng.choices((1, 0, 5), (0.90, 0.07, 0.03))[0]
        user = rng.choices(range(1, users + 1), heavy)[0]
        rows.append([procs, runtime, requested, status, user, queue])
    work = sum(r[0] * min(r[1], r[2]) for r in rows)
    mean_gap = work / (cores * load) / jobs
    lines = [
        "; Version: 2.2",
        "; Computer: synthetic (fluxes.sim.synth)",
        f"; Note: seeded synthetic trace, seed {seed}, load {load}",
        f"; UnixStartTime: {START}",
        f"; MaxJobs: {jobs}",
        f"; MaxRecords: {jobs}",
        f"; MaxProcs: {cores}",
        "; MaxQueues: 2",
        "; Queue: 1 batch",
        "; Queue: 2 debug (small, short jobs)",
    ]
    t = 0.0
    for number, row in enumerate(rows, 1):
        t += rng.expovariate(1.0 / mean_gap)
        p, run, req, st, who, q = (int(v) for v in row)
        lines.append(f"{number} {int(t)} -1 {run} {p} -1 -1 {p} {req} -1 {st} {who} {who % 8} "
                     f"-1 {q} 1 -1 -1")
    return "\n".join(lines) + "\n"
