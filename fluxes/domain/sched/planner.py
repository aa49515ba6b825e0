"""One scheduling pass's view of the pool: start now, reserve, estimate, and why not.

:class:`PassPlanner` wraps a pool (:class:`~fluxes.domain.sched.protocol.SchedulerPool`) for
one pass at a fixed time.  It drops the reservations of the previous pass
(they were plans, rebuilt every pass), then answers, per job, in the order
the policy considers them:

* :meth:`PassPlanner.start`: allocate now (respecting every reservation
  made so far in this pass), else the note saying why not;
* :meth:`PassPlanner.reserve`: reserve the job's earliest window;
* :meth:`PassPlanner.estimate`: the earliest start, without reserving.

During a pass resources are only ever taken (allocations and reservations
are added, nothing is freed), so a request that could not start now keeps
failing until the pass ends, and a request with the same placement needs
and a window at least as long fails too (a longer window overlaps every
reservation a shorter one overlaps, and more).  The planner remembers such
failures per placement key and answers repeats with a dictionary lookup:
this is what keeps a pass over thousands of similar jobs cheap on a full
machine.  The same holds for "no start time is known" answers.

The module also holds the wording of the ``reason_pending`` annotations.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final

from fluxes.domain.sched.errors import InsufficientResources
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.formats.rset import ResourceSet

__all__ = [
    "BEHIND_RESERVED",
    "BEYOND_DEPTH",
    "NO_ESTIMATE",
    "WAITING",
    "PassPlanner",
    "format_time",
    "insufficient",
]

#: ``reason_pending`` of a job behind a blocked job of a strict (fcfs) queue.
WAITING: Final = "waiting behind higher-priority jobs"
#: Suffix for a blocked job whose start cannot be known.
NO_ESTIMATE: Final = ("no start time known (resources it needs are drained or held by "
                      "jobs without a time limit)")
#: Suffix for a blocked job that got no reservation because others hold them.
BEHIND_RESERVED: Final = "waiting behind reserved higher-priority jobs"
#: ``reason_pending`` of a job no longer among the jobs a pass considers.
BEYOND_DEPTH: Final = "not considered: beyond the queue depth"

_INF: Final = math.inf


def format_time(t: float) -> str:
    """*t* (UNIX seconds) as ISO 8601 UTC to the second, e.g. ``2024-05-01T12:00:00Z``."""
    try:
        return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        # Far beyond year 9999 (absurd durations): the number says it all.
        return f"{t:.0f}"


def insufficient(note: str) -> str:
    """``reason_pending`` for a job that cannot start now, from the pool's note."""
    return f"insufficient resources: {note}"


def _length(request: Request) -> float:
    """The job's window length; unlimited (0) is infinite."""
    return request.duration or _INF


class PassPlanner:
    """The pool at one instant, for one pass (see the module docstring).

    Creating it clears every reservation of the pool.  ``reserved`` maps
    each job reserved in this pass to its start; ``tries`` and ``skipped``
    count allocation attempts made and answered from the failure cache.
    """

    __slots__ = ("_after", "_failed", "_unknown", "now", "pool", "reserved", "skipped", "tries")

    def __init__(self, pool: SchedulerPool, now: float) -> None:
        """Start a pass at *now*: the previous pass's reservations are dropped."""
        pool.clear_reservations()
        self.pool = pool
        self.now = now
        #: (placement key, placement policy) -> (shortest failed window, note)
        self._failed: dict[tuple[Any, ...], tuple[float, str]] = {}
        #: placement key -> shortest window whose start was unknown
        self._unknown: dict[tuple[Any, ...], float] = {}
        #: placement key -> (window, its estimate): no longer window starts earlier
        self._after: dict[tuple[Any, ...], tuple[float, float]] = {}
        self.reserved: dict[int, float] = {}
        self.tries = 0
        self.skipped = 0

    def start(self, request: Request, jobid: int, placement: str) -> ResourceSet | str:
        """Allocate *request* to *jobid* now; its R, or the note saying why it cannot start.

        Raises InfeasibleRequest (never possible) and ValueError (bad
        arguments) from the pool.
        """
        key = (request.placement_key, placement)
        length = _length(request)
        failed = self._failed.get(key)
        if failed is not None and length >= failed[0]:
            self.skipped += 1
            return failed[1]
        self.tries += 1
        try:
            return self.pool.alloc(request, jobid, placement, now=self.now)
        except InsufficientResources as exc:
            note = str(exc)
            self._failed[key] = (length, note)
            return note

    def failure(self, request: Request, placement: str) -> str | None:
        """The note :meth:`start` would answer *request* with from the failures of this
        pass (it cannot start until the pass ends, whichever job asks); None if none."""
        failed = self._failed.get((request.placement_key, placement))
        if failed is not None and _length(request) >= failed[0]:
            return failed[1]
        return None

    def estimate(self, request: Request, jobid: int) -> float | None:
        """The earliest start of *request* given this pass's reservations; None if unknown."""
        key = request.placement_key
        length = _length(request)
        unknown = self._unknown.get(key)
        if unknown is not None and length >= unknown:
            return None
        # A job of the same placement needs with a window no longer than this
        # one could not start before its estimate, and constraints only grow
        # during a pass: the walk may begin there (the answer is the same,
        # the times before are not tried again).
        begin = self.now
        hint = self._after.get(key)
        if hint is not None and length >= hint[0]:
            begin = max(begin, hint[1])
        when = self.pool.earliest_start(request, begin, jobid=jobid)
        if when is None or when == _INF:
            # None (infeasible) cannot happen after start() refused "not now";
            # both mean no estimate to publish.
            self._unknown[key] = length  # shorter than any recorded (else answered above)
            return None
        if hint is None or length <= hint[0]:
            self._after[key] = (length, when)
        return when

    def reserve(self, request: Request, jobid: int, placement: str) -> float | None:
        """Reserve *request*'s earliest window for *jobid*; its start, or None if unknown.

        Work started later in the pass cannot run into the reservation (the
        pool's overlay of reservations sees to it).
        """
        when = self.estimate(request, jobid)
        if when is None:
            return None
        try:
            self.pool.reserve(request, jobid, placement, when)
        except InsufficientResources:
            # The planner's test and the placement policy disagree (should not
            # happen): publish nothing rather than a start nobody holds.
            return None
        self.reserved[jobid] = when
        return when
