"""The forecast engine: a snapshot of the live state run forward on a virtual clock.

:func:`forecast` seeds the simulator's :class:`~fluxes.sim.drive.Driver` (the
job manager's and the scheduler's own cores, wired as the workers wire them)
with the snapshot: the running jobs' allocations are held as a restarted
scheduler adopts them (``Driver.hold``), drained ranks are marked down, and
the waiting jobs are submitted in submission order with the priorities they
have now. Then the clock moves from one end to the next: a running job frees
its resources at its predicted end (``Driver.release``), a started job's
tasks end after their predicted run time (or at their time limit, killed by
the job manager), and the scheduler passes in between start jobs exactly as
the live scheduler would, limits and reservations included. The run stops
once every waiting job has started (or nothing is left to happen: the
jobs still waiting then never start, e.g. on drained-only resources, or
behind a job with no time limit).

This module touches the simulator only through ``Driver``'s public methods
and the :class:`~fluxes.sim.drive.ExecModel` / :class:`~fluxes.sim.drive.Observer`
plug-ins, so a driver rewired onto another scheduler core carries the forecast
with it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from fluxes.domain.jm.priority import PriorityInput
from fluxes.domain.sched.policy import PassResult
from fluxes.domain.sched.request import Request
from fluxes.forecast.history import predict
from fluxes.forecast.model import Forecast, ForecastRun, RuntimeSource, Snapshot, Waiting
from fluxes.formats.idset import IDSet
from fluxes.sim.accounting import SimAccounting
from fluxes.sim.drive import (
    Driver,
    ExecModel,
    Granted,
    Observer,
    Prepared,
    VirtualClock,
    queue_policies,
)
from fluxes.sim.workload import SimJob

__all__ = ["forecast"]

# Event kinds, in the order they are handled at one instant (as the simulation's).
_RELEASE: Final = 0
_END: Final = 1
_TIMER: Final = 2


class _Priorities:
    """The job manager's priority plugin in a forecast: each job keeps the priority it
    has now (a multi-factor plugin's drift over the forecast is not modelled)."""

    name: Final = "forecast"

    def __init__(self, known: Mapping[int, int]) -> None:
        self.known = known

    def priority(self, job: PriorityInput) -> int:
        """The job's priority in the snapshot (its urgency for a job not in it)."""
        return self.known.get(job.jobid, job.urgency)

    def reprioritize_all(self) -> bool:
        """Priorities are frozen at the snapshot."""
        return False


class _Run(ExecModel, Observer):
    """One forecast: the exec side and the ears of the driver (see the module)."""

    def __init__(self, snap: Snapshot, runtime: RuntimeSource) -> None:
        self.snap = snap
        self.source = runtime
        self.clock = VirtualClock(snap.now)
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.timer_at: float | None = None
        self.limits: dict[int, float] = {}
        self.userid: dict[int, int] = {}
        self.starts: dict[int, tuple[float, IDSet]] = {}
        self.ends: dict[int, float | None] = {}
        #: what held each job before the pass that started it (see ``passed``)
        self.reasons: dict[int, str] = {}
        #: per job, and per request, the last pass that said what held it, and what
        self.said: dict[int, tuple[int, str]] = {}
        self.held: dict[Request, tuple[int, str]] = {}
        self.request_of: dict[int, Request] = {}
        self.npass = 0
        self.started = 0
        #: the jobs asked about (empty: every one) and how many of them still wait
        self.wanted: set[int] = set()
        self.wanted_left = 0
        self.sources: dict[int, str] = {}
        self.driver = Driver(
            snap.inventory, queue_policies(snap.config), clock=self.clock, exec_model=self,
            observer=self, priority=_Priorities({w.id: w.priority for w in snap.waiting}),
            mode=snap.config.sched.get("mode", "unlimited"),
            limit=int(snap.config.sched.get("limit", 0)), table=snap.table,
            accounting=_accounting(snap, self.clock))

    # -- the driver's plug-ins -----------------------------------------------------------

    def start(self, jobid: int, ranks: Sequence[int], now: float) -> None:
        """The job's tasks start: they end after their predicted run time (the job
        manager kills them at their limit)."""
        limit = self.limits[jobid]
        ran = self._runtime(self.userid[jobid], limit, jobid)
        self.starts[jobid] = (now, IDSet(ranks))
        self.started += 1
        if jobid in self.wanted:
            self.wanted_left -= 1
        end = now + ran if math.isfinite(ran) else None
        self.ends[jobid] = end
        if end is not None and ran < limit:
            self._push(end, _END, jobid)

    def kill(self, jobid: int, now: float) -> bool:
        """The job manager killed the job (its time limit)."""
        return jobid in self.starts

    def granted(self, grant: Granted) -> None:
        """Nothing to keep: the start says where."""

    def passed(self, now: float, result: PassResult) -> None:
        """Keep what the scheduler last said held each job: what it told the job, or
        what it said of the job's request without looking at the job (a quick pass's
        ``held``), whichever is newer; a job started by this pass keeps what held it
        before."""
        for jobid, _rset in result.allocated:
            self.reasons[jobid] = self._reason(jobid)
        self.npass += 1
        npass, said, held = self.npass, self.said, self.held
        for jobid, ann in result.annotations.items():
            reason = ann.get("reason_pending")
            if isinstance(reason, str):
                said[jobid] = (npass, reason)
        for request, reason in result.held.items():
            held[request] = (npass, reason)

    def _reason(self, jobid: int) -> str:
        """What the scheduler last said held ``jobid`` (empty: nothing)."""
        own = self.said.get(jobid)
        request = self.request_of.get(jobid)
        group = self.held.get(request) if request is not None else None
        if group is not None and (own is None or group[0] > own[0]):
            return group[1]
        return own[1] if own is not None else ""

    # -- the run -------------------------------------------------------------------------

    def _runtime(self, userid: int, limit: float, jobid: int) -> float:
        if self.source == "history":
            recent = self.snap.history.get(userid)
            self.sources[jobid] = "history" if recent else "limit"
            return predict(recent, limit)
        self.sources[jobid] = "limit"
        return limit

    def _push(self, when: float, kind: int, jobid: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, jobid))

    def seed(self) -> None:
        """The snapshot into the driver: running jobs held, drained ranks down, waiting
        jobs submitted."""
        snap, driver = self.snap, self.driver
        # newest first: of two that overlap (see below), the newer holds the cores
        for job in sorted(snap.running, key=lambda r: -r.t_run):
            try:
                driver.hold(job.id, job.R, userid=job.userid, bank=job.bank)
            except ValueError:
                # the snapshot is not read at one instant: a job that ended while it
                # was read may overlap the one that took its cores
                continue
            end = self._running_end(job.userid, job.t_run, job.expiration)
            self.ends[job.id] = end
            self.starts[job.id] = (job.t_run, job.R.ranks)
            if end is not None:
                self._push(max(end, snap.now), _RELEASE, job.id)
        if snap.drained:
            driver.drain(str(snap.drained))
        parsed: dict[str, Request | None] = {}
        for wait in sorted(snap.waiting, key=lambda w: (w.t_submit, w.id)):
            self.limits[wait.id] = wait.limit
            self.userid[wait.id] = wait.userid
            if wait.request not in parsed:
                parsed[wait.request] = _parsed(wait.request)
            request = parsed[wait.request]
            if request is not None:
                self.request_of[wait.id] = request
            # past its dependencies already: the job manager must not wait on them again
            info = {k: v for k, v in wait.info.items() if k != "dependencies"}
            driver.submit(_simjob(wait), Prepared(_queue(wait), info, wait.request))

    def _running_end(self, userid: int, t_run: float, expiration: float | None
                     ) -> float | None:
        """When a running job frees its resources: its expiration, or with the history
        predictor its predicted end while that is still ahead."""
        if self.source == "history":
            limit = math.inf if expiration is None else expiration - t_run
            end = t_run + predict(self.snap.history.get(userid), limit)
            if end > self.snap.now and math.isfinite(end):
                return end
        return expiration

    def run(self) -> None:
        """Move the clock from event to event until every waiting job started."""
        driver, events = self.driver, self.events
        now = self.snap.now
        driver.settle(now)
        self._timers(now)
        waiting = len(self.limits)
        while events and self.started < waiting and (not self.wanted or self.wanted_left):
            now = events[0][0]
            self.clock.now = now
            while events and events[0][0] == now:
                _when, kind, _seq, jobid = heapq.heappop(events)
                if kind == _RELEASE:
                    driver.release(jobid)
                elif kind == _END:
                    driver.finished(jobid, 0)
            driver.settle(now)
            self._timers(now)

    def _timers(self, now: float) -> None:
        due = self.driver.next_timer()
        if due is not None and (self.timer_at is None or self.timer_at <= now
                                or due < self.timer_at):
            self.timer_at = max(due, now)
            if due > now:
                self._push(due, _TIMER, 0)

    def result(self, elapsed: float) -> ForecastRun:
        """The forecasts, per waiting job."""
        names = _hostnames(self.snap)
        jobs: dict[int, Forecast] = {}
        for jobid, why in self.snap.excluded.items():
            jobs[jobid] = Forecast(jobid, None, reason=why)
        complete = not self.wanted or self.started == len(self.limits) or not self.events
        for jobid in self.limits:
            started = self.starts.get(jobid)
            if started is None and not complete:
                continue  # not reached: the run stopped once the jobs asked about started
            reason = self.reasons.get(jobid, "") if started else self._reason(jobid)
            source = self.sources.get(jobid, self.source if self.source == "limit" else "")
            if started is None:
                jobs[jobid] = Forecast(jobid, None, reason=reason, runtime=source or "limit")
                continue
            t, ranks = started
            jobs[jobid] = Forecast(jobid, t, self.ends.get(jobid), str(ranks),
                                   _nodelist(ranks, names), reason, source)
        spans = {jobid: (ranks, t, self.ends.get(jobid))
                 for jobid, (t, ranks) in self.starts.items()}
        return ForecastRun(self.snap.now, jobs, spans, elapsed, self.driver.passes, complete)


def forecast(snapshot: Snapshot, runtime: RuntimeSource = "limit",
             wanted: Iterable[int] | None = None) -> ForecastRun:
    """Every waiting job's expected start, from ``snapshot`` run forward (see the module).

    ``runtime``: how run times are predicted, ``"limit"`` (each job runs to its time
    limit: an upper bound, as the schedulers plan) or ``"history"`` (the mean of its
    user's last two run times, capped by the limit: :mod:`fluxes.forecast.history`).
    ``wanted``: the jobs asked about; the run stops once they have all started, so a
    job near the front costs a short run (the result then leaves out the jobs not
    reached, and says it is not ``complete``). Pure: the snapshot is not changed. A
    running job whose R the pool refuses (on cores a newer running job holds: a
    snapshot is not read at one instant) is left out.
    """
    if runtime not in ("limit", "history"):
        raise ValueError(f"forecast: runtime must be limit or history, not {runtime!r}")
    began = time.perf_counter()
    run = _Run(snapshot, runtime)
    if wanted is not None:
        # a wanted job not waiting (unknown, excluded) is nothing to wait for; none at
        # all left (the -1 that no job is): the run stops after its first pass
        run.wanted = set(wanted) & {w.id for w in snapshot.waiting} or {-1}
        run.wanted_left = len(run.wanted - {-1})
    run.seed()
    run.run()
    return run.result(time.perf_counter() - began)


def _accounting(snap: Snapshot, clock: VirtualClock) -> SimAccounting | None:
    """The running limits (the scheduler's gate), when some bank or user has one; the
    priorities stay the snapshot's (no multi-factor plugin in the run)."""
    accounts = snap.accounts
    if accounts is None or not accounts.enabled:
        return None
    config = dataclasses.replace(snap.config.accounting, priority_plugin="default")
    return SimAccounting(config, accounts, cores=snap.inventory.ncores,
                         nodes=len(snap.inventory), clock=clock)


def _parsed(wire: str) -> Request | None:
    """The request a waiting job carries (None: unreadable; the scheduler reads its
    jobspec instead, and what it says of the job comes with the job)."""
    try:
        return Request.from_wire(wire)
    except ValueError:
        return None


def _simjob(job: Waiting) -> SimJob:
    """The waiting job as the driver submits it."""
    name = job.info.get("name")
    return SimJob(id=job.id, submit=job.t_submit, size=0, requested=0.0, runtime=math.inf,
                  userid=job.userid, user=str(job.userid), queue_label="",
                  urgency=job.urgency, name=name if isinstance(name, str) else None)


def _queue(job: Waiting) -> str | None:
    queue = job.info.get("queue")
    return queue if isinstance(queue, str) and queue else None


def _hostnames(snap: Snapshot) -> dict[int, str]:
    return {t.rank: t.hostname for t in snap.inventory if t.hostname is not None}


def _nodelist(ranks: IDSet, names: Mapping[int, str]) -> str:
    if not names:
        return ""
    from fluxes.formats.hostlist import Hostlist

    return str(Hostlist([names[r] for r in ranks if r in names]))
