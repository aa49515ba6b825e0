"""RFC 26 job dependencies: parsing, checking, and the pure bookkeeping behind DEPEND.

A job in DEPEND state waits until every dependency it was given has been
*added* (a ``dependency-add`` event naming a description) and then *removed*
(``dependency-remove`` with the same description).  This module decides
which events to post; the job manager posts them.

Schemes (the descriptions are the ones flux's built-in plugins write):

============  ==================  ================================================
scheme        description         satisfied when the target job ...
============  ==================  ================================================
after         after-start=ID      has started (its ``start`` event)
afterany      after-finish=ID     is INACTIVE, whatever the result
afterok       after-success=ID    is INACTIVE with result COMPLETED
afternotok    after-failure=ID    is INACTIVE, ran, and did not complete
afterexcept   after-except=ID     is INACTIVE, ran, and ended by an exception
begin-time    begin-time=T.3f     (no target) the clock reaches timestamp T
============  ==================  ================================================

``ID`` is the dependency's value exactly as the user wrote it (any RFC 19
encoding).  When a dependency can no longer be satisfied (afterok on a job
that failed, after on a job canceled before it started, ...) the dependent
job gets a fatal ``dependency`` exception whose note says why.  As in flux,
only ``afterany`` accepts a target that never ran.

:class:`DependencyIndex` keeps the waiting jobs indexed by target job and by
time, so each job event costs work only for the jobs waiting on that job.
See ``docs/dependencies.md``.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, cast

from fluxes.domain.job.model import Job
from fluxes.domain.job.states import JobResult, JobState
from fluxes.errors import PolicyError
from fluxes.formats import fsd
from fluxes.formats import jobid as _jobid
from fluxes.formats.jobspec import parse_dependency as _split_dependency
from fluxes.formats.shown import shown as _show

__all__ = [
    "JOBID_SCHEMES",
    "SCHEMES",
    "Dependency",
    "DependencyActions",
    "DependencyIndex",
    "Lookup",
    "TargetStatus",
    "Verdict",
    "check_dependency",
    "evaluate",
    "parse_dependency",
]

#: Schemes whose value is a job id, and the description prefix flux uses for each.
_DESCRIPTION_PREFIX: Final = {
    "after": "after-start",
    "afterany": "after-finish",
    "afterok": "after-success",
    "afternotok": "after-failure",
    "afterexcept": "after-except",
}
JOBID_SCHEMES: Final = tuple(_DESCRIPTION_PREFIX)
#: Every scheme this module handles.
SCHEMES: Final = (*JOBID_SCHEMES, "begin-time")

# A UNIX timestamp: a plain non-negative decimal number.  Stricter than
# flux's strtod on purpose: no hex, inf, nan, signs or surrounding spaces.
_TIMESTAMP = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# -- one dependency --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dependency:
    """A checked RFC 26 dependency.

    ``target`` is the antecedent job id for the ``after*`` schemes (else
    None); ``begin_time`` the UNIX time for ``begin-time`` (else None);
    ``description`` what the ``dependency-add``/``-remove`` events carry.
    """

    scheme: str
    value: str
    description: str
    target: int | None = None
    begin_time: float | None = None


def _parse_timestamp(text: str, scheme: str) -> float:
    if not _TIMESTAMP.fullmatch(text):
        raise PolicyError(f"dependency: {scheme}: invalid timestamp {_show(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise PolicyError(f"dependency: {scheme}: timestamp {_show(text)} is too large")
    return value


def check_dependency(dep: Mapping[str, Any]) -> Dependency:
    """Check one RFC 26 dependency object (``{"scheme": ..., "value": ...}``).

    Raises PolicyError: ``unknown dependency scheme 'foo'``, ``dependency:
    afterok: "x" is not a valid jobid``, ``dependency: begin-time: invalid
    timestamp 'x'``, or a note on a missing or non-string scheme or value.
    Extra keys are allowed (RFC 26) and ignored.
    """
    if not isinstance(dep, Mapping):
        raise PolicyError(f"dependency: expected a mapping, got {type(dep).__name__}")
    scheme, value = dep.get("scheme"), dep.get("value")
    if not isinstance(scheme, str) or not scheme:
        raise PolicyError(f"dependency: scheme must be a non-empty string, got {_show(scheme)}")
    if scheme not in SCHEMES:
        raise PolicyError(f"unknown dependency scheme {_show(scheme)}")
    if not isinstance(value, str) or not value:
        raise PolicyError(
            f"dependency: {scheme}: value must be a non-empty string, got {_show(value)}"
        )
    if scheme == "begin-time":
        when = _parse_timestamp(value, scheme)
        return Dependency(scheme, value, f"begin-time={when:.3f}", begin_time=when)
    try:
        target = _jobid.parse(value)
    except ValueError:
        raise PolicyError(f"dependency: {scheme}: {value[:40]!r} is not a valid jobid") from None
    return Dependency(scheme, value, f"{_DESCRIPTION_PREFIX[scheme]}={value}", target=target)


def _format_timestamp(value: float) -> str:
    """Shortest plain decimal for a timestamp (microsecond precision, no exponent)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def parse_dependency(text: str, now: float | None = None) -> dict[str, str]:
    """Turn a command line dependency (``--dependency=URI``) into its RFC 26 object.

    ``afterok:ƒ2oLkTLb`` -> ``{"scheme": "afterok", "value": "ƒ2oLkTLb"}``;
    ``?key=val&...`` adds keys.  The job id may be in any RFC 19 encoding and
    is kept as written.  ``begin-time:T`` takes a UNIX timestamp, or ``+FSD``
    for that long after ``now`` (default: the current time), which is turned
    into a timestamp here.  Raises PolicyError for malformed text, an unknown
    scheme or a bad value.
    """
    try:
        dep = _split_dependency(text)
    except ValueError as exc:
        raise PolicyError(str(exc)) from None
    if dep["scheme"] == "begin-time" and dep["value"].startswith("+"):
        try:
            offset = fsd.parse_duration(dep["value"][1:])
        except ValueError as exc:
            raise PolicyError(f"dependency: begin-time: {exc}") from None
        if math.isinf(offset):
            raise PolicyError("dependency: begin-time: the offset must be finite")
        base = time.time() if now is None else now
        dep["value"] = _format_timestamp(base + offset)
    check_dependency(dep)
    return dep


# -- evaluating against a target ---------------------------------------------------------


class TargetStatus(NamedTuple):
    """What the dependency rules need to know about a target (antecedent) job.

    ``allocated``: it was given resources (an ``alloc`` event); ``started``:
    it had a ``start`` event; ``exception``: it ended by a fatal exception;
    ``userid``: its owner, when known (dependencies on other users' jobs are
    refused, as in flux).
    """

    state: JobState
    result: JobResult | None = None
    allocated: bool = False
    started: bool = False
    exception: bool = False
    userid: int | None = None

    @classmethod
    def from_job(cls, job: Job) -> TargetStatus:
        """The status of a job record from :mod:`fluxes.domain.job.model`."""
        return cls(
            state=job.state,
            result=job.result,
            allocated=job.was_allocated,
            started=job.started,
            exception=job.fatal is not None,
            userid=job.userid,
        )


#: Looks a job up by id: its status, or None when there is no such job.
Lookup = Callable[[int], TargetStatus | None]


class Verdict(NamedTuple):
    """The outcome of one dependency: satisfied, failed (with a note), or neither yet."""

    satisfied: bool = False
    fail: str | None = None

    @property
    def pending(self) -> bool:
        """Neither satisfied nor failed."""
        return not self.satisfied and self.fail is None


_PENDING: Final = Verdict()
_SATISFIED: Final = Verdict(satisfied=True)
_RESULT_WORDS: Final = {
    JobResult.FAILED: "failed",
    JobResult.CANCELED: "was canceled",
    JobResult.TIMEOUT: "timed out",
}


def evaluate(dep: Dependency, status: TargetStatus | None) -> Verdict:
    """Whether ``dep`` (an ``after*`` dependency) is met by its target's ``status``.

    ``status`` None means the target does not exist.  begin-time is not
    handled here (it depends on the clock, see :class:`DependencyIndex`).
    """
    scheme, shown = dep.scheme, dep.value
    if dep.target is None:
        raise PolicyError(f"dependency: {scheme}: names no job to evaluate against")
    if status is None:
        return Verdict(fail=f"dependency: {scheme}: job {shown} not found")
    if scheme == "after":
        if status.started:
            return _SATISFIED
        if status.state == JobState.INACTIVE:
            return Verdict(fail=f"dependency: after: job {shown} never started")
        return _PENDING
    if status.state != JobState.INACTIVE:
        return _PENDING
    if scheme == "afterany":
        return _SATISFIED
    if scheme == "afterok":
        if status.result == JobResult.COMPLETED:
            return _SATISFIED
        word = _RESULT_WORDS.get(status.result or JobResult.FAILED, "failed")
        return Verdict(fail=f"dependency: afterok: job {shown} {word}")
    # afternotok and afterexcept need a target that ran (flux issue #6555):
    # a job canceled while pending did not "fail" in any useful sense.
    if not status.allocated:
        return Verdict(fail=f"dependency: {scheme}: job {shown} never started")
    if scheme == "afternotok":
        if status.result != JobResult.COMPLETED:
            return _SATISFIED
        return Verdict(fail=f"dependency: afternotok: job {shown} succeeded")
    if status.exception:
        return _SATISFIED
    return Verdict(fail=f"dependency: afterexcept: job {shown} ended without an exception")


# -- the index --------------------------------------------------------------------------


class DependencyActions(NamedTuple):
    """What the job manager should post for one dependent job.

    ``add``: descriptions for ``dependency-add`` events, then ``remove``:
    descriptions for ``dependency-remove`` events, in order.  ``fail``: if
    set, raise a fatal ``dependency`` exception with this note instead
    (nothing else is posted).  ``ready``: no dependency is outstanding any
    more, so the job may leave DEPEND (the ``depend`` event).
    """

    jobid: int
    add: list[str]
    remove: list[str]
    fail: str | None = None
    ready: bool = False


@dataclass(slots=True)
class _Waiter:
    """A dependent job's outstanding dependencies."""

    userid: int | None
    by_target: dict[int, list[Dependency]] = field(default_factory=dict)
    timers: dict[str, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.by_target and not self.timers


class DependencyIndex:
    """Jobs waiting in DEPEND, indexed by the job they wait for and by begin time.

    * :meth:`add` when a job enters DEPEND: returns the events to post now;
    * :meth:`target_changed` on any event of a job that :meth:`is_target`
      (cost: the jobs waiting on that target);
    * :meth:`due` when the clock passes :meth:`next_due`;
    * :meth:`remove` when a waiting job leaves DEPEND otherwise (canceled).

    Not thread-safe; one job manager owns one index.
    """

    __slots__ = ("_dependents", "_heap", "_timers", "_waiting")

    def __init__(self) -> None:
        """An empty index."""
        self._waiting: dict[int, _Waiter] = {}
        # target job id -> ids of jobs waiting on it (insertion ordered).
        self._dependents: dict[int, dict[int, None]] = {}
        # (time, jobid, description); entries of removed jobs are dropped lazily.
        self._heap: list[tuple[float, int, str]] = []
        self._timers = 0  # live begin-time entries, to know when the heap is mostly stale

    # -- inspection ---------------------------------------------------------

    def __len__(self) -> int:
        """Number of waiting jobs."""
        return len(self._waiting)

    def __contains__(self, jobid: object) -> bool:
        """True if job ``jobid`` is waiting here."""
        return jobid in self._waiting

    def is_target(self, jobid: int) -> bool:
        """True if some waiting job depends on job ``jobid`` (O(1))."""
        return jobid in self._dependents

    def dependents(self, target: int) -> list[int]:
        """The jobs waiting on job ``target``."""
        return list(self._dependents.get(target, ()))

    def outstanding(self, jobid: int) -> list[str]:
        """The outstanding descriptions of waiting job ``jobid`` (empty if not waiting)."""
        waiter = self._waiting.get(jobid)
        if waiter is None:
            return []
        out = [dep.description for deps in waiter.by_target.values() for dep in deps]
        return out + list(waiter.timers)

    def next_due(self) -> float | None:
        """The earliest pending begin time, or None."""
        heap = self._heap
        while heap:
            when, jobid, desc = heap[0]
            waiter = self._waiting.get(jobid)
            if waiter is not None and waiter.timers.get(desc) == when:
                return when
            heapq.heappop(heap)
        return None

    # -- changes --------------------------------------------------------------

    def add(
        self,
        jobid: int,
        deps: Iterable[Mapping[str, Any]],
        lookup: Lookup,
        now: float,
        *,
        userid: int | None = None,
        outstanding: Collection[str] | None = None,
    ) -> DependencyActions:
        """Start tracking job ``jobid`` with RFC 26 dependencies ``deps``.

        Targets are looked up once, with ``lookup``; dependencies met already
        appear in both ``add`` and ``remove``.  A malformed dependency, a
        target that does not exist, belongs to another user than ``userid``
        (when both are known), is the job itself, or can never satisfy the
        dependency gives ``fail`` and the job is not tracked.

        ``outstanding`` is for rebuilding the index after a restart: the
        descriptions the job's eventlog shows as added and not yet removed.
        Nothing is added again, and dependencies not in it count as met.

        Re-adding a job that is tracked replaces it.
        """
        self.remove(jobid)
        checked: list[Dependency] = []
        seen: set[str] = set()
        try:
            for raw in deps:
                item = check_dependency(raw)
                # Two objects may differ only in ignored keys; the model refuses
                # a description added twice.
                if item.description not in seen:
                    seen.add(item.description)
                    checked.append(item)
        except PolicyError as exc:
            return DependencyActions(jobid, [], [], fail=str(exc))

        resuming = outstanding is not None
        wanted = set(outstanding) if outstanding is not None else seen
        added = [] if resuming else [dep.description for dep in checked]
        removed: list[str] = []
        waiter = _Waiter(userid)
        for dep in checked:
            if dep.description not in wanted:
                continue
            if dep.begin_time is not None:
                if dep.begin_time <= now:
                    removed.append(dep.description)
                else:
                    waiter.timers[dep.description] = dep.begin_time
                continue
            target = cast(int, dep.target)  # every scheme but begin-time names a job
            if target == jobid:
                return DependencyActions(
                    jobid, [], [], fail=f"dependency: {dep.scheme}: a job cannot depend on itself"
                )
            status = lookup(target)
            if status is not None and userid is not None and status.userid is not None \
                    and status.userid != userid:
                return DependencyActions(
                    jobid, [], [],
                    fail=f"dependency: {dep.scheme}: permission denied for job {dep.value}",
                )
            verdict = evaluate(dep, status)
            if verdict.fail is not None:
                return DependencyActions(jobid, [], [], fail=verdict.fail)
            if verdict.satisfied:
                removed.append(dep.description)
            else:
                waiter.by_target.setdefault(target, []).append(dep)

        if waiter.empty:
            return DependencyActions(jobid, added, removed, ready=True)
        self._waiting[jobid] = waiter
        for target in waiter.by_target:
            self._dependents.setdefault(target, {})[jobid] = None
        for desc, when in waiter.timers.items():
            heapq.heappush(self._heap, (when, jobid, desc))
        self._timers += len(waiter.timers)
        return DependencyActions(jobid, added, removed)

    def remove(self, jobid: int) -> None:
        """Stop tracking job ``jobid`` (no-op if it is not tracked)."""
        waiter = self._waiting.pop(jobid, None)
        if waiter is None:
            return
        for target in waiter.by_target:
            self._unlink(target, jobid)
        # Heap entries of the job are skipped when they surface, but many
        # canceled far-future jobs would pile up: rebuild when mostly stale.
        self._timers -= len(waiter.timers)
        if len(self._heap) > 64 and len(self._heap) > 2 * self._timers:
            self._heap = [(when, job, desc) for job, w in self._waiting.items()
                          for desc, when in w.timers.items()]
            heapq.heapify(self._heap)

    def _unlink(self, target: int, jobid: int) -> None:
        waiting = self._dependents.get(target)
        if waiting is not None:
            waiting.pop(jobid, None)
            if not waiting:
                del self._dependents[target]

    def target_changed(self, target: int, status: TargetStatus | None
                       ) -> list[DependencyActions]:
        """Re-evaluate the jobs waiting on job ``target`` after it changed.

        ``status`` None means the target is gone.  Returns one entry per
        dependent job whose dependencies moved (met or failed), in the order
        they were added; jobs that fail or become ready are dropped from the
        index.
        """
        waiting = self._dependents.get(target)
        if not waiting:
            return []
        out: list[DependencyActions] = []
        for jobid in list(waiting):
            waiter = self._waiting[jobid]
            deps = waiter.by_target[target]
            removed: list[str] = []
            keep: list[Dependency] = []
            fail: str | None = None
            for dep in deps:
                verdict = evaluate(dep, status)
                if verdict.fail is not None:
                    fail = verdict.fail
                    break
                if verdict.satisfied:
                    removed.append(dep.description)
                else:
                    keep.append(dep)
            if fail is not None:
                self.remove(jobid)
                out.append(DependencyActions(jobid, [], [], fail=fail))
                continue
            if not removed:
                continue
            if keep:
                waiter.by_target[target] = keep
            else:
                del waiter.by_target[target]
                self._unlink(target, jobid)
            ready = waiter.empty
            if ready:
                del self._waiting[jobid]
            out.append(DependencyActions(jobid, [], removed, ready=ready))
        return out

    def due(self, now: float) -> list[DependencyActions]:
        """Satisfy the begin-time dependencies whose time is ``<= now``, grouped by job."""
        found: dict[int, list[str]] = {}
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, jobid, desc = heapq.heappop(heap)
            waiter = self._waiting.get(jobid)
            if waiter is None or waiter.timers.get(desc) != when:
                continue  # stale: the job left, or was re-added
            del waiter.timers[desc]
            self._timers -= 1
            found.setdefault(jobid, []).append(desc)
        out: list[DependencyActions] = []
        for jobid, removed in found.items():
            ready = self._waiting[jobid].empty
            if ready:
                del self._waiting[jobid]
            out.append(DependencyActions(jobid, [], removed, ready=ready))
        return out
