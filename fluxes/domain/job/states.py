"""RFC 21 job states and results as flags, so unions such as PENDING test with ``&``."""

from __future__ import annotations

import enum


class JobState(enum.IntFlag):
    """RFC 21 job states; PENDING, RUNNING and ACTIVE are unions (virtual states)."""

    NEW = 1
    DEPEND = 2
    PRIORITY = 4
    SCHED = 8
    RUN = 16
    CLEANUP = 32
    INACTIVE = 64

    PENDING = DEPEND | PRIORITY | SCHED
    RUNNING = RUN | CLEANUP
    ACTIVE = PENDING | RUNNING

    @property
    def short(self) -> str:
        """Two-letter code as ``flux jobs`` prints it (``S`` for SCHED, ``R`` for RUN...)."""
        return _SHORT.get(self, "?")


_SHORT = {
    JobState.NEW: "N",
    JobState.DEPEND: "D",
    JobState.PRIORITY: "P",
    JobState.SCHED: "S",
    JobState.RUN: "R",
    JobState.CLEANUP: "C",
    JobState.INACTIVE: "I",
}


class JobResult(enum.IntFlag):
    """Outcome of an inactive job, as flux's job-list reports it."""

    COMPLETED = 1
    FAILED = 2
    CANCELED = 4
    TIMEOUT = 8

    @property
    def short(self) -> str:
        """Two-letter result code as ``flux jobs`` prints it (CD, F, CA, TO)."""
        return _RESULT_SHORT.get(self, "?")


_RESULT_SHORT = {
    JobResult.COMPLETED: "CD",
    JobResult.FAILED: "F",
    JobResult.CANCELED: "CA",
    JobResult.TIMEOUT: "TO",
}

#: Single states in life-cycle order (no unions), for iteration and display.
STATES: tuple[JobState, ...] = (
    JobState.NEW,
    JobState.DEPEND,
    JobState.PRIORITY,
    JobState.SCHED,
    JobState.RUN,
    JobState.CLEANUP,
    JobState.INACTIVE,
)

RESULTS: tuple[JobResult, ...] = (
    JobResult.COMPLETED,
    JobResult.FAILED,
    JobResult.CANCELED,
    JobResult.TIMEOUT,
)


def parse_states(text: str) -> JobState | JobResult | tuple[JobState, JobResult]:
    """Parse a comma-separated list of state and result names (``flux jobs -f``).

    Returns the union of the named states, the union of named results, or both
    as a pair when the list mixes them. Names are case-insensitive; unions such
    as ``pending`` and ``active`` are accepted. Raises ValueError on an unknown name.
    """
    states = JobState(0)
    results = JobResult(0)
    for raw in text.split(","):
        name = raw.strip().upper()
        if not name:
            continue
        if name in JobState.__members__:
            states |= JobState[name]
        elif name in JobResult.__members__:
            results |= JobResult[name]
        elif name in ("CANCELLED",):
            results |= JobResult.CANCELED
        else:
            raise ValueError(f"unknown job state or result: {raw.strip()!r}")
    if not states and not results:
        raise ValueError("no job state or result given")
    if states and results:
        return states, results
    return states if states else results
