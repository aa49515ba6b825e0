"""The invariants a recovery drill checks, as pure functions over eventlogs and R.

* every submitted job reaches INACTIVE exactly once, with the right result;
* no core or GPU is held by two jobs at any instant (allocation intervals
  from the ``alloc`` and ``free`` events, resources from R);
* every eventlog replays cleanly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fluxes.job import events as ev
from fluxes.job.model import Job, TransitionError, apply
from fluxes.job.states import JobResult, JobState
from fluxes.rset import ResourceSet


@dataclass
class Violation:
    """One broken invariant: which job(s), and what happened."""

    invariant: str
    jobs: tuple[int, ...]
    detail: str

    def __str__(self) -> str:
        ids = ",".join(str(j) for j in self.jobs)
        return f"{self.invariant}: job(s) {ids}: {self.detail}"


@dataclass
class Report:
    """Everything the checks found."""

    jobs: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no invariant is broken."""
        return not self.violations


def check_jobs(eventlogs: Mapping[int, Sequence[ev.Event]],
               expected: Mapping[int, JobResult] | None = None) -> tuple[dict[int, Job], Report]:
    """Replay each eventlog; every job must be INACTIVE once, with the expected result."""
    report = Report(jobs=len(eventlogs))
    jobs: dict[int, Job] = {}
    for jobid, log in eventlogs.items():
        job = Job(jobid)
        try:
            for event in log:
                job = apply(event, job)
        except (TransitionError, ev.EventError) as exc:
            report.violations.append(Violation("replays cleanly", (jobid,), str(exc)))
            continue
        jobs[jobid] = job
        cleans = sum(1 for e in log if e.event_name == "clean")
        if job.state is not JobState.INACTIVE or cleans != 1:
            report.violations.append(Violation(
                "inactive exactly once", (jobid,),
                f"state {job.state.name}, {cleans} clean events; events: "
                f"{' '.join(e.event_name for e in log[-6:])}"))
            continue
        want = (expected or {}).get(jobid)
        if want is not None and job.result != want:
            got = job.result.name if job.result is not None else "-"
            report.violations.append(Violation(
                "right result", (jobid,), f"expected {want.name}, got {got}"))
    return jobs, report


def allocation_intervals(eventlogs: Mapping[int, Sequence[ev.Event]]
                         ) -> dict[int, tuple[float, float]]:
    """Per job: [alloc, free) in event time (free missing: still held, until +inf)."""
    out: dict[int, tuple[float, float]] = {}
    for jobid, log in eventlogs.items():
        start = end = None
        for event in log:
            if event.event_name == "alloc" and start is None:
                start = event.timestamp
            elif event.event_name == "free" and start is not None:
                end = event.timestamp
        if start is not None:
            out[jobid] = (start, end if end is not None else float("inf"))
    return out


def check_no_double_allocation(intervals: Mapping[int, tuple[float, float]],
                               rsets: Mapping[int, ResourceSet]) -> list[Violation]:
    """No (rank, core) or (rank, gpu) in two jobs' R while their intervals overlap."""
    # sweep in time order; each unit remembers which job holds it until when
    holder: dict[tuple[int, str, int], tuple[int, float]] = {}
    found: list[Violation] = []
    for jobid, (start, end) in sorted(intervals.items(), key=lambda kv: (kv[1][0], kv[0])):
        rset = rsets.get(jobid)
        if rset is None:
            continue
        for rank in rset.ranks:
            for kind, ids in (("core", rset.cores(rank)), ("gpu", rset.gpus(rank))):
                for unit in ids:
                    key = (rank, kind, unit)
                    prev = holder.get(key)
                    if prev is not None and prev[1] > start:
                        found.append(Violation(
                            "no unit held twice", (prev[0], jobid),
                            f"rank {rank} {kind} {unit} held by both "
                            f"(first until {prev[1]:.6f}, second from {start:.6f})"))
                    holder[key] = (jobid, end)
    return found


def summarize(violations: Iterable[Violation], limit: int = 20) -> list[str]:
    """Printable lines, at most ``limit`` (and a count of the rest)."""
    items = list(violations)
    lines = [str(v) for v in items[:limit]]
    if len(items) > limit:
        lines.append(f"... and {len(items) - limit} more")
    return lines
