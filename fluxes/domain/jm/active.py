"""An active job as the job manager holds it in memory: its record and runtime facts.

Kept small: a million pending jobs are a million of these (docs/operations.md,
"Memory"); what only a running job needs is made when it is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluxes.domain.jm.perilog import HookProgress
from fluxes.domain.job.model import Job
from fluxes.domain.job.record import JobRecord
from fluxes.formats.idset import IDSet


@dataclass(slots=True)
class ExecProgress:
    """The ranks of a running job that reported started, finished (their wait status)
    and released."""

    started: set[int] = field(default_factory=set)
    finished: dict[int, int] = field(default_factory=dict)
    released: set[int] = field(default_factory=set)
    #: stored (``exec:progress``) by this leader or the last: deleted when the job
    #: ends; a single-rank job's progress is never stored (its events record it)
    saved: bool = False


@dataclass(slots=True)
class Active:
    """An active job as the job manager sees it: record plus runtime facts."""

    rec: JobRecord
    ranks: IDSet | None = None
    alloc_epoch: int | None = None  # scheduler epoch of the outstanding alloc request
    cancel_sent: bool = False
    free_sent: bool = False
    start_sent: bool = False
    kill_sent: bool = False
    #: made at the first exec report: most active jobs pend, and two empty sets and a
    #: dict cost ~500 bytes a job (docs/operations.md, "Memory")
    progress: ExecProgress | None = None
    exec_error: bool = False
    #: prolog/epilog progress of the ranks (fluxes/domain/jm/perilog.py)
    hooks: HookProgress | None = None
    deadline: float | None = None
    #: what the job asks the scheduler for (``Request.to_wire``), kept while it is
    #: pending (its alloc requests carry it); jobs of one shape share one string
    request: str | None = None

    @property
    def job(self) -> Job:
        """The event-sourced state."""
        return self.rec.job

    def _progress(self) -> ExecProgress:
        progress = self.progress
        if progress is None:
            progress = self.progress = ExecProgress()
        return progress

    def rank_progress(self) -> ExecProgress:
        """The per-rank exec progress, made at the first report (a hot path reads its
        sets from it once instead of through the properties below)."""
        return self._progress()

    @property
    def exec_started(self) -> set[int]:
        """Ranks that reported their tasks started."""
        return self._progress().started

    @property
    def exec_finished(self) -> dict[int, int]:
        """Ranks that reported their tasks finished, with the wait status."""
        return self._progress().finished

    @property
    def exec_released(self) -> set[int]:
        """Ranks that reported their share of the job released."""
        return self._progress().released

    @property
    def exec_done(self) -> bool:
        """True once every rank reported its share of the job released."""
        if self.ranks is None:
            return False
        released = self.progress.released if self.progress is not None else ()
        return len(released) >= len(self.ranks)
