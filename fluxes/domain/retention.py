"""Retention, pure: which inactive jobs a purge removes, how far a stream may be
trimmed, which day an archived entry belongs to, and whether stored history went
backwards (writes lost in a power cut).

Nothing here talks to Redis: :mod:`fluxes.store.retention` reads what these
functions need and applies what they decide.

Purge policy (flux's ``[job-manager]`` ``inactive-age-limit`` and
``inactive-num-limit``, and ``flux job purge --age-limit/--num-limit``): a job
goes when it has been inactive longer than the age limit, or when it is among
the oldest inactive jobs beyond the number limit; with both, either is enough.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The journal-only entry a purge appends, naming the purged job (never in an eventlog).
PURGE_EVENT = "purge"
#: The events after which a job is inactive: a purge accepts only jobs whose
#: eventlog ends with one of them.
TERMINAL_EVENTS = frozenset({"clean", "invalidate"})


@dataclass(frozen=True, slots=True)
class Limits:
    """How long and how many inactive jobs are kept (None: no limit)."""

    #: seconds a job may stay inactive before it is purged
    age: float | None = None
    #: inactive jobs kept at most (the oldest beyond it are purged)
    num: int | None = None

    def __post_init__(self) -> None:
        if self.age is not None and not self.age >= 0:
            raise ValueError(f"age limit must be >= 0, got {self.age!r}")
        if self.num is not None and self.num < 0:
            raise ValueError(f"num limit must be >= 0, got {self.num!r}")

    @property
    def active(self) -> bool:
        """True when some limit is set (a purge has something to decide)."""
        return self.age is not None or self.num is not None


def select_purge(oldest: Sequence[tuple[int, float]], total: int, now: float,
                 limits: Limits) -> list[int]:
    """The jobs to purge among ``oldest`` (``(jobid, t_inactive)``, oldest first: the
    first entries of the inactive index), given ``total`` inactive jobs in all.

    A job goes when it became inactive more than ``limits.age`` seconds before
    ``now``, or when it is one of the ``total - limits.num`` oldest. Only jobs of
    ``oldest`` are chosen, so a caller purges in batches of its length.
    """
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    over = 0 if limits.num is None else max(total - limits.num, 0)
    cutoff = None if limits.age is None else now - limits.age
    out = []
    for rank, (jobid, t_inactive) in enumerate(oldest):
        if rank < over or (cutoff is not None and t_inactive < cutoff):
            out.append(jobid)
    return out


def count_purge(total: int, older: int, limits: Limits) -> int:
    """How many jobs ``limits`` purge out of ``total`` inactive ones, ``older`` of which
    became inactive before the age limit (both rules take the oldest first, so
    together they take the longer of the two prefixes)."""
    over = 0 if limits.num is None else max(total - limits.num, 0)
    aged = 0 if limits.age is None else min(older, total)
    return max(over, aged)


def merge_oldest(parts: Iterable[Sequence[tuple[int, float]]], limit: int
                 ) -> list[tuple[int, float]]:
    """The ``limit`` oldest of several partitions' oldest-first lists (by t_inactive,
    then id), oldest first: what :func:`select_purge` takes for an instance of
    several partitions, whose number limit counts every partition's jobs."""
    merged = sorted((item for part in parts for item in part), key=lambda x: (x[1], x[0]))
    return merged[:limit]


# ---------------------------------------------------------------------- stream ids


def parse_id(stream_id: str) -> tuple[int, int]:
    """A stream id (``ms-seq``, or ``ms``) as a pair of numbers; ValueError if malformed."""
    ms, sep, seq = stream_id.partition("-")
    if not ms.isdigit() or (sep and not seq.isdigit()):
        raise ValueError(f"not a stream id: {stream_id!r:.40}")
    return int(ms), int(seq) if sep else 0


def format_id(parts: tuple[int, int]) -> str:
    """The text of a stream id."""
    return f"{parts[0]}-{parts[1]}"


def id_after(stream_id: str) -> str:
    """The smallest stream id greater than ``stream_id``."""
    ms, seq = parse_id(stream_id)
    if seq < 2**64 - 1:
        return format_id((ms, seq + 1))
    return format_id((ms + 1, 0))


def id_before(stream_id: str) -> str:
    """The greatest stream id smaller than ``stream_id`` ("0-0" for the smallest)."""
    ms, seq = parse_id(stream_id)
    if seq > 0:
        return format_id((ms, seq - 1))
    if ms > 0:
        return format_id((ms - 1, 2**64 - 1))
    return "0-0"


def min_id(ids: Iterable[str]) -> str | None:
    """The smallest of ``ids`` (None when there is none)."""
    found = [parse_id(i) for i in ids]
    return format_id(min(found)) if found else None


@dataclass(frozen=True, slots=True)
class GroupPosition:
    """What one consumer group of a stream has consumed."""

    name: str
    #: the id of the last entry delivered to the group ("0-0": none yet)
    last_delivered: str
    #: the smallest id still pending (delivered, not acknowledged), None when none is
    oldest_pending: str | None = None


def acknowledged_through(groups: Sequence[GroupPosition]) -> str | None:
    """The id up to which (inclusive) every group has acknowledged every entry, i.e.
    the greatest id a trim may remove; None when nothing may go (no group: nobody
    reads the stream yet, so nobody has acknowledged anything).

    An entry is done when it is at or before a group's last-delivered id and not
    pending; entries after the last-delivered id were never read by the group.
    """
    if not groups:
        return None
    limits = []
    for group in groups:
        limit = group.last_delivered
        if group.oldest_pending is not None:
            limit = min(limit, id_before(group.oldest_pending), key=parse_id)
        limits.append(limit)
    lowest = min_id(limits)
    return None if lowest is None or lowest == "0-0" else lowest


def trim_bound(*bounds: str | None) -> str | None:
    """The greatest id every one of ``bounds`` allows to remove (each the last id its
    reader allows, None: that reader allows nothing); None when nothing may go."""
    if any(b is None for b in bounds):
        return None
    lowest = min_id(b for b in bounds if b is not None)
    return None if lowest is None or lowest == "0-0" else lowest


def id_time(stream_id: str) -> float:
    """Redis' clock (UNIX seconds) when the entry ``stream_id`` was added."""
    return parse_id(stream_id)[0] / 1000.0


def archive_day(stream_id: str) -> str:
    """The UTC day (``YYYY-MM-DD``) an entry is archived under: its stream id's time."""
    return time.strftime("%Y-%m-%d", time.gmtime(parse_id(stream_id)[0] // 1000))


def split_by_day(ids: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(day, start, end)`` runs of consecutive ``ids`` (in stream order) that fall on
    one UTC day: what goes into one archive file each."""
    out: list[tuple[str, int, int]] = []
    for i, stream_id in enumerate(ids):
        day = archive_day(stream_id)
        if out and out[-1][0] == day:
            out[-1] = (day, out[-1][1], i + 1)
        else:
            out.append((day, i, i + 1))
    return out


# ---------------------------------------------------------------------- lost writes


@dataclass(frozen=True, slots=True)
class Mark:
    """What a worker last saw of one partition's history, kept in a local file."""

    #: the instance it was seen in (its creation time): another instance is not a loss
    instance: str
    #: the newest journal id seen
    journal: str
    #: the FLUID generator counter seen (0: not recorded)
    fluid_gen: int = 0


@dataclass(frozen=True, slots=True)
class Loss:
    """History went backwards since a mark: acknowledged writes were lost."""

    what: str
    was: str
    now: str

    def text(self) -> str:
        """One line for logs and ``fluxes status``."""
        return f"{self.what} went backwards from {self.was} to {self.now}"


def losses(mark: Mark, instance: str, journal_end: str, fluid_gen: int) -> list[Loss]:
    """What went backwards between ``mark`` and what is stored now: the journal's end
    (its last generated id) or the FLUID generator counter. A mark of another
    instance (recreated, or a new Redis on purpose) says nothing."""
    if mark.instance != instance:
        return []
    out = []
    if parse_id(journal_end) < parse_id(mark.journal):
        out.append(Loss("journal", mark.journal, journal_end))
    if fluid_gen < mark.fluid_gen:
        out.append(Loss("FLUID generator counter", str(mark.fluid_gen), str(fluid_gen)))
    return out
