"""The figures of a simulated run: what each means is in docs/simulate.md, "Metrics".

* ``makespan``: from the first submission to the last job's end (seconds);
* ``utilization``: core-seconds the jobs held over ``cores x makespan``;
* ``wait``: start minus submit of every job that ran: mean, median, 95th
  percentile (linear interpolation between the closest ranks, numpy's
  default) and maximum;
* ``bounded_slowdown``: per job ``max(1, (wait + run) / max(run, tau))`` with
  ``tau`` = 10 s (Feitelson's bounded slowdown: a 1-second job waiting a
  minute counts as 7, not 61), averaged.

The same figures per queue and per user, and counts of how jobs ended.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Final

from fluxes.sim.engine import JobRun, Outcome

__all__ = ["TAU", "bounded_slowdown", "percentile", "summarize", "wait_stats"]

#: The bounded slowdown's threshold (seconds): runs shorter count as this long.
TAU: Final = 10.0


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of already sorted values, linearly interpolated;
    ValueError when there are none."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile: p must be in 0..100, got {p}")
    pos = (len(sorted_values) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def bounded_slowdown(wait: float, run: float, tau: float = TAU) -> float:
    """``max(1, (wait + run) / max(run, tau))``."""
    return max(1.0, (wait + run) / max(run, tau))


def wait_stats(waits: Iterable[float]) -> dict[str, float]:
    """Mean, median, p95 and max of waits (all 0 when there are none)."""
    values = sorted(waits)
    if not values:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    return {"mean": math.fsum(values) / len(values), "median": percentile(values, 50),
            "p95": percentile(values, 95), "max": values[-1]}


def _group(runs: Sequence[JobRun]) -> dict[str, Any]:
    """The figures of a group of jobs (a queue, a user)."""
    waits: list[float] = []
    slow: list[float] = []
    core_s: list[float] = []
    for run in runs:
        start, end = run.start, run.end
        if start is None or end is None:
            continue
        wait = start - run.job.submit
        waits.append(wait)
        slow.append(bounded_slowdown(wait, end - start))
        core_s.append(run.ncores * (end - start))
    return {"jobs": len(runs), "ran": len(waits), "wait": wait_stats(waits),
            "bounded_slowdown": math.fsum(slow) / len(slow) if slow else 0.0,
            "core_hours": math.fsum(core_s) / 3600.0}


def summarize(outcome: Outcome) -> dict[str, Any]:
    """Every figure of ``outcome`` as a JSON-ready mapping."""
    runs = outcome.runs
    machine = outcome.machine
    first = min((r.job.submit for r in runs), default=0.0)
    last = max((r.end for r in runs if r.end is not None), default=first)
    makespan = max(last - first, 0.0)
    overall = _group(runs)
    core_s = overall["core_hours"] * 3600.0
    utilization = core_s / (machine.cores * makespan) if makespan > 0 else 0.0
    results = Counter(r.result or "?" for r in runs)
    by_queue: dict[str, list[JobRun]] = {}
    by_user: dict[str, list[JobRun]] = {}
    for run in runs:
        by_queue.setdefault(run.queue, []).append(run)
        by_user.setdefault(run.job.user, []).append(run)
    elapsed = outcome.elapsed
    return {
        "label": outcome.label,
        "machine": {"description": machine.description, "nodes": machine.nodes,
                    "cores": machine.cores},
        "policies": dict(outcome.policies),
        "jobs": {"simulated": len(runs), "ran": overall["ran"],
                 "refused": sum(outcome.refused.values()),
                 "refused_by_reason": dict(outcome.refused.most_common()),
                 "results": dict(sorted(results.items()))},
        "first_submit": first,
        "makespan": makespan,
        "utilization": utilization,
        "wait": overall["wait"],
        "bounded_slowdown": {"tau": TAU, "mean": overall["bounded_slowdown"]},
        "core_hours": overall["core_hours"],
        "queues": {name: _group(group) for name, group in sorted(by_queue.items())},
        "users": {name: _group(group) for name, group in
                  sorted(by_user.items(), key=lambda kv: _user_order(kv[0]))},
        "invariants": outcome.checked.to_dict(),
        "simulation": {"elapsed_s": elapsed, "passes": outcome.passes,
                       "jobs_per_s": len(runs) / elapsed if elapsed > 0 else 0.0,
                       "journal_entries": outcome.journal_entries},
    }


def _user_order(name: str) -> tuple[int, int | str]:
    """Numeric user ids in numeric order, others after them."""
    try:
        return (0, int(name))
    except ValueError:
        return (1, name)
