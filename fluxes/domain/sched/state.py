"""What is free on every target at one moment, indexed for fast placement.

:class:`FreeState` keeps, per rank, the free cores and gpus (IDSets) and
free memory, plus aggregate indexes over the ranks that are *up*:

* ``buckets[k]``: ranks with exactly ``k >= 1`` free cores, so "ranks with
  at least k free cores", in rank order or by free count, is a merge of a
  few IDSets rather than a loop over every node;
* ``gfree``: ranks with at least one free gpu;
* ``idle``: ranks with everything free (candidates for exclusive jobs);
* ``tfc`` / ``tfg``: total free cores and gpus, for "cannot fit now"
  answers in O(1).

Per-rank IDSets are never modified in place (every change stores a new
set), so :meth:`FreeState.clone` is a handful of dict copies: the planner
clones the present state and replays releases to see the future.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from itertools import chain, count

from fluxes.formats.idset import IDSet

__all__ = ["Capacity", "FreeState", "reversed_ids"]

_EMPTY = IDSet()
_SERIALS = count()


class Capacity:
    """Static per-rank capacity: cores, gpus, memory (0 if unknown), sockets."""

    __slots__ = ("cores", "gpus", "memory", "ncores", "ngpus", "sockets")

    def __init__(self, cores: IDSet, gpus: IDSet, memory: int,
                 sockets: tuple[IDSet, ...]) -> None:
        """Record one rank's capacity (the IDSets are shared, never modified)."""
        self.cores = cores
        self.gpus = gpus
        self.memory = memory
        self.sockets = sockets
        self.ncores = len(cores)
        self.ngpus = len(gpus)


def reversed_ids(ids: IDSet) -> Iterator[int]:
    """The ids of *ids* in descending order."""
    for lo, hi in reversed(list(ids.ranges())):
        yield from range(hi, lo - 1, -1)


def _merge(sets: Iterable[IDSet]) -> IDSet:
    """The union of many (typically tiny, disjoint) IDSets in one construction."""
    ids: list[int] = []
    for one in sets:
        n = len(one)
        if n == 1:
            ids.append(one.first())  # type: ignore[arg-type]  # not None: n == 1
        elif n:
            ids.extend(one)
    return IDSet(ids) if ids else _EMPTY


class FreeState:
    """Free resources per rank and the indexes described in the module docstring."""

    __slots__ = ("buckets", "cap", "down", "fc", "fg", "fm", "gfree", "idle", "nfc", "nfg",
                 "serial", "tfc", "tfg", "version")

    def __init__(self, cap: dict[int, Capacity]) -> None:
        """A state with everything free and every rank up."""
        self.cap = cap
        self.fc: dict[int, IDSet] = {r: c.cores for r, c in cap.items()}
        self.fg: dict[int, IDSet] = {r: c.gpus for r, c in cap.items()}
        self.fm: dict[int, int] = {r: c.memory for r, c in cap.items()}
        self.nfc: dict[int, int] = {r: c.ncores for r, c in cap.items()}
        self.nfg: dict[int, int] = {r: c.ngpus for r, c in cap.items()}
        self.down: set[int] = set()
        by_count: dict[int, list[int]] = {}
        for r, c in cap.items():
            if c.ncores:
                by_count.setdefault(c.ncores, []).append(r)
        self.buckets: dict[int, IDSet] = {k: IDSet(v) for k, v in by_count.items()}
        self.gfree = IDSet(r for r, c in cap.items() if c.ngpus)
        self.idle = IDSet(cap)
        self.tfc = sum(c.ncores for c in cap.values())
        self.tfg = sum(c.ngpus for c in cap.values())
        #: (serial, version) identifies the contents: caches derived from a
        #: state key on it (serial is unique per object, version counts changes).
        self.serial = next(_SERIALS)
        self.version = 0

    def clone(self) -> FreeState:
        """An independent copy (per-rank sets are shared: they are never modified)."""
        new = FreeState.__new__(FreeState)
        new.cap = self.cap
        new.fc = self.fc.copy()
        new.fg = self.fg.copy()
        new.fm = self.fm.copy()
        new.nfc = self.nfc.copy()
        new.nfg = self.nfg.copy()
        new.down = self.down.copy()
        new.buckets = {k: b.copy() for k, b in self.buckets.items()}
        new.gfree = self.gfree.copy()
        new.idle = self.idle.copy()
        new.tfc = self.tfc
        new.tfg = self.tfg
        new.serial = next(_SERIALS)
        new.version = 0
        return new

    def with_idle(self, idle: IDSet) -> FreeState:
        """A read-only view of this state whose idle ranks are *idle*.

        Whole-node placement reads nothing but the idle set, so the planner
        answers "which nodes are idle at time t" with this instead of
        replaying every release up to t.  The view shares everything else
        with this state and must not be changed.
        """
        new = FreeState.__new__(FreeState)
        # assigned one by one: a walk over a full machine makes one view per end time
        new.cap, new.fc, new.fg, new.fm = self.cap, self.fc, self.fg, self.fm
        new.nfc, new.nfg, new.down, new.buckets = self.nfc, self.nfg, self.down, self.buckets
        new.gfree, new.tfc, new.tfg = self.gfree, self.tfc, self.tfg
        new.idle = idle
        new.serial = next(_SERIALS)
        new.version = 0
        return new

    # -- changes -----------------------------------------------------------------

    def _set(self, r: int, cores: IDSet, gpus: IDSet, mem: int) -> None:
        """Install new free sets for rank *r* and keep the indexes in step."""
        old_n = self.nfc[r]
        old_g = self.nfg[r]
        cap = self.cap[r]
        was_idle = old_n == cap.ncores and old_g == cap.ngpus and self.fm[r] == cap.memory
        n = len(cores)
        g = len(gpus)
        self.version += 1
        self.fc[r] = cores
        self.fg[r] = gpus
        self.fm[r] = mem
        self.nfc[r] = n
        self.nfg[r] = g
        if r in self.down:
            return
        if n != old_n:
            self.tfc += n - old_n
            buckets = self.buckets
            if old_n:
                bucket = buckets[old_n]
                bucket.discard(r)
                if not bucket:
                    del buckets[old_n]
            if n:
                target = buckets.get(n)
                if target is None:
                    buckets[n] = IDSet.from_range(r, r)
                else:
                    target.add(r)
        if g != old_g:
            self.tfg += g - old_g
            if not old_g:
                self.gfree.add(r)
            elif not g:
                self.gfree.discard(r)
        is_idle = n == cap.ncores and g == cap.ngpus and mem == cap.memory
        if is_idle != was_idle:
            if is_idle:
                self.idle.add(r)
            else:
                self.idle.discard(r)

    def take(self, r: int, cores: IDSet, gpus: IDSet, mem: int) -> None:
        """Mark *cores*, *gpus* and *mem* bytes of rank *r* as used."""
        fc = self.fc[r]
        fg = self.fg[r]
        cap = self.cap[r]
        # Whole-node takes are common (exclusive jobs): skip the set algebra.
        new_c = _EMPTY if cores is cap.cores or len(cores) == len(fc) else fc - cores
        new_g = _EMPTY if not fg or len(gpus) == len(fg) else (fg - gpus if gpus else fg)
        self._set(r, new_c, new_g, self.fm[r] - mem)

    def give(self, r: int, cores: IDSet, gpus: IDSet, mem: int) -> None:
        """Mark *cores*, *gpus* and *mem* bytes of rank *r* as free again."""
        fc = self.fc[r]
        fg = self.fg[r]
        new_c = cores if not fc else fc | cores
        new_g = fg if not gpus else (gpus if not fg else fg | gpus)
        self._set(r, new_c, new_g, self.fm[r] + mem)

    def give_many(self, released: dict[int, list[tuple[IDSet, IDSet, int]]]) -> None:
        """:meth:`give` for many parts at once, grouped by rank.

        Replaying thousands of small releases (a machine full of 1-core
        jobs) one by one moves each rank between buckets once per release;
        merging each rank's parts first moves it once.
        """
        for r, parts in released.items():
            if len(parts) == 1:
                cores, gpus, mem = parts[0]
            else:
                cores = _merge(p[0] for p in parts)
                gpus = _merge(p[1] for p in parts)
                mem = sum(p[2] for p in parts)
            self.give(r, cores, gpus, mem)

    def take_many(self, held: dict[int, list[tuple[IDSet, IDSet, int]]]) -> None:
        """:meth:`take` for many parts at once, grouped by rank (see :meth:`give_many`)."""
        for r, parts in held.items():
            if len(parts) == 1:
                cores, gpus, mem = parts[0]
            else:
                cores = _merge(p[0] for p in parts)
                gpus = _merge(p[1] for p in parts)
                mem = sum(p[2] for p in parts)
            fc = self.fc[r]
            fg = self.fg[r]
            self._set(r, fc - cores if cores else fc, fg - gpus if gpus else fg,
                      self.fm[r] - mem)

    def set_down(self, r: int) -> None:
        """Exclude rank *r* from the indexes (its free sets are kept)."""
        if r in self.down:
            return
        self.version += 1
        n = self.nfc[r]
        g = self.nfg[r]
        if n:
            bucket = self.buckets[n]
            bucket.discard(r)
            if not bucket:
                del self.buckets[n]
        if g:
            self.gfree.discard(r)
        self.idle.discard(r)
        self.tfc -= n
        self.tfg -= g
        self.down.add(r)

    def set_up(self, r: int) -> None:
        """Put rank *r* back into the indexes."""
        if r not in self.down:
            return
        self.version += 1
        self.down.discard(r)
        n = self.nfc[r]
        g = self.nfg[r]
        cap = self.cap[r]
        if n:
            bucket = self.buckets.get(n)
            if bucket is None:
                self.buckets[n] = IDSet.from_range(r, r)
            else:
                bucket.add(r)
        if g:
            self.gfree.add(r)
        if n == cap.ncores and g == cap.ngpus and self.fm[r] == cap.memory:
            self.idle.add(r)
        self.tfc += n
        self.tfg += g

    # -- queries -------------------------------------------------------------------

    def count_at_least(self, k: int) -> int:
        """Number of up ranks with at least *k* (>= 1) free cores."""
        return sum(len(b) for n, b in self.buckets.items() if n >= k)

    def at_least(self, k: int, order: str) -> Iterator[int]:
        """Up ranks with at least *k* (>= 1) free cores, lazily, in *order*.

        *order* is ``asc`` / ``desc`` (by rank), ``few`` (fewest free cores
        first) or ``many`` (most free cores first); ties go to the lower rank.
        """
        keys = sorted(n for n in self.buckets if n >= k)
        if not keys:
            return iter(())
        buckets = self.buckets
        if order == "few":
            return chain.from_iterable(iter(buckets[n]) for n in keys)
        if order == "many":
            return chain.from_iterable(iter(buckets[n]) for n in reversed(keys))
        if order == "desc":
            if len(keys) == 1:
                return reversed_ids(buckets[keys[0]])
            return heapq.merge(*(reversed_ids(buckets[n]) for n in keys), reverse=True)
        if len(keys) == 1:
            return iter(buckets[keys[0]])
        return heapq.merge(*(iter(buckets[n]) for n in keys))

    def ordered(self, ranks: Iterable[int], order: str) -> list[int]:
        """*ranks* (up ones only) sorted in *order* (see :meth:`at_least`)."""
        down = self.down
        ranks = [r for r in ranks if r not in down]
        if order == "asc":
            return ranks
        if order == "desc":
            ranks.reverse()
            return ranks
        nfc = self.nfc
        if order == "few":
            return sorted(ranks, key=lambda r: (nfc[r], r))
        return sorted(ranks, key=lambda r: (-nfc[r], r))
