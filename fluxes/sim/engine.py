"""The discrete-event simulation: a workload through the driven cores in virtual time.

:class:`Simulation` keeps a heap of timed events (a job's submission, the end
of its tasks, its user's cancel, the cores' own timers), moves the virtual
clock from one to the next, hands each to the :class:`~fluxes.sim.drive.Driver`
and lets the driver settle every message of that instant (scheduling passes
included) before moving on. It is the exec side too (:class:`ExecModel`):
a job's tasks start the moment the job manager asks, and end after the job's
run time, or when the job manager kills them (its time limit, a cancel).

Everything that happens at one virtual instant is one batch, in this order:
task ends, cancels, submissions (in trace order), then the job manager's
timers; the scheduler sees the whole batch before its pass.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.domain.graph.table import graph_of_table
from fluxes.domain.job import events as ev
from fluxes.domain.sched.policy import PassResult
from fluxes.sim.accounting import SimAccounting
from fluxes.sim.drive import (
    Driver,
    ExecModel,
    Granted,
    Ingest,
    Observer,
    Prepared,
    VirtualClock,
    queue_policies,
)
from fluxes.sim.invariants import Checked, Ran, ReservationCheck, check_schedule
from fluxes.sim.journal import Writer
from fluxes.sim.workload import CANCELED, FAILED, Machine, SimJob

__all__ = ["JobRun", "Outcome", "Simulation"]

# Event kinds, in the order they are handled at one instant.
_END: Final = 0
_CANCEL: Final = 1
_SUBMIT: Final = 2
_TIMER: Final = 3
#: Progress is reported every this many retired jobs.
_PROGRESS_EVERY: Final = 500


@dataclass(slots=True)
class JobRun:
    """One accepted job and what happened to it in the simulation."""

    job: SimJob
    queue: str
    #: its time limit as the job manager applies it (0: none)
    limit: float
    start: float | None = None
    end: float | None = None
    masks: dict[int, int] | None = None
    ncores: int = 0
    result: str = ""
    inactive: float | None = None

    @property
    def wait(self) -> float | None:
        """Seconds from submission to start (None: never started)."""
        return None if self.start is None else self.start - self.job.submit

    @property
    def ran(self) -> float | None:
        """Seconds its tasks held their cores (None: never started)."""
        if self.start is None or self.end is None:
            return None
        return self.end - self.start


@dataclass
class Outcome:
    """A finished run: every job's fate, the time series and the checks."""

    label: str
    machine: Machine
    runs: list[JobRun]
    #: jobs the ingest refused, by its message
    refused: Counter[str] = field(default_factory=Counter)
    #: (time, busy cores, pending jobs), at every instant either changed
    series: list[tuple[float, int, int]] = field(default_factory=list)
    passes: int = 0
    elapsed: float = 0.0
    journal_entries: int = 0
    checked: Checked = field(default_factory=Checked)
    #: the queue policies the run used (for the report)
    policies: dict[str, str] = field(default_factory=dict)


class _Observer(Observer):
    """The simulation's ears on the driver (kept apart from its exec role)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.wants_journal = sim.writer is not None

    def journal(self, jobid: int, seq: int | None, event: ev.Event,
                extra: Mapping[str, Any] | None) -> None:
        """Write the event to the simulated journal."""
        writer = self.sim.writer
        if writer is not None:
            writer.event(jobid, seq, event, extra)

    def granted(self, grant: Granted) -> None:
        """Keep the cores the job was given."""
        run = self.sim.runs.get(grant.jobid)
        if run is not None:
            run.masks = grant.masks
            run.ncores = grant.ncores

    def retired(self, jobid: int, result: str, when: float) -> None:
        """The job is inactive."""
        self.sim.retire(jobid, result, when)

    def queued(self, jobid: int, key: tuple[int, float, int], queue: str | None) -> None:
        """Tell the reservation check."""
        sim = self.sim
        sim.reservations.queued(jobid, key, sim.policy_name(queue))

    def passed(self, now: float, result: PassResult) -> None:
        """Tell the reservation check what the pass reserved and started."""
        check = self.sim.reservations
        check.observe(now, result.reserved, [jobid for jobid, _r in result.allocated])
        for jobid, _note in result.denied:
            check.forget(jobid)


class Simulation(ExecModel):
    """One run of a workload on a machine under a configuration (see the module)."""

    def __init__(self, jobs: Sequence[SimJob], machine: Machine, config: InstanceConfig,
                 *, overrides: Mapping[str, Any] | None = None, label: str = "",
                 annotations: bool = False, writer: Writer | None = None,
                 accounts: Accounts | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.jobs = jobs
        self.machine = machine
        self.config = config
        self.writer = writer
        self.progress = progress
        self.queues = queue_policies(config, overrides)
        self.clock = VirtualClock()
        self.checked = Checked()
        self.reservations = ReservationCheck(self.checked)
        self.ingest = Ingest(config, machine.inventory,
                             graph_of_table(machine.table) if machine.table else None)
        # accounting is modelled with banks, or with the multi-factor plugin (its
        # periodic reprioritizing); without either the run pays nothing for it
        self.accounting: SimAccounting | None = None
        if accounts is not None or config.accounting.priority_plugin == "multifactor":
            self.accounting = SimAccounting(config.accounting, accounts or Accounts(),
                                            cores=machine.cores, nodes=machine.nodes,
                                            clock=self.clock)
        self.runs: dict[int, JobRun] = {}
        self.refused: Counter[str] = Counter()
        self.label = label
        mode = config.sched.get("mode", "unlimited")
        self.driver = Driver(
            machine.inventory, self.queues, clock=self.clock, exec_model=self,
            observer=_Observer(self),
            mode=mode, limit=int(config.sched.get("limit", 0)), annotations=annotations,
            track_dependencies=any(j.dependencies for j in jobs), table=machine.table,
            accounting=self.accounting)
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._timer_at: float | None = None
        self.busy = 0
        self.pending = 0
        self.done = 0
        self.series: list[tuple[float, int, int]] = []

    def policy_name(self, queue: str | None) -> str:
        """The policy of a queue (``fcfs`` for queues the run does not know)."""
        policy = self.queues.get(queue) or self.queues.get(None)
        return policy.policy if policy is not None else "fcfs"

    # -- the event heap -------------------------------------------------------------

    def _push(self, when: float, kind: int, jobid: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, kind, self._seq, jobid))

    def run(self) -> Outcome:
        """Simulate every job to its end; the outcome, checked."""
        started = time.perf_counter()
        by_id = {job.id: job for job in self.jobs}
        if len(by_id) != len(self.jobs):
            raise ValueError("workload: job ids must be unique")
        self._by_id = by_id
        for job in self.jobs:
            self._push(job.submit, _SUBMIT, job.id)
        events = self._events
        pop = heapq.heappop
        driver = self.driver
        while events:
            now = events[0][0]
            self.clock.now = now
            while events and events[0][0] == now:
                _when, kind, _seq, jobid = pop(events)
                if kind == _END:
                    self._end(jobid, now)
                elif kind == _CANCEL:
                    self._cancel(jobid)
                elif kind == _SUBMIT:
                    self._submit(by_id[jobid])
            driver.settle(now)
            due = driver.next_timer()
            if due is not None and (self._timer_at is None or self._timer_at <= now
                                    or due < self._timer_at):
                self._timer_at = max(due, now)
                if due > now:
                    self._push(due, _TIMER, 0)
            series = self.series
            if not series or series[-1][1] != self.busy or series[-1][2] != self.pending:
                series.append((now, self.busy, self.pending))
        if self.progress is not None:
            self.progress(self.done, len(self.jobs))
        leftovers = sorted(set(driver.active_jobs) | set(driver.pending_requests))
        runs = list(self.runs.values())
        check_schedule((Ran(r.job.id, r.job.submit, r.start, r.end, r.masks, r.ncores,
                            bool(r.result) or r.inactive is not None) for r in runs),
                       self.machine, self.checked, leftovers)
        if self.accounting is not None:
            self.accounting.check(((r.job.id, r.job.userid, r.start, r.end, len(r.masks or ()),
                                    r.ncores) for r in runs
                                   if r.start is not None and r.end is not None), self.checked)
        return Outcome(
            label=self.label, machine=self.machine, runs=runs, refused=self.refused,
            series=self.series, passes=driver.passes, elapsed=time.perf_counter() - started,
            journal_entries=self.writer.entries if self.writer is not None else 0,
            checked=self.checked,
            policies={("-" if q is None else q): _describe(p)
                      for q, p in self.queues.items()
                      if q is not None or not self.config.queues.named})

    # -- inputs -----------------------------------------------------------------------

    def _submit(self, job: SimJob) -> None:
        prepared = self.ingest.prepare(job)
        if self.accounting is not None:
            prepared = self._charge(job, prepared)
        if isinstance(prepared, str):
            self.refused[prepared] += 1
            self.done += 1
            return
        self.runs[job.id] = JobRun(job, _label(job, prepared), _limit(prepared))
        self.pending += 1
        self.driver.submit(job, prepared)

    def _charge(self, job: SimJob, prepared: Prepared | str) -> Prepared | str:
        """The ingest charges an accepted job to its association (accounting on)."""
        if isinstance(prepared, str) or self.accounting is None:
            return prepared
        asked = prepared.info if job.bank is None else {**prepared.info, "bank": job.bank}
        info = self.accounting.charge(job.id, job.userid, job.user, asked)
        if isinstance(info, str):
            return info
        return Prepared(prepared.queue, info, prepared.request)

    def _end(self, jobid: int, now: float) -> None:
        run = self.runs.get(jobid)
        if run is None or run.end is not None or run.start is None:
            return  # killed before its natural end
        self._stop(run, now)
        job = run.job
        self.driver.finished(jobid, job.exit_status if job.outcome == FAILED else 0)

    def _cancel(self, jobid: int) -> None:
        run = self.runs.get(jobid)
        if run is None or run.end is not None:
            return
        self.driver.cancel(jobid, run.job.userid)

    # -- the exec side ----------------------------------------------------------------

    def start(self, jobid: int, ranks: Sequence[int], now: float) -> None:
        """The job's tasks start: they end after its run time, unless killed first."""
        run = self.runs[jobid]
        run.start = now
        self.busy += run.ncores
        self.pending -= 1
        job = run.job
        runtime = job.runtime
        if not math.isfinite(runtime) and not run.limit:
            runtime = job.requested if job.requested > 0 else 0.0
        if run.limit and runtime > run.limit:
            return  # the job manager's time limit kills it first
        self._push(now + runtime, _CANCEL if job.outcome == CANCELED else _END, jobid)

    def kill(self, jobid: int, now: float) -> bool:
        """The job manager kills the job's tasks (time limit, cancel)."""
        run = self.runs.get(jobid)
        if run is None or run.start is None or run.end is not None:
            return False
        self._stop(run, now)
        return True

    def _stop(self, run: JobRun, now: float) -> None:
        run.end = now
        self.busy -= run.ncores

    def retire(self, jobid: int, result: str, when: float) -> None:
        """The job manager retired the job."""
        run = self.runs.get(jobid)
        if run is None:
            return
        run.result = result or "?"
        run.inactive = when
        if run.start is None:
            self.pending -= 1
        self.done += 1
        if self.progress is not None and self.done % _PROGRESS_EVERY == 0:
            self.progress(self.done, len(self.jobs))


def _limit(prepared: Prepared) -> float:
    duration = prepared.info.get("duration")
    if isinstance(duration, int | float) and not isinstance(duration, bool) \
            and 0 < duration < math.inf:
        return float(duration)
    return 0.0


def _label(job: SimJob, prepared: Prepared) -> str:
    """The queue the report files the job under."""
    return prepared.queue if prepared.queue is not None else job.queue_label


def _describe(policy: Any) -> str:
    """``easy (queue depth 1000, placement first-fit)``."""
    text = f"{policy.policy} (queue depth {policy.queue_depth}"
    if policy.policy == "conservative":
        text += f", reservation depth {policy.reservation_depth}"
    return text + f", {policy.placement})"
