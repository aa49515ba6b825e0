"""What a hot standby scheduler's pool should hold, from the journals it follows.

A standby keeps a pool as the leader's: every job the journals say was
allocated (``alloc`` event) holds its stored R there until its ``free``
event. The R is read from the job's hash in batches (:class:`Mirror` says
which jobs still want theirs). On taking over, the job manager's hello reply
is the authority: :func:`reconcile` says which pool jobs to free and which
held jobs to adopt still, so ready follows the reply after reading only the R
the standby had not read yet.
"""

from __future__ import annotations

from collections.abc import Container, Iterable


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
