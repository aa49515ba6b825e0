"""The job prolog and epilog as the job manager records them (flux's perilog events).

Exec workers run the ``[exec] prolog``/``epilog`` commands on each of a job's
ranks (docs/exec.md, "Prolog, epilog, housekeeping") and say how far they got
in their cumulative reports: ``prolog``/``epilog`` is :data:`RUNNING` while
the command runs and its wait status once it ended.  The job manager turns
the ranks' progress into the job-level events flux's perilog plugin posts:

* ``prolog-start`` (``{"description": "job-manager.prolog"}``) when a first
  rank runs its prolog, ``prolog-finish`` (``description`` and the largest
  ``status``) once every rank ended it (or was released without it); a
  rank's failure is a fatal ``prolog`` exception at once (as flux raises it
  before ``prolog-finish``), which stops the other ranks;
* ``epilog-start`` once the job is in CLEANUP and a rank runs its epilog,
  ``epilog-finish`` once every rank ended it or was released; a failure is
  a non-fatal (severity 2) ``epilog`` exception.

Pure: :func:`hook_events` only computes the events; the flags of what was
posted travel with the job's exec progress so a restarted job manager does
not post twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job
from fluxes.domain.job.states import JobState

__all__ = ["EPILOG", "PROLOG", "RUNNING", "HookProgress", "hook_events"]

#: The descriptions flux's perilog plugin gives its events.
PROLOG: Final = "job-manager.prolog"
EPILOG: Final = "job-manager.epilog"
#: A rank's report value while its prolog/epilog runs (a wait status is >= 0).
RUNNING: Final = -1


@dataclass(slots=True)
class HookProgress:
    """Per rank prolog/epilog progress of one job, and which events are posted."""

    prolog: dict[int, int] = field(default_factory=dict)
    epilog: dict[int, int] = field(default_factory=dict)
    posted: set[str] = field(default_factory=set)

    def note(self, rank: int, prolog: int | None, epilog: int | None) -> None:
        """Take a report's values (a finished status is never taken back to running)."""
        for table, value in ((self.prolog, prolog), (self.epilog, epilog)):
            if value is not None and (value != RUNNING or table.get(rank, RUNNING) == RUNNING):
                table[rank] = value

    def to_wire(self) -> dict[str, object]:
        """What the job's exec progress saves (empty when nothing happened)."""
        if not (self.prolog or self.epilog or self.posted):
            return {}
        return {"prolog": {str(r): s for r, s in self.prolog.items()},
                "epilog": {str(r): s for r, s in self.epilog.items()},
                "posted": sorted(self.posted)}

    @classmethod
    def from_wire(cls, saved: Mapping[str, object]) -> HookProgress:
        """Back from :meth:`to_wire` (bad parts are dropped: only progress)."""
        out = cls()
        for name, table in (("prolog", out.prolog), ("epilog", out.epilog)):
            raw = saved.get(name)
            if isinstance(raw, Mapping):
                for rank, status in raw.items():
                    if isinstance(status, int):
                        table[int(rank)] = status
        posted = saved.get("posted")
        if isinstance(posted, list):
            out.posted = {p for p in posted if isinstance(p, str)}
        return out


def _ended(table: Mapping[int, int], ranks: Iterable[int], released: set[int]) -> int | None:
    """The largest status once every rank ended (or was released without it), else None."""
    statuses = []
    for rank in ranks:
        status = table.get(rank)
        if status is not None and status != RUNNING:
            statuses.append(status)
        elif rank not in released:
            return None
    return max(statuses, default=0)


def hook_events(job: Job, hooks: HookProgress, ranks: Iterable[int], released: set[int],
                note: str | None, now: float) -> list[ev.Event]:
    """The perilog events (and exceptions) due now; marks them posted in ``hooks``.

    ``note`` is the error a failing rank reported, the exception's note.
    """
    ranks = list(ranks)
    out: list[ev.Event] = []
    posted = hooks.posted
    # the eventlog says what a restarted job manager's saved progress may not
    if PROLOG in job.prologs:
        posted.add("prolog-start")
    if EPILOG in job.epilogs:
        posted.add("epilog-start")
    if (hooks.prolog and "prolog-start" not in posted and not job.started
            and job.state & JobState.RUNNING and PROLOG not in job.prologs):
        posted.add("prolog-start")
        out.append(ev.PrologStart(timestamp=now, description=PROLOG))
    if "prolog-start" in posted and "prolog-failed" not in posted and any(
            s not in (0, RUNNING) for s in hooks.prolog.values()):
        # at once, not when every rank is done: the exception stops the others
        posted.add("prolog-failed")
        out.append(ev.JobException(timestamp=now, type="prolog", severity=0,
                                   note=note or "job prolog failed"))
    if "prolog-start" in posted and "prolog-finish" not in posted:
        status = _ended(hooks.prolog, ranks, released)
        if status is not None:
            posted.add("prolog-finish")
            out.append(ev.PrologFinish(timestamp=now, description=PROLOG, status=status))
    if (hooks.epilog and "epilog-start" not in posted and job.state == JobState.CLEANUP
            and not job.released and EPILOG not in job.epilogs):
        posted.add("epilog-start")
        out.append(ev.EpilogStart(timestamp=now, description=EPILOG))
    if "epilog-start" in posted and "epilog-finish" not in posted:
        status = _ended(hooks.epilog, ranks, released)
        if status is not None:
            posted.add("epilog-finish")
            if status:
                out.append(ev.JobException(timestamp=now, type="epilog", severity=2,
                                           note=note or "job epilog failed"))
            out.append(ev.EpilogFinish(timestamp=now, description=EPILOG, status=status))
    return out
