"""What a hot standby scheduler's pool should hold, from the journals it follows.

A standby keeps a pool as the leader's: every job the journals say was
allocated (``alloc`` event) holds its stored R there until its ``free``
event. The R is read from the job's hash in batches (:class:`Mirror` says
which jobs still want theirs). On taking over, the job manager's hello reply
is the authority: :func:`reconcile` says which pool jobs to free and which
held jobs to adopt still, so ready follows the reply after reading only the R
the standby had not read yet.

Both the standby and the hello recovery adopt through :func:`adopt_followed`: a
job whose R overlaps jobs the pool holds (a job and the jobs staged behind it,
each with its own R) takes their place, and those are followed as freed early.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.staging import Staging
from fluxes.formats.rset import ResourceSet


class Mirror:
    """The allocated jobs whose R a standby has yet to read into its pool."""

    def __init__(self) -> None:
        #: allocated per the journals, R not read yet (insertion order: oldest first)
        self.wanted: dict[int, None] = {}

    def apply(self, events: Iterable[tuple[int, bool]], held: Container[int]) -> list[int]:
        """Apply (jobid, allocated) events in order; the jobs of ``held`` (the pool's) that
        were freed since, which the pool must free."""
        freed: list[int] = []
        for jobid, allocated in events:
            if allocated:
                if jobid not in held:
                    self.wanted[jobid] = None
            else:
                self.wanted.pop(jobid, None)
                if jobid in held:
                    freed.append(jobid)
        return freed

    def take(self, n: int) -> list[int]:
        """Up to ``n`` jobs whose R to read now (forgotten here: read once)."""
        out: list[int] = []
        for jobid in self.wanted:
            if len(out) >= n:
                break
            out.append(jobid)
        for jobid in out:
            del self.wanted[jobid]
        return out


def reconcile(pooled: Iterable[int], held: Iterable[int]) -> tuple[list[int], list[int]]:
    """(jobs of the pool not held: free them, held jobs not in the pool: adopt them) for
    one partition, ``held`` being its job manager's hello reply."""
    in_pool = set(pooled)
    wanted = list(dict.fromkeys(held))
    wanted_set = set(wanted)
    stale = sorted(j for j in in_pool if j not in wanted_set)
    return stale, [j for j in wanted if j not in in_pool]


def adopt_stored(pool: SchedulerPool, graph: bool, jobid: int, raw_r: bytes,
                 request: Request | None) -> ResourceSet:
    """Put a job's stored R back into ``pool`` (ValueError when it does not fit); its R."""
    rset = ResourceSet(raw_r)
    # a graph pool takes back exactly what R's scheduling subgraph lists
    pool.adopt(jobid, raw_r.decode() if graph else rset, memory=_memory_per_rank(rset, request),
               exclusive=bool(request is not None and request.exclusive))
    return rset


def adopt_followed(pool: SchedulerPool, graph: bool, staging: Staging, jobid: int,
                   raw_r: bytes, request: Request | None,
                   expiration: float | None = None) -> ResourceSet:
    """:func:`adopt_stored`, where an R overlapping allocations of the pool takes their
    place (they are followed as freed early: the exec worker never runs two jobs on
    one core at once, so either may be taken for the one staged behind), and the
    job's end is followed by ``staging`` (``expiration``: its R's when None).
    ValueError when R does not fit and overlaps nothing; its R."""
    try:
        rset = adopt_stored(pool, graph, jobid, raw_r, request)
    except ValueError:
        rset = ResourceSet(raw_r)
        holders = pool.holders(rset)
        if not holders:
            raise ValueError(f"job {jobid}: its R does not fit the pool") from None
        for other in sorted(holders):
            theirs = pool.allocation_of(other)
            pool.free(other)
            staging.hold_early(other, theirs)
        rset = adopt_stored(pool, graph, jobid, raw_r, request)
    if staging.depth or staging.early:
        staging.placed(jobid, rset, request.run if request is not None else 0.0,
                       rset.starttime or 0.0,
                       rset.expiration if expiration is None else expiration)
    return rset


def _memory_per_rank(rset: ResourceSet, request: Request | None) -> dict[int, int] | None:
    """Memory a recovered allocation holds per rank (R does not record it)."""
    if request is None or not request.memory_per_slot:
        return None
    per_slot = int(request.memory_per_slot)
    size = max(int(request.min_cores_per_slot), 1)
    return {r: per_slot * max(len(rset.cores(r)) // size, 1) for r in rset.ranks}
