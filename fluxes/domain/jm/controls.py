"""The job manager core's handling of user requests and queue changes.

Cancel, raise, signal and kill-all, ``fluxes update``, urgency, lost ranks (RFC
21's exceptions and the job manager's requests), and a queue's admin state
changing: :class:`ControlHandlers`, a base class of
:class:`~fluxes.domain.jm.core.JobManagerCore`, whose per-job runtime facts and
transitions these handlers use (declared below for the type checker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fluxes import messages as proto
from fluxes.domain.jm.active import Active
from fluxes.domain.jm.depend import DependencyActions, DependencyIndex
from fluxes.domain.jm.effects import (
    KILL_SIGNAL,
    LOST_WAIT_STATUS,
    Ack,
    Effects,
    SchedSession,
    show_id,
)
from fluxes.domain.jm.priority import check_urgency_change
from fluxes.domain.jm.update import DURATION as DURATION_KEY
from fluxes.domain.jm.update import IMMUTABLE_FLAG, UPDATABLE
from fluxes.domain.jm.update import QUEUE as QUEUE_KEY
from fluxes.domain.job import events as ev
from fluxes.domain.job.states import JobState
from fluxes.errors import PolicyError
from fluxes.formats.idset import IDSet
from fluxes.messages import (
    CancelRequest,
    Control,
    ExecReport,
    Kill,
    KillAllRequest,
    LostRanks,
    QueuesChanged,
    RaiseRequest,
    Reply,
    Signal,
    SignalRequest,
    UpdateRequest,
    UrgencyRequest,
)

_SCHED, _RUN, _INACTIVE = JobState.SCHED, JobState.RUN, JobState.INACTIVE


class ControlHandlers:
    """User requests and queue changes (see the module's docstring)."""

    if TYPE_CHECKING:
        jobs: dict[int, Active]
        owner_uid: int
        session: SchedSession
        deps: DependencyIndex
        stopped_queues: set[str]
        _parked: dict[str, set[int]]
        _timers: list[tuple[float, int, str]]
        clock: Callable[[], float]

        def _post(self, fx: Effects, act: Active, event: ev.Event,
                  extra: Mapping[str, Any] | None = None) -> None: ...
        def _advance(self, fx: Effects, act: Active) -> None: ...
        def pump(self, fx: Effects) -> None: ...
        def _send_cancel(self, fx: Effects, act: Active) -> None: ...
        def on_exec(self, fx: Effects, msg: ExecReport, ack: Ack | None = None) -> None: ...
        def _shared(self, request: str | None) -> str | None: ...
        def _enqueue(self, act: Active) -> None: ...
        def _dependency_actions(self, fx: Effects,
                                actions: Iterable[DependencyActions]) -> None: ...
        def _arm_timelimit(self, act: Active) -> None: ...

    def on_ctl(self, fx: Effects, msg: Control, ack: Ack | None = None) -> None:
        """A forwarded user request (cancel, urgency, raise, signal), lost ranks or a
        queue change."""
        lost = _checked_control(msg)
        if ack is not None:
            fx.acks.append(ack)
        answer = self._answer_control(fx, msg, lost)
        if msg.reply:
            fx.replies.append((msg.reply, answer))
        self.pump(fx)

    def _answer_control(self, fx: Effects, msg: Control, lost: IDSet | None) -> Reply:
        """Act on a checked control request; its answer."""
        match msg:
            case CancelRequest(ids=ids, userid=userid, note=note):
                return self._raise_many(fx, ids, userid, "cancel", 0, note)
            case RaiseRequest(ids=ids, userid=userid, type=etype, severity=severity, note=note):
                return self._raise_many(fx, ids, userid, etype, severity, note)
            case UrgencyRequest(id=jobid, urgency=urgency, userid=userid):
                return self._urgency(fx, jobid, urgency, userid)
            case SignalRequest(ids=ids, userid=userid, signal=sig):
                return self._signal_many(fx, ids, userid, sig)
            case KillAllRequest(userid=userid, target=target, signal=sig, dry_run=dry_run):
                return self._killall(fx, userid, target, sig, dry_run)
            case UpdateRequest():
                return self._update(fx, msg)
            case QueuesChanged(stopped=stopped):
                if stopped is not None:
                    self.set_stopped_queues(fx, set(stopped))
                return Reply(ok=[])
            case LostRanks():
                assert lost is not None
                return self._lost_ranks(fx, lost)

    def _lost_ranks(self, fx: Effects, lost: IDSet) -> Reply:
        """Exec workers of ``lost`` are gone: fail their jobs and count those ranks as done.

        No exec worker will ever report on them, so the job manager reports
        for it (killed, released), which lets the job finish its cleanup.
        """
        now = self.clock()
        failed = []
        for act in list(self.jobs.values()):
            if act.ranks is None or not act.job.has_resources or not act.ranks.intersects(lost):
                continue
            gone = act.ranks & lost
            for rank in gone:
                # Waits in the rank's stream until its exec worker is back, so
                # tasks still running behind a network partition are stopped
                # before their cores are handed out again.
                fx.exec.setdefault(rank, []).append(Kill(id=act.rec.id, signal=KILL_SIGNAL))
            if act.job.fatal is None:
                self._post(fx, act, ev.JobException(
                    timestamp=now, type="node-failure", severity=0,
                    note=f"lost contact with the exec worker of rank(s) {gone}"))
            for rank in gone:
                if rank in act.exec_started or act.job.started:
                    act.exec_started.add(rank)
                    act.exec_finished.setdefault(rank, LOST_WAIT_STATUS)
                act.exec_released.add(rank)
            failed.append(act.rec.id)
            self.on_exec(fx, ExecReport(id=act.rec.id, rank=next(iter(gone))))
        return Reply(ok=failed)

    def _acting_on(self, jobid: int, userid: int) -> Active | str:
        """The active job ``jobid`` if ``userid`` may act on it (its owner or the
        instance owner), else why not (a line naming the job)."""
        act = self.jobs.get(jobid)
        if act is None or act.job.state is _INACTIVE:
            return f"{show_id(jobid)}: job is inactive or unknown"
        if userid not in (self.owner_uid, act.job.userid):
            return f"{show_id(jobid)}: permission denied"
        return act

    def _each_job(self, ids: list[int], userid: int,
                  act_on: Callable[[int, Active], str | None]) -> Reply:
        """``act_on`` each job ``userid`` may act on (it returns the job's error, or
        None once done); the others' refusals as errors."""
        errors = []
        done = []
        for jobid in ids:
            act = self._acting_on(jobid, userid)
            error = act if isinstance(act, str) else act_on(jobid, act)
            if error is None:
                done.append(jobid)
            else:
                errors.append(error)
        return Reply(ok=done, errors=errors)

    def _raise_many(self, fx: Effects, ids: list[int], userid: int, kind: str,
                    severity: int, note: str) -> Reply:
        def raise_on(jobid: int, act: Active) -> str | None:
            if not 0 <= severity <= 7:
                return f"{show_id(jobid)}: severity must be 0-7"
            context = {} if userid == self.owner_uid else {"userid": userid}
            self._post(fx, act, ev.JobException(
                timestamp=self.clock(), type=kind, severity=severity, note=note,
                userid=context.get("userid")))
            self._advance(fx, act)
            return None

        return self._each_job(ids, userid, raise_on)

    def _signal(self, fx: Effects, act: Active, sig: int) -> None:
        """Ask the exec worker of each of the job's ranks to signal its tasks there."""
        assert act.ranks is not None
        for rank in act.ranks:
            fx.exec.setdefault(rank, []).append(Signal(id=act.rec.id, signal=sig))

    def _signal_many(self, fx: Effects, ids: list[int], userid: int, sig: int) -> Reply:
        """``fluxes job kill``: signal the tasks of running jobs; the jobs go on."""
        def signal_on(jobid: int, act: Active) -> str | None:
            if act.job.state is not _RUN or act.ranks is None:
                return f"{show_id(jobid)}: job is not running"
            self._signal(fx, act, sig)
            return None

        return self._each_job(ids, userid, signal_on)

    def _killall(self, fx: Effects, userid: int, target: int, sig: int,
                 dry_run: bool) -> Reply:
        """``fluxes job killall``: signal every running job of ``target`` (-1: of
        every user), or only name them (``dry_run``); only the instance owner may
        name another user's jobs."""
        if userid not in (target, self.owner_uid):
            return Reply(ok=[], errors=["permission denied: only the instance owner may "
                                        "signal other users' jobs"])
        matched = []
        for act in self.jobs.values():
            if act.job.state is not _RUN or act.ranks is None:
                continue
            if target not in (-1, act.job.userid):
                continue
            if not dry_run:
                self._signal(fx, act, sig)
            matched.append(act.rec.id)
        return Reply(ok=matched)

    def _update(self, fx: Effects, msg: UpdateRequest) -> Reply:
        """``fluxes update``, checked by the ingest against the job as it was then: a
        pending job gets a ``jobspec-update`` (and its new scheduler request, the old
        alloc request canceled), a running one a ``resource-update`` with its new
        expiration and time limit. Refused when the job changed since the check."""
        jobid = msg.id
        act = self._acting_on(jobid, msg.userid)
        if isinstance(act, str):
            return Reply(errors=[act])
        job = act.job
        if dict(job.jobspec_updates) != msg.base or job.expiration != msg.base_expiration:
            return Reply(errors=[f"{show_id(jobid)}: the job changed while the update was "
                                 "checked: try again"])
        now = self.clock()
        if job.state & JobState.PENDING:
            if msg.immutable:
                self._post(fx, act, ev.SetFlags(timestamp=now, flags=(IMMUTABLE_FLAG,)))
            self._post(fx, act, ev.JobspecUpdate(timestamp=now, updates=dict(msg.updates)))
            act.request = self._shared(msg.request)
            fields = fx.job_fields.setdefault(jobid, {})
            fields["request"] = msg.request
            if QUEUE_KEY in msg.updates:
                fields["queue"] = str(msg.updates[QUEUE_KEY])
            if act.alloc_epoch is not None:
                # the scheduler holds the old request: the CANCEL answer requeues the job
                self._send_cancel(fx, act)
            self._advance(fx, act)
        elif job.state is _RUN and set(msg.updates) == {DURATION_KEY}:
            duration = msg.updates[DURATION_KEY]
            if not duration:
                return Reply(errors=[f"{show_id(jobid)}: a running job's duration cannot "
                                     "become unlimited"])
            expiration = (job.t_run or now) + float(duration)
            if msg.immutable:
                self._post(fx, act, ev.SetFlags(timestamp=now, flags=(IMMUTABLE_FLAG,)))
            self._post(fx, act, ev.ResourceUpdate(timestamp=now, expiration=expiration))
            if self.session.epoch is not None:
                # the scheduler plans with the new end; with no session yet, the
                # hello reply carries it (as after any scheduler restart)
                fx.sched.append(proto.Expiration(id=jobid, expiration=expiration))
            act.deadline = None
            self._arm_timelimit(act)
        elif job.state is _RUN:
            return Reply(errors=[f"{show_id(jobid)}: only the duration of a running job "
                                 "may be updated"])
        else:
            return Reply(errors=[f"{show_id(jobid)}: job is finishing: it can no longer "
                                 "be updated"])
        return Reply(ok=[jobid], updates=dict(msg.updates))

    def _urgency(self, fx: Effects, jobid: int, urgency: int, userid: int) -> Reply:
        act = self.jobs.get(jobid)
        if act is None:
            return Reply(errors=[f"{show_id(jobid)}: job is inactive or unknown"])
        job = act.job
        try:
            check_urgency_change(urgency, userid, job.userid, userid == self.owner_uid,
                                 current_urgency=job.urgency, has_resources=job.has_resources)
            if not job.state & JobState.PENDING:
                raise PolicyError("urgency cannot be changed once resources are allocated")
        except PolicyError as exc:
            return Reply(errors=[f"{show_id(jobid)}: {exc}"])
        old = job.urgency
        self._post(fx, act, ev.Urgency(timestamp=self.clock(), urgency=urgency, userid=userid))
        self._advance(fx, act)
        return Reply(ok=[jobid], old=old)

    def set_stopped_queues(self, fx: Effects, stopped: set[str]) -> None:
        """Apply queue start/stop: stopped queues get no alloc requests (pending ones canceled)."""
        newly_stopped = stopped - self.stopped_queues
        started = self.stopped_queues - stopped
        self.stopped_queues = set(stopped)
        if newly_stopped:
            for each in self.jobs.values():
                if each.rec.queue in newly_stopped and each.alloc_epoch is not None:
                    self._send_cancel(fx, each)
        for queue in started:
            for jobid in self._parked.pop(queue, set()):
                act = self.jobs.get(jobid)
                if act is not None and act.job.state is _SCHED:
                    self._enqueue(act)

    # ------------------------------------------------------------ timers


def _checked_control(msg: Control) -> IDSet | None:
    """Refuse a control request no replay could accept; the lost ranks of a ``lost-ranks``."""
    if getattr(msg, "userid", 0) < 0:
        # events record the requester's userid, and replay refuses a negative one
        # (decoding refuses it already; this guards messages built in memory)
        raise proto.MessageError("control request: 'userid' must be >= 0")
    if isinstance(msg, UpdateRequest):
        _check_update(msg)
    if not isinstance(msg, LostRanks):
        return None
    try:
        return IDSet(msg.ranks)
    except ValueError as exc:
        raise proto.MessageError(f"lost-ranks: {exc}") from None


def _check_update(msg: UpdateRequest) -> None:
    """MessageError unless the update names only keys an update may change, each with
    a value of its kind (text; a duration a number of seconds >= 0)."""
    if not msg.updates:
        raise proto.MessageError("update-request: no updates")
    for key, value in msg.updates.items():
        if key not in UPDATABLE:
            raise proto.MessageError(f"update-request: key {key[:40]!r} cannot be updated")
        if key == DURATION_KEY:
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not 0 <= value < float("inf"):
                raise proto.MessageError("update-request: duration must be a number >= 0")
        elif not isinstance(value, str) or not value:
            raise proto.MessageError(f"update-request: {key} must be a non-empty string")
