"""Starts that wait for their cores: a start whose cores or gpus on its rank are still
held by a job running there (or wanted by a start waiting before it) waits, and starts
the moment they free (docs/exec.md, "Starts that wait for their cores").

Pure bookkeeping.  :class:`UseReader` reads what a start's R holds on a rank (its
:class:`RankUse`, cached by the R's allocation: jobs run one after another on the same
cores share it); :class:`Cores` knows what each rank's started jobs hold and which
starts wait there, in arrival order, and which of them may start once a job ends.  It
also holds back the acknowledgement of a request entry while a start it carries waits:
that entry is acknowledged with the write that records the start (or the kill) instead.

Only jobs this worker started (or restored from their records) and earlier waiting
starts ever block a start: a start never waits for a job the worker does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from fluxes.formats.idset import IDSet

#: The highest core or gpu id a :class:`RankUse` keeps as a bit (an R naming more is
#: taken as holding nothing known: it neither waits nor blocks, as before waits existed).
MAX_ID = 65535
#: Allocations :class:`UseReader` remembers (the oldest dropped beyond).
USE_CACHE_SIZE = 1024

__all__ = ["MAX_ID", "Cores", "RankUse", "UseReader", "Waiting", "use_of_texts"]


class RankUse(NamedTuple):
    """What a job holds on one rank: bit masks of its cores and gpus, and the idsets
    (RFC 22 text, "" for none) they come from, for the job's record."""

    cores: int
    gpus: int
    core_text: str
    gpu_text: str

    def overlaps(self, other: RankUse) -> bool:
        """Whether the two hold a core or a gpu in common."""
        return bool(self.cores & other.cores or self.gpus & other.gpus)


def _mask(text: str) -> int:
    """The bit mask of an idset; ValueError for ids beyond :data:`MAX_ID`."""
    mask = 0
    for lo, hi in IDSet(text).ranges():
        if hi > MAX_ID:
            raise ValueError(f"id {hi} beyond {MAX_ID}")
        mask |= (1 << (hi + 1)) - (1 << lo)
    return mask


def use_of_texts(core_text: str, gpu_text: str) -> RankUse | None:
    """The :class:`RankUse` of two idsets (a job's record); None if unreadable or empty."""
    try:
        use = RankUse(_mask(core_text), _mask(gpu_text), core_text, gpu_text)
    except ValueError:
        return None
    return use if use.cores or use.gpus else None


class UseReader:
    """The :class:`RankUse` of a start's R on a rank, cached by the R's ``R_lite``.

    A simulated start never decoded its R before waits existed: this costs one JSON
    parse of R (the times differ from job to job, so the key is the R_lite part).
    """

    def __init__(self, size: int = USE_CACHE_SIZE) -> None:
        self.size = size
        self._uses: dict[tuple[int, bytes], RankUse | None] = {}

    def __len__(self) -> int:
        return len(self._uses)

    def of(self, r_raw: Any, rank: int) -> RankUse | None:
        """What R holds on ``rank``; None when R is missing, unreadable or holds nothing
        known there (such a start neither waits nor blocks: its own checks fail it)."""
        if not isinstance(r_raw, (bytes, str)):
            return None
        try:
            doc = orjson.loads(r_raw)
            lite = doc["execution"]["R_lite"]
            key = (rank, orjson.dumps(lite))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None
        try:
            return self._uses[key]
        except KeyError:
            pass
        use = _read_lite(lite, rank)
        if len(key[1]) <= 4096:  # a huge R is read again rather than kept
            if len(self._uses) >= self.size:
                del self._uses[next(iter(self._uses))]
            self._uses[key] = use
        return use


def _read_lite(lite: Any, rank: int) -> RankUse | None:
    """The cores and gpus R_lite gives ``rank`` (None: none, or unreadable)."""
    if not isinstance(lite, list):
        return None
    cores, gpus = IDSet(), IDSet()
    try:
        for entry in lite:
            if not isinstance(entry, Mapping) or rank not in IDSet(str(entry["rank"])):
                continue
            children = entry.get("children") or {}
            cores |= IDSet(str(children.get("core", "")))
            gpus |= IDSet(str(children.get("gpu", "")))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return use_of_texts(str(cores), str(gpus))


@dataclass(eq=False)
class Waiting:
    """A start waiting on ``rank`` for ``use``: what starting it later needs (the job's
    fetched facts, whether its entry was redelivered, the request itself) and the
    request entry whose acknowledgement it holds."""

    rank: int
    jobid: int
    use: RankUse
    facts: Any
    redelivered: bool
    request: Any
    entry: bytes


@dataclass
class _Entry:
    """A request entry holding waiting starts: how many, and its dead letters once
    every request of it was handled (None until then)."""

    count: int = 0
    dead: list[Any] | None = None


@dataclass
class Cores:
    """What the started jobs hold on each rank, and the starts waiting there.

    ``held`` names each started job's :class:`RankUse`; ``union`` is what they hold
    together per rank (bit masks of cores and gpus), so that a start is checked in a
    few operations however many jobs run on its rank.
    """

    held: dict[int, dict[int, RankUse]] = field(default_factory=dict)
    union: dict[int, tuple[int, int]] = field(default_factory=dict)
    queue: dict[int, list[Waiting]] = field(default_factory=dict)
    #: what the waiting starts want together per rank (bit masks of cores and gpus)
    wanted: dict[int, tuple[int, int]] = field(default_factory=dict)
    entries: dict[tuple[int, bytes], _Entry] = field(default_factory=dict)
    #: ranks where a job ended while starts wait there (look at them: :meth:`ready`)
    freed: set[int] = field(default_factory=set)
    #: ranks where held jobs overlap (restored so, or a job held twice): a release
    #: there recomputes the union instead of clearing the job's bits
    shared: set[int] = field(default_factory=set)
    _waiting: set[tuple[int, int]] = field(default_factory=set)

    def __len__(self) -> int:
        """The number of waiting starts."""
        return len(self._waiting)

    def hold(self, rank: int, jobid: int, use: RankUse | None) -> None:
        """Job ``jobid`` starts on ``rank`` holding ``use`` (None: nothing known)."""
        if use is None:
            return
        held = self.held.setdefault(rank, {})
        if held.get(jobid) == use:
            return  # held already (a start again after its prolog ran)
        cores, gpus = self.union.get(rank, (0, 0))
        if jobid in held or cores & use.cores or gpus & use.gpus:
            self.shared.add(rank)
        held[jobid] = use
        self.union[rank] = (cores | use.cores, gpus | use.gpus)

    def use(self, rank: int, jobid: int) -> RankUse | None:
        """What job ``jobid`` holds on ``rank`` (None: nothing known, or it ended)."""
        return self.held.get(rank, {}).get(jobid)

    def release(self, rank: int, jobid: int) -> None:
        """Job ``jobid`` ended on ``rank``: what it held is free."""
        held = self.held.get(rank)
        use = None if held is None else held.pop(jobid, None)
        if held is None or use is None:
            return
        if rank in self.shared:
            cores = gpus = 0
            for other in held.values():
                cores |= other.cores
                gpus |= other.gpus
            self.union[rank] = (cores, gpus)
            if not held:
                self.shared.discard(rank)
        else:
            cores, gpus = self.union[rank]
            self.union[rank] = (cores & ~use.cores, gpus & ~use.gpus)
        if self.queue.get(rank):
            self.freed.add(rank)

    def busy(self, rank: int, jobid: int, use: RankUse) -> bool:
        """Whether a start of ``jobid`` holding ``use`` must wait: a job running on
        ``rank`` or a start waiting there holds part of it.  A job holding its cores
        already (a start again after its prolog ran) never waits."""
        cores, gpus = self.union.get(rank, (0, 0))
        if cores & use.cores or gpus & use.gpus:
            return jobid not in self.held[rank]
        cores, gpus = self.wanted.get(rank, (0, 0))
        return bool(cores & use.cores or gpus & use.gpus)

    def waiting(self, rank: int, jobid: int) -> bool:
        """Whether a start of ``jobid`` waits on ``rank``."""
        return (rank, jobid) in self._waiting

    def wait(self, start: Waiting) -> None:
        """Queue ``start`` behind what it overlaps (its entry's acknowledgement held)."""
        self.queue.setdefault(start.rank, []).append(start)
        self._waiting.add((start.rank, start.jobid))
        cores, gpus = self.wanted.get(start.rank, (0, 0))
        self.wanted[start.rank] = (cores | start.use.cores, gpus | start.use.gpus)
        self.entries.setdefault((start.rank, start.entry), _Entry()).count += 1

    def cancel(self, rank: int, jobid: int) -> Waiting | None:
        """Take the waiting start of ``jobid`` off ``rank``'s queue (killed); None if none.

        Starts behind it may start now: the rank is looked at again.
        """
        queue = self.queue.get(rank, [])
        for i, start in enumerate(queue):
            if start.jobid == jobid:
                del queue[i]
                self._waiting.discard((rank, jobid))
                self._wanted(rank, queue)
                if queue:
                    self.freed.add(rank)
                return start
        return None

    def ready(self) -> list[Waiting]:
        """The waiting starts that may start now, taken off their queues, in arrival
        order per rank: each holds nothing a running job holds, nor anything an earlier
        start still waiting (or starting now) wants."""
        out: list[Waiting] = []
        for rank in sorted(self.freed):
            queue = self.queue.get(rank)
            if not queue:
                continue
            blocked_cores, blocked_gpus = self.union.get(rank, (0, 0))
            want_cores, want_gpus = self.wanted[rank]
            stay: list[Waiting] = []
            for i, start in enumerate(queue):
                use = start.use
                if not (use.cores & blocked_cores or use.gpus & blocked_gpus):
                    out.append(start)
                    self._waiting.discard((rank, start.jobid))
                else:
                    stay.append(start)
                blocked_cores |= use.cores
                blocked_gpus |= use.gpus
                if not (want_cores & ~blocked_cores or want_gpus & ~blocked_gpus):
                    stay += queue[i + 1:]  # all they want is blocked: none behind starts
                    break
            if len(stay) < len(queue):
                self.queue[rank] = stay
                self._wanted(rank, stay)
        self.freed.clear()
        return out

    def _wanted(self, rank: int, queue: list[Waiting]) -> None:
        cores = gpus = 0
        for start in queue:
            cores |= start.use.cores
            gpus |= start.use.gpus
        self.wanted[rank] = (cores, gpus)

    def entry_handled(self, rank: int, entry: bytes, dead: list[Any]) -> bool:
        """Every request of ``entry`` was handled: True when its acknowledgement must
        wait (a start of it waits; it goes with :meth:`entry_released`)."""
        key = (rank, entry)
        held = self.entries.get(key)
        if held is None:
            return False
        if held.count == 0:  # its waiting starts left before its last request was handled
            del self.entries[key]
            return False
        held.dead = dead
        return True

    def entry_released(self, start: Waiting) -> list[Any] | None:
        """``start`` left the queue (started or killed): the dead letters of its entry
        when that entry may now be acknowledged (None: not yet)."""
        key = (start.rank, start.entry)
        held = self.entries.get(key)
        if held is None:
            return None
        held.count -= 1
        if held.count > 0 or held.dead is None:
            return None
        del self.entries[key]
        return held.dead
