"""The invariants a recovery drill checks, as pure functions over eventlogs, R and read models.

* every submission is accepted, and every submitted job reaches INACTIVE
  exactly once, with the right result;
* no core or GPU is held by two jobs at any instant (allocation intervals
  from the ``alloc`` and ``free`` events, resources from R), but for a job the
  scheduler staged behind others (its ``alloc`` annotated ``sched.staged``):
  its allocation overlaps theirs on purpose, and what must not overlap is
  their runs (``start`` to ``finish``);
* every eventlog decodes and replays cleanly;
* the job-list read model equals a fresh fold of the journal;
* the scheduler's pool, as it publishes it, holds what the stored R of the
  jobs holding resources says.

Each function returns the violations it found (an empty list when the
invariant holds), naming the jobs and the events involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, TransitionError, apply, staged_info
from fluxes.domain.job.states import JobResult, JobState
from fluxes.domain.joblist.model import ReadModel
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet


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


def check_submissions(rejections: Sequence[str]) -> list[Violation]:
    """Every submission of the drill's (valid) workload must be accepted: one violation per
    distinct refusal, with how many submissions it refused."""
    counts: dict[str, int] = {}
    for reason in rejections:
        counts[reason] = counts.get(reason, 0) + 1
    return [Violation("every submission accepted", (), f"{n} refused: {reason}")
            for reason, n in counts.items()]


def check_jobs(eventlogs: Mapping[int, Sequence[ev.Event]],
               expected: Mapping[int, JobResult] | None = None,
               broken: Mapping[int, str] | None = None) -> tuple[dict[int, Job], Report]:
    """Replay each eventlog; every job must be INACTIVE once, with the expected result.

    ``broken`` maps jobs whose eventlog could not even be decoded to why; each
    is a "replays cleanly" violation.
    """
    report = Report(jobs=len(eventlogs) + len(broken or {}))
    for jobid, why in (broken or {}).items():
        report.violations.append(Violation("replays cleanly", (jobid,), why))
    jobs: dict[int, Job] = {}
    for jobid, log in eventlogs.items():
        job = Job(jobid)
        bad = None
        for i, event in enumerate(log):
            try:
                job = apply(event, job)
            except (TransitionError, ev.EventError) as exc:
                bad = f"event {i} ({event.event_name}): {exc}"
                break
        if bad is not None:
            report.violations.append(Violation("replays cleanly", (jobid,), bad))
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
    return _intervals(eventlogs, "alloc", "free", last_end=True)


def run_intervals(eventlogs: Mapping[int, Sequence[ev.Event]]
                  ) -> dict[int, tuple[float, float]]:
    """Per job that started: [start, finish) in event time (no finish: still running)."""
    return _intervals(eventlogs, "start", "finish", last_end=False)


def _intervals(eventlogs: Mapping[int, Sequence[ev.Event]], opens: str, closes: str,
               last_end: bool) -> dict[int, tuple[float, float]]:
    """Per job: from its first ``opens`` event to its last (or first) ``closes`` event
    after it, +inf without one."""
    out: dict[int, tuple[float, float]] = {}
    for jobid, log in eventlogs.items():
        start = end = None
        for event in log:
            name = event.event_name
            if name == opens and start is None:
                start = event.timestamp
            elif name == closes and start is not None and (last_end or end is None):
                end = event.timestamp
        if start is not None:
            out[jobid] = (start, end if end is not None else float("inf"))
    return out


def staged_jobs(eventlogs: Mapping[int, Sequence[ev.Event]]) -> set[int]:
    """The jobs whose ``alloc`` says the scheduler staged them behind running jobs."""
    out: set[int] = set()
    for jobid, log in eventlogs.items():
        for event in log:
            if isinstance(event, ev.Alloc):
                if staged_info(event.annotations) is not None:
                    out.add(jobid)
                break
    return out


def check_exclusive(eventlogs: Mapping[int, Sequence[ev.Event]],
                    rsets: Mapping[int, ResourceSet]) -> list[Violation]:
    """:func:`check_no_double_allocation` of the eventlogs' allocations, staged jobs
    judged by their runs."""
    return check_no_double_allocation(allocation_intervals(eventlogs), rsets,
                                      run_intervals(eventlogs), staged_jobs(eventlogs))


def holding(eventlogs: Mapping[int, Sequence[ev.Event]]) -> list[int]:
    """The jobs whose eventlog has an ``alloc`` and no ``free`` yet: they hold resources."""
    return sorted(j for j, (_start, end) in allocation_intervals(eventlogs).items()
                  if end == float("inf"))


def check_no_double_allocation(intervals: Mapping[int, tuple[float, float]],
                               rsets: Mapping[int, ResourceSet],
                               runs: Mapping[int, tuple[float, float]] | None = None,
                               staged: Iterable[int] = ()) -> list[Violation]:
    """No (rank, core) or (rank, gpu) in two jobs' R while their intervals overlap.

    Every overlapping pair is reported once, with the units both held. A pair
    of which one is ``staged`` holds them twice on purpose: it is a violation
    only when their ``runs`` overlap (a staged job that never ran held nothing).
    """
    # per unit, the intervals that are still open at the start of the next one
    # (all of them, not only the latest: a long job overlaps every later one)
    open_on: dict[tuple[int, str, int], list[tuple[int, float]]] = {}
    clashes: dict[tuple[int, int], list[tuple[int, str, int]]] = {}
    for jobid, (start, end) in sorted(intervals.items(), key=lambda kv: (kv[1][0], kv[0])):
        rset = rsets.get(jobid)
        if rset is None:
            continue
        for rank in rset.ranks:
            for kind, ids in (("core", rset.cores(rank)), ("gpu", rset.gpus(rank))):
                for unit in ids:
                    key = (rank, kind, unit)
                    still = [(j, e) for j, e in open_on.get(key, []) if e > start]
                    for other, _end in still:
                        clashes.setdefault((other, jobid), []).append(key)
                    still.append((jobid, end))
                    open_on[key] = still
    found = []
    staged = set(staged)
    for (first, second), units in clashes.items():
        if (first in staged or second in staged) and not _runs_overlap(runs or {}, first,
                                                                        second):
            continue
        where = ", ".join(f"rank {r} {kind} {u}" for r, kind, u in units[:8])
        more = f" and {len(units) - 8} more" if len(units) > 8 else ""
        a, b = intervals[first], intervals[second]
        found.append(Violation(
            "no unit held twice", (first, second),
            f"{where}{more} held by both (first [{a[0]:.6f}, {a[1]:.6f}), "
            f"second [{b[0]:.6f}, {b[1]:.6f}))"))
    return found


def _runs_overlap(runs: Mapping[int, tuple[float, float]], a: int, b: int) -> bool:
    ra, rb = runs.get(a), runs.get(b)
    return ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]


def pool_summary(rsets: Iterable[ResourceSet]) -> dict[str, Any]:
    """What a pool holding ``rsets`` allocates: cores, GPUs, nodes and ranks (the figures
    the scheduler publishes for its allocated resources in ``sched:status``)."""
    ranks = IDSet()
    ncores = ngpus = 0
    for rset in rsets:
        ranks |= rset.ranks
        ncores += rset.ncores
        ngpus += rset.ngpus
    return {"ncores": ncores, "ngpus": ngpus, "nnodes": len(ranks), "ranks": str(ranks)}


def check_pool(published: Mapping[str, Any], rsets: Mapping[int, ResourceSet]) -> list[Violation]:
    """The scheduler's published allocated resources equal the union of the stored R of the
    jobs holding resources (``rsets``): core and GPU counts, node count and ranks."""
    want = pool_summary(rsets.values())
    try:
        got = {"ncores": int(published["ncores"]), "ngpus": int(published["ngpus"]),
               "nnodes": int(published["nnodes"]), "ranks": str(IDSet(published["ranks"]))}
    except (KeyError, TypeError, ValueError) as exc:
        return [Violation("pool equals stored R", tuple(sorted(rsets)),
                          f"the scheduler's published pool is malformed: {exc!r}")]
    if got == want:
        return []
    diff = ", ".join(f"{k} {got[k]} (stored R: {want[k]})" for k in want if got[k] != want[k])
    return [Violation("pool equals stored R", tuple(sorted(rsets)),
                      f"the scheduler's pool allocates {diff}")]


def check_read_model(fresh: ReadModel, stored: ReadModel) -> list[Violation]:
    """The job-list read model (``stored``) equals a fresh fold of the journal (``fresh``)."""
    out = []
    for jobid in sorted(set(fresh.summaries) | set(stored.summaries)):
        want, got = fresh.summaries.get(jobid), stored.summaries.get(jobid)
        if want == got:
            continue
        if got is None or want is None:
            detail = "missing from the read model" if got is None else \
                "in the read model but not in the journal"
        else:
            detail = (f"the job-list summary ({got.job.state.name}, {got.job.seq} events) "
                      f"differs from the journal's ({want.job.state.name}, "
                      f"{want.job.seq} events)")
        out.append(Violation("read model equals a rebuild", (jobid,), detail))
    if +fresh.counters != +stored.counters:
        diff = {k: (stored.counters.get(k, 0), fresh.counters.get(k, 0))
                for k in set(fresh.counters) | set(stored.counters)
                if stored.counters.get(k, 0) != fresh.counters.get(k, 0)}
        out.append(Violation("read model equals a rebuild", (),
                             "counters differ (stored, rebuilt): "
                             + ", ".join(f"{k} {a} vs {b}" for k, (a, b) in sorted(diff.items()))))
    return out


def summarize(violations: Iterable[Violation], limit: int = 20) -> list[str]:
    """Printable lines, at most ``limit`` (and a count of the rest)."""
    items = list(violations)
    lines = [str(v) for v in items[:limit]]
    if len(items) > limit:
        lines.append(f"... and {len(items) - limit} more")
    return lines
