"""Placing one request on a :class:`~fluxes.domain.sched.state.FreeState`: plans and policies.

A :class:`Plan` is everything about a request that does not depend on what
is free: its mode (slots anywhere, slots on N shared nodes, N exclusive
nodes), per-node needs, the ranks whose *capacity* can host it (after its
constraint), and, if it can never run, the note saying why.  Plans are
computed once per request shape and cached by the pool.

:meth:`Placer.place` then walks candidate ranks in the order the policy
defines and returns ``{rank: (cores, gpus, memory)}``, or None when the
request does not fit.  An :class:`Overlay` subtracts planned reservations
from what is free, so work started now cannot run into them.

Why one module: Plan and Placer are two halves of one computation (the placer builds the
plans, caches them and walks them) over the same node groups; apart, each would reach
into the other's internals.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, TypeAlias

from fluxes.domain.sched.inventory import format_size
from fluxes.domain.sched.request import Amount, Request
from fluxes.domain.sched.state import Capacity, FreeState, reversed_ids
from fluxes.formats.counts import Count
from fluxes.formats.idset import IDSet

__all__ = [
    "MODE_EXCLUSIVE",
    "MODE_NODES",
    "MODE_SLOTS",
    "POLICIES",
    "Overlay",
    "Part",
    "Placer",
    "Plan",
    "socket_slots",
]

#: Placement policies, see ``docs/scheduler-pool.md``.
POLICIES: Final = ("first-fit", "best-fit", "worst-fit", "lonode", "hinode")

#: Slots anywhere (``nnodes == 0``).
MODE_SLOTS: Final = 0
#: ``nnodes`` nodes, shared with other jobs.
MODE_NODES: Final = 1
#: ``nnodes`` whole nodes.
MODE_EXCLUSIVE: Final = 2

Part: TypeAlias = tuple[IDSet, IDSet, int]
"""What a job holds on one rank: cores, gpus, bytes of memory."""

_EMPTY = IDSet()
_UNBOUNDED = 1 << 62

_ORDER: Final = {"first-fit": "asc", "best-fit": "few", "worst-fit": "many", "lonode": "asc",
                 "hinode": "desc"}


class Overlay:
    """Resources set aside by reservations over some time window, per rank.

    ``parts[rank] = (cores, gpus, memory, exclusive)``; an exclusive part
    blocks the whole rank.
    """

    __slots__ = ("_held_free", "blocked", "parts", "ranks")

    def __init__(self, parts: dict[int, tuple[IDSet, IDSet, int, bool]]) -> None:
        """Wrap merged reservation parts."""
        self.parts = parts
        self.ranks = IDSet(parts)
        #: Ranks reserved whole: skipped without looking at what is free there.
        self.blocked = frozenset(r for r, p in parts.items() if p[3])
        self._held_free: tuple[int, int, int, int] = (-1, -1, 0, 0)

    def held_free(self, st: FreeState) -> tuple[int, int]:
        """(cores, gpus) free in *st* now but set aside by this overlay.

        Cached per state contents: a backfill pass asks this for thousands
        of jobs between two changes of the state.
        """
        serial, version, cores, gpus = self._held_free
        if serial != st.serial or version != st.version:
            cores = gpus = 0
            down = st.down
            for r, (hc, hg, _, whole) in self.parts.items():
                if r in down:
                    continue
                if whole:
                    cores += st.nfc[r]
                    gpus += st.nfg[r]
                else:
                    cores += len(st.fc[r] & hc) if hc else 0
                    gpus += len(st.fg[r] & hg) if hg else 0
            self._held_free = (st.serial, st.version, cores, gpus)
        return cores, gpus


def _top(value: Amount) -> int:
    """The largest accepted value of an amount (a big number when unbounded)."""
    if isinstance(value, int):
        return value
    return _UNBOUNDED if value.max is None else value.max


def _largest(value: Amount, n: int) -> int:
    """The largest accepted amount not above *n*, 0 if none."""
    if isinstance(value, int):
        return value if value <= n else 0
    return value.largest_at_most(n) or 0


def _grows(value: Amount) -> bool:
    """True for a count range that accepts more than its minimum."""
    return isinstance(value, Count) and not value.is_fixed


def socket_slots(units: list[int], sockets: int, limit: int) -> int:
    """How many slots of one unit on each of *sockets* distinct sockets fit, at most *limit*.

    ``units[i]`` is how many units (``cores_per_socket`` free cores) socket
    *i* offers.  *t* slots fit exactly when ``sum(min(u, t)) >= sockets * t``
    (a socket gives each slot at most one unit), and that test is monotone
    in *t*, so a binary search finds the largest *t*.
    """
    if sockets > len(units):
        return 0
    hi = min(limit, sum(units) // sockets)
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(u if u < mid else mid for u in units) >= sockets * mid:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(slots=True)
class Plan:
    """The allocation-independent analysis of one request (see the module docstring)."""

    request: Request
    mode: int
    nmin: int
    smin: int
    c: int
    g: int
    m: int
    sk: int
    cps: int
    shape: tuple[int, int, int, int, int]
    need_c: int
    need_g: int
    need_m: int
    total_c: int
    total_g: int
    static: IDSet
    static_all: bool
    homogeneous: bool
    note: str | None
    grow: bool

    @property
    def feasible(self) -> bool:
        """True if the request fits on the empty machine with every node up."""
        return self.note is None


@dataclass(slots=True)
class _Group:
    """Ranks sharing one capacity."""

    ncores: int
    ngpus: int
    memory: int
    sockets: tuple[int, ...]
    ranks: IDSet


def _slot_too_big(plan: Plan, groups: list[_Group], matching: str) -> str | None:
    """Why one slot of *plan* fits on none of the node *groups* (one line), or None."""
    max_c = max(grp.ncores for grp in groups)
    max_g = max(grp.ngpus for grp in groups)
    max_m = max(grp.memory for grp in groups)
    max_sockets = max(len(grp.sockets) for grp in groups)
    max_socket = max((max(grp.sockets, default=0) for grp in groups), default=0)
    if plan.sk:
        if plan.sk > max_sockets:
            return (f"job requests {plan.sk} sockets per slot, nodes{matching} have at "
                    f"most {max_sockets}")
        if plan.cps > max_socket:
            return (f"job requests {plan.cps} cores per socket, sockets{matching} have "
                    f"at most {max_socket}")
    elif plan.c > max_c:
        return f"job requests {plan.c} cores per slot, nodes{matching} have at most {max_c}"
    if plan.g > max_g:
        return f"job requests {plan.g} gpus per slot, nodes{matching} have at most {max_g}"
    if plan.m > max_m:
        if max_m == 0:
            return (f"job requests {format_size(plan.m)} memory per slot, no node"
                    f"{matching} declares memory")
        return (f"job requests {format_size(plan.m)} memory per slot, nodes{matching} "
                f"have at most {format_size(max_m)}")
    return None


class Placer:
    """Plans and places requests for one inventory (its capacity never changes)."""

    __slots__ = ("_all", "_cap", "_groups")

    def __init__(self, cap: dict[int, Capacity], all_ranks: IDSet) -> None:
        """Group the ranks of *cap* (all of them: *all_ranks*) by capacity."""
        self._cap = cap
        self._all = all_ranks
        groups: dict[tuple[int, int, int, tuple[int, ...]], list[int]] = {}
        for r, c in cap.items():
            key = (c.ncores, c.ngpus, c.memory, tuple(len(s) for s in c.sockets))
            groups.setdefault(key, []).append(r)
        self._groups = [_Group(*key, ranks=IDSet(ranks)) for key, ranks in groups.items()]

    # -- plans -----------------------------------------------------------------------

    def plan(self, req: Request, cset: IDSet) -> Plan:
        """Analyse *req*; *cset* holds the ranks matching its constraint."""
        if req.exclusive:
            mode = MODE_EXCLUSIVE
        elif req.min_nodes:
            mode = MODE_NODES
        else:
            mode = MODE_SLOTS
        smin = req.min_slots
        c = req.min_cores_per_slot
        g = req.min_gpus_per_slot
        m = req.memory_per_slot
        sk = req.sockets_per_slot if isinstance(req.sockets_per_slot, int) else \
            req.sockets_per_slot.min
        cps = req.cores_per_socket if isinstance(req.cores_per_socket, int) else \
            req.cores_per_socket.min
        per_node = smin if mode != MODE_SLOTS else 1
        grow = any(_grows(v) for v in (req.slot_size, req.gpu_per_slot, req.sockets_per_slot,
                                        req.cores_per_socket))
        if mode != MODE_SLOTS:
            grow = grow or _grows(req.nslots)
        static_parts: list[IDSet] = []
        total_fit = 0
        fitting_groups = 0
        for group in self._groups:
            ranks = group.ranks if cset is self._all else group.ranks & cset
            if not ranks:
                continue
            fit = self._fit_counts((c, g, m, sk, cps), group.ncores, group.ngpus, group.memory,
                                   list(group.sockets), limit=_UNBOUNDED)
            if mode == MODE_EXCLUSIVE and c == 0 and g == 0 and m == 0:
                fit = _UNBOUNDED
            if fit >= per_node:
                static_parts.append(ranks)
                fitting_groups += 1
                total_fit += fit * len(ranks)
        static = IDSet()
        for ranks in static_parts:
            static |= ranks
        static_all = len(static) == len(self._all)
        plan = Plan(req, mode, req.min_nodes, smin, c, g, m, sk, cps, (c, g, m, sk, cps),
                    per_node * c, per_node * g, per_node * m,
                    req.min_cores, req.min_gpus, static, static_all, fitting_groups <= 1,
                    None, grow)
        if mode == MODE_SLOTS:
            if total_fit < smin:
                plan.note = self._note(plan, cset, total_fit)
        elif len(static) < plan.nmin:
            plan.note = self._note(plan, cset, total_fit)
        return plan

    @staticmethod
    def _fit_counts(shape: tuple[int, int, int, int, int], nc: int, ng: int, nm: int,
                    sockets: list[int], *, limit: int) -> int:
        """How many slots of *shape* fit in *nc* cores, *ng* gpus and *nm* bytes, up to *limit*.

        *shape* is (cores, gpus, bytes, sockets, cores per socket) of one
        slot; *sockets* lists the free cores of each socket (used only when
        the slot asks for sockets).
        """
        c, g, m, sk, cps = shape
        fit = limit
        if sk:
            units = [n // cps for n in sockets]
            fit = socket_slots(units, sk, fit)
        elif c:
            fit = min(fit, nc // c)
        if g:
            fit = min(fit, ng // g)
        if m:
            fit = min(fit, nm // m)
        return fit

    def _note(self, plan: Plan, cset: IDSet, total_fit: int) -> str:
        """Why *plan* cannot run even on the empty machine (one line)."""
        req = plan.request
        constraint = req.constraint
        matching = f" matching {constraint}" if constraint is not None else ""
        if not cset:
            return f"no node matches {constraint}"
        groups = [grp for grp in self._groups if grp.ranks.intersects(cset)]
        too_big = _slot_too_big(plan, groups, matching)
        if too_big is not None:
            return too_big
        slot = req.describe_slot()
        if plan.mode == MODE_SLOTS:
            if total_fit == 0:
                return f"job requests slots of {slot}, no node{matching} can hold one"
            if plan.c and not plan.g and not plan.m and not plan.sk:
                ncores = sum(grp.ncores * len(grp.ranks & cset) for grp in groups)
                if plan.total_c > ncores:
                    where = f"match {constraint}" if constraint is not None else "exist"
                    return f"job requests {plan.total_c} cores, only {ncores} {where}"
            return (f"job requests {plan.smin} slots of {slot}, at most {total_fit} fit on "
                    f"the nodes{matching}")
        nodes = len(cset)
        qualified = len(plan.static)
        if qualified == nodes:
            where = f"match {constraint}" if constraint is not None else "exist"
            return f"job requests {plan.nmin} nodes, only {nodes} {where}"
        if plan.mode == MODE_EXCLUSIVE and not (plan.c or plan.g or plan.m):
            what = "whole nodes"
        else:
            what = f"{plan.smin} slot{'' if plan.smin == 1 else 's'} of {slot} per node"
        if qualified == 0:
            return f"job requests {plan.nmin} nodes with {what}, no node{matching} can hold it"
        return (f"job requests {plan.nmin} nodes with {what}, only {qualified} nodes"
                f"{matching} can hold it")

    # -- placing ---------------------------------------------------------------------

    def place(self, st: FreeState, plan: Plan, policy: str,
              ov: Overlay | None) -> dict[int, Part] | None:
        """Where *plan* goes on *st* under *policy*, or None if it does not fit.

        The state is not changed; the caller commits the returned parts.
        """
        if plan.mode == MODE_EXCLUSIVE:
            return self._place_exclusive(st, plan, policy, ov)
        if plan.total_c > st.tfc or plan.total_g > st.tfg:
            return None
        if ov is not None:
            held_c, held_g = ov.held_free(st)
            if plan.total_c > st.tfc - held_c or plan.total_g > st.tfg - held_g:
                return None
        if plan.mode == MODE_NODES:
            return self._place_nodes(st, plan, policy, ov)
        return self._place_slots(st, plan, policy, ov)

    def _place_exclusive(self, st: FreeState, plan: Plan, policy: str,
                         ov: Overlay | None) -> dict[int, Part] | None:
        """Whole idle nodes."""
        idle = st.idle
        if len(idle) < plan.nmin:
            return None
        cands = idle if plan.static_all else idle & plan.static
        if ov is not None and ov.parts:
            cands = cands - ov.ranks
        n = _largest(plan.request.nnodes, len(cands))
        if n == 0 or n < plan.nmin:
            return None
        if policy == "hinode":
            chosen: list[int] = []
            for r in reversed_ids(cands):
                chosen.append(r)
                if len(chosen) == n:
                    break
        elif policy in ("best-fit", "worst-fit") and not plan.homogeneous:
            chosen = self._by_capacity(cands, n, policy == "worst-fit")
        else:
            chosen = list(cands.first_n(n))
        cap = self._cap
        return {r: (cap[r].cores, cap[r].gpus, cap[r].memory) for r in chosen}

    def _by_capacity(self, cands: IDSet, n: int, largest: bool) -> list[int]:
        """*n* ranks of *cands*, smallest (or largest) capacity first, then by rank."""
        groups = sorted(self._groups, key=lambda grp: (grp.ncores, grp.ngpus, grp.memory),
                        reverse=largest)
        chosen: list[int] = []
        for grp in groups:
            for r in grp.ranks & cands:
                chosen.append(r)
                if len(chosen) == n:
                    return chosen
        return chosen

    def _candidates(self, st: FreeState, plan: Plan, policy: str) -> Iterator[int]:
        """Up ranks that may host the request's per-node need, in policy order.

        Ranks come from the free-core buckets (or the free-gpu set for
        slots without cores); a small static set (a selective constraint)
        is sorted directly instead.  Ranks outside the static set may still
        be yielded: callers filter.
        """
        order = _ORDER[policy]
        k = plan.need_c
        by_gpu = k == 0
        if not plan.static_all:
            pool_size = len(st.gfree) if by_gpu else st.count_at_least(k)
            if len(plan.static) * 4 < pool_size:
                return iter(self._sorted(st, plan.static, plan, policy, by_gpu))
        if by_gpu:
            return iter(self._sorted(st, st.gfree, plan, policy, True))
        return st.at_least(k, order)

    @staticmethod
    def _sorted(st: FreeState, ranks: IDSet, plan: Plan, policy: str,
                by_gpu: bool) -> list[int]:
        """Up ranks of *ranks* with some room, sorted for *policy*."""
        down = st.down
        free = st.nfg if by_gpu else st.nfc
        need = max(plan.need_g if by_gpu else plan.need_c, 1)
        found = [r for r in ranks if free[r] >= need and r not in down]
        order = _ORDER[policy]
        if order == "desc":
            found.reverse()
        elif order == "few":
            found.sort(key=lambda r: (free[r], r))
        elif order == "many":
            found.sort(key=lambda r: (-free[r], r))
        return found

    def _room(self, st: FreeState, r: int, plan: Plan, ov: Overlay | None,
              limit: int) -> tuple[int, IDSet, IDSet, int]:
        """(slots that fit, free cores, free gpus, free memory) on rank *r*, after *ov*."""
        fc = st.fc[r]
        fg = st.fg[r]
        fm = st.fm[r]
        if ov is not None:
            held = ov.parts.get(r)
            if held is not None:
                if held[3]:
                    return 0, _EMPTY, _EMPTY, 0
                fc = fc - held[0] if held[0] else fc
                fg = fg - held[1] if held[1] else fg
                fm -= held[2]
        sockets: list[int] = []
        if plan.sk:
            sockets = [len(fc & s) for s in self._cap[r].sockets]
        fit = self._fit_counts(plan.shape, len(fc), len(fg), fm, sockets, limit=limit)
        return fit, fc, fg, fm

    def _place_nodes(self, st: FreeState, plan: Plan, policy: str,
                     ov: Overlay | None) -> dict[int, Part] | None:
        """``nnodes`` shared nodes holding ``nslots`` slots each."""
        req = plan.request
        want = _top(req.nnodes)
        slots_top = _top(req.nslots)
        static = None if plan.static_all else plan.static
        nfc, nfg, fm_all = st.nfc, st.nfg, st.fm
        need_c, need_g, need_m, smin = plan.need_c, plan.need_g, plan.need_m, plan.smin
        exact = not plan.sk and not plan.grow
        chosen: list[tuple[int, int, IDSet, IDSet]] = []
        held = ov.parts if ov is not None else {}
        blocked = ov.blocked if ov is not None else frozenset()
        for r in self._candidates(st, plan, policy):
            if static is not None and r not in static:
                continue
            if nfc[r] < need_c or nfg[r] < need_g or fm_all[r] < need_m or r in blocked:
                continue
            if exact and r not in held:
                chosen.append((r, smin, st.fc[r], st.fg[r]))
            else:
                fit, fc, fg, _ = self._room(st, r, plan, ov, slots_top)
                if fit < smin:
                    continue
                chosen.append((r, _largest(req.nslots, fit), fc, fg))
            if len(chosen) >= want:
                break
        n = _largest(req.nnodes, len(chosen))
        if n == 0 or n < plan.nmin:
            return None
        return {r: self._part(r, plan, k, fc, fg) for r, k, fc, fg in chosen[:n]}

    def _place_slots(self, st: FreeState, plan: Plan, policy: str,
                     ov: Overlay | None) -> dict[int, Part] | None:
        """``nslots`` slots anywhere."""
        req = plan.request
        if isinstance(req.nslots, int):
            target = req.nslots
        else:
            total = 0
            top = _top(req.nslots)
            for r in self._candidates(st, plan, policy):
                if plan.static_all or r in plan.static:
                    total += self._room(st, r, plan, ov, top - total)[0]
                    if total >= top:
                        break
            target = _largest(req.nslots, total)
            if target == 0:
                return None
        if policy == "worst-fit":
            placed = self._spread(st, plan, ov, target)
        else:
            placed = self._fill(st, plan, policy, ov, target)
        if placed is None:
            return None
        return {r: self._part(r, plan, k, fc, fg) for r, (k, fc, fg) in placed.items()}

    def _fill(self, st: FreeState, plan: Plan, policy: str, ov: Overlay | None,
              target: int) -> dict[int, tuple[int, IDSet, IDSet]] | None:
        """Fill nodes one after the other in policy order until *target* slots are placed."""
        placed: dict[int, tuple[int, IDSet, IDSet]] = {}
        remaining = target
        static = None if plan.static_all else plan.static
        simple = not plan.sk and not plan.g and not plan.m
        c = plan.c
        nfc = st.nfc
        held = ov.parts if ov is not None else {}
        blocked = ov.blocked if ov is not None else frozenset()
        for r in self._candidates(st, plan, policy):
            if static is not None and r not in static:
                continue
            if r in held:
                if r in blocked:
                    continue
                fit, fc, fg, _ = self._room(st, r, plan, ov, remaining)
            elif simple:
                fit = nfc[r] // c
                fc, fg = st.fc[r], _EMPTY
            else:
                fit, fc, fg, _ = self._room(st, r, plan, ov, remaining)
            if fit <= 0:
                continue
            k = fit if fit < remaining else remaining
            placed[r] = (k, fc, fg)
            remaining -= k
            if not remaining:
                return placed
        return None

    def _spread(self, st: FreeState, plan: Plan, ov: Overlay | None,
                target: int) -> dict[int, tuple[int, IDSet, IDSet]] | None:
        """worst-fit: each slot goes to the node with the most free cores at that moment.

        Candidates arrive most-free first, so they join the heap lazily:
        only when the next one would beat the best node already in it.
        """
        static = None if plan.static_all else plan.static
        by_gpu = plan.c == 0
        step = plan.g if by_gpu else plan.c
        source = self._candidates(st, plan, "worst-fit")
        heap: list[tuple[int, int]] = []
        fits: dict[int, int] = {}
        sets: dict[int, tuple[IDSet, IDSet]] = {}
        counts: dict[int, int] = {}

        blocked = ov.blocked if ov is not None else frozenset()

        def pull() -> tuple[int, int] | None:
            for r in source:
                if (static is not None and r not in static) or r in blocked:
                    continue
                fit, fc, fg, _ = self._room(st, r, plan, ov, target)
                if fit > 0:
                    fits[r] = fit
                    sets[r] = (fc, fg)
                    return (-(len(fg) if by_gpu else len(fc)), r)
            return None

        pending = pull()
        remaining = target
        while remaining:
            if pending is not None and (not heap or pending < heap[0]):
                heapq.heappush(heap, pending)
                pending = pull()
                continue
            if not heap:
                return None
            neg, r = heapq.heappop(heap)
            counts[r] = counts.get(r, 0) + 1
            remaining -= 1
            fits[r] -= 1
            if fits[r]:
                heapq.heappush(heap, (neg + step, r))
        return {r: (k, *sets[r]) for r, k in counts.items()}

    def _part(self, r: int, plan: Plan, k: int, fc: IDSet, fg: IDSet) -> Part:
        """The cores, gpus and memory *k* slots take on rank *r* (free sets *fc*, *fg*)."""
        req = plan.request
        g = _largest(req.gpu_per_slot, len(fg) // k) if plan.grow else plan.g
        gpus = fg.first_n(k * g) if g else _EMPTY
        if plan.sk:
            cores = self._socket_cores(r, plan, k, fc)
        else:
            c = _largest(req.slot_size, len(fc) // k) if plan.grow else plan.c
            cores = fc.first_n(k * c) if c else _EMPTY
        return cores, gpus, k * plan.m

    def _socket_cores(self, r: int, plan: Plan, k: int, fc: IDSet) -> IDSet:
        """Cores for *k* slots of ``sk`` sockets x ``cps`` cores on rank *r*.

        Each slot takes ``cps`` cores from each of the ``sk`` sockets with
        the most units left (lower socket first on ties), which is the
        choice that keeps the most slots possible.  With one slot and count
        ranges, the slot takes as many sockets, and as many cores in each,
        as the ranges and the free cores allow.
        """
        req = plan.request
        free = [fc & s for s in self._cap[r].sockets]
        if k == 1 and (_grows(req.sockets_per_slot) or _grows(req.cores_per_socket)):
            usable = [i for i, ids in enumerate(free) if len(ids) >= plan.cps]
            usable.sort(key=lambda i: (-len(free[i]), i))
            nsock = _largest(req.sockets_per_slot, len(usable))
            taken = IDSet()
            for i in sorted(usable[:nsock]):
                taken |= free[i].first_n(_largest(req.cores_per_socket, len(free[i])))
            return taken
        taken = IDSet()
        left = [len(ids) // plan.cps for ids in free]
        used = [0] * len(free)
        for _ in range(k):
            order = sorted(range(len(free)), key=lambda i: (-left[i], i))[:plan.sk]
            for i in order:
                left[i] -= 1
                used[i] += 1
        for i, ids in enumerate(free):
            if used[i]:
                taken |= ids.first_n(used[i] * plan.cps)
        return taken
