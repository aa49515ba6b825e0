"""The job manager's logic, pure: inputs in, events and messages out.

The worker (``workers/jobmanager.py``) reads its input streams, hands each
message to :class:`JobManagerCore`, and commits the returned
:class:`Effects` in one atomic step (events, outbound messages, the
acknowledgements of the inputs). The core follows flux's rule: *update state
first, then act*, and make every action idempotent, so that after a restart
the core can re-derive and re-issue whatever actions are still owed
(:meth:`JobManagerCore.advance_all`).

Per job the core keeps the event-sourced :class:`~fluxes.domain.job.record.JobRecord`
plus runtime facts that are not events (an outstanding alloc request, the
exec progress per rank, timers); the runtime facts are rebuilt after a
restart from the pending inputs and by re-sending requests.

What one step produced is :class:`~fluxes.domain.jm.effects.Effects`; the handlers of
user requests are in :mod:`fluxes.domain.jm.controls` (a base class of the core: they
share its per-job runtime facts); the parts that stand alone are apart already
(dependencies, priority, queues, submission, feasibility).

Why one module: what is left is the one state machine of a job's life (new job,
the scheduler's session and its responses, exec reports, timers), whose handlers
share the per-job runtime facts and the transitions between them.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from fluxes import messages as proto
from fluxes.domain.jm.active import Active, ExecProgress
from fluxes.domain.jm.controls import ControlHandlers
from fluxes.domain.jm.depend import DependencyActions, DependencyIndex, TargetStatus
from fluxes.domain.jm.effects import (
    KILL_SIGNAL,
    LOST_WAIT_STATUS,
    SavedProgress,
    SchedSession,
    check_jobid,
    show_id,
)
from fluxes.domain.jm.effects import Ack as Ack  # noqa: PLC0414 -- re-exported
from fluxes.domain.jm.effects import Effects as Effects  # noqa: PLC0414 -- re-exported
from fluxes.domain.jm.perilog import HookProgress, hook_events
from fluxes.domain.jm.priority import (
    DefaultPriority,
    PriorityInput,
    PriorityPlugin,
    job_priority,
)
from fluxes.domain.job import events as ev
from fluxes.domain.job.model import merge_annotations, staged_info
from fluxes.domain.job.record import JobRecord, apply_record
from fluxes.domain.job.states import JobState
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import MAX_RANKS
from fluxes.messages import (
    Alloc,
    AllocResponse,
    ExecReport,
    Free,
    FreeResponse,
    HeldJob,
    Hello,
    HelloReply,
    Kill,
    New,
    Prioritize,
    Ready,
    Reset,
    SchedError,
    SchedResponse,
    Start,
)

_DEPEND, _PRIORITY, _SCHED = JobState.DEPEND, JobState.PRIORITY, JobState.SCHED
_RUN, _CLEANUP, _INACTIVE = JobState.RUN, JobState.CLEANUP, JobState.INACTIVE
#: RUN and CLEANUP: a set, as membership costs less than JobState's flag arithmetic
_RUNNING_STATES = frozenset({_RUN, _CLEANUP})

#: Distinct request strings shared at most (see JobManagerCore._shared).
_REQUESTS_KEPT = 4096
#: Distinct (short) granted rank lists kept parsed (see JobManagerCore._granted).
_RANKS_KEPT = 1024
_RANKS_TEXT_KEPT = 64
#: Distinct checked submit events kept (see JobManagerCore._submit_of).
_SUBMITS_KEPT = 1024
#: Seconds scheduling stays suspended, while a scheduler holds the partition's
#: lease, before the job manager asks it for a new session (``reset``): an
#: ``error`` (forged, or the scheduler's own) must not stop scheduling for good.
HEAL_AFTER_S = 2.0


class JobManagerCore(ControlHandlers):
    """All active jobs of one partition and the rules that drive them."""

    def __init__(self, *, owner_uid: int, priority: PriorityPlugin | None = None,
                 clock: Callable[[], float] = time.time,
                 stopped_queues: Iterable[str] = (),
                 lookup: Callable[[int], TargetStatus | None] | None = None) -> None:
        self.owner_uid = owner_uid
        self._lookup = lookup
        self.priority = priority or DefaultPriority()
        self.clock = clock
        self.jobs: dict[int, Active] = {}
        self.session = SchedSession()
        self.deps = DependencyIndex()
        self.stopped_queues: set[str] = set(stopped_queues)
        self._waiting: list[tuple[int, float, int]] = []  # (-priority, t_submit, id)
        self._queued: set[int] = set()
        self._parked: dict[str, set[int]] = {}
        self._timers: list[tuple[float, int, str]] = []
        self._prioritize: dict[int, int] = {}
        self.inactive_count = 0
        #: one string per distinct request (a --cc array's jobs share one)
        self._requests: dict[str, str] = {}
        #: when the last ``reset`` asked the scheduler for a new session (heal)
        self._reset_at = float("-inf")
        #: granted rank lists as parsed (the same few recur: parsing is most of an alloc
        #: response's cost); each job gets a copy, never the kept set
        self._ranks_parsed: dict[str, IDSet] = {}
        #: checked submit events by (stamp's type, stamp, urgency, userid, flags)
        self._submits: dict[tuple[Any, ...], ev.Submit] = {}

    # ------------------------------------------------------------ loading

    def load(self, records: Iterable[JobRecord],
             progress: Mapping[int, Mapping[str, Any]] | None = None,
             requests: Mapping[int, str | None] | None = None) -> None:
        """Take over the active records of a replay, the saved exec progress and the
        stored requests of pending jobs (:meth:`pending_ids` says which)."""
        for rec in records:
            if rec.job.state is _INACTIVE or rec.job.state is JobState.NEW:
                continue
            act = Active(rec)
            if requests and rec.job.state & JobState.PENDING:
                act.request = self._shared(requests.get(rec.id))
            ranks = rec.info.get("ranks")
            if isinstance(ranks, str) and rec.job.has_resources:
                act.ranks = IDSet(ranks)
            saved = (progress or {}).get(rec.id)
            if saved and act.ranks is not None:
                act.progress = ExecProgress(
                    {int(r) for r in saved.get("started", [])},
                    {int(r): int(s) for r, s in saved.get("finished", {}).items()},
                    {int(r) for r in saved.get("released", [])}, saved=True)
                act.exec_error = bool(saved.get("error"))
                if isinstance(saved.get("hooks"), dict):
                    act.hooks = HookProgress.from_wire(saved["hooks"])
            self.jobs[rec.id] = act

    @staticmethod
    def pending_ids(records: Iterable[JobRecord]) -> list[int]:
        """The jobs of ``records`` that :meth:`load` takes as pending (their requests
        are read from storage for it)."""
        return [rec.id for rec in records if rec.job.state & JobState.PENDING]

    def _shared(self, request: str | None) -> str | None:
        """``request`` as the one string kept for its shape (bounded: only a cache)."""
        if request is None:
            return None
        found = self._requests.get(request)
        if found is None:
            if len(self._requests) >= _REQUESTS_KEPT:
                self._requests.clear()
            found = self._requests[request] = request
        return found

    def restart(self, fx: Effects) -> None:
        """After a restart: jobs in SCHED go back to PRIORITY, every job is advanced.

        The scheduler session is unknown, so a ``reset`` asks the scheduler to
        begin a new epoch with a hello; allocations are requested after ready.
        """
        now = self.clock()
        self.session = SchedSession()
        fx.sched.append(Reset())
        for act in list(self.jobs.values()):
            if act.job.state is _SCHED:
                self._post(fx, act, ev.FluxRestart(timestamp=now))
        self.advance_all(fx)

    def advance_all(self, fx: Effects) -> None:
        """Re-derive and issue every action owed (idempotent)."""
        for act in list(self.jobs.values()):
            if act.job.state is _DEPEND:
                self._add_dependencies(fx, act, resuming=True)
            self._advance(fx, act)
        self.pump(fx)

    # ------------------------------------------------------------ posting

    def _post(self, fx: Effects, act: Active, event: ev.Event,
              extra: Mapping[str, Any] | None = None) -> None:
        """Apply ``event`` to the job (state first) and record it for the commit."""
        rec = act.rec
        jobid = rec.job.id
        base_seq = fx.base_seq
        if jobid not in base_seq:
            base_seq[jobid] = rec.job.seq
        act.rec = rec = apply_record(rec, jobid, event, extra)
        fx.add_event(jobid, event, extra)
        userid = rec.job.userid
        if userid is not None:
            fx.owners[jobid] = userid
        if self.deps.is_target(jobid):
            self._dependency_actions(fx, self.deps.target_changed(
                jobid, TargetStatus.from_job(rec.job)))

    def _annotate(self, fx: Effects, act: Active, annotations: Mapping[str, Any]) -> None:
        event = ev.Annotations(timestamp=self.clock(), annotations=annotations)
        act.rec = apply_record(act.rec, act.rec.id, event)
        fx.ops.setdefault(act.rec.id, []).append(("J", event))

    # ------------------------------------------------------------ new jobs

    def on_new(self, fx: Effects, msg: New, ack: Ack | None = None) -> None:
        """A job the ingest created (its submit and validate are in the journal).

        Raises MessageError, changing nothing, for a message that does not
        describe a submit the journal could hold.
        """
        jobid = check_jobid(msg.id)
        info = msg.info
        if not isinstance(info.get("dependencies", []), list):
            raise proto.MessageError("new: 'info' must be an object with a list of dependencies")
        submit = self._submit_of(msg)
        if ack is not None:
            fx.acks.append(ack)
        if jobid in self.jobs:
            return  # known from the replay already
        t = submit.timestamp
        rec = apply_record(None, jobid, submit, info)
        rec = apply_record(rec, jobid, ev.Validate(timestamp=t))
        act = Active(rec, request=self._shared(msg.request))
        self.jobs[jobid] = act
        self._add_dependencies(fx, act, resuming=False)
        self._advance(fx, act)

    def _submit_of(self, msg: New) -> ev.Submit:
        """The submit event ``msg`` describes, checked as replay checks the one the ingest
        wrote (MessageError when it could not be stored). The jobs of one submission
        share it: an event is immutable, and the check is most of a new job's cost."""
        key = (type(msg.t_submit), msg.t_submit, msg.urgency, msg.userid, msg.flags)
        exact = type(msg.urgency) is int and type(msg.userid) is int \
            and type(msg.flags) is int  # (True == 1: a bool is never taken for a kept one)
        found = self._submits.get(key) if exact else None
        if found is not None:
            return found
        try:
            submit = ev.decode("submit", msg.t_submit, {
                "urgency": msg.urgency, "userid": msg.userid, "flags": msg.flags,
                "version": 1})
        except ev.EventError as exc:
            raise proto.MessageError(f"new: {exc}") from None
        assert isinstance(submit, ev.Submit)
        if exact:
            if len(self._submits) >= _SUBMITS_KEPT:
                self._submits.clear()
            self._submits[key] = submit
        return submit

    def _add_dependencies(self, fx: Effects, act: Active, resuming: bool) -> None:
        deps = act.rec.info.get("dependencies")
        if not deps or act.job.state is not _DEPEND:
            return
        actions = self.deps.add(
            act.rec.id, deps, self._target_status, self.clock(), userid=act.job.userid,
            outstanding=act.job.dependencies if resuming else None)
        self._dependency_actions(fx, [actions])

    def _target_status(self, jobid: int) -> TargetStatus | None:
        act = self.jobs.get(jobid)
        if act is not None:
            return TargetStatus.from_job(act.job)
        return self.lookup_inactive(jobid)

    def lookup_inactive(self, jobid: int) -> TargetStatus | None:
        """Status of a job the core no longer holds (the worker plugs in a store lookup)."""
        return self._lookup(jobid) if self._lookup is not None else None

    def _dependency_actions(self, fx: Effects, actions: Iterable[DependencyActions]) -> None:
        now = self.clock()
        for action in actions:
            act = self.jobs.get(action.jobid)
            if act is None or act.job.state is not _DEPEND:
                continue
            if action.fail is not None:
                self._post(fx, act, ev.JobException(timestamp=now, type="dependency",
                                                    severity=0, note=action.fail))
                self._advance(fx, act)
                continue
            for desc in action.add:
                if desc not in act.job.dependencies:
                    self._post(fx, act, ev.DependencyAdd(timestamp=now, description=desc))
            for desc in action.remove:
                if desc in act.job.dependencies:
                    self._post(fx, act, ev.DependencyRemove(timestamp=now, description=desc))
            self._advance(fx, act)

    # ------------------------------------------------------------ the driver

    def _advance(self, fx: Effects, act: Active) -> None:
        """Post the automatic transitions and send the requests the state calls for."""
        while True:
            job = act.job
            state = job.state
            if state is _DEPEND:
                if job.dependencies or act.rec.id in self.deps:
                    return
                self._post(fx, act, ev.Depend(timestamp=self.clock()))
            elif state is _PRIORITY:
                prio = self._priority_of(act)
                self._post(fx, act, ev.Priority(timestamp=self.clock(), priority=prio))
                if act.alloc_epoch is not None:
                    # the alloc request is still with the scheduler: tell it
                    if prio == 0:
                        self._send_cancel(fx, act)
                    elif not act.cancel_sent:  # (an update cancels it to ask anew)
                        self._prioritize[act.rec.id] = prio
            elif state is _SCHED:
                if act.alloc_epoch is None and job.priority:
                    self._enqueue(act)
                return
            elif state is _RUN:
                act.request = None  # no longer pending: never asked for again
                if job.can_start and not act.start_sent:
                    self._send_start(fx, act)
                self._arm_timelimit(act)
                return
            elif state is _CLEANUP:
                act.request = None
                self._cleanup(fx, act)
                return
            else:
                return

    def _priority_of(self, act: Active) -> int:
        job = act.job
        return job_priority(self.priority, PriorityInput(
            jobid=act.rec.id, urgency=job.urgency, userid=job.userid, t_submit=job.t_submit,
            queue=act.rec.queue or None))

    def reprioritize(self, fx: Effects) -> int:
        """Recompute the priority of every job waiting in SCHED (the plugin's inputs drift:
        fair share, age) and post a ``priority`` event for each that changed; an
        outstanding alloc request is updated with RFC 27 ``prioritize``, a queued one
        goes out in its new place. The number of jobs whose priority changed."""
        changed = 0
        for act in self.jobs.values():
            job = act.job
            if job.state is not _SCHED or not job.priority:
                continue  # held jobs stay held; jobs in PRIORITY get theirs anyway
            prio = self._priority_of(act)
            if prio == job.priority:
                continue
            changed += 1
            self._post(fx, act, ev.Priority(timestamp=self.clock(), priority=prio))
            if act.alloc_epoch is not None:
                self._prioritize[act.rec.id] = prio
            elif act.rec.id in self._queued:
                # its heap entry is stale now: pump puts it back at its new priority
                heapq.heappush(self._waiting, (-prio, job.t_submit, act.rec.id))
        if changed:
            self.pump(fx)  # the prioritize message goes out with these events
        return changed

    def _cleanup(self, fx: Effects, act: Active) -> None:
        job = act.job
        if act.alloc_epoch is not None:
            if not act.cancel_sent:
                self._send_cancel(fx, act)
            return  # wait for the CANCEL (or SUCCESS) response
        if job.has_resources and not (job.released or act.exec_done):
            # Exec may hold processes on the ranks (even if it never reported
            # them started): kill, and wait until every rank has released.
            if not act.kill_sent and act.ranks is not None:
                act.kill_sent = True
                kill = Kill(id=act.rec.id, signal=KILL_SIGNAL)
                for rank in act.ranks:
                    fx.exec.setdefault(rank, []).append(kill)
            return
        if job.free_owed:
            if job.can_free and not act.free_sent and self.session.ready:
                act.free_sent = True
                fx.sched.append(Free(id=act.rec.id))
            return
        if job.can_clean:
            self._post(fx, act, ev.Clean(timestamp=self.clock()))
            self._retire(fx, act)

    def _retire(self, fx: Effects, act: Active) -> None:
        """The job is INACTIVE: record its outcome and forget it."""
        job = act.job
        jobid = act.rec.id
        result = job.result
        fx.retired[jobid] = ((result.name or "") if result is not None else "",
                             job.t_inactive if job.t_inactive is not None else self.clock())
        progress = act.progress
        if progress is not None and progress.saved:
            fx.progress[jobid] = None  # nothing to delete when it was never stored
        self.deps.remove(jobid)
        self._queued.discard(jobid)
        del self.jobs[jobid]
        self.inactive_count += 1

    # ------------------------------------------------------------ scheduling

    def _enqueue(self, act: Active) -> None:
        jobid = act.rec.id
        if jobid in self._queued:
            return
        self._queued.add(jobid)
        heapq.heappush(self._waiting, (-(act.job.priority or 0), act.job.t_submit, jobid))

    def pump(self, fx: Effects) -> None:
        """Send alloc requests for waiting jobs, best first, as the ready mode allows."""
        session = self.session
        if self._prioritize and session.ready:
            fx.sched.append(Prioritize(jobs=list(self._prioritize.items())))
            self._prioritize = {}
        while self._waiting and session.may_send():
            neg_prio, t_submit, jobid = heapq.heappop(self._waiting)
            if jobid not in self._queued:
                continue
            act = self.jobs.get(jobid)
            if (act is None or act.job.state is not _SCHED or act.alloc_epoch is not None
                    or not act.job.priority):
                self._queued.discard(jobid)
                continue
            if -neg_prio != act.job.priority:  # stale entry: the priority changed
                heapq.heappush(self._waiting, (-act.job.priority, t_submit, jobid))
                continue
            self._queued.discard(jobid)
            queue = act.rec.queue
            if queue in self.stopped_queues:
                self._parked.setdefault(queue, set()).add(jobid)
                continue
            act.alloc_epoch = session.epoch
            act.cancel_sent = False
            session.outstanding += 1
            job = act.job
            fx.sched.append(Alloc(id=jobid, priority=job.priority or 0, userid=job.userid,
                                  t_submit=job.t_submit, queue=queue or None,
                                  request=act.request, bank=_bank(act)))

    def _send_cancel(self, fx: Effects, act: Active) -> None:
        # Not while suspended: the next hello forgets every outstanding
        # request, which settles the job as a CANCEL response would.
        if act.alloc_epoch is not None and not act.cancel_sent and self.session.ready:
            act.cancel_sent = True
            fx.sched.append(proto.Cancel(id=act.rec.id))

    def _send_start(self, fx: Effects, act: Active) -> None:
        if act.ranks is None:
            return
        act.start_sent = True
        jobid = act.rec.id
        start = Start(id=jobid, ranks=str(act.ranks))
        for rank in act.ranks:
            fx.exec.setdefault(rank, []).append(start)

    def _arm_timelimit(self, act: Active) -> None:
        """Set the job's time-limit timer (from its alloc time, or when the jobs it is
        staged behind end) once."""
        if act.deadline is not None:
            return
        if act.job.expiration is not None:
            # moved by a resource-update (``fluxes update`` of the running job)
            act.deadline = act.job.expiration
            heapq.heappush(self._timers, (act.deadline, act.rec.id, "timelimit"))
            return
        duration = act.rec.info.get("duration")
        if isinstance(duration, int | float) and not isinstance(duration, bool) \
                and 0 < duration < float("inf"):
            start = act.job.t_run or self.clock()
            # staged behind running jobs: its limit counts from when they end, as R's
            # expiration does (docs/scheduling-policies.md, "Staged starts")
            start = max(start, _staged_start(act.job.annotations))
            act.deadline = start + float(duration)
            heapq.heappush(self._timers, (act.deadline, act.rec.id, "timelimit"))

    # ------------------------------------------------------------ scheduler messages

    def on_sched(self, fx: Effects, epoch: int, msg: SchedResponse,
                 current: int | None = None) -> None:
        """One RFC 27 message from the scheduler (acks are the caller's).

        Every message carries its session's epoch. A ``hello`` opens a session
        only with an epoch newer than the current session's and, when the
        caller read it (``current``: the epoch of the scheduler holding the
        partition's lease, -1 when nobody does), equal to that one: a hello of
        an older scheduler (replayed, forged, or sent by one paused past its
        lease) changes nothing. Other messages count only in the current
        session's epoch.
        """
        session = self.session
        if isinstance(msg, Hello):
            if session.epoch is not None and epoch <= session.epoch:
                return  # a repeated or older hello: the session stands
            if current is not None and epoch != current:
                return  # not the scheduler that leads now: its hello follows, if any
            self._on_hello(fx, epoch)
            return
        if epoch != session.epoch:
            return  # an older scheduler's message: ignored (RFC 27 epochs)
        match msg:
            case SchedError(note=note, id=jobid):
                what = f" (job {show_id(jobid)})" if jobid is not None else ""
                self.suspend(f"scheduler error{what}: {note[:200]}"
                             if note else f"scheduler error{what}")
            case Ready(mode=mode, limit=limit):
                if session.suspended is not None:
                    return  # RFC 27: only a new hello (a new epoch) resumes scheduling
                if session.ready:
                    return  # one ready per session: a repeated one changes no mode
                session.ready = True
                session.mode = mode
                session.limit = limit if limit > 0 else 1
                for each in list(self.jobs.values()):
                    self._advance(fx, each)  # frees owed, allocs wanted
                self.pump(fx)
            case AllocResponse():
                self._on_alloc_response(fx, epoch, msg)
            case FreeResponse(id=jobid):
                act = self.jobs.get(jobid)
                if act is not None and act.free_sent and act.job.has_resources:
                    self._post(fx, act, ev.Free(timestamp=self.clock()))
                    self._advance(fx, act)
                    self.pump(fx)  # the freed job may have released dependents

    def _granted(self, ranks: str) -> IDSet:
        """``ranks`` parsed (ValueError when malformed), as a set of the job's own."""
        kept = self._ranks_parsed.get(ranks)
        if kept is None:
            kept = IDSet(ranks)
            if len(ranks) > _RANKS_TEXT_KEPT:
                return kept
            if len(self._ranks_parsed) >= _RANKS_KEPT:
                self._ranks_parsed.clear()
            self._ranks_parsed[ranks] = kept
        return IDSet(kept)

    def suspend(self, why: str) -> bool:
        """Stop talking to the scheduler until the next hello (RFC 27 "Finalization").

        No alloc, free, cancel or prioritize goes out; responses of the
        session's epoch are still taken (they tell what the scheduler did).
        Nothing is lost: the next hello forgets the outstanding requests and
        sends them again after ready, as after any scheduler restart.
        Returns False when there is no live session to suspend.
        """
        session = self.session
        if session.epoch is None or session.suspended is not None:
            return False
        session.ready = False
        session.suspended = why
        session.suspended_at = self.clock()
        return True

    def heal(self, fx: Effects, lease_epoch: int | None) -> bool:
        """Ask for a new session (``reset``) when scheduling has been suspended for
        HEAL_AFTER_S while a scheduler holds the lease (``lease_epoch``, None when
        nobody does: a new scheduler says hello by itself); at most once per
        HEAL_AFTER_S. The scheduler answers with a hello in a new epoch, which
        resumes scheduling. True when a reset was sent.

        An ``error`` in the current epoch cannot be told from a forged one, so
        it suspends, and this is what makes scheduling go on afterwards.
        """
        session = self.session
        if session.suspended is None or lease_epoch is None:
            return False
        now = self.clock()
        if now - session.suspended_at < HEAL_AFTER_S or now - self._reset_at < HEAL_AFTER_S:
            return False
        self._reset_at = now
        fx.sched.append(Reset())
        return True

    def check_scheduler(self, lease_epoch: int | None) -> str | None:
        """Suspend the session if its scheduler no longer leads; return why, or None.

        ``lease_epoch`` is the epoch of the scheduler holding the partition's
        scheduler lease, None when nobody holds it (the scheduler died, or
        stopped, and its lease expired). Another epoch than the session's
        means a newer scheduler took over; its hello resumes scheduling.
        """
        session = self.session
        if session.epoch is None or session.suspended is not None:
            return None
        if lease_epoch is None:
            why = f"scheduler of epoch {session.epoch} went away (its lease expired)"
        elif lease_epoch != session.epoch:
            why = f"scheduler of epoch {session.epoch} was replaced (epoch {lease_epoch})"
        else:
            return None
        return why if self.suspend(why) else None

    def _on_hello(self, fx: Effects, epoch: int) -> None:
        """A scheduler (re)started: forget the old session, answer with held resources."""
        session = self.session
        session.epoch = epoch
        session.ready = False
        session.suspended = None
        session.outstanding = 0
        self._prioritize = {}
        alloc: list[HeldJob] = []
        for act in self.jobs.values():
            if act.alloc_epoch is not None:
                act.alloc_epoch = None
                act.cancel_sent = False
                if act.job.state is _SCHED:
                    self._enqueue(act)
            act.free_sent = False
            job = act.job
            if job.has_resources:
                # the ranks let the scheduler keep them out of use should the
                # job's stored R be unreadable
                alloc.append(HeldJob(id=act.rec.id, priority=job.priority or 0,
                                     userid=job.userid,
                                     ranks=None if act.ranks is None else str(act.ranks),
                                     bank=_bank(act), expiration=job.expiration or None))
        fx.sched.append(HelloReply(alloc=alloc))
        fx.sched_epoch = epoch
        # jobs canceled while their request was with the old scheduler can finish now
        for act in list(self.jobs.values()):
            if act.job.state is _CLEANUP:
                self._advance(fx, act)

    def _on_alloc_response(self, fx: Effects, epoch: int, msg: AllocResponse) -> None:
        act = self.jobs.get(msg.id)
        if act is None or act.alloc_epoch != epoch:
            return  # not asked for (or already answered)
        kind = msg.type
        ann = msg.annotations
        if ann is not None and not _encodable(ann):
            raise proto.MessageError("alloc-response: annotations cannot be stored "
                                     "(nested too deeply)")
        ranks = msg.ranks
        granted: IDSet | None = None
        if kind == proto.ALLOC_SUCCESS and ranks is not None:
            # checked before anything changes: a bad message is refused whole
            try:
                granted = self._granted(ranks)
            except ValueError as exc:
                raise proto.MessageError(f"alloc-response: {exc}") from None
            if not granted or len(granted) > MAX_RANKS:
                raise proto.MessageError(f"alloc-response: ranks {ranks!r:.40} must name "
                                         f"1 to {MAX_RANKS} ranks")
        now = self.clock()
        if kind == proto.ALLOC_ANNOTATE:
            if ann is not None:
                self._annotate(fx, act, ann)
            return
        act.alloc_epoch = None
        self.session.outstanding = max(0, self.session.outstanding - 1)
        if kind == proto.ALLOC_SUCCESS:
            merged = act.rec.job.annotations
            if ann is not None:
                merged = merge_annotations(merged, ann)
            extra: dict[str, Any] = {}
            if granted is not None:
                extra["ranks"] = ranks
                act.ranks = granted
            if msg.nodelist is not None:
                extra["nodelist"] = msg.nodelist
            if msg.ncores is not None:
                # what accounting charges (docs/accounting.md): R's own counts
                extra["ncores"] = msg.ncores
                extra["ngpus"] = msg.ngpus or 0
            if staged_info(ann) is not None:
                # its cores free only when the jobs it waits behind end: accounting
                # charges it from its start (docs/accounting.md)
                extra["staged"] = True
            self._post(fx, act, ev.Alloc(timestamp=now, annotations=dict(merged) if merged
                                         else None), extra or None)
        elif kind == proto.ALLOC_DENY:
            note = msg.note
            self._post(fx, act, ev.JobException(
                timestamp=now, type="alloc", severity=0,
                note=note if note is not None else "resources can never be allocated"))
        # else CANCEL: the cancel we asked for: the job is in CLEANUP, or its queue stopped
        self._advance(fx, act)
        self.pump(fx)

    # ------------------------------------------------------------ exec messages

    def on_exec(self, fx: Effects, msg: ExecReport, ack: Ack | None = None) -> None:
        """Per-rank progress from an exec worker.

        Progress that no event records yet (some ranks reported, not all) is
        saved with the commit (``fx.progress``), so the input can be
        acknowledged at once and a restarted job manager still knows it.
        """
        if ack is not None:
            fx.acks.append(ack)
        act = self.jobs.get(msg.id)
        if act is None or act.ranks is None or not act.job.has_resources:
            return  # nothing to do: the job is gone or not running
        rank = msg.rank
        if rank not in act.ranks:
            return  # not one of the job's ranks: it must not count towards them
        now = self.clock()
        nranks = len(act.ranks)
        error = msg.error
        status = msg.status
        if status is not None and not 0 <= status <= 0xFFFF:
            # no wait(2) status: the finish event could not hold it, so fail the job
            error = error or f"rank {rank} reported an invalid wait status"
            status = None
        # an error earlier than this report stops the start; one in this
        # report comes after it (as flux's shell: start, then "start failed")
        error_before = act.exec_error
        self._note_rank(act, msg, status)
        # the progress _note_rank made: read once, not through the properties each time
        progress = act.rank_progress()
        if act.hooks is not None:
            # a failed prolog is its own exception (type prolog), not an exec one
            error = self._hook_events(fx, act, error, now)
        job = act.rec.job
        if (not job.started and len(progress.started) >= nranks and not error_before
                and job.state in _RUNNING_STATES and not job.prologs
                and not job.prolog_failed):
            self._post(fx, act, ev.Start(timestamp=now))
        if error and not act.exec_error:
            act.exec_error = True
            self._post(fx, act, ev.JobException(timestamp=now, type="exec", severity=0,
                                                note=error))
        job = act.rec.job
        finished = progress.finished
        if job.started and job.wait_status is None and len(finished) >= nranks:
            self._post(fx, act, ev.Finish(timestamp=now, status=max(finished.values())))
        if act.hooks is not None:
            self._hook_events(fx, act, error, now)  # the epilog, once in CLEANUP
        job = act.rec.job
        if job.wait_status is not None and not job.released \
                and len(progress.released) >= nranks:
            self._post(fx, act, ev.Release(timestamp=now, ranks="all", final=True))
        if nranks > 1:
            self._save_progress(fx, act)
        self._advance(fx, act)
        self.pump(fx)

    @staticmethod
    def _note_rank(act: Active, msg: ExecReport, status: int | None) -> None:
        """Take what one rank's report says into the job's per-rank progress."""
        rank = msg.rank
        if msg.prolog is not None or msg.epilog is not None:
            act.hooks = act.hooks or HookProgress()
            act.hooks.note(rank, msg.prolog, msg.epilog)
        if msg.started:
            act.exec_started.add(rank)
        if status is not None:
            act.exec_finished[rank] = status
        if msg.released:
            act.exec_released.add(rank)
            if rank in act.exec_started and rank not in act.exec_finished:
                # It ran but its status is lost (its processes died with the
                # exec worker): count it as killed, so finish, release and
                # free can follow instead of the job waiting forever.
                act.exec_finished[rank] = LOST_WAIT_STATUS

    @staticmethod
    def _save_progress(fx: Effects, act: Active) -> None:
        """The ranks' progress no event records yet, saved with the commit."""
        saved: SavedProgress = {
            "started": sorted(act.exec_started),
            "finished": {str(r): s for r, s in act.exec_finished.items()},
            "released": sorted(act.exec_released), "error": act.exec_error}
        if act.hooks is not None:
            saved["hooks"] = act.hooks.to_wire()
        fx.progress[act.rec.id] = saved
        if act.progress is not None:  # made by the reads above
            act.progress.saved = True

    def _hook_events(self, fx: Effects, act: Active, error: str | None,
                     now: float) -> str | None:
        """Post the prolog/epilog events due (fluxes/domain/jm/perilog.py); the exec
        error left to report (None when a prolog exception said it)."""
        assert act.hooks is not None and act.ranks is not None
        events = hook_events(act.job, act.hooks, act.ranks, act.exec_released, error, now)
        for event in events:
            self._post(fx, act, event)
            if isinstance(event, ev.JobException) and event.type == "prolog":
                act.exec_error = True
                error = None
            elif isinstance(event, ev.PrologFinish) and event.status == 0:
                # every rank's prolog ended well and waits: the start again starts
                # the tasks (fluxes/proc/perilog.py)
                act.start_sent = False
        return error

    # ------------------------------------------------------------ user requests

    def next_timer(self) -> float | None:
        """When :meth:`on_timers` next has something to do (UNIX time), or None."""
        candidates = []
        if self._timers:
            candidates.append(self._timers[0][0])
        due = self.deps.next_due()
        if due is not None:
            candidates.append(due)
        return min(candidates) if candidates else None

    def on_timers(self, fx: Effects, now: float | None = None) -> None:
        """Fire expired time limits and begin-time dependencies."""
        now = self.clock() if now is None else now
        while self._timers and self._timers[0][0] <= now:
            deadline, jobid, _kind = heapq.heappop(self._timers)
            act = self.jobs.get(jobid)
            if act is None or act.deadline != deadline or act.job.state is not _RUN:
                continue
            self._post(fx, act, ev.JobException(timestamp=now, type="timelimit", severity=0,
                                                note="job time limit expired"))
            self._advance(fx, act)
        self._dependency_actions(fx, self.deps.due(now))
        self.pump(fx)


def _bank(act: Active) -> str | None:
    """The bank a job is charged to (its submit extras), None when it names none."""
    bank = act.rec.info.get("bank")
    return bank if isinstance(bank, str) and bank else None


def _encodable(value: Any) -> bool:
    """True if ``value`` can be written as JSON (orjson nests at most 254 levels)."""
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


def _staged_start(ann: Mapping[str, Any] | None) -> float:
    """When the jobs a staged job waits behind end at the latest (its ``sched.staged``
    annotation's ``t_start``); 0 when it is not staged."""
    staged = staged_info(ann)
    t_start = staged.get("t_start") if staged is not None else None
    if isinstance(t_start, int | float) and not isinstance(t_start, bool) \
            and math.isfinite(t_start):
        return float(t_start)
    return 0.0
