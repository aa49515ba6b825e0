"""How accurate forecasts are: ``fluxes simulate --forecast-eval TRACE``.

A trace is simulated as ``fluxes simulate`` does (:class:`~fluxes.sim.engine.Simulation`);
at every ``every``-th submission the state of the simulated instance at that
moment (its running jobs with their allocations, its pending jobs, its users'
recent run times) becomes a :class:`~fluxes.forecast.model.Snapshot`, and that
job's start is forecast with each runtime source. Once the simulation is over,
each forecast is compared with the start the job really got in it. For
comparison, the EASY head's ``t_estimate`` (the start of the first reservation
the scheduler made for a job, which is all flux offers) is measured against
the real start of every job that got one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluxes.config import InstanceConfig
from fluxes.forecast.engine import forecast
from fluxes.forecast.history import remember
from fluxes.forecast.model import RUNTIME_SOURCES, Running, Snapshot, Waiting
from fluxes.sim.engine import Simulation
from fluxes.sim.invariants import Checked, ReservationCheck
from fluxes.sim.workload import COMPLETED, Machine, SimJob

__all__ = ["Evaluation", "evaluate"]


class _FirstEstimates(ReservationCheck):
    """The simulation's reservation check, also keeping each job's first reservation."""

    def __init__(self, checked: Checked) -> None:
        super().__init__(checked)
        self.first: dict[int, float] = {}

    def observe(self, now: float, reserved: Mapping[int, float], started: Iterable[int]
                ) -> None:
        """Keep the first start each job was reserved for, then check as before."""
        first = self.first
        for jobid, when in reserved.items():
            if jobid not in first:
                first[jobid] = when
        super().observe(now, reserved, started)


class _Probed(Simulation):
    """A simulation that forecasts every ``every``-th submitted job (see the module)."""

    def __init__(self, jobs: Sequence[SimJob], machine: Machine, config: InstanceConfig,
                 overrides: Mapping[str, Any], every: int,
                 progress: Callable[[int, int], None] | None) -> None:
        super().__init__(jobs, machine, config, overrides=overrides, label="forecast-eval",
                         progress=progress)
        self.reservations = self.first = _FirstEstimates(self.checked)
        self.every = every
        self.seen = 0
        self.history: dict[int, tuple[float, ...]] = {}
        #: runtime source -> job -> forecast start (None: never), and the forecasts' cost
        self.forecasts: dict[str, dict[int, float | None]] = {s: {} for s in RUNTIME_SOURCES}
        self.cost = 0.0

    def _submit(self, job: SimJob) -> None:
        super()._submit(job)
        self.seen += 1
        if job.id in self.runs and self.seen % self.every == 0:
            snap = self.snapshot()
            for source in RUNTIME_SOURCES:
                out = forecast(snap, source)
                self.cost += out.elapsed
                self.forecasts[source][job.id] = out.jobs[job.id].t_start

    def snapshot(self) -> Snapshot:
        """The simulated instance now, as the store would read a live one."""
        running: list[Running] = []
        waiting: list[Waiting] = []
        for run in self.runs.values():
            job = run.job
            if run.start is not None and run.end is None:
                try:
                    rset = self.driver.allocation(job.id)
                except ValueError:
                    continue  # ended at this instant, not yet freed
                expiration = run.start + run.limit if run.limit else None
                running.append(Running(job.id, job.userid, rset, run.start, expiration))
            elif run.start is None and run.inactive is None:
                prepared = self.ingest.prepare(job)
                if isinstance(prepared, str):
                    continue
                waiting.append(Waiting(job.id, job.userid, job.urgency, job.urgency,
                                       job.submit, prepared.info, prepared.request or ""))
        return Snapshot(self.clock.now, self.config, self.machine.inventory,
                        tuple(running), tuple(waiting), table=self.machine.table,
                        history=dict(self.history))

    def retire(self, jobid: int, result: str, when: float) -> None:
        """Keep the user's run times of jobs that ran to their end."""
        super().retire(jobid, result, when)
        run = self.runs.get(jobid)
        if run is None or run.ran is None or run.job.outcome != COMPLETED:
            return
        user = run.job.userid
        self.history[user] = remember(self.history.get(user, ()), run.ran)


@dataclass
class Evaluation:
    """Forecast errors against the simulated starts."""

    jobs: int
    probed: int
    #: row label -> absolute errors in seconds
    errors: dict[str, list[float]] = field(default_factory=dict)
    #: row label -> forecasts that said never for a job that started (or the reverse)
    misses: dict[str, int] = field(default_factory=dict)
    cost_s: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        """One row per predictor: n, median and p90 of |forecast - actual|, misses."""
        out = []
        for label, errs in self.errors.items():
            out.append({"predictor": label, "n": len(errs), "median_s": _pct(errs, 50),
                        "p90_s": _pct(errs, 90), "mean_s": round(sum(errs) / len(errs), 1)
                        if errs else None, "misses": self.misses.get(label, 0)})
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"jobs": self.jobs, "probed": self.probed, "forecast_cost_s":
                round(self.cost_s, 3), "rows": self.rows()}

    def text(self) -> list[str]:
        """The report as lines."""
        lines = [f"forecasts of {self.probed} of {self.jobs} jobs, made at their submission "
                 f"({self.cost_s:.1f} s of forecasting); |forecast - actual start|:",
                 f"{'predictor':<28} {'n':>6} {'median':>10} {'p90':>10} {'mean':>10} "
                 f"{'misses':>7}"]
        for row in self.rows():
            lines.append(f"{row['predictor']:<28} {row['n']:>6} {_s(row['median_s']):>10} "
                         f"{_s(row['p90_s']):>10} {_s(row['mean_s']):>10} "
                         f"{row['misses']:>7}")
        return lines


def evaluate(jobs: Sequence[SimJob], machine: Machine, config: InstanceConfig,
             overrides: Mapping[str, Any], *, every: int = 1,
             progress: Callable[[int, int], None] | None = None) -> Evaluation:
    """Simulate ``jobs``, forecasting every ``every``-th submission (see the module)."""
    if every < 1:
        raise ValueError("--forecast-every must be >= 1")
    sim = _Probed(jobs, machine, config, overrides, every, progress)
    sim.run()
    ev = Evaluation(len(jobs), len(sim.forecasts["limit"]), cost_s=sim.cost)
    for source, said in sim.forecasts.items():
        errs, missed = _errors(said, sim)
        ev.errors[f"forecast, {source}"] = errs
        ev.misses[f"forecast, {source}"] = missed
    errs, missed = _errors(dict(sim.first.first), sim)
    ev.errors["EASY head t_estimate"] = errs
    ev.misses["EASY head t_estimate"] = missed
    return ev


def _errors(said: Mapping[int, float | None], sim: Simulation) -> tuple[list[float], int]:
    errs: list[float] = []
    missed = 0
    for jobid, when in said.items():
        run = sim.runs.get(jobid)
        actual = run.start if run is not None else None
        if when is None or actual is None or not math.isfinite(when):
            missed += (when is None) != (actual is None)
            continue
        errs.append(abs(when - actual))
    return errs, missed


def _pct(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))
    return round(ordered[k], 1)


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"
