"""The RFC 21 state machine as a pure fold: ``apply(event, job) -> job``.

A :class:`Job` is an immutable record; :func:`apply` returns a new one or raises
:class:`TransitionError` (leaving the caller's job untouched) when the event is
impossible in the job's current state. Replaying a job's eventlog is
``functools.reduce`` over its events (:func:`replay`), so incremental state and
replayed state are the same by construction.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fluxes.job import events as ev
from fluxes.job.states import JobResult, JobState

DEFAULT_URGENCY = 16
_EMPTY: Mapping[str, Any] = {}


class TransitionError(ValueError):
    """An event is impossible in the job's current state."""


@dataclass(frozen=True, slots=True)
class FatalException:
    """The first severity-0 exception: the root cause of a job's end."""

    type: str
    note: str
    timestamp: float


@dataclass(frozen=True, slots=True)
class Job:
    """Everything the event history says about one job (small: one record per job)."""

    id: int
    state: JobState = JobState.NEW
    seq: int = 0  # events applied: the eventlog length an appender expects
    urgency: int = DEFAULT_URGENCY
    userid: int = -1
    flags: int = 0
    set_flags: frozenset[str] = frozenset()
    priority: int | None = None
    t_submit: float = 0.0
    t_depend: float | None = None
    t_priority: float | None = None
    t_sched: float | None = None
    t_run: float | None = None
    t_cleanup: float | None = None
    t_inactive: float | None = None
    dependencies: frozenset[str] = frozenset()
    prologs: tuple[str, ...] = ()
    epilogs: tuple[str, ...] = ()
    prolog_failed: bool = False
    has_resources: bool = False
    was_allocated: bool = False
    started: bool = False
    released: bool = False
    wait_status: int | None = None
    fatal: FatalException | None = None
    exceptions: int = 0
    restarts: int = 0
    expiration: float | None = None
    annotations: Mapping[str, Any] | None = None
    memo: Mapping[str, Any] | None = None
    jobspec_updates: Mapping[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------ derived

    @property
    def finished(self) -> bool:
        """True once the ``finish`` event is in."""
        return self.wait_status is not None

    @property
    def result(self) -> JobResult | None:
        """COMPLETED, FAILED, CANCELED or TIMEOUT once INACTIVE; None before."""
        if self.state != JobState.INACTIVE:
            return None
        if self.fatal is not None:
            if self.fatal.type == "cancel":
                return JobResult.CANCELED
            if self.fatal.type == "timelimit":
                return JobResult.TIMEOUT
            return JobResult.FAILED
        if self.wait_status == 0:
            return JobResult.COMPLETED
        return JobResult.FAILED

    @property
    def exit_code(self) -> int | None:
        """Exit code from the finish wait status (128+signal when killed), as flux reports."""
        status = self.wait_status
        if status is None:
            return None
        signo = status & 0x7F
        if signo == 0:
            return (status >> 8) & 0xFF
        return 128 + signo

    @property
    def free_owed(self) -> bool:
        """True when the job is in CLEANUP still holding resources (sched.free must follow)."""
        return self.has_resources and self.state == JobState.CLEANUP

    @property
    def can_free(self) -> bool:
        """True when sched.free may be sent now: resources released by exec, no epilog running."""
        return self.free_owed and not self.epilogs and (self.released or not self.started)

    @property
    def can_clean(self) -> bool:
        """True when the ``clean`` event may be posted."""
        return (self.state == JobState.CLEANUP and not self.has_resources
                and not self.prologs and not self.epilogs
                and (not self.started or self.finished))

    @property
    def can_start(self) -> bool:
        """True when exec may be asked to start the job."""
        return (self.state == JobState.RUN and self.has_resources and not self.started
                and not self.prologs and not self.prolog_failed)


def _refuse(job: Job, event: ev.Event, why: str = "") -> TransitionError:
    reason = why or f"impossible in state {job.state.name}"
    return TransitionError(f"job {job.id}: event {event.event_name!r} {reason}")


def _require(job: Job, event: ev.Event, states: JobState) -> None:
    if not job.state & states:
        raise _refuse(job, event)


def merge_annotations(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
                      ) -> Mapping[str, Any] | None:
    """Merge RFC 27 annotations: recurse into dicts, null deletes, otherwise replace.

    Returns None when nothing remains, so "no annotations" has one representation.
    """
    if new is None:
        return None
    merged = _merge(old or _EMPTY, new)
    return merged or None


def _merge(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in new.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            sub = _merge(out[key], value)
            if sub:
                out[key] = sub
            else:
                out.pop(key, None)
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------ apply

@functools.singledispatch
def _transition(event: ev.Event, job: Job) -> Job:
    """Events the state machine does not act on (unknown, ``debug.*``) change nothing."""
    return job


def apply(event: ev.Event, job: Job) -> Job:
    """Return ``job`` after ``event``; raise TransitionError if the event is impossible.

    Every accepted event advances ``seq`` (the eventlog length), including the
    ones that change nothing else, so the appender's expected position stays
    in step with the stream.
    """
    if job.seq == 0 and not isinstance(event, ev.Submit):
        raise _refuse(job, event, "before submit")
    if job.state == JobState.INACTIVE:
        # INACTIVE is captive: the job record is read-only from here on.
        raise _refuse(job, event)
    new = _transition(event, job)
    if isinstance(event, ev.Annotations):
        return new  # journal-only: not part of the job eventlog
    return replace(new, seq=job.seq + 1)


def replay(jobid: int, events: Iterable[ev.Event]) -> Job:
    """Fold ``events`` into a fresh job (the projection of its eventlog)."""
    job = Job(jobid)
    for event in events:
        job = apply(event, job)
    return job


@_transition.register
def _submit(event: ev.Submit, job: Job) -> Job:
    if job.seq != 0:
        raise _refuse(job, event, "must be the first event")
    return replace(job, urgency=event.urgency, userid=event.userid, flags=event.flags,
                   t_submit=event.timestamp)


@_transition.register
def _validate(event: ev.Validate, job: Job) -> Job:
    _require(job, event, JobState.NEW)
    return replace(job, state=JobState.DEPEND, t_depend=event.timestamp)


@_transition.register
def _invalidate(event: ev.Invalidate, job: Job) -> Job:
    _require(job, event, JobState.NEW)
    return replace(job, state=JobState.INACTIVE, t_inactive=event.timestamp)


@_transition.register
def _dependency_add(event: ev.DependencyAdd, job: Job) -> Job:
    _require(job, event, JobState.NEW | JobState.DEPEND)
    if event.description in job.dependencies:
        raise _refuse(job, event, f"duplicates dependency {event.description!r}")
    return replace(job, dependencies=job.dependencies | {event.description})


@_transition.register
def _dependency_remove(event: ev.DependencyRemove, job: Job) -> Job:
    _require(job, event, JobState.NEW | JobState.DEPEND)
    if event.description not in job.dependencies:
        raise _refuse(job, event, f"names no outstanding dependency {event.description!r}")
    return replace(job, dependencies=job.dependencies - {event.description})


@_transition.register
def _depend(event: ev.Depend, job: Job) -> Job:
    _require(job, event, JobState.DEPEND)
    if job.dependencies:
        raise _refuse(job, event, f"while dependencies are outstanding: "
                                  f"{', '.join(sorted(job.dependencies))}")
    return replace(job, state=JobState.PRIORITY, t_priority=event.timestamp)


@_transition.register
def _priority(event: ev.Priority, job: Job) -> Job:
    _require(job, event, JobState.PRIORITY | JobState.SCHED)
    if job.state == JobState.PRIORITY:
        return replace(job, state=JobState.SCHED, priority=event.priority,
                       t_sched=event.timestamp)
    return replace(job, priority=event.priority)


@_transition.register
def _urgency(event: ev.Urgency, job: Job) -> Job:
    _require(job, event, JobState.NEW | JobState.PENDING)
    if job.state == JobState.SCHED:
        # The priority must be computed again before the job may be scheduled.
        return replace(job, urgency=event.urgency, state=JobState.PRIORITY,
                       t_priority=event.timestamp)
    return replace(job, urgency=event.urgency)


@_transition.register
def _flux_restart(event: ev.FluxRestart, job: Job) -> Job:
    if job.state == JobState.SCHED:
        return replace(job, state=JobState.PRIORITY, restarts=job.restarts + 1,
                       t_priority=event.timestamp, annotations=None)
    return replace(job, restarts=job.restarts + 1)


@_transition.register
def _jobspec_update(event: ev.JobspecUpdate, job: Job) -> Job:
    _require(job, event, JobState.NEW | JobState.PENDING)
    updates = {**job.jobspec_updates, **event.updates}
    if job.state == JobState.SCHED:
        return replace(job, jobspec_updates=updates, state=JobState.PRIORITY,
                       t_priority=event.timestamp)
    return replace(job, jobspec_updates=updates)


@_transition.register
def _resource_update(event: ev.ResourceUpdate, job: Job) -> Job:
    _require(job, event, JobState.RUNNING)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if event.expiration is None:
        return job
    return replace(job, expiration=event.expiration)


@_transition.register
def _set_flags(event: ev.SetFlags, job: Job) -> Job:
    return replace(job, set_flags=job.set_flags | frozenset(event.flags))


@_transition.register
def _alloc(event: ev.Alloc, job: Job) -> Job:
    # An alloc may land in CLEANUP: the job was canceled while the request
    # was in flight and the scheduler answered SUCCESS first. The resources
    # are then held and must be freed.
    _require(job, event, JobState.SCHED | JobState.CLEANUP)
    if job.has_resources or job.was_allocated:
        raise _refuse(job, event, "but resources were already allocated")
    if job.state == JobState.CLEANUP:
        return replace(job, has_resources=True, was_allocated=True)
    return replace(job, state=JobState.RUN, has_resources=True, was_allocated=True,
                   t_run=event.timestamp, annotations=event.annotations or None)


@_transition.register
def _prolog_start(event: ev.PrologStart, job: Job) -> Job:
    _require(job, event, JobState.RUN)
    if job.started:
        raise _refuse(job, event, "after the job started")
    return replace(job, prologs=(*job.prologs, event.description))


@_transition.register
def _prolog_finish(event: ev.PrologFinish, job: Job) -> Job:
    _require(job, event, JobState.RUNNING)
    if event.description not in job.prologs:
        raise _refuse(job, event, f"without a matching prolog-start {event.description!r}")
    prologs = list(job.prologs)
    prologs.remove(event.description)
    return replace(job, prologs=tuple(prologs),
                   prolog_failed=job.prolog_failed or event.status != 0)


@_transition.register
def _epilog_start(event: ev.EpilogStart, job: Job) -> Job:
    _require(job, event, JobState.CLEANUP)
    return replace(job, epilogs=(*job.epilogs, event.description))


@_transition.register
def _epilog_finish(event: ev.EpilogFinish, job: Job) -> Job:
    _require(job, event, JobState.CLEANUP)
    if event.description not in job.epilogs:
        raise _refuse(job, event, f"without a matching epilog-start {event.description!r}")
    epilogs = list(job.epilogs)
    epilogs.remove(event.description)
    return replace(job, epilogs=tuple(epilogs))


@_transition.register
def _start(event: ev.Start, job: Job) -> Job:
    _require(job, event, JobState.RUN)
    if job.started:
        raise _refuse(job, event, "twice")
    if job.prologs:
        raise _refuse(job, event, "while a prolog is running")
    return replace(job, started=True)


@_transition.register
def _release(event: ev.Release, job: Job) -> Job:
    _require(job, event, JobState.RUNNING)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if job.released:
        raise _refuse(job, event, "after the final release")
    return replace(job, released=event.final) if event.final else job


@_transition.register
def _finish(event: ev.Finish, job: Job) -> Job:
    _require(job, event, JobState.RUNNING)
    if not job.started:
        raise _refuse(job, event, "before start")
    if job.finished:
        raise _refuse(job, event, "twice")
    if job.state == JobState.RUN:
        return replace(job, wait_status=event.status, state=JobState.CLEANUP,
                       t_cleanup=event.timestamp)
    return replace(job, wait_status=event.status)


@_transition.register
def _free(event: ev.Free, job: Job) -> Job:
    _require(job, event, JobState.CLEANUP)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if job.epilogs:
        raise _refuse(job, event, "while an epilog is running")
    return replace(job, has_resources=False)


@_transition.register
def _clean(event: ev.Clean, job: Job) -> Job:
    _require(job, event, JobState.CLEANUP)
    if job.has_resources:
        raise _refuse(job, event, "while the job still holds resources (free first)")
    if job.prologs or job.epilogs:
        raise _refuse(job, event, "while a prolog or epilog is running")
    if job.started and not job.finished:
        raise _refuse(job, event, "while job shells are still running")
    return replace(job, state=JobState.INACTIVE, t_inactive=event.timestamp)


@_transition.register
def _exception(event: ev.JobException, job: Job) -> Job:
    _require(job, event, JobState.ACTIVE)
    count = job.exceptions + 1
    if event.severity != 0:
        return replace(job, exceptions=count)
    fatal = job.fatal or FatalException(event.type, event.note, event.timestamp)
    if job.state == JobState.CLEANUP:
        return replace(job, exceptions=count, fatal=fatal)
    # Annotations are volatile until alloc succeeds; a job leaving SCHED on an
    # exception drops them (RFC 27).
    annotations = None if job.state == JobState.SCHED else job.annotations
    return replace(job, exceptions=count, fatal=fatal, state=JobState.CLEANUP,
                   t_cleanup=event.timestamp, annotations=annotations)


@_transition.register
def _memo(event: ev.Memo, job: Job) -> Job:
    memo = dict(job.memo or _EMPTY)
    for key, value in event.values.items():
        if value is None:
            memo.pop(key, None)
        else:
            memo[key] = value
    return replace(job, memo=memo or None)


@_transition.register
def _annotations(event: ev.Annotations, job: Job) -> Job:
    return replace(job, annotations=merge_annotations(job.annotations, event.annotations))
