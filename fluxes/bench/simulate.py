"""``fluxes bench simulate``: how fast ``fluxes simulate`` replays a large trace.

A seeded synthetic SWF trace (:func:`fluxes.sim.synth.synthetic_swf`: by
default 50,000 jobs offered at 85% load to 2,048 processors) is parsed and
simulated once under one policy; the figures are the simulation's wall time,
jobs simulated per second, scheduling passes, and the process's peak resident
memory (``ru_maxrss``: the trace, the simulation and Python itself).
"""

from __future__ import annotations

import gc
import resource
import time
from typing import Any

from fluxes.config import InstanceConfig
from fluxes.sim import metrics
from fluxes.sim.run import load_swf, simulate
from fluxes.sim.synth import synthetic_swf
from fluxes.sim.workload import Machine, machine_for_trace


def run(jobs: int = 50_000, cores: int = 2048, nodes: int | None = None,
        policy: str = "easy", seed: int = 1, load: float = 0.85) -> dict[str, Any]:
    """Simulate the synthetic trace; the figures (see the module docstring)."""
    if jobs < 1 or cores < 1 or (nodes is not None and (nodes < 1 or cores % nodes)):
        raise ValueError("--jobs and --cores must be >= 1, and --nodes must divide --cores")
    began = time.perf_counter()
    text = synthetic_swf(jobs, cores, seed=seed, load=load)
    workload = load_swf(text.splitlines())
    del text
    trace = workload.trace
    assert trace is not None
    machine = Machine.uniform(nodes, cores // nodes) if nodes else \
        machine_for_trace(trace, None, None, False)
    prepared = time.perf_counter() - began
    gc.collect()
    outcome = simulate(workload, machine, InstanceConfig(), {"policy": policy}, label=policy)
    summary = metrics.summarize(outcome)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "jobs": len(workload.jobs),
        "machine": machine.description,
        "policy": policy,
        "trace_s": round(prepared, 3),
        "simulation_s": round(outcome.elapsed, 3),
        "jobs_per_s": round(len(workload.jobs) / outcome.elapsed, 1),
        "passes": outcome.passes,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "utilization": round(summary["utilization"], 4),
        "mean_wait_s": round(summary["wait"]["mean"], 1),
        "invariants_ok": outcome.checked.ok,
    }
