"""Match a resources tree against a resource graph over a time window (Fluxion's semantics).

Fluxion's three rules (docs/resource-graph.md):

1. the top-level request is looked for from the root, descending through
   vertices of other types (levels may be omitted above the first match);
   below a matched vertex only its direct children match;
2. a ``slot`` is its children repeated ``count`` times, each copy below one
   *home*: a vertex with children of every type the slot holds (the matched
   parent itself, else one of its direct children; at the top, searched for
   from the root), filling a home before the next;
3. an exclusive vertex must be untouched during the window; it closes its
   whole subtree to other jobs, but the hold lists only what the jobspec
   named below it (all of it when it named nothing below); an exclusive
   pool vertex (memory, ssd) is taken whole,
   per slot copy (granules), while a shared leaf may take part of a vertex.

Candidates come in the policy's order and the first that fit are taken:

* ``low`` / ``high``: lower / higher ids first at every level;
  ``lonodex`` / ``hinodex`` the same with every node taken exclusively
  (and held whole, as Fluxion's node-exclusive policies list it);
* ``first``: graph order;
* ``best`` / ``worst``: the subtrees with the fewest / most free units of
  the request's main type (cores when it has any) first: pack or spread;
* ``locality`` (Fluxion's locality-aware policy): at the top, the
  candidates that qualify (could take the request's children now) are
  grouped into runs of consecutive ids, and the longest run is used first
  (ties: the run with the higher ids), so a job lands on contiguous
  resources; below the top, higher ids first, as ``high``;
* ``variation`` (Fluxion's variation-aware policy): at every level, and
  across the whole graph at the top, the vertices with the lowest
  ``perf_class`` property first (a missing, unreadable or out-of-range
  class counts as 9999, the worst), graph order among equals.

A count range takes the most that fits (``largest accepted value``).
Trees read from today's plain Requests (``Want.loose``) keep today's pool's
reading: counts gathered anywhere below the parent, a slot copy anywhere on
one host, and an exclusive vertex naming nothing below holds its subtree.

Everything here is one attempt at one window; :mod:`fluxes.domain.graph.traverser`
chooses the windows.

Why one module: the compiled request (:class:`Need`), the hold it gives
(:func:`make_hold`) and the :class:`Matcher` whose methods share one
attempt's tentative picks and the policy's orders are one algorithm;
split, each part would pass that state to the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from fluxes.domain.graph.model import ResourceGraph, unit_bytes
from fluxes.domain.graph.state import GraphState, Hold
from fluxes.domain.graph.wants import Want
from fluxes.formats.counts import Count

__all__ = ["EXCLUSIVE", "MANY", "MATCH_POLICIES", "PASS", "SHARED", "WORST_CLASS", "Matcher",
           "Need", "PruneSpec", "compile_wants", "make_hold", "missing_types", "parse_prune",
           "perf_class"]

#: Stands for "no upper bound" in counts.
MANY: Final = 1 << 62

#: Policies the matcher knows (``lonodex`` / ``hinodex``: ``low`` / ``high`` with every
#: node taken exclusively, Fluxion's node-exclusive policies).
MATCH_POLICIES: Final = ("low", "high", "first", "best", "worst", "lonode", "hinode",
                         "lonodex", "hinodex", "locality", "variation")
#: The worst performance class (Fluxion's default for a vertex without a readable one).
WORST_CLASS: Final = 9999
_LEADING_INT: Final = re.compile(r"\s*([+-]?\d+)")
_NODEX: Final = {"lonodex": "low", "hinodex": "high"}
#: node-centric policies: nodes ranked by the ids of what they would give
_NODE_CENTRIC: Final = {"lonode": "low", "hinode": "high"}

_GB: Final = 1 << 30

#: Prune filters: ((low-level type, the types of the vertices that prune by it, or None
#: for all of them), ...); None: every type at every vertex.
PruneSpec = tuple[tuple[str, frozenset[str] | None], ...]
Cols = tuple[tuple[list[int], int, frozenset[str] | None], ...]

#: Kinds of picks: part of a vertex, a whole subtree, passed through.
SHARED: Final = 0
EXCLUSIVE: Final = 1
PASS: Final = 2
_SHARED: Final = SHARED
_EXCL: Final = EXCLUSIVE
_PASS: Final = PASS


class Need:
    """A :class:`Want` compiled for one graph (counts in graph units, pruning needs)."""

    __slots__ = ("children", "cols", "count", "exclusive", "granular", "hi", "kinds", "leaf",
                 "lo", "loose", "per", "primary", "sizes", "slot", "type")

    def __init__(self, want: Want, graph: ResourceGraph) -> None:
        """Compile *want* (and its children) for *graph*."""
        self.type = want.type
        self.slot = want.is_slot
        self.exclusive = want.exclusive
        self.loose = want.loose
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
        #: the slot's child types: a slot copy lives below one vertex with children of each
        self.kinds = frozenset(c.type for c in self.children)
        #: an exclusive leaf of a type with vertices larger than one unit: taken in whole
        #: vertices, per slot copy (Fluxion's granules)
        self.granular = (self.leaf and self.exclusive and not self.loose
                         and _has_pools(graph, self.type))
        #: mode -> ((column, units), ...) built on first use against a state
        self.cols: dict[object, tuple[tuple[list[int], int, frozenset[str] | None], ...]] = {}
        #: mode -> ((column, units), ...): what one candidate needs, to size slot fills
        self.sizes: dict[str, tuple[tuple[list[int], int], ...]] = {}

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


def _has_pools(graph: ResourceGraph, kind: str) -> bool:
    """Whether *graph* has a vertex of type *kind* holding more than one unit."""
    n = graph.total(kind)
    return n > sum(1 for t in graph.types if t == kind) if n else False


def parse_prune(text: str) -> PruneSpec:
    """Fluxion's ``--prune-filters`` ``HL:LL[,HL:LL...]`` (``ALL`` as HL: every vertex
    type) as a :data:`PruneSpec`; empty (as Fluxion takes ``--prune-filters=""``) or
    ``none``: no pruning.  ValueError if malformed."""
    if text.strip().lower() in ("", "none"):
        return ()
    where: dict[str, set[str] | None] = {}
    for item in text.split(","):
        high, sep, low = item.strip().partition(":")
        if not sep or not high or not low or ":" in low:
            raise ValueError(f"prune filter {item.strip()!r}: expected HL:LL (e.g. ALL:core)")
        have = where.get(low, set())
        if high == "ALL" or have is None:
            where[low] = None
        else:
            where[low] = have | {high}
    return tuple(sorted((low, None if high is None else frozenset(high))
                        for low, high in where.items()))


def perf_class(props: dict[str, str] | None) -> int:
    """A vertex's ``perf_class`` property as the variation policy ranks it: the leading
    integer of its value (as C's ``stoi`` reads it), :data:`WORST_CLASS` when there is
    none or it is outside 0..9999."""
    text = (props or {}).get("perf_class")
    found = _LEADING_INT.match(text) if text is not None else None
    if found is None:
        return WORST_CLASS
    value = int(found.group(1))
    return value if 0 <= value <= WORST_CLASS else WORST_CLASS


def make_hold(g: ResourceGraph, picks: Sequence[tuple[int, int, int]], jobid: int,
              start: float, end: float, reserved: bool) -> Hold:
    """The :class:`Hold` of *picks*: ``(vertex, units, kind)`` with kind 0 shared (part of a
    vertex), 1 exclusive (the vertex, its subtree closed to others), 2 passed through.

    Only picked vertices (what the jobspec named) and their ancestors are
    shown and held; an exclusive pick closes its whole subtree (``blocked``).
    """
    sizes, parent, types = g.sizes, g.parent, g.types
    shown: dict[int, tuple[int, bool]] = {}
    amounts: dict[int, int] = {}
    closed: list[int] = []
    for v, amount, kind in picks:
        if kind == _EXCL:
            shown[v] = (amount, True)
            amounts[v] = amount
            closed.append(v)
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
    blocked = dict(amounts)
    touched = set(shown)
    gend = g.end
    for v in closed:
        for u in range(v, gend[v]):
            blocked[u] = sizes[u]
            touched.add(u)
    totals: dict[str, int] = {}
    for v, a in blocked.items():
        t = types[v]
        totals[t] = totals.get(t, 0) + a
    return Hold(jobid, start, end, shown, amounts, reserved, totals, blocked,
                tuple(sorted(touched)))


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
    reservation does not count.  *prune* (resource-query's ``-p``) says by
    which types' free units subtrees are skipped early, and at which vertex
    types; the default prunes by every type everywhere, ``()`` never prunes:
    the result is the same either way, only the work differs.
    """

    __slots__ = (
        "agg",
        "allowed",
        "centric",
        "end",
        "g",
        "mode",
        "nodex",
        "now",
        "picks",
        "policy",
        "prune",
        "skip",
        "st",
        "start",
        "taken",
        "tbusy",
        "texcl",
    )

    def __init__(self, state: GraphState, start: float, end: float, now: float, mode: str,
                 policy: str = "low", skip: int | None = None,
                 allowed: frozenset[int] | None = None, prune: PruneSpec | None = None
                 ) -> None:
        """Prepare an attempt; :meth:`run` does it."""
        self.st = state
        self.g = state.g
        self.start = start
        self.end = end
        self.now = now
        self.mode = mode
        self.nodex = policy in _NODEX
        self.centric = policy in _NODE_CENTRIC
        self.policy = _NODEX.get(policy, _NODE_CENTRIC.get(policy, policy))
        self.skip = skip
        self.allowed = allowed
        self.prune = prune
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

    def _cols(self, need: Need) -> Cols:
        """*need*'s prune filters for this mode: (aggregate column, units one candidate
        needs, the vertex types it prunes at or None for all), as the filters allow."""
        key = (self.mode, self.prune)
        cols = need.cols.get(key)
        if cols is None:
            agg = self.agg
            prune = self.prune
            if prune is None:
                cols = tuple((agg[t], k, None) for t, k in need.per)
            else:
                where = dict(prune)
                cols = tuple((agg[t], k, where[t]) for t, k in need.per if t in where)
            need.cols[key] = cols
        return cols

    def _sizes(self, need: Need) -> tuple[tuple[list[int], int], ...]:
        """*need*'s per-candidate units as (aggregate column, units) pairs for this mode:
        how many slot copies a home may take at most (not a filter: always known)."""
        sizes = need.sizes.get(self.mode)
        if sizes is None:
            agg = self.agg
            sizes = need.sizes[self.mode] = tuple((agg[t], k) for t, k in need.per)
        return sizes

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
        if policy == "locality":
            return g.kids_high(v)
        if policy == "variation":
            props = g.props
            return sorted(g.children[v], key=lambda c: perf_class(props[c]))
        col = self.agg.get(primary)
        ids = g.ids
        if col is None:
            return g.kids_low(v)
        if policy == "best":
            return sorted(g.children[v], key=lambda c: (col[c], ids[c]))
        return sorted(g.children[v], key=lambda c: (-col[c], ids[c]))

    def _ok(self, u: int, cols: Cols) -> bool:
        """Whether *u* may be visited: enough units below (as the prune filters tell),
        up, not taken, allowed."""
        for col, k, where in cols:
            if col[u] < k and (where is None or self.g.types[u] in where):
                return False
        if self.mode != "static" and self.st.down[u]:
            return False
        if u in self.texcl:
            return False
        g = self.g
        return not (self.allowed is not None and g.host[u] == u
                    and g.ranks[u] not in self.allowed)

    def _candidates(self, scope: int, need: Need) -> Iterator[int]:
        """Vertices of *need*'s type where it may be matched, in the policy's order.

        Below a matched vertex (*scope* >= 0) only its direct children; at
        the top (-1) the graph is searched from the root through vertices
        of other types (Fluxion's "pristine" prefix omission).  Subtrees
        that are drained, outside the allowed ranks, taken exclusively in
        this attempt, or without enough units for one candidate are skipped.
        """
        cols = self._cols(need)
        ok = self._ok
        want = need.type
        types = self.g.types
        if scope >= 0 and not need.loose:
            for u in self._kids(scope, need.primary):
                if types[u] == want and ok(u, cols):
                    yield u
            return
        found = self._search(scope, need, cols, lambda u: types[u] == want)
        yield from self._top(found, need) if scope < 0 else found

    def _top(self, found: Iterator[int], need: Need) -> Iterator[int]:
        """The top-level candidates in the policy's global order (``variation``: by
        performance class across the graph; ``locality``: longest runs of consecutive
        ids among those that qualify); else as found."""
        if self.policy == "variation":
            props = self.g.props
            yield from sorted(found, key=lambda u: (perf_class(props[u]), u))
        elif self.policy == "locality":
            yield from self._runs([u for u in found if self._qualifies(u, need)])
        else:
            yield from found

    def _qualifies(self, u: int, need: Need) -> bool:
        """Whether candidate *u* could take one of *need* now (nothing is kept)."""
        if need.slot:
            return True  # a home: its units were checked on the way
        if self.tbusy.get(u, 0) and (need.exclusive or not need.leaf):
            return False
        if need.exclusive and not self._whole(u):
            return False
        if need.leaf:
            return self._avail(u) > 0
        mark = len(self.picks)
        ok = self._wants(u, need.children, 1)
        self._rollback(mark)
        return ok

    def _runs(self, cands: list[int]) -> list[int]:
        """*cands* by runs of consecutive ids (per type): the longest run first, ties to
        the higher ids; higher ids first within a run."""
        g = self.g
        ids, types = g.ids, g.types
        runs: list[list[int]] = []
        for u in sorted(cands, key=lambda c: (types[c], ids[c])):
            last = runs[-1][-1] if runs else -1
            if runs and types[last] == types[u] and ids[u] == ids[last] + 1:
                runs[-1].append(u)
            else:
                runs.append([u])
        runs.sort(key=lambda run: (-len(run), -ids[run[-1]]))
        return [u for run in runs for u in reversed(run)]

    def _search(self, scope: int, need: Need, cols: Cols,
                hit: Callable[[int], bool]) -> Iterator[int]:
        """Vertices for which *hit* holds, below *scope* (-1: from the root) down through
        the others."""
        ok = self._ok
        kids = self._kids
        primary = need.primary
        stack = [iter((0,)) if scope < 0 else iter(kids(scope, primary))]
        while stack:
            for u in stack[-1]:
                if not ok(u, cols):
                    continue
                if hit(u):
                    yield u
                else:
                    stack.append(iter(kids(u, primary)))
                    break
            else:
                stack.pop()

    def _homes(self, scope: int, need: Need) -> Iterator[int]:
        """Vertices a slot copy may live under: those with children of every type it holds.

        Below a matched vertex: that vertex itself, else its direct
        children; at the top: searched from the root.
        """
        kinds = need.kinds
        kid_types = self.st.kid_types
        cols = self._cols(need)
        if need.loose:
            # today's pool: one host holds a copy (below the hosts: the vertex itself)
            host = self.g.host
            if scope >= 0 and host[scope] >= 0:
                yield scope
            else:
                yield from self._search(scope, need, cols, lambda u: host[u] == u)
            return

        def home(u: int) -> bool:
            return kinds <= kid_types[u]

        if scope >= 0:
            if home(scope):
                yield scope
                return
            for u in self._kids(scope, need.primary):
                if home(u) and self._ok(u, cols):
                    yield u
            return
        yield from self._top(self._search(-1, need, cols, home), need)

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
        if need.granular and mult > 1 and need.lo == need.hi:
            # whole vertices for each copy: 4 copies of 1 GB on 2 GB vertices take 4
            for _ in range(mult):
                if self._gather(scope, need, need.lo) < need.lo:
                    self._rollback(mark)
                    return False
            return True
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

    def _ranked(self, scope: int, need: Need) -> Iterator[int]:
        """Node candidates ranked by the ids of what each would give (node-centric).

        Each node is tried alone; the one whose picks have the highest ids
        (``hinode``; lowest for ``lonode``) comes first, ties in id order.
        """
        high = self.policy == "high"
        ids = self.g.ids
        scored: list[tuple[int, int, int]] = []
        for c in self._candidates(scope, need):
            if self.tbusy.get(c, 0) or (need.exclusive and not self._whole(c)):
                continue
            mark = len(self.picks)
            if self._wants(c, need.children, 1):
                total = sum(ids[v] for v, _, _ in self.picks[mark:])
                scored.append((-total if high else total, len(scored), c))
            self._rollback(mark)
        return iter([c for _, _, c in sorted(scored)])

    def _gather(self, scope: int, need: Need, target: int) -> int:
        """Pick candidates in order until *target* units (or candidates) are taken."""
        got = 0
        sizes = self.g.sizes
        ranked = self.centric and need.type == "node" and not need.leaf
        for c in (self._ranked(scope, need) if ranked else self._candidates(scope, need)):
            nodex = self.nodex and need.type == "node"
            exclusive = need.exclusive or nodex
            if need.leaf:
                if exclusive:
                    size = sizes[c]
                    if not self._whole(c) or self._avail(c) < size:
                        continue
                    self._pick(c, size, _EXCL)
                    # a vertex named with nothing below it is held whole
                    self._pick_below(c)
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
                if self.tbusy.get(c, 0) or (exclusive and not self._whole(c)):
                    continue
                mark = len(self.picks)
                if not self._wants(c, need.children, 1):
                    self._rollback(mark)
                    continue
                # an exclusive vertex closes its subtree; only what was named is listed
                # (all of it, for today's whole-node requests)
                if exclusive and (need.loose or nodex):
                    self._rollback(mark)
                    self._pick(c, sizes[c], _EXCL)
                    self._pick_below(c)
                else:
                    self._pick(c, sizes[c] if exclusive else 0, _EXCL if exclusive else _PASS)
                got += 1
            if got >= target:
                break
        return got

    def _pick_below(self, v: int) -> None:
        """List every vertex below *v* as held too (an exclusive vertex the jobspec names
        with nothing below it, a whole-node request, a node-exclusive policy)."""
        sizes = self.g.sizes
        for u in range(v + 1, self.g.end[v]):
            self._pick(u, sizes[u], _EXCL)

    def _slot(self, scope: int, need: Need, mult: int) -> bool:
        """Match ``count × mult`` slot copies (the most that fit, for a range), each copy
        below one home vertex, filling a home before the next in the policy's order."""
        mark = len(self.picks)
        lo = need.lo * mult
        hi = min(need.hi * mult, MANY)
        got = self._fill_homes(scope, need, hi)
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
        return self._fill_homes(scope, need, target) >= target

    def _fill_homes(self, scope: int, need: Need, target: int) -> int:
        """Put up to *target* slot copies below homes of *scope*; how many were placed."""
        got = 0
        sizes = self._sizes(need)
        for h in self._homes(scope, need):
            room = target - got
            for col, k in sizes:
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
