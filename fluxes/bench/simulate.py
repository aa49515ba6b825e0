"""``fluxes bench simulate``: how fast ``fluxes simulate`` replays a large trace.

A seeded synthetic SWF trace (:func:`fluxes.sim.synth.synthetic_swf`: by
default 50,000 jobs offered at 85% load to 2,048 processors) is parsed and
simulated once under one policy (or an SWF file given with ``--trace``, and
several policies in turn with ``--compare``); the figures are the simulation's wall time,
jobs simulated per second, scheduling passes, and the process's peak resident
memory (``ru_maxrss``: the trace, the simulation and Python itself).
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Sequence
from typing import Any

from fluxes.config import InstanceConfig
from fluxes.sim import metrics
from fluxes.sim.run import Workload, load_swf, simulate
from fluxes.sim.synth import synthetic_swf
from fluxes.sim.workload import Machine, machine_for_trace


def run(jobs: int = 50_000, cores: int = 2048, nodes: int | None = None,
        policy: str = "easy", seed: int = 1, load: float = 0.85,
        trace_file: str | None = None, compare: Sequence[str] = ()) -> dict[str, Any]:
    """Simulate the synthetic trace (or ``trace_file``, an SWF file); the figures (see
    the module docstring). With ``compare``, the same workload under each policy in
    turn, a row of figures each, and each policy's time against the first's."""
    if jobs < 1 or cores < 1 or (nodes is not None and (nodes < 1 or cores % nodes)):
        raise ValueError("--jobs and --cores must be >= 1, and --nodes must divide --cores")
    began = time.perf_counter()
    workload, machine = _workload(jobs, cores, nodes, seed, load, trace_file)
    prepared = time.perf_counter() - began
    if not compare:
        figures = _one(workload, machine, policy)
        return {"jobs": len(workload.jobs), "machine": machine.description,
                "policy": policy, "trace_s": round(prepared, 3), **figures}
    runs = {name: _one(workload, machine, name) for name in compare}
    first = runs[compare[0]]["simulation_s"]
    for row in runs.values():
        row["vs_" + compare[0]] = round(row["simulation_s"] / first, 2) if first else None
    return {"jobs": len(workload.jobs), "machine": machine.description,
            "trace_s": round(prepared, 3), "runs": runs}


def _workload(jobs: int, cores: int, nodes: int | None, seed: int, load: float,
              trace_file: str | None) -> tuple[Workload, Machine]:
    """The workload (the synthetic trace, or the SWF file) and its machine."""
    if trace_file is not None:
        with open(trace_file, encoding="utf-8", errors="replace") as f:
            workload = load_swf(f)
    else:
        text = synthetic_swf(jobs, cores, seed=seed, load=load)
        workload = load_swf(text.splitlines())
        del text
    trace = workload.trace
    assert trace is not None
    if not workload.jobs:
        raise ValueError("the trace has no job to simulate")
    if nodes:
        return workload, Machine.uniform(nodes, cores // nodes)
    return workload, machine_for_trace(trace, None, None, False)


def _one(workload: Workload, machine: Machine, policy: str) -> dict[str, Any]:
    """One simulation of ``workload`` under ``policy``: its figures."""
    gc.collect()
    outcome = simulate(workload, machine, InstanceConfig(), {"policy": policy}, label=policy)
    summary = metrics.summarize(outcome)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "simulation_s": round(outcome.elapsed, 3),
        "jobs_per_s": round(len(workload.jobs) / outcome.elapsed, 1),
        "passes": outcome.passes,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "utilization": round(summary["utilization"], 4),
        "mean_wait_s": round(summary["wait"]["mean"], 1),
        "invariants_ok": outcome.checked.ok,
    }
