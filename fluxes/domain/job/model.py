"""The RFC 21 state machine as a pure fold: ``apply(event, job) -> job``.

A :class:`Job` is an immutable record; :func:`apply` returns a new one or raises
:class:`TransitionError` (leaving the caller's job untouched) when the event is
impossible in the job's current state. Replaying a job's eventlog is
``functools.reduce`` over its events (:func:`replay`), so incremental state and
replayed state are the same by construction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from fluxes.domain.job import events as ev
from fluxes.domain.job.states import STATES, JobResult, JobState
from fluxes.domain.sharing import SharedValues

DEFAULT_URGENCY = 16
_EMPTY: Mapping[str, Any] = {}


#: Distinct shared timestamps and integers kept (caches: clearing them only costs sharing).
SHARED_KEPT = 1024
_floats: SharedValues[float] = SharedValues(SHARED_KEPT)
_ints: SharedValues[int] = SharedValues(SHARED_KEPT)


def shared_float(value: float) -> float:
    """``value``, or an equal float seen before: the jobs of one submission or one batch
    of the job manager are stamped with one time, and a float object is 24 bytes of
    each job's record in the job manager and the job list (issue 26)."""
    if type(value) is not float:
        return value  # an int stamp stays one (1 == 1.0 in a dict)
    return _floats(value)


def shared_int(value: int) -> int:
    """``value``, or an equal int seen before (user ids and priorities: 28 bytes a job
    each, beyond the small ints Python shares itself)."""
    if type(value) is not int:
        return value  # True == 1 in a dict
    return _ints(value)


class TransitionError(ValueError):
    """An event is impossible in the job's current state."""


@dataclass(frozen=True, slots=True)
class FatalException:
    """The first severity-0 exception: the root cause of a job's end."""

    type: str
    note: str
    timestamp: float


class Job(NamedTuple):
    """Everything the event history says about one job (small: one record per job).

    A NamedTuple rather than a frozen dataclass: it is just as immutable, and
    copying it with a few fields changed costs about a microsecond instead of
    twenty, which is what replaying a million events needs.
    """

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
    jobspec_updates: Mapping[str, Any] = _EMPTY

    def replace(self, **changes: Any) -> Job:
        """A copy of this job with ``changes`` applied (fast ``_replace``)."""
        values = list(self)
        for name, value in changes.items():
            values[_FIELD_INDEX[name]] = value
        return tuple.__new__(Job, values)

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


_FIELD_INDEX = {name: i for i, name in enumerate(Job._fields)}


def _refuse(job: Job, event: ev.Event, why: str = "") -> TransitionError:
    reason = why or f"impossible in state {job.state.name}"
    return TransitionError(f"job {job.id}: event {event.event_name!r} {reason}")


def _states(mask: JobState) -> frozenset[JobState]:
    """The single states in ``mask``, as a set: membership is cheaper than flag arithmetic."""
    return frozenset(s for s in STATES if s & mask)


_IN_NEW = _states(JobState.NEW)
_IN_DEPEND = _states(JobState.DEPEND)
_IN_RUN = _states(JobState.RUN)
_IN_CLEANUP = _states(JobState.CLEANUP)
_IN_RUNNING = _states(JobState.RUNNING)
_IN_ACTIVE = _states(JobState.ACTIVE)
_IN_NEW_DEPEND = _states(JobState.NEW | JobState.DEPEND)
_IN_NEW_PENDING = _states(JobState.NEW | JobState.PENDING)
_IN_PRIORITY_SCHED = _states(JobState.PRIORITY | JobState.SCHED)
_IN_SCHED_CLEANUP = _states(JobState.SCHED | JobState.CLEANUP)


def _require(job: Job, event: ev.Event, states: frozenset[JobState]) -> None:
    if job.state not in states:
        raise _refuse(job, event)


def staged_info(annotations: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The scheduler's ``sched.staged`` annotation of a job it staged behind running jobs
    (``after``, ``t_start``: docs/scheduling-policies.md, "Staged starts"); None when the
    job was not staged."""
    sched = annotations.get("sched") if annotations is not None else None
    staged = sched.get("staged") if isinstance(sched, Mapping) else None
    return staged if isinstance(staged, Mapping) and staged else None


def merge_annotations(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
                      ) -> Mapping[str, Any] | None:
    """Merge RFC 27 annotations: recurse into dicts, null deletes, otherwise replace.

    A null never lands in the result, at any depth: RFC 27 gives null the
    meaning "remove this key", so a null under a key that is new (or that was
    not a dict) is dropped rather than stored, and an object left empty is
    dropped too. Returns None when nothing remains, so "no annotations" has
    one representation.
    """
    if new is None:
        return None
    merged = _merge(old or _EMPTY, new)
    return merged or None


def _merge(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in new.items():
        # a dict is by far the most common: tested first, as the Mapping check goes
        # through the abstract class's machinery
        if type(value) is dict or isinstance(value, Mapping):
            current = out.get(key)
            # merging into an empty dict is how a new object loses its nulls
            sub = _merge(current if type(current) is dict or isinstance(current, Mapping)
                         else _EMPTY, value)
            if sub:
                out[key] = sub
            else:
                out.pop(key, None)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------ apply

_Changes = dict[str, Any]
_NO_CHANGE: _Changes = {}
_SEQ = Job._fields.index("seq")
# singledispatch resolves each event class once; apply() keeps the result in a
# plain dict because the generic dispatch wrapper costs more than the
# transition itself on the replay path.
_DISPATCH: dict[type, Callable[[ev.Event, Job], _Changes]] = {}


@functools.singledispatch
def _transition(event: ev.Event, job: Job) -> _Changes:
    """The fields ``event`` changes in ``job``; the base case (unknown, ``debug.*``) none."""
    return _NO_CHANGE


def apply(event: ev.Event, job: Job) -> Job:
    """Return ``job`` after ``event``; raise TransitionError if the event is impossible.

    Every accepted event advances ``seq`` (the eventlog length), including the
    ones that change nothing else, so the appender's expected position stays
    in step with the stream.
    """
    if job.seq == 0 and not isinstance(event, ev.Submit):
        raise _refuse(job, event, "before submit")
    if job.state is JobState.INACTIVE:
        # INACTIVE is captive: the job record is read-only from here on.
        raise _refuse(job, event)
    cls = event.__class__
    handler = _DISPATCH.get(cls)
    if handler is None:
        handler = _DISPATCH[cls] = _transition.dispatch(cls)
    changes = handler(event, job)
    values: list[Any] = list(job)
    for name, value in changes.items():
        values[_FIELD_INDEX[name]] = value
    if not isinstance(event, ev.Annotations):  # journal-only, not in the eventlog
        values[_SEQ] += 1
    return tuple.__new__(Job, values)


def replay(jobid: int, events: Iterable[ev.Event]) -> Job:
    """Fold ``events`` into a fresh job (the projection of its eventlog)."""
    job = Job(jobid)
    for event in events:
        job = apply(event, job)
    return job


@_transition.register
def _submit(event: ev.Submit, job: Job) -> _Changes:
    if job.seq != 0:
        raise _refuse(job, event, "must be the first event")
    return dict(urgency=event.urgency, userid=shared_int(event.userid), flags=event.flags,
                t_submit=shared_float(event.timestamp))


@_transition.register
def _validate(event: ev.Validate, job: Job) -> _Changes:
    _require(job, event, _IN_NEW)
    return dict(state=JobState.DEPEND, t_depend=shared_float(event.timestamp))


@_transition.register
def _invalidate(event: ev.Invalidate, job: Job) -> _Changes:
    _require(job, event, _IN_NEW)
    return dict(state=JobState.INACTIVE, t_inactive=event.timestamp)


@_transition.register
def _dependency_add(event: ev.DependencyAdd, job: Job) -> _Changes:
    _require(job, event, _IN_NEW_DEPEND)
    if event.description in job.dependencies:
        raise _refuse(job, event, f"duplicates dependency {event.description!r}")
    return dict(dependencies=job.dependencies | {event.description})


@_transition.register
def _dependency_remove(event: ev.DependencyRemove, job: Job) -> _Changes:
    _require(job, event, _IN_NEW_DEPEND)
    if event.description not in job.dependencies:
        raise _refuse(job, event, f"names no outstanding dependency {event.description!r}")
    return dict(dependencies=job.dependencies - {event.description})


@_transition.register
def _depend(event: ev.Depend, job: Job) -> _Changes:
    _require(job, event, _IN_DEPEND)
    if job.dependencies:
        raise _refuse(job, event, f"while dependencies are outstanding: "
                                  f"{', '.join(sorted(job.dependencies))}")
    return dict(state=JobState.PRIORITY, t_priority=shared_float(event.timestamp))


@_transition.register
def _priority(event: ev.Priority, job: Job) -> _Changes:
    _require(job, event, _IN_PRIORITY_SCHED)
    if job.state == JobState.PRIORITY:
        return dict(state=JobState.SCHED, priority=shared_int(event.priority),
                    t_sched=shared_float(event.timestamp))
    return dict(priority=shared_int(event.priority))


@_transition.register
def _urgency(event: ev.Urgency, job: Job) -> _Changes:
    _require(job, event, _IN_NEW_PENDING)
    if job.state == JobState.SCHED:
        # The priority must be computed again before the job may be scheduled.
        return dict(urgency=event.urgency, state=JobState.PRIORITY,
                       t_priority=event.timestamp)
    return dict(urgency=event.urgency)


@_transition.register
def _flux_restart(event: ev.FluxRestart, job: Job) -> _Changes:
    if job.state == JobState.SCHED:
        return dict(state=JobState.PRIORITY, restarts=job.restarts + 1,
                       t_priority=event.timestamp, annotations=None)
    return dict(restarts=job.restarts + 1)


@_transition.register
def _jobspec_update(event: ev.JobspecUpdate, job: Job) -> _Changes:
    _require(job, event, _IN_NEW_PENDING)
    updates = {**job.jobspec_updates, **event.updates}
    if job.state == JobState.SCHED:
        return dict(jobspec_updates=updates, state=JobState.PRIORITY,
                       t_priority=event.timestamp)
    return dict(jobspec_updates=updates)


@_transition.register
def _resource_update(event: ev.ResourceUpdate, job: Job) -> _Changes:
    _require(job, event, _IN_RUNNING)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if event.expiration is None:
        return _NO_CHANGE
    return dict(expiration=event.expiration)


@_transition.register
def _set_flags(event: ev.SetFlags, job: Job) -> _Changes:
    return dict(set_flags=job.set_flags | frozenset(event.flags))


@_transition.register
def _alloc(event: ev.Alloc, job: Job) -> _Changes:
    # An alloc may land in CLEANUP: the job was canceled while the request
    # was in flight and the scheduler answered SUCCESS first. The resources
    # are then held and must be freed.
    _require(job, event, _IN_SCHED_CLEANUP)
    if job.has_resources or job.was_allocated:
        raise _refuse(job, event, "but resources were already allocated")
    if job.state == JobState.CLEANUP:
        return dict(has_resources=True, was_allocated=True)
    # the snapshot follows the merge rules too: an old eventlog's nulls are not kept
    return dict(state=JobState.RUN, has_resources=True, was_allocated=True,
                   t_run=event.timestamp, annotations=merge_annotations(None, event.annotations))


@_transition.register
def _prolog_start(event: ev.PrologStart, job: Job) -> _Changes:
    _require(job, event, _IN_RUN)
    if job.started:
        raise _refuse(job, event, "after the job started")
    return dict(prologs=(*job.prologs, event.description))


@_transition.register
def _prolog_finish(event: ev.PrologFinish, job: Job) -> _Changes:
    _require(job, event, _IN_RUNNING)
    if event.description not in job.prologs:
        raise _refuse(job, event, f"without a matching prolog-start {event.description!r}")
    prologs = list(job.prologs)
    prologs.remove(event.description)
    return dict(prologs=tuple(prologs),
                   prolog_failed=job.prolog_failed or event.status != 0)


@_transition.register
def _epilog_start(event: ev.EpilogStart, job: Job) -> _Changes:
    _require(job, event, _IN_CLEANUP)
    return dict(epilogs=(*job.epilogs, event.description))


@_transition.register
def _epilog_finish(event: ev.EpilogFinish, job: Job) -> _Changes:
    _require(job, event, _IN_CLEANUP)
    if event.description not in job.epilogs:
        raise _refuse(job, event, f"without a matching epilog-start {event.description!r}")
    epilogs = list(job.epilogs)
    epilogs.remove(event.description)
    return dict(epilogs=tuple(epilogs))


@_transition.register
def _start(event: ev.Start, job: Job) -> _Changes:
    # Also in CLEANUP: an exception may land between alloc and the shells starting.
    _require(job, event, _IN_RUNNING)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if job.started:
        raise _refuse(job, event, "twice")
    if job.prologs:
        raise _refuse(job, event, "while a prolog is running")
    return dict(started=True)


@_transition.register
def _release(event: ev.Release, job: Job) -> _Changes:
    # RFC 21 logs release in CLEANUP: exec gives resources back once the shells are
    # gone, and their exit (finish) or a fatal exception has moved the job there.
    _require(job, event, _IN_CLEANUP)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if job.released:
        raise _refuse(job, event, "after the final release")
    return dict(released=True) if event.final else _NO_CHANGE


@_transition.register
def _finish(event: ev.Finish, job: Job) -> _Changes:
    _require(job, event, _IN_RUNNING)
    if not job.started:
        raise _refuse(job, event, "before start")
    if job.finished:
        raise _refuse(job, event, "twice")
    if job.state == JobState.RUN:
        return dict(wait_status=event.status, state=JobState.CLEANUP,
                       t_cleanup=event.timestamp)
    return dict(wait_status=event.status)


@_transition.register
def _free(event: ev.Free, job: Job) -> _Changes:
    _require(job, event, _IN_CLEANUP)
    if not job.has_resources:
        raise _refuse(job, event, "while the job holds no resources")
    if job.epilogs:
        raise _refuse(job, event, "while an epilog is running")
    return dict(has_resources=False)


@_transition.register
def _clean(event: ev.Clean, job: Job) -> _Changes:
    _require(job, event, _IN_CLEANUP)
    if job.has_resources:
        raise _refuse(job, event, "while the job still holds resources (free first)")
    if job.prologs or job.epilogs:
        raise _refuse(job, event, "while a prolog or epilog is running")
    if job.started and not job.finished:
        raise _refuse(job, event, "while job shells are still running")
    return dict(state=JobState.INACTIVE, t_inactive=event.timestamp)


@_transition.register
def _exception(event: ev.JobException, job: Job) -> _Changes:
    _require(job, event, _IN_ACTIVE)
    count = job.exceptions + 1
    if event.severity != 0:
        return dict(exceptions=count)
    fatal = job.fatal or FatalException(event.type, event.note, event.timestamp)
    if job.state == JobState.CLEANUP:
        return dict(exceptions=count, fatal=fatal)
    # Annotations are volatile until alloc succeeds; a job leaving SCHED on an
    # exception drops them (RFC 27).
    annotations = None if job.state == JobState.SCHED else job.annotations
    return dict(exceptions=count, fatal=fatal, state=JobState.CLEANUP,
                   t_cleanup=event.timestamp, annotations=annotations)


@_transition.register
def _memo(event: ev.Memo, job: Job) -> _Changes:
    memo = dict(job.memo or _EMPTY)
    for key, value in event.values.items():
        if value is None:
            memo.pop(key, None)
        else:
            memo[key] = value
    return dict(memo=memo or None)


@_transition.register
def _annotations(event: ev.Annotations, job: Job) -> _Changes:
    return dict(annotations=merge_annotations(job.annotations, event.annotations))
