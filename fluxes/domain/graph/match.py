"""Match a resources tree against a resource graph over a time window (Fluxion's semantics).

For each wanted vertex (a :class:`~fluxes.domain.graph.wants.Want`) the
matcher looks, below the vertex chosen for its parent (from the root for the
top level), for vertices of its type, descending through vertices of other
types; each candidate must be free enough and hold the wanted children
itself.  Candidates come in the policy's order and the first that fit are
taken:

* ``low`` / ``high``: lower / higher ids first at every level (Fluxion's
  ``low``, ``high``; ``lonode`` / ``hinode`` and today's ``first-fit`` map to
  them);
* ``first``: graph order;
* ``best`` / ``worst``: the subtrees with the fewest / most free units of
  the request's main type (cores when it has any) first: pack or spread.

A count range takes the most that fits (``largest accepted value``); a
``slot`` is its children repeated ``count`` times.  A slot holding only
resources below the hosts (cores, gpus, memory, sockets...) that is looked
for above the hosts puts each copy on one host, filling a host before the
next (a task slot never spans nodes).  An exclusive vertex must be untouched
during the window and is taken with its whole subtree; a shared leaf (a
memory or ssd pool outside a slot) may take part of a vertex.

Everything here is one attempt at one window; :mod:`fluxes.domain.graph.traverser`
chooses the windows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from fluxes.domain.graph.model import ResourceGraph, unit_bytes
from fluxes.domain.graph.state import GraphState, Hold
from fluxes.domain.graph.wants import Want
from fluxes.formats.counts import Count

__all__ = ["EXCLUSIVE", "MANY", "MATCH_POLICIES", "PASS", "SHARED", "Matcher", "Need",
           "compile_wants", "make_hold", "missing_types"]

#: Stands for "no upper bound" in counts.
MANY: Final = 1 << 62

#: Policies the matcher knows.
MATCH_POLICIES: Final = ("low", "high", "first", "best", "worst")

_GB: Final = 1 << 30

#: Kinds of picks: part of a vertex, a whole subtree, passed through.
SHARED: Final = 0
EXCLUSIVE: Final = 1
PASS: Final = 2
_SHARED: Final = SHARED
_EXCL: Final = EXCLUSIVE
_PASS: Final = PASS


class Need:
    """A :class:`Want` compiled for one graph (counts in graph units, pruning needs)."""

    __slots__ = ("children", "cols", "count", "exclusive", "hi", "leaf", "lo", "node_bound",
                 "per", "primary", "slot", "type")

    def __init__(self, want: Want, graph: ResourceGraph) -> None:
        """Compile *want* (and its children) for *graph*."""
        self.type = want.type
        self.slot = want.is_slot
        self.exclusive = want.exclusive
        count = want.count
        if want.unit is not None:
            # Sizes in another unit: scale the minimum (a range of bytes would
            # rarely land on the graph's granules anyway).
            graph_unit = unit_bytes(graph.type_units.get(want.type, "")) or _GB
            scaled = -(-count.min * want.unit // graph_unit)
            count = Count(max(scaled, 1), max(scaled, 1))
        self.count = count
        self.lo = count.min
        self.hi = MANY if count.max is None else count.max
        self.children = tuple(Need(c, graph) for c in want.children)
        self.leaf = not self.children and not self.slot
        per: dict[str, int] = {}
        if self.leaf:
            per[self.type] = 1
        for child in self.children:
            for t, k in child.total().items():
                per[t] = per.get(t, 0) + k
        #: units of each type one candidate (one slot copy) needs in its subtree
        self.per = tuple(per.items())
        kinds = self.leaf_types()
        self.primary = "core" if "core" in kinds else (kinds[0] if kinds else self.type)
        self.node_bound = (self.slot and bool(graph.hosts)
                           and not (self.all_types() & graph.upper_types))
        #: mode -> ((column, units), ...) built on first use against a state
        self.cols: dict[str, tuple[tuple[list[int], int], ...]] = {}

    def total(self) -> dict[str, int]:
        """Units of each type the least count of this vertex needs."""
        if self.leaf:
            return {self.type: self.lo}
        return {t: k * self.lo for t, k in self.per}

    def leaf_types(self) -> list[str]:
        """Types of the leaves below (or of this vertex when it is a leaf), in order."""
        if self.leaf:
            return [self.type]
        out: list[str] = []
        for child in self.children:
            for t in child.leaf_types():
                if t not in out:
                    out.append(t)
        return out

    def all_types(self) -> set[str]:
        """Every resource type in this subtree of the request (slots excluded)."""
        out = set() if self.slot else {self.type}
        for child in self.children:
            out |= child.all_types()
        return out


def make_hold(g: ResourceGraph, picks: Sequence[tuple[int, int, int]], jobid: int,
              start: float, end: float, reserved: bool) -> Hold:
    """The :class:`Hold` of *picks*: ``(vertex, units, kind)`` with kind 0 shared (part of a
    vertex), 1 exclusive (its whole subtree), 2 passed through (nothing taken)."""
    sizes, parent, types = g.sizes, g.parent, g.types
    shown: dict[int, tuple[int, bool]] = {}
    amounts: dict[int, int] = {}
    for v, amount, kind in picks:
        if kind == _EXCL:
            for u in range(v, g.end[v]):
                shown[u] = (sizes[u], True)
                amounts[u] = sizes[u]
        elif kind == _SHARED:
            have = amounts.get(v, 0) + amount
            amounts[v] = have
            shown[v] = (have, False)
        elif v not in shown:
            shown[v] = (1, False)
    for v, _, _ in picks:
        u = parent[v]
        while u >= 0 and u not in shown:
            shown[u] = (1, False)
            u = parent[u]
    totals: dict[str, int] = {}
    for v, a in amounts.items():
        t = types[v]
        totals[t] = totals.get(t, 0) + a
    return Hold(jobid, start, end, shown, amounts, reserved, totals)


def compile_wants(wants: Sequence[Want], graph: ResourceGraph) -> tuple[Need, ...]:
    """The compiled form of a resources tree for *graph*."""
    return tuple(Need(w, graph) for w in wants)


def missing_types(needs: Sequence[Need], graph: ResourceGraph) -> list[str]:
    """Types the request names that the graph has no vertex of."""
    found: set[str] = set()
    for need in needs:
        found |= need.all_types()
    return sorted(t for t in found if t not in graph.type_units)


class Matcher:
    """One attempt to match a request at one window (see the module docstring).

    *mode* is ``now`` (the window starts now: prune with what is free now),
    ``later`` (a future window: prune with what is up) or ``static``
    (satisfiability: an empty graph, every vertex up).  *allowed* restricts
    the hosts to those ranks (a constraint); *skip* is a job whose own
    reservation does not count.
    """

    __slots__ = (
        "agg",
        "allowed",
        "end",
        "g",
        "mode",
        "now",
        "picks",
        "policy",
        "skip",
        "st",
        "start",
        "taken",
        "tbusy",
        "texcl",
    )

    def __init__(self, state: GraphState, start: float, end: float, now: float, mode: str,
                 policy: str = "low", skip: int | None = None,
                 allowed: frozenset[int] | None = None) -> None:
        """Prepare an attempt; :meth:`run` does it."""
        self.st = state
        self.g = state.g
        self.start = start
        self.end = end
        self.now = now
        self.mode = mode
        self.policy = policy
        self.skip = skip
        self.allowed = allowed
        self.agg = (state.free if mode == "now" else state.upcap if mode == "later"
                    else state.g.cap)
        self.picks: list[tuple[int, int, int]] = []
        self.taken: dict[int, int] = {}
        self.tbusy: dict[int, int] = {}
        self.texcl: set[int] = set()

    # -- the attempt ---------------------------------------------------------------

    def run(self, needs: Sequence[Need]) -> bool:
        """Try to match every top-level need; the picks stay in :attr:`picks` on success."""
        if self._wants(-1, needs, 1):
            return True
        self._rollback(0)
        return False

    def hold(self, jobid: int, reserved: bool) -> Hold:
        """The :class:`Hold` of the picks (whole subtrees for exclusive picks)."""
        return make_hold(self.g, self.picks, jobid, self.start, self.end, reserved)

    # -- picks ---------------------------------------------------------------------

    def _pick(self, v: int, amount: int, kind: int) -> None:
        """Take *amount* of *v* tentatively (a pass-through takes nothing)."""
        self.picks.append((v, amount, kind))
        if amount:
            self.taken[v] = self.taken.get(v, 0) + amount
        tbusy = self.tbusy
        parent = self.g.parent
        u = v
        while u >= 0:
            tbusy[u] = tbusy.get(u, 0) + 1
            u = parent[u]
        if kind == _EXCL:
            self.texcl.add(v)

    def _rollback(self, mark: int) -> None:
        """Undo the picks after the first *mark* ones."""
        picks = self.picks
        tbusy = self.tbusy
        parent = self.g.parent
        while len(picks) > mark:
            v, amount, kind = picks.pop()
            if amount:
                self.taken[v] -= amount
            u = v
            while u >= 0:
                tbusy[u] -= 1
                u = parent[u]
            if kind == _EXCL:
                self.texcl.discard(v)

    # -- availability ----------------------------------------------------------------

    def _avail(self, v: int) -> int:
        """Units of *v* free for this attempt."""
        free = self.g.sizes[v] - self.taken.get(v, 0)
        if self.mode == "static":
            return free
        st = self.st
        return (free - st.alloc_units(v, self.start, self.now)
                - st.resv_units(v, self.start, self.end, self.skip))

    def _whole(self, v: int) -> bool:
        """Whether *v*'s whole subtree is free for this attempt (exclusive take)."""
        if self.tbusy.get(v, 0):
            return False
        if self.mode == "static":
            return True
        st = self.st
        return not (st.ndown[v] or st.alloc_busy(v, self.start, self.now)
                    or st.resv_busy(v, self.start, self.end, self.skip))

    # -- candidates ------------------------------------------------------------------

    def _cols(self, need: Need) -> tuple[tuple[list[int], int], ...]:
        """*need*'s per-candidate units as (aggregate column, units) pairs for this mode."""
        cols = need.cols.get(self.mode)
        if cols is None:
            agg = self.agg
            cols = tuple((agg[t], k) for t, k in need.per)
            need.cols[self.mode] = cols
        return cols

    def _kids(self, v: int, primary: str) -> list[int]:
        """Children of *v* in the policy's order."""
        policy = self.policy
        g = self.g
        if policy == "low":
            return g.kids_low(v)
        if policy == "high":
            return g.kids_high(v)
        if policy == "first":
            return g.children[v]
        col = self.agg.get(primary)
        ids = g.ids
        if col is None:
            return g.kids_low(v)
        if policy == "best":
            return sorted(g.children[v], key=lambda c: (col[c], ids[c]))
        return sorted(g.children[v], key=lambda c: (-col[c], ids[c]))

    def _candidates(self, scope: int, need: Need, hosts: bool) -> Iterator[int]:
        """Vertices of *need*'s type (or hosts) below *scope* (-1: the root too), in order.

        Subtrees that are drained, outside the allowed ranks, taken
        exclusively in this attempt, or without enough units for one
        candidate are skipped.
        """
        g = self.g
        types, host, ranks = g.types, g.host, g.ranks
        cols = self._cols(need)
        down = None if self.mode == "static" else self.st.down
        allowed = self.allowed
        texcl = self.texcl
        want = need.type
        primary = need.primary
        kids = self._kids
        # One column (the usual single-type need) is tested inline: this loop
        # is where matching spends its time, skipping full subtrees.
        col0, k0 = cols[0] if cols else ([], 0)
        rest = cols[1:]
        stack = [iter((0,)) if scope < 0 else iter(kids(scope, primary))]
        while stack:
            for u in stack[-1]:
                if k0 and col0[u] < k0:
                    continue
                if rest and any(col[u] < k for col, k in rest):
                    continue
                if down is not None and down[u]:
                    continue
                if texcl and u in texcl:
                    continue
                is_host = host[u] == u
                if allowed is not None and is_host and ranks[u] not in allowed:
                    continue
                if is_host if hosts else types[u] == want:
                    yield u
                elif not (hosts and host[u] >= 0):
                    stack.append(iter(kids(u, primary)))
                    break
            else:
                stack.pop()

    # -- needs -----------------------------------------------------------------------

    def _wants(self, scope: int, needs: Sequence[Need], mult: int) -> bool:
        """Match every need below *scope* (each count multiplied by *mult*)."""
        for need in needs:
            ok = self._slot(scope, need, mult) if need.slot else self._want(scope, need, mult)
            if not ok:
                return False
        return True

    def _want(self, scope: int, need: Need, mult: int) -> bool:
        """Take ``count × mult`` (the most that fits, for a range) of *need* below *scope*."""
        mark = len(self.picks)
        lo = need.lo * mult
        hi = min(need.hi * mult, MANY)
        got = self._gather(scope, need, hi)
        if got < lo:
            self._rollback(mark)
            return False
        if lo == hi or got >= hi:
            return True
        best = need.count.largest_at_most(got // mult)
        if best is not None and best * mult == got:
            return True
        self._rollback(mark)
        target = (best or need.lo) * mult
        return self._gather(scope, need, target) >= target

    def _gather(self, scope: int, need: Need, target: int) -> int:
        """Pick candidates in order until *target* units (or candidates) are taken."""
        got = 0
        sizes = self.g.sizes
        for c in self._candidates(scope, need, False):
            if need.leaf:
                if need.exclusive:
                    size = sizes[c]
                    if not self._whole(c) or self._avail(c) < size:
                        continue
                    self._pick(c, size, _EXCL)
                    got += size
                else:
                    free = self._avail(c)
                    if free <= 0:
                        continue
                    take = min(free, target - got)
                    self._pick(c, take, _SHARED)
                    got += take
            else:
                # another vertex of the same kind, when siblings ask for one each
                if self.tbusy.get(c, 0) or (need.exclusive and not self._whole(c)):
                    continue
                mark = len(self.picks)
                if not self._wants(c, need.children, 1):
                    self._rollback(mark)
                    continue
                if need.exclusive:
                    self._rollback(mark)  # the whole subtree is taken instead
                    self._pick(c, sizes[c], _EXCL)
                else:
                    self._pick(c, 0, _PASS)
                got += 1
            if got >= target:
                break
        return got

    def _slot(self, scope: int, need: Need, mult: int) -> bool:
        """Match ``count × mult`` copies of a slot's children (the most that fit, for a range)."""
        if need.node_bound and (scope < 0 or self.g.host[scope] < 0):
            return self._slot_hosts(scope, need, mult)
        if need.lo == need.hi:
            return self._wants(scope, need.children, mult * need.lo)
        top = 0 if scope < 0 else scope
        bound = min(need.hi, MANY)
        for col, k in self._cols(need):
            bound = min(bound, col[top] // max(k * mult, 1))
        best = need.count.largest_at_most(bound)
        if best is None:
            return False
        mark = len(self.picks)
        if self._wants(scope, need.children, mult * best):
            return True
        self._rollback(mark)
        if best == need.lo or not self._try(scope, need, mult, need.lo):
            return False
        # The most copies that fit (fewer copies always fit when more do):
        # halve the gap while a valid count lies in its lower half, else
        # step down through the valid counts.
        good, bad = need.lo, best
        while True:
            mid = need.count.largest_at_most((good + bad) // 2)
            if mid is None or mid <= good:
                mid = need.count.largest_at_most(bad - 1)
                if mid is None or mid <= good:
                    break
            if self._try(scope, need, mult, mid):
                good = mid
            else:
                bad = mid
        return self._wants(scope, need.children, mult * good)

    def _try(self, scope: int, need: Need, mult: int, copies: int) -> bool:
        """Whether *copies* copies of a slot's children fit (nothing stays picked)."""
        mark = len(self.picks)
        ok = self._wants(scope, need.children, mult * copies)
        self._rollback(mark)
        return ok

    def _slot_hosts(self, scope: int, need: Need, mult: int) -> bool:
        """Slot copies one host each: fill a host, then the next, in the policy's order."""
        mark = len(self.picks)
        lo = need.lo * mult
        hi = min(need.hi * mult, MANY)
        got = self._fill_hosts(scope, need, hi)
        if got < lo:
            self._rollback(mark)
            return False
        if lo == hi or got >= hi:
            return True
        best = need.count.largest_at_most(got // mult)
        if best is not None and best * mult == got:
            return True
        self._rollback(mark)
        target = (best or need.lo) * mult
        return self._fill_hosts(scope, need, target) >= target

    def _fill_hosts(self, scope: int, need: Need, target: int) -> int:
        """Put up to *target* slot copies on hosts below *scope*; how many were placed."""
        got = 0
        cols = self._cols(need)
        for h in self._candidates(scope, need, True):
            room = target - got
            for col, k in cols:
                room = min(room, col[h] // k)
            while room >= 1:
                mark = len(self.picks)
                if self._wants(h, need.children, room):
                    got += room
                    break
                self._rollback(mark)
                room = room - 1 if room <= 4 else room // 2
            if got >= target:
                break
        return got
