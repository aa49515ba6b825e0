"""When each node becomes idle: the pool's owners per rank and their last ends, in order.

:class:`NodeEnds` keeps, per rank, the jobs holding something there and the
latest end among them (when the rank becomes idle if every allocation ends on
time), and the ranks sorted by that end. The planner's questions about whole
nodes read it: which ranks are idle at a time (:meth:`NodeEnds.idle_by`), and
the times nodes become idle, in order, from a time on (:meth:`NodeEnds.times`),
each in the time of the ranks it returns, not of the whole machine. An EASY
pass reserves for its head at every end of a full machine: sorting every node's
end for each of those walks cost a quarter of a forecast (``fluxes bench
forecast``, docs/forecast.md "Cost").

A free can lower a rank's last end only when the job freed held the latest:
the rank is then marked stale and recomputed (and moved in the order) when next
asked, so a stream of frees on a node of many small jobs does not rescan its
owners each time. Pure: no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Final

from fluxes.domain.sched.placement import Part
from fluxes.formats.idset import IDSet

__all__ = ["NodeEnds", "released_room"]

_INF: Final = math.inf


class NodeEnds:
    """Owners and last ends per rank, ranks in order of their last end (see the module).

    ``end_of`` gives a held job's current end (the pool's job table).
    """

    __slots__ = ("_end_of", "_last", "_order", "_stale", "owners")

    def __init__(self, end_of: Callable[[int], float]) -> None:
        """No rank holds anything."""
        self._end_of = end_of
        #: rank -> the jobs holding something there
        self.owners: dict[int, set[int]] = {}
        #: rank -> latest end among its owners (ranks holding nothing are absent)
        self._last: dict[int, float] = {}
        #: (last end, rank) of every rank in ``_last``, ascending
        self._order: list[tuple[float, int]] = []
        self._stale: set[int] = set()

    def _move(self, r: int, end: float | None) -> None:
        """Set rank ``r``'s last end to ``end`` (None: it holds nothing now)."""
        old = self._last.get(r)
        if old == end:
            return
        order = self._order
        if old is not None:
            del order[bisect_left(order, (old, r))]
        if end is None:
            del self._last[r]
        else:
            self._last[r] = end
            insort(order, (end, r))

    def hold(self, r: int, jobid: int, end: float) -> None:
        """``jobid``, ending at ``end``, holds something on rank ``r`` now."""
        held = self.owners.get(r)
        if held is None:
            self.owners[r] = {jobid}
            self._move(r, end)
        else:
            held.add(jobid)
            if end > self._last[r]:
                self._move(r, end)

    def drop(self, r: int, jobid: int, end: float) -> None:
        """``jobid`` (ending at ``end``) no longer holds anything on rank ``r``."""
        held = self.owners[r]
        held.discard(jobid)
        if not held:
            del self.owners[r]
            self._move(r, None)
            self._stale.discard(r)
        elif end >= self._last[r]:
            # recomputed when asked (see the module)
            self._stale.add(r)

    def moved(self, ranks: Iterable[int]) -> None:
        """The end of a job holding ``ranks`` moved: their last ends are recomputed."""
        self._stale.update(ranks)

    def _refresh(self) -> None:
        if self._stale:
            end_of = self._end_of
            for r in self._stale:
                self._move(r, max(end_of(j) for j in self.owners[r]))
            self._stale.clear()

    def last_ends(self) -> Mapping[int, float]:
        """rank -> when its last allocation ends (ranks holding nothing are absent)."""
        self._refresh()
        return self._last

    def idle_by(self, when: float, down: Container[int]) -> list[int]:
        """The ranks, not ``down``, whose every allocation ends by ``when`` (the ranks
        holding nothing are not among them)."""
        self._refresh()
        order = self._order
        return [r for _end, r in order[:bisect_right(order, (when, _INF))] if r not in down]

    def times(self, begin: float, down: Container[int], static: IDSet | None
              ) -> Iterator[tuple[float, int]]:
        """(when it becomes idle, rank) of the ranks holding something with a known end,
        not ``down`` and in ``static`` (None: any), by time; a time before ``begin`` is
        ``begin`` (an overdue job is taken to end now). Lazy: read it only while the
        pool does not change."""
        self._refresh()
        for end, r in self._order:
            if end == _INF:
                return
            if r in down or (static is not None and r not in static):
                continue
            yield (end if end > begin else begin), r


def released_room(parts: Mapping[int, Part], nfc: dict[int, int], k: int, per_node: bool,
                  down: set[int], static: IDSet | None) -> int:
    """Give ``parts``' cores back to the free-core counts ``nfc``; the room they add for
    the pool's walk: nodes reaching ``k`` free cores (``per_node``), else slots of ``k``
    cores."""
    room = 0
    for r, part in parts.items():
        a = nfc[r]
        b = nfc[r] = a + len(part[0])
        if r in down or (static is not None and r not in static):
            continue
        if per_node:
            if a < k <= b:
                room += 1
        else:
            room += b // k - a // k
    return room
