"""Staged starts: which allocated jobs the scheduler frees early, and who waits behind them.

A 1 ms job's core is idle while its end travels to the job manager, its free
to the scheduler, the next allocation back and its start to the exec worker.
So when jobs are pending, a pass first *early-frees* every allocated job whose
end is known and near (within the horizon of now): the pool frees it as if it
had ended, and :class:`Staging` remembers it. A job the pass then allocates on
cores or gpus an early-freed job still holds is *staged* behind it: its start
request reaches the exec worker, which starts it the moment those resources
free (docs/exec.md). See docs/scheduling-policies.md, "Staged starts".

Per job, its *bound* is when it ends at the latest as far as the scheduler
knows: its R's expiration, or for a simulated job its start plus its run time,
whichever is sooner (no time limit and not simulated: no bound, never freed
early). A staged job starts no sooner than the bounds of the jobs it is staged
behind, so its start (and the expiration of a time limit) count from there.
Its *level* is 1 + the highest level of the live early-freed jobs it overlaps
(0: it overlaps none); only jobs below the depth are freed early, so a core has
at most ``depth`` jobs waiting behind the one it runs.

Pure: no pool here (the session frees and moves what this says); the early
candidates are kept in a heap by bound so a pass looks only at the nearest.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fluxes.formats.rset import ResourceSet

__all__ = ["Known", "Staging", "bound_of", "parts_of"]

#: cores and gpus on one rank (plain sets: an IDSet intersection costs ten times more)
Part = tuple[frozenset[int], frozenset[int]]
#: rank -> its part
Parts = dict[int, Part]


_NONE: frozenset[int] = frozenset()


def parts_of(rset: ResourceSet) -> Parts:
    """The cores and gpus of ``rset`` per rank."""
    return {r: (frozenset(cores), frozenset(gpus) if gpus else _NONE)
            for r, cores, gpus in rset.per_rank()}


def _overlaps(mine: Part, theirs: Part) -> bool:
    return not mine[0].isdisjoint(theirs[0]) or (
        bool(mine[1]) and not mine[1].isdisjoint(theirs[1]))


@dataclass(slots=True)
class Known:
    """A job the staging follows: allocated with a known bound, staged, or early-freed."""

    #: when it ends at the latest (inf: unknown)
    bound: float
    #: when it starts at the soonest (the bound of what it is staged behind)
    start: float
    #: its simulated run time (0: not simulated)
    run: float
    level: int = 0
    #: the live early-freed jobs it is staged behind (replaced, never changed: most jobs
    #: share the empty one)
    behind: frozenset[int] = _NONE
    #: its parts per rank (kept when known; the pool's R gives them when it is freed early)
    parts: Parts | None = None
    #: (early-freed) the jobs staged behind it
    ahead: set[int] | None = None


def bound_of(start: float, run: float, expiration: float | None) -> float:
    """When a job starting at ``start`` ends at the latest (inf: unknown)."""
    bound = start + run if run else math.inf
    if expiration:
        bound = min(bound, expiration)
    return bound


class Staging:
    """The early-freed jobs and the jobs staged behind them (see the module docstring).

    ``depth`` 0 frees nothing early (the simulator's and forecasts': their exec is
    instant); what the hello recovery finds overlapping is followed all the same.
    """

    def __init__(self, depth: int = 0, horizon: float = 0.0) -> None:
        self.depth = depth
        self.horizon = horizon
        #: job -> its record, for every job followed (early-freed ones included)
        self.known: dict[int, Known] = {}
        #: the early-freed jobs still live (their real free not seen yet)
        self.early: dict[int, Known] = {}
        #: rank -> the early-freed jobs holding something there
        self._by_rank: dict[int, set[int]] = {}
        #: (bound, job) of the candidates to free early (stale entries skipped)
        self._heap: list[tuple[float, int]] = []

    # -- candidates --------------------------------------------------------------------

    def _candidate(self, jobid: int, job: Known) -> None:
        if job.level < self.depth and job.bound != math.inf and jobid not in self.early:
            heap = self._heap
            heapq.heappush(heap, (job.bound, jobid))
            if len(heap) > 2 * len(self.known) + 64:
                # jobs that ended long before their bound (a time limit they did not use)
                # leave their entries behind: drop them all at once
                self._heap = [(j.bound, i) for i, j in self.known.items()
                              if j.level < self.depth and j.bound != math.inf
                              and i not in self.early]
                heapq.heapify(self._heap)

    def _top(self) -> tuple[float, int] | None:
        """The nearest live candidate (stale entries dropped)."""
        heap, known = self._heap, self.known
        while heap:
            bound, jobid = heap[0]
            job = known.get(jobid)
            if job is not None and job.bound == bound and job.level < self.depth \
                    and jobid not in self.early:
                return heap[0]
            heapq.heappop(heap)
        return None

    def next_due(self) -> float | None:
        """When the nearest candidate's bound enters the horizon (None: no candidate)."""
        top = self._top() if self._heap else None
        return None if top is None else top[0] - self.horizon

    def due(self, now: float) -> list[int]:
        """The candidates whose bound is within the horizon of ``now``, nearest first (no
        longer candidates): the session frees them in its pool, then :meth:`free_early`."""
        out: list[int] = []
        if not self._heap:
            return out
        limit = now + self.horizon
        seen: set[int] = set()
        while (top := self._top()) is not None and top[0] <= limit:
            heapq.heappop(self._heap)
            if top[1] not in seen:  # a job's entry may be there twice (moved, same bound)
                seen.add(top[1])
                out.append(top[1])
        return out

    def has_parts(self, jobid: int) -> bool:
        """Whether a followed job's parts are known (else :meth:`free_early` wants its R)."""
        return self.known[jobid].parts is not None

    def free_early(self, jobid: int, rset: ResourceSet | None) -> None:
        """``jobid`` (followed, holding ``rset``: None when :meth:`has_parts`) is freed
        early: its resources may be handed out."""
        job = self.known[jobid]
        parts = job.parts
        if parts is None:
            if rset is None:
                raise ValueError(f"free_early: job {jobid}: its R is needed")
            job.parts = parts = parts_of(rset)
        self.early[jobid] = job
        for r in parts:
            self._by_rank.setdefault(r, set()).add(jobid)

    # -- allocations -------------------------------------------------------------------

    def behind(self, rset: ResourceSet, parts: Parts | None = None) -> set[int]:
        """The live early-freed jobs ``rset`` (whose ``parts`` when known) overlaps."""
        by_rank = self._by_rank
        out: set[int] = set()
        if parts is None:
            parts = parts_of(rset)
        for r, mine in parts.items():
            ids = by_rank.get(r)
            if not ids:
                continue
            for other in ids:
                theirs = self.early[other].parts
                if theirs is not None and _overlaps(mine, theirs[r]):
                    out.add(other)
        return out

    def placed(self, jobid: int, rset: ResourceSet, run: float, now: float,
               expiration: float | None) -> Known | None:
        """A job holds ``rset`` from ``now`` (allocated, or adopted by a recovery) until
        ``expiration`` at the latest: follow it when it has a bound or is staged; its
        record (None: neither)."""
        parts = None
        behind: set[int] = set()
        if self.early:
            # kept: if this job is freed early in turn, they are what its successors test
            parts = parts_of(rset)
            behind = self.behind(rset, parts)
        start = max([now, *(self.early[b].bound for b in behind)])
        bound = bound_of(start, run, expiration)
        if not behind and (bound == math.inf or not self.depth):
            return None
        job = Known(bound, start, run)
        if behind:
            # its parts are kept for when it is freed early in turn (asked right away in
            # a stream of short jobs); a job behind nothing reads them from the pool then
            job.parts = parts
            job.behind = frozenset(behind)
            job.level = 1 + max(self.early[b].level for b in behind)
            for b in behind:
                before = self.early[b]
                if before.ahead is None:
                    before.ahead = set()
                before.ahead.add(jobid)
        self.known[jobid] = job
        self._candidate(jobid, job)
        return job

    def moved(self, jobid: int, expiration: float | None) -> None:
        """A followed job's expiration moved (``sched.expiration``): its bound too."""
        job = self.known.get(jobid)
        if job is None or jobid in self.early:
            return  # unknown end before (a new limit is followed from its next pass), or
            # freed early already: its successors keep the bound they were given
        bound = bound_of(job.start, job.run, expiration)
        if bound != job.bound:
            job.bound = bound
            self._candidate(jobid, job)

    # -- frees -------------------------------------------------------------------------

    def freed(self, jobid: int) -> bool:
        """``jobid`` is really freed (or forgotten): True when it was early-freed (the pool
        holds nothing of it). The jobs staged behind it drop a level."""
        job = self.known.pop(jobid, None)
        if job is None:
            return False
        for b in job.behind:
            before = self.early.get(b)
            if before is not None and before.ahead is not None:
                before.ahead.discard(jobid)
        if self.early.pop(jobid, None) is None:
            return False
        assert job.parts is not None
        for r in job.parts:
            ids = self._by_rank.get(r)
            if ids is not None:
                ids.discard(jobid)
                if not ids:
                    del self._by_rank[r]
        if job.ahead:
            self._relevel(job.ahead, gone=jobid)
        return True

    def _relevel(self, jobids: Iterable[int], gone: int) -> None:
        """The jobs of ``jobids`` are no longer behind ``gone``: their levels, and those of
        the jobs behind them, are recomputed."""
        todo = [(j, gone) for j in jobids]
        while todo:
            jobid, left = todo.pop()
            job = self.known.get(jobid)
            if job is None:
                continue
            early = self.early
            # a job behind two that both ended may be met through the other first
            behind = job.behind
            levels = [e.level for b in behind if b != left and (e := early.get(b)) is not None]
            if len(levels) != len(behind):
                job.behind = frozenset(b for b in behind if b != left and b in early)
            level = 1 + max(levels, default=-1)
            if level == job.level:
                continue
            job.level = level
            self._candidate(jobid, job)
            if jobid in self.early and job.ahead:
                todo.extend((a, -1) for a in job.ahead)

    def forget(self, keep: Callable[[int], bool]) -> list[int]:
        """Forget every followed job ``keep`` refuses (a partition's reset); the early-freed
        ones among them (the pool holds nothing of those)."""
        gone = [j for j in self.known if not keep(j)]
        return [j for j in gone if self.freed(j)]

    def hold_early(self, jobid: int, rset: ResourceSet) -> None:
        """A held job another held job's R overlaps (the hello recovery of a job and the
        jobs staged behind it): it is taken as freed early. Either choice is safe: the
        exec worker never runs two jobs on one core at once."""
        if jobid in self.early:
            return
        job = self.known.get(jobid)
        if job is None:
            start = rset.starttime or 0.0
            job = self.known[jobid] = Known(bound_of(start, 0.0, rset.expiration), start,
                                            0.0)
        self.free_early(jobid, rset)

