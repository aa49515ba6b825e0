"""The web server's time index: every partition's journal folded, with snapshots.

One per web server process (a cache: several servers each keep their own, and
a restarted one builds it again). :meth:`TimeIndex.build` folds the archive
(when the journal was trimmed and the archive is reachable from this host)
and the journal; :meth:`TimeIndex.follow` folds what was added since, and is
what the server's follower thread calls in a loop, handing the new entries on
to the live views. :meth:`TimeIndex.moment` gives every job as it was at a
time (:mod:`fluxes.web.timefold`).

The journal is public (docs/security.md), so the index is read with the
server's own connection and shared by every session.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fluxes.domain.job.record import JobRecord
from fluxes.store.direct import Direct
from fluxes.store.errors import StoreError
from fluxes.store.eventstore import UNTIL_MARGIN_S
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.web.timefold import (
    SNAPSHOT_EVERY,
    PartitionFold,
    PartitionMoment,
    RawEntry,
    fold_until,
    job_and_stamp,
    merge_newest_first,
)

#: Entries per XRANGE while building or folding on.
READ_BLOCK = 5_000
#: How long a request for the past waits for the index's first build.
BUILD_WAIT_S = 60.0


class IndexNotReady(Exception):
    """The index is still being built."""


@dataclass
class Moment:
    """Every partition as it was at ``at``."""

    at: float
    parts: list[PartitionMoment]
    #: history before this time is gone (trimmed, not in a reachable archive)
    purged_before: float | None

    def get(self, jobid: int, partitions: int) -> JobRecord | None:
        """The job's record at the time (None: not submitted yet, purged, unknown)."""
        return self.parts[jobid % partitions].get(jobid)

    def active(self) -> list[JobRecord]:
        """Every job active at the time, newest submission first."""
        out = [r for part in self.parts for r in part.active()]
        out.sort(key=lambda r: (r.job.t_submit, r.id), reverse=True)
        return out

    def ended(self) -> Iterator[JobRecord]:
        """Every job that had ended by the time, the last to end first."""
        return merge_newest_first([part.ended() for part in self.parts])


def _raw_entries(reply: Any) -> list[RawEntry]:
    """An XRANGE reply (raw lists, or redis-py's dicts on a cluster) as raw entries."""
    out: list[RawEntry] = []
    for sid, fields in reply or []:
        flat = [x for kv in fields.items() for x in kv] if isinstance(fields, dict) \
            else list(fields)
        out.append((sid if isinstance(sid, bytes) else str(sid).encode(), flat))
    return out


class TimeIndex:
    """Folded journals with snapshots, for time travel and the Gantt chart."""

    def __init__(self, instance: Instance, every: int = SNAPSHOT_EVERY,
                 margin_s: float = UNTIL_MARGIN_S) -> None:
        self.instance = instance
        self.keys = instance.keys
        self.every = every
        self.margin_s = margin_s
        self.folds: list[PartitionFold] = []
        self.purged_before: float | None = None
        self.ready = threading.Event()
        self._archives: list[Any] = []
        self._lock = threading.Lock()
        #: seconds the last build took (for ``fluxes bench web``)
        self.build_s = 0.0

    # ------------------------------------------------------------ reading

    def _xrange(self, partition: int, after: str, count: int = READ_BLOCK,
                upto: str = "+") -> list[RawEntry]:
        key = self.keys.journal(partition)
        start = "-" if after in ("0-0", "-") else "(" + after
        return _raw_entries(Direct.of(self.instance.redis, key).call(
            "XRANGE", key, start, upto, "COUNT", count))

    def _entries_after(self, partition: int, after: str) -> Iterator[RawEntry]:
        """Entries after ``after``: from the archive first (what was trimmed), then the
        journal; lazily, in blocks."""
        archive = self._archives[partition] if self._archives else None
        if archive is not None:
            for block in archive.read(after):
                yield from block
                after = block[-1][0].decode()
        while True:
            block = self._xrange(partition, after)
            yield from block
            if len(block) < READ_BLOCK:
                return
            after = block[-1][0].decode()

    # ------------------------------------------------------------ building, following

    def build(self) -> None:
        """Fold every partition's history from its beginning (archive, then journal)."""
        from fluxes.store.retention import archive_for, read_trim_state

        started = time.perf_counter()
        client = self.instance.redis
        config = self.instance.config()
        folds: list[PartitionFold] = []
        archives: list[Any] = []
        gaps: list[float] = []
        for p in range(self.keys.partitions):
            trim = read_trim_state(client, self.keys, p)
            archive = None
            if trim.was_trimmed:
                try:
                    archive = archive_for(client, self.keys, config.retention, p)
                except (OSError, StoreError):
                    archive = None
            archives.append(archive)
            gap = self._gap(p, trim, archive)
            if gap is not None:
                gaps.append(gap)
            folds.append(PartitionFold(self.every, trimmed=trim.was_trimmed))
        self._archives = archives
        for p, fold in enumerate(folds):
            fold.feed(self._entries_after(p, "0-0"))
        with self._lock:
            self.folds = folds
            self.purged_before = max(gaps) if gaps else None
        self.build_s = time.perf_counter() - started
        self.ready.set()

    def _gap(self, partition: int, trim: Any, archive: Any) -> float | None:
        """When the partition's readable history starts, if it lost its beginning."""
        if not trim.was_trimmed:
            return None
        if archive is None or not archive.holds(trim.trimmed):
            return float(trim.trimmed_t) if trim.trimmed_t is not None else 0.0
        if trim.lost_until != "0-0":
            return float(trim.lost_t) if trim.lost_t is not None else 0.0
        return None

    def follow(self, block_ms: int) -> list[tuple[int, RawEntry]]:
        """Fold the entries added since (waiting up to ``block_ms`` for one); return them
        with their partition."""
        if not self.ready.is_set():
            self.build()
        streams = {self.keys.journal(p): fold.position if fold.position != "0-0" else "0-0"
                   for p, fold in enumerate(self.folds)}
        reply = read_streams(self.instance.redis, streams, READ_BLOCK, block_ms)
        out: list[tuple[int, RawEntry]] = []
        for stream, entries in reply:
            name = stream.decode() if isinstance(stream, bytes) else str(stream)
            partition = next(p for p in range(self.keys.partitions)
                             if self.keys.journal(p) == name)
            raws = [(sid, [x for kv in fields.items() for x in kv]) for sid, fields in entries]
            with self._lock:
                self.folds[partition].feed(raws)
            out += [(partition, raw) for raw in raws]
        return out

    # ------------------------------------------------------------ queries

    def wait_ready(self, timeout: float = BUILD_WAIT_S) -> None:
        """Wait for the first build; IndexNotReady when it takes longer than ``timeout``."""
        if not self.ready.wait(timeout):
            raise IndexNotReady("the time-travel index is still being built; try again")

    def moment(self, at: float) -> Moment:
        """Every job as it was at ``at`` (UNIX time)."""
        self.wait_ready()
        parts = []
        for p, fold in enumerate(self.folds):
            with self._lock:
                base = fold.base_for(at)
            parts.append(fold_until(fold, at, self._entries_after(p, base.position),
                                    self.margin_s))
        return Moment(at, parts, self.purged_before)

    def span(self) -> tuple[float | None, float | None]:
        """The first and last timestamps the index has seen (None: an empty journal)."""
        self.wait_ready()
        first = min((f.min_stamp for f in self.folds), default=math.inf)
        last = max((f.max_stamp for f in self.folds), default=-math.inf)
        return (first if first < math.inf else None, last if last > -math.inf else None)

    def steps(self, at: float, count: int, backwards: bool = False
              ) -> list[tuple[float, int, str]]:
        """The next ``count`` events after ``at`` (before it, ``backwards``): their time, job
        and name, read from the journals around ``at`` (stream ids follow Redis' clock,
        close to the stamps)."""
        from fluxes.web.timefold import entry_name

        found: list[tuple[float, int, str]] = []
        margin = math.ceil(self.margin_s * 1000)
        pivot = int(at * 1000)
        for p in range(self.keys.partitions):
            key = self.keys.journal(p)
            direct = Direct.of(self.instance.redis, key)
            if backwards:
                reply = direct.call("XREVRANGE", key, f"{pivot + margin}-0", "-",
                                    "COUNT", 4 * count + 200)
            else:
                reply = direct.call("XRANGE", key, f"{max(pivot - margin, 0)}-0", "+",
                                    "COUNT", 4 * count + 200)
            for _sid, fields in _raw_entries(reply):
                stamp = job_and_stamp(fields)
                if stamp is None:
                    continue
                jobid, t = stamp
                if (t < at) if backwards else (t > at):
                    found.append((t, jobid, entry_name(fields).decode("utf-8", "replace")))
        found.sort(reverse=backwards)
        return found[:count]
