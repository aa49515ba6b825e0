"""What is held on a resource graph, now and over time: each vertex's planner.

A :class:`Hold` is what one job holds, as Fluxion gives it: per vertex the
units it takes of the vertices its jobspec names (``amounts``: what its R
lists and what it is charged for) and what it shows (``shown``: those
vertices with the amount printed and whether it holds them exclusively, and
their ancestors, shown shared).  A vertex held exclusively is closed to
every other job *with its whole subtree*, but the hold lists only what the
jobspec named below it: ``blocked`` (units of every vertex closed to
others, whole subtrees included) and ``touched`` (every vertex shown or
closed) are what the planner keeps.

:class:`GraphState` keeps, per vertex:

* allocations (they hold now, until released; their end time is what the
  planner assumes): units used, and the jobs touching the vertex with their
  end times;
* reservations (future windows): spans ``(start, end, units, jobid)``;
* drained (down) flags, set on whole host subtrees;
* per type, the units free now in each subtree (``free``, up vertices only)
  and the units of up vertices (``upcap``): the matcher prunes with them.

A vertex "touched" by a job (it or a descendant is taken) cannot be taken
exclusively by another job whose window overlaps.  Availability questions
take a window ``[start, end)``: allocations count when the window starts
now (``start <= now``) or before they end; reservations when they overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluxes.domain.graph.model import ResourceGraph

__all__ = ["GraphState", "Hold"]


@dataclass(slots=True)
class Hold:
    """What one job holds (an allocation, or a reservation when ``reserved``)."""

    jobid: int
    start: float
    end: float
    #: vertex -> (amount shown, exclusive): everything touched, ancestors included
    shown: dict[int, tuple[int, bool]]
    #: vertex -> units taken (vertices taken, not those only passed through)
    amounts: dict[int, int]
    reserved: bool = False
    #: units taken per type (the planner tallies releases with them)
    totals: dict[str, int] = field(default_factory=dict)
    #: vertex -> units closed to other jobs (amounts, and whole exclusive subtrees)
    blocked: dict[int, int] = field(default_factory=dict)
    #: every vertex shown or closed (no other job may take these exclusively)
    touched: tuple[int, ...] = ()


class GraphState:
    """The allocations, reservations and drains of one graph (see the module docstring)."""

    __slots__ = ("amts", "down", "free", "g", "holds", "kid_types", "ndown", "resv", "upcap",
                 "used")

    def __init__(self, graph: ResourceGraph) -> None:
        """Everything free and up."""
        n = len(graph)
        self.g = graph
        self.used = [0] * n
        #: per vertex, jobid -> end of each allocation touching it (None: none)
        self.holds: list[dict[int, float] | None] = [None] * n
        #: per vertex, jobid -> units of each allocation taking some of it
        self.amts: list[dict[int, int] | None] = [None] * n
        #: vertex -> reservation spans (start, end, units, jobid) touching it
        self.resv: dict[int, list[tuple[float, float, int, int]]] = {}
        self.down = [False] * n
        #: down hosts in each subtree
        self.ndown = [0] * n
        # Lists are changed in place, never replaced: the matcher keeps references.
        self.free = {t: col[:] for t, col in graph.cap.items()}
        self.upcap = {t: col[:] for t, col in graph.cap.items()}
        #: per vertex, the types of its direct children (where a slot copy may live)
        types = graph.types
        self.kid_types = [frozenset(types[c] for c in kids) for kids in graph.children]

    # -- allocations and reservations ----------------------------------------------

    def commit(self, hold: Hold) -> None:
        """Record *hold*: as an allocation (held now) or a reservation."""
        jobid = hold.jobid
        if hold.reserved:
            resv = self.resv
            amounts = hold.blocked
            span = (hold.start, hold.end)
            for v in hold.touched:
                spans = resv.get(v)
                entry = (span[0], span[1], amounts.get(v, 0), jobid)
                if spans is None:
                    resv[v] = [entry]
                else:
                    spans.append(entry)
            return
        holds = self.holds
        end = hold.end
        for v in hold.touched:
            h = holds[v]
            if h is None:
                holds[v] = {jobid: end}
            else:
                h[jobid] = end
        self._take(hold, 1)

    def set_end(self, hold: Hold, end: float) -> None:
        """Move the end of allocation *hold* (held in this state) to *end*."""
        hold.end = end
        holds = self.holds
        for v in hold.touched:
            h = holds[v]
            if h is not None and hold.jobid in h:
                h[hold.jobid] = end

    def release(self, hold: Hold) -> None:
        """Forget *hold* (allocation or reservation)."""
        jobid = hold.jobid
        if hold.reserved:
            resv = self.resv
            for v in hold.touched:
                spans = resv.get(v)
                if spans is None:
                    continue
                kept = [s for s in spans if s[3] != jobid]
                if kept:
                    resv[v] = kept
                else:
                    del resv[v]
            return
        holds = self.holds
        for v in hold.touched:
            h = holds[v]
            if h is not None:
                h.pop(jobid, None)
                if not h:
                    holds[v] = None
        self._take(hold, -1)

    def _take(self, hold: Hold, sign: int) -> None:
        """Add (sign 1) or give back (-1) *hold*'s units, and the free totals above them."""
        g = self.g
        parent, types = g.parent, g.types
        used, amts, down, free = self.used, self.amts, self.down, self.free
        jobid = hold.jobid
        for v, a in hold.blocked.items():
            if not a:
                continue
            used[v] += sign * a
            am = amts[v]
            if sign > 0:
                if am is None:
                    amts[v] = {jobid: a}
                else:
                    am[jobid] = a
            elif am is not None:
                am.pop(jobid, None)
                if not am:
                    amts[v] = None
            if down[v]:
                continue  # drained units are not in the free totals
            col = free[types[v]]
            delta = sign * a
            u = v
            while u >= 0:
                col[u] -= delta
                u = parent[u]

    # -- availability over a window ---------------------------------------------------------

    def alloc_units(self, v: int, start: float, now: float) -> int:
        """Units of *v* allocations hold at *start* (all of them when it is now)."""
        if start <= now:
            return self.used[v]
        am = self.amts[v]
        if not am:
            return 0
        ends = self.holds[v]
        assert ends is not None
        return sum(a for j, a in am.items() if ends[j] > start)

    def alloc_busy(self, v: int, start: float, now: float) -> bool:
        """Whether an allocation touches *v* at *start* (any does now)."""
        h = self.holds[v]
        if not h:
            return False
        if start <= now:
            return True
        return any(end > start for end in h.values())

    def resv_units(self, v: int, start: float, end: float, skip: int | None) -> int:
        """Most units of *v* the reservations (but *skip*'s) hold at once in ``[start, end)``."""
        spans = self.resv.get(v)
        if not spans:
            return 0
        hit = [(s, e, a) for s, e, a, j in spans if a and s < end and start < e and j != skip]
        if len(hit) <= 1:
            return hit[0][2] if hit else 0
        best = 0
        for point in {max(s, start) for s, _, _ in hit}:
            total = sum(a for s, e, a in hit if s <= point < e)
            best = max(best, total)
        return best

    def resv_busy(self, v: int, start: float, end: float, skip: int | None) -> bool:
        """Whether a reservation (but *skip*'s) touches *v* during ``[start, end)``."""
        spans = self.resv.get(v)
        if not spans:
            return False
        return any(s < end and start < e and j != skip for s, e, _, j in spans)

    def conflict(self, hold: Hold, now: float) -> int | None:
        """A vertex *hold* cannot have over its window (another job holds it, or it is
        down), or None when the hold fits (``update``: an R given, not matched).

        Vertices it shows exclusively, and those closed below them, must be
        untouched by others; what it takes shared must be free in those
        amounts; a vertex it passes through must not be closed by another.
        """
        start, end, sizes, shown = hold.start, hold.end, self.g.sizes, hold.shown
        for v in hold.touched:
            if self.down[v]:
                return v
            excl = shown[v][1] if v in shown else True  # below an exclusive vertex: closed
            if excl:
                if self.alloc_busy(v, start, now) or self.resv_busy(v, start, end, None):
                    return v
                continue
            need = max(hold.amounts.get(v, 0), 1)
            if (self.alloc_units(v, start, now) + self.resv_units(v, start, end, None) + need
                    > sizes[v]):
                return v
        return None

    # -- drains ------------------------------------------------------------------------------

    def set_down(self, host: int, down: bool) -> bool:
        """Drain (or undrain) the subtree of *host*; False if it already was so."""
        g = self.g
        if self.down[host] == down:
            return False
        span = g.subtree(host)
        flags = self.down
        for u in span:
            flags[u] = down
        delta = 1 if down else -1
        self.ndown[host] += delta
        for a in g.ancestors(host):
            self.ndown[a] += delta
        self._recount(host)
        return True

    def _recount(self, top: int) -> None:
        """Recompute the free and up totals of *top*'s subtree, and carry the change up."""
        g = self.g
        lo, hi = top, g.end[top]
        before = {t: (self.free[t][top], self.upcap[t][top]) for t in self.free}
        for col in (*self.free.values(), *self.upcap.values()):
            col[lo:hi] = [0] * (hi - lo)
        types, sizes, parent, used, down = g.types, g.sizes, g.parent, self.used, self.down
        free, upcap = self.free, self.upcap
        names = list(free)
        for u in range(hi - 1, lo - 1, -1):
            if not down[u]:
                t = types[u]
                free[t][u] += sizes[u] - used[u]
                upcap[t][u] += sizes[u]
            if u != top:
                p = parent[u]
                for t in names:
                    f = free[t][u]
                    if f:
                        free[t][p] += f
                    c = upcap[t][u]
                    if c:
                        upcap[t][p] += c
        for t, (f0, c0) in before.items():
            df = free[t][top] - f0
            dc = upcap[t][top] - c0
            if df or dc:
                for a in g.ancestors(top):
                    free[t][a] += df
                    upcap[t][a] += dc
