"""Allocate, reserve and cancel on a resource graph: the operations Fluxion's traverser offers.

:class:`Traverser` owns a graph and its :class:`~fluxes.domain.graph.state.GraphState`
and keeps every job's :class:`~fluxes.domain.graph.state.Hold`:

* :meth:`Traverser.allocate`: match now for ``[now, now + duration)``;
* :meth:`Traverser.reserve_at`: match a future window (allocations count
  until their end time);
* :meth:`Traverser.earliest`: the earliest window start when the request
  fits, trying now and then each time something ends (an allocation or a
  reservation), as the planner says; release totals rule most times out
  before any matching;
* :meth:`Traverser.satisfiable`: whether it could fit the empty graph;
* :meth:`Traverser.cancel`: drop a job's allocation or reservation;
* :meth:`Traverser.update`: record a hold given as an R (Fluxion's
  ``update``), if nothing else holds it;
* :meth:`Traverser.release_ranks`: release a job's vertices on some ranks
  (Fluxion's partial cancel).

Times are floats; a duration of ``math.inf`` is unlimited.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from heapq import merge
from typing import Final

from fluxes.domain.graph.match import Matcher, Need, PruneSpec, compile_wants, missing_types
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.state import GraphState, Hold
from fluxes.domain.graph.wants import Want

__all__ = ["Traverser"]

_INF: Final = math.inf
# Compiled requests are cheap to redo; the cap only bounds a stream of shapes.
_COMPILED_MAX: Final = 4096


class Traverser:
    """Jobs' holds on one graph (see the module docstring)."""

    __slots__ = ("_compiled", "_ends", "_missing", "allocs", "graph", "prune", "resvs", "state")

    def __init__(self, graph: ResourceGraph, prune: PruneSpec | None = None) -> None:
        """Nothing held; *prune*: the matcher's prune filters (None: by every type)."""
        self.graph = graph
        self.prune = prune
        self.state = GraphState(graph)
        self.allocs: dict[int, Hold] = {}
        self.resvs: dict[int, Hold] = {}
        #: (end, jobid) of allocations with an end, sorted
        self._ends: list[tuple[float, int]] = []
        self._compiled: dict[tuple[Want, ...], tuple[Need, ...]] = {}
        self._missing: dict[tuple[Need, ...], list[str]] = {}

    def compile(self, wants: Sequence[Want]) -> tuple[Need, ...]:
        """The compiled form of *wants* for this graph (cached)."""
        key = tuple(wants)
        needs = self._compiled.get(key)
        if needs is None:
            if len(self._compiled) >= _COMPILED_MAX:
                self._compiled.clear()
            needs = self._compiled[key] = compile_wants(key, self.graph)
        return needs

    def missing(self, needs: Sequence[Need]) -> list[str]:
        """Resource types the request names that the graph lacks (cached per request)."""
        key = tuple(needs)
        found = self._missing.get(key)
        if found is None:
            if len(self._missing) >= _COMPILED_MAX:
                self._missing.clear()
            found = self._missing[key] = missing_types(key, self.graph)
        return found

    # -- matching ----------------------------------------------------------------------

    def attempt(self, needs: Sequence[Need], jobid: int, start: float, length: float,
                now: float, policy: str, *, skip: int | None = None,
                allowed: frozenset[int] | None = None, overdue: bool = False
                ) -> Hold | None:
        """The hold *needs* would get for ``[start, start + length)``, or None (nothing kept).

        With *overdue*, allocations past their end time count as ended
        (planning at *now* as if they had ended on time).
        """
        if self.missing(needs):
            return None  # a type the graph lacks: nothing can match
        mode = "now" if start <= now and not overdue else "later"
        matcher = Matcher(self.state, start, start + length, -_INF if overdue else now, mode,
                          policy, skip, allowed, self.prune)
        if not matcher.run(needs):
            return None
        return matcher.hold(jobid, start > now)

    def satisfiable(self, needs: Sequence[Need], allowed: frozenset[int] | None = None
                    ) -> bool:
        """Whether *needs* fits the empty graph (every vertex up, nothing held)."""
        if self.missing(needs):
            return False
        return Matcher(self.state, 0.0, _INF, 0.0, "static", "low", None, allowed,
                       self.prune).run(needs)

    def allocate(self, needs: Sequence[Need], jobid: int, now: float, length: float,
                 policy: str, allowed: frozenset[int] | None = None) -> Hold | None:
        """Allocate for ``[now, now + length)`` (a reservation of *jobid* is replaced)."""
        self._check_free_id(jobid)
        hold = self.attempt(needs, jobid, now, length, now, policy, skip=jobid, allowed=allowed)
        if hold is None:
            return None
        self.drop_reservation(jobid)
        self.commit(hold)
        return hold

    def reserve_at(self, needs: Sequence[Need], jobid: int, start: float, length: float,
                   policy: str, allowed: frozenset[int] | None = None) -> Hold | None:
        """Reserve ``[start, start + length)`` for *jobid* (replacing its reservation).

        The window is planned on what will be free at *start* if every
        allocation ends on time: those ending by then do not count, even
        when *start* is now (they are overdue).
        """
        if jobid in self.allocs:
            raise ValueError(f"reserve: job {jobid} already has an allocation")
        hold = self.attempt(needs, jobid, start, length, start, policy, skip=jobid,
                            allowed=allowed, overdue=True)
        if hold is None:
            return None
        hold.reserved = True
        self.drop_reservation(jobid)
        self.commit(hold)
        return hold

    def earliest(self, needs: Sequence[Need], jobid: int | None, now: float, length: float,
                 policy: str, allowed: frozenset[int] | None = None
                 ) -> tuple[float, Hold] | None:
        """The earliest start >= *now* where *needs* fits for *length*, with its hold.

        Allocations are assumed to end at their end times (overdue ones now)
        and every reservation but *jobid*'s is respected.  None when no time
        is known (the request needs drained vertices, or resources held
        without an end, or it can never fit).  Nothing is kept.
        """
        hold = self.attempt(needs, -1 if jobid is None else jobid, now, length, now, policy,
                            skip=jobid, allowed=allowed)
        if hold is not None:
            return now, hold
        if self.missing(needs):
            return None
        need = self._totals(needs)
        free = {t: col[0] for t, col in self.state.free.items()}
        ends = self._ends
        res_ends = sorted(r.end for j, r in self.resvs.items() if now < r.end < _INF
                          and j != jobid)
        # Overdue allocations are assumed to end now: "now" is tried again
        # without them, then each later end.
        overdue = bisect_left(ends, (now, _INF))
        first = [now] if overdue else []
        done = 0
        last = -_INF
        for when in merge(first, (e for e, _ in ends[overdue:]), res_ends):
            if when == last:
                continue
            last = when
            while done < len(ends) and ends[done][0] <= when:
                for t, a in self.allocs[ends[done][1]].totals.items():
                    free[t] = free.get(t, 0) + a
                done += 1
            if any(free.get(t, 0) < k for t, k in need.items()):
                continue  # not enough units anywhere yet: no need to match
            hold = self.attempt(needs, -1 if jobid is None else jobid, when, length, now,
                                policy, skip=jobid, allowed=allowed, overdue=when <= now)
            if hold is not None:
                return when, hold
        return None

    @staticmethod
    def _totals(needs: Iterable[Need]) -> dict[str, int]:
        """Least units of each leaf type the request needs in all."""
        out: dict[str, int] = {}
        for need in needs:
            if need.exclusive and not need.leaf:
                continue  # whole subtrees: their units are not known ahead
            for t, k in need.total().items():
                out[t] = out.get(t, 0) + k
        return out

    # -- records -------------------------------------------------------------------

    def _check_free_id(self, jobid: int) -> None:
        """ValueError if *jobid* already holds an allocation."""
        if jobid in self.allocs:
            raise ValueError(f"alloc: job {jobid} already has an allocation")

    def commit(self, hold: Hold) -> None:
        """Record *hold* (allocation or reservation) in the state and the job tables."""
        self.state.commit(hold)
        if hold.reserved:
            self.resvs[hold.jobid] = hold
            return
        self.allocs[hold.jobid] = hold
        if hold.end != _INF:
            insort(self._ends, (hold.end, hold.jobid))

    def drop_reservation(self, jobid: int) -> bool:
        """Forget *jobid*'s reservation; False if it had none."""
        hold = self.resvs.pop(jobid, None)
        if hold is None:
            return False
        self.state.release(hold)
        return True

    def cancel(self, jobid: int) -> Hold | None:
        """Release *jobid*'s allocation, or drop its reservation; what it held, or None."""
        hold = self.allocs.pop(jobid, None)
        if hold is None:
            hold = self.resvs.pop(jobid, None)
            if hold is not None:
                self.state.release(hold)
            return hold
        self.state.release(hold)
        if hold.end != _INF:
            i = bisect_left(self._ends, (hold.end, jobid))
            del self._ends[i]
        return hold

    def update(self, hold: Hold, now: float) -> int | None:
        """Record *hold* as given (an R read back, Fluxion's ``update``): an allocation when
        it starts by *now*, else a reservation.

        Returns the vertex that does not fit (held by another job over the
        window, or down), or None once recorded.  ValueError if the job
        already holds something.
        """
        jobid = hold.jobid
        if jobid in self.allocs or jobid in self.resvs:
            raise ValueError(f"update: job {jobid} already exists")
        hold.reserved = hold.start > now
        bad = self.state.conflict(hold, now)
        if bad is None:
            self.commit(hold)
        return bad

    def release_ranks(self, jobid: int, ranks: Iterable[int]) -> tuple[Hold, bool] | None:
        """Release what *jobid*'s allocation holds on *ranks* (a partial cancel).

        Returns what the job still holds and whether that was the last of
        it (the job is then gone, as after :meth:`cancel`); None when the
        job has no allocation.  Vertices above the hosts (a rack, the
        cluster) stay held until the last rank goes; one of them held
        exclusively (a switch) keeps its subtree closed until then, as it
        keeps it closed to others in Fluxion, though the R no longer lists
        the ranks released.
        """
        hold = self.allocs.get(jobid)
        if hold is None:
            return None
        g = self.graph
        gone = {r for r in ranks if r in g.rank_host}

        def keep(v: int) -> bool:
            return g.rank_of(v) not in gone

        closed: set[int] = set()
        for v, (_, excl) in hold.shown.items():
            if excl and keep(v) and g.rank_of(v) < 0:
                closed.update(g.subtree(v))
        left = Hold(jobid, hold.start, hold.end,
                    {v: s for v, s in hold.shown.items() if keep(v)},
                    {v: a for v, a in hold.amounts.items() if keep(v)}, False, {},
                    {v: a for v, a in hold.blocked.items() if keep(v) or v in closed},
                    tuple(v for v in hold.touched if keep(v) or v in closed))
        if not any(g.rank_of(v) >= 0 for v in left.shown):
            self.cancel(jobid)
            return left, True
        for v, a in left.blocked.items():
            left.totals[g.types[v]] = left.totals.get(g.types[v], 0) + a
        self.state.release(hold)
        self.state.commit(left)
        self.allocs[jobid] = left
        return left, False

    def set_end(self, jobid: int, end: float) -> bool:
        """Move the end of *jobid*'s allocation to *end*; False if it holds none."""
        hold = self.allocs.get(jobid)
        if hold is None:
            return False
        if hold.end != _INF:
            del self._ends[bisect_left(self._ends, (hold.end, jobid))]
        self.state.set_end(hold, end)
        if end != _INF:
            insort(self._ends, (end, jobid))
        return True

    def clear_reservations(self) -> None:
        """Drop every reservation."""
        for jobid in list(self.resvs):
            self.drop_reservation(jobid)
