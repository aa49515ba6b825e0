"""The forecast engine: a snapshot of the live state run forward on a virtual clock.

:func:`forecast` drives the scheduler worker's own session core
(:class:`~fluxes.domain.sched.session.SessionCore`, wired as the simulator
wires it: :func:`fluxes.sim.drive.scheduler_core`) with the snapshot, as the
recipe of :mod:`fluxes.domain.sched.session` says: the running jobs'
allocations are held as the hello recovery adopts them (counted by the
running limits' gate), drained ranks are marked down, and the waiting jobs'
alloc requests are sent as the job manager sends them (best first, at most
``limit`` outstanding in the ``limited`` mode, none for a held job). Then a
virtual clock moves from one end to the next on a heap of ends: a running job
frees its resources at its predicted end, a started job at the end of its
predicted run time (at most its time limit, where the job manager kills it),
and after the frees of each instant the session's pass starts jobs exactly as
the live scheduler would, limits and reservations included. The run stops
once every waiting job has started (or nothing is left to happen: the jobs
still waiting then never start, e.g. on drained-only resources, or behind a
job with no time limit).

Why no job manager: what it adds between the scheduler's answers and the ends
is fixed here (a start at once, an end at the predicted run time or the time
limit, a free right after), so the forecast keeps only its order of sending
alloc requests and models the rest with the heap; the rules that decide who
starts when are all the scheduler's, and this module has none of its own.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from fluxes import messages as proto
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.sched.policy import PassResult
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.session import Effects, Item
from fluxes.forecast.history import predict
from fluxes.forecast.model import Forecast, ForecastRun, RuntimeSource, Snapshot, Waiting
from fluxes.formats.idset import IDSet
from fluxes.sim.drive import EPOCH, PARTITION, VirtualClock, queue_policies, scheduler_core

__all__ = ["forecast"]

#: The job manager's order of sending alloc requests: priority, then submit time, id.
_Key = tuple[int, float, int]
#: Kinds of responses that answer an alloc request (the job manager sends the next).
_ANSWERS: Final = (proto.ALLOC_SUCCESS, proto.ALLOC_DENY, proto.ALLOC_CANCEL)


class _Run:
    """One forecast: the session core, the job manager's side of it, and the heap of
    ends (see the module)."""

    def __init__(self, snap: Snapshot, runtime: RuntimeSource) -> None:
        self.snap = snap
        self.source = runtime
        self.clock = VirtualClock(snap.now)
        #: (when, seq, jobid) of every end to come
        self.events: list[tuple[float, int, int]] = []
        self.seq = 0
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
        accounts = snap.accounts
        self.gate = LimitGate(accounts) if accounts is not None and accounts.enabled \
            else None
        mode = snap.config.sched.get("mode", "unlimited")
        self.core = scheduler_core(snap.inventory, queue_policies(snap.config), self.clock,
                                   mode=mode, limit=int(snap.config.sched.get("limit", 0)),
                                   table=snap.table, gate=self.gate, answer=False)
        # the job manager's side: the alloc requests it has not sent yet, best first,
        # and how many it may have outstanding (the ready message's mode and limit)
        self.unsent: list[tuple[_Key, proto.Alloc]] = []
        self.outstanding = 0
        self.room = max(int(snap.config.sched.get("limit", 0)), 1) \
            if mode == "limited" else math.inf
        fx = Effects()
        self.core.handle(PARTITION, [Item(EPOCH, proto.HelloReply(alloc=[]))], fx)

    # -- the scheduler's answers ---------------------------------------------------------

    def _started(self, jobid: int, ranks: IDSet, now: float) -> None:
        """The job's tasks start at once: they end after their predicted run time (the
        job manager kills them at their limit)."""
        ran = self._runtime(self.userid[jobid], self.limits[jobid], jobid)
        self.starts[jobid] = (now, ranks)
        self.started += 1
        if jobid in self.wanted:
            self.wanted_left -= 1
        end = now + ran if math.isfinite(ran) else None
        self.ends[jobid] = end
        if end is not None:
            self._push(end, jobid)

    def passed(self, result: PassResult) -> None:
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

    def _push(self, when: float, jobid: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, jobid))

    def seed(self) -> None:
        """The snapshot into the session: running jobs held, drained ranks down, waiting
        jobs' alloc requests sent (as the job manager sends them)."""
        snap, core, gate = self.snap, self.core, self.gate
        pool = core.pool
        # newest first: of two that overlap (see below), the newer holds the cores
        for job in sorted(snap.running, key=lambda r: -r.t_run):
            try:
                # as the hello recovery adopts it (SessionCore.hold, from an R object)
                pool.adopt(job.id, job.R)
            except ValueError:
                # the snapshot is not read at one instant: a job that ended while it
                # was read may overlap the one that took its cores
                continue
            if gate is not None:
                gate.adopt(job.id, job.userid, job.bank, job.R.nnodes, job.R.ncores)
            end = self._running_end(job.userid, job.t_run, job.expiration)
            self.ends[job.id] = end
            self.starts[job.id] = (job.t_run, job.R.ranks)
            if end is not None:
                self._push(max(end, snap.now), job.id)
        if snap.drained:
            pool.mark_down(snap.drained)
            core.dirty = True
        parsed: dict[str, Request | None] = {}
        batch: list[proto.Alloc] = []
        for wait in sorted(snap.waiting, key=lambda w: (w.t_submit, w.id)):
            self.limits[wait.id] = wait.limit
            self.userid[wait.id] = wait.userid
            if wait.request not in parsed:
                parsed[wait.request] = _parsed(wait.request)
            request = parsed[wait.request]
            if request is not None:
                self.request_of[wait.id] = request
            if not wait.priority:
                continue  # held: the job manager sends no alloc request for it
            heapq.heappush(self.unsent, ((-wait.priority, wait.t_submit, wait.id),
                                         _alloc(wait)))
            # the job manager sends as each job arrives, while its mode allows
            self._pump(batch)
        self._send(batch)

    def _pump(self, batch: list[proto.Alloc]) -> None:
        """The job manager's pump: alloc requests, best first, while it may send."""
        unsent = self.unsent
        while unsent and self.outstanding < self.room:
            batch.append(heapq.heappop(unsent)[1])
            self.outstanding += 1

    def _send(self, msgs: Sequence[proto.SchedRequest]) -> None:
        """Hand requests to the session; its answers to alloc requests (a denial at
        once) free a place for the next."""
        if not msgs:
            return
        fx = Effects()
        self.core.handle(PARTITION, [Item(EPOCH, msg) for msg in msgs], fx)
        if fx.hellos or fx.refused:
            raise RuntimeError(f"forecast: the scheduler's session broke: {fx.refused}")
        if self.room != math.inf:  # only the limited mode counts what is outstanding
            self.outstanding -= sum(1 for r in fx.responses.get(PARTITION, ())
                                    if isinstance(r, proto.AllocResponse)
                                    and r.type in _ANSWERS)

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

    def _settle(self, now: float) -> None:
        """Passes at ``now`` while one is due (the job manager's next requests, in the
        ``limited`` mode, make another one due)."""
        core = self.core
        while core.due(now):
            result = core.schedule(now, Effects())
            self.passed(result)
            for jobid, rset in result.allocated:
                self._started(jobid, rset.ranks, now)
            self.outstanding -= len(result.allocated) + len(result.denied)
            batch: list[proto.Alloc] = []
            self._pump(batch)
            self._send(batch)

    def run(self) -> None:
        """Move the clock from end to end until every waiting job started."""
        events = self.events
        now = self.snap.now
        self._settle(now)
        waiting = len(self.limits)
        while events and self.started < waiting and (not self.wanted or self.wanted_left):
            now = events[0][0]
            self.clock.now = now
            frees: list[proto.SchedRequest] = []
            while events and events[0][0] == now:
                frees.append(proto.Free(id=heapq.heappop(events)[2]))
            self._send(frees)
            self._settle(now)

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
        return ForecastRun(self.snap.now, jobs, spans, elapsed, self.npass, complete)


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


def _parsed(wire: str) -> Request | None:
    """The request a waiting job carries (None: unreadable; the scheduler reads its
    jobspec instead, and what it says of the job comes with the job)."""
    try:
        return Request.from_wire(wire)
    except ValueError:
        return None


def _alloc(job: Waiting) -> proto.Alloc:
    """The alloc request the job manager sends for the waiting job."""
    bank = job.info.get("bank")
    return proto.Alloc(id=job.id, priority=job.priority, userid=job.userid,
                       t_submit=job.t_submit, queue=_queue(job), request=job.request,
                       bank=bank if isinstance(bank, str) and bank else None)


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
