"""Time travel over one partition's journal, pure: folded snapshots, then a short fold.

``fluxes eventlog replay --until=T`` folds the whole journal (a million events
take seconds). The web server answers "the machine at T" in well under a
second by keeping, per partition, a running fold of the journal
(:class:`PartitionFold`) that drops a :class:`Snapshot` every few thousand
entries: the records of the jobs still active at that point (jobs that ended
are kept once, in the order they ended, with the count of them each snapshot
includes). The state at T is then the newest snapshot every entry of which
is stamped by T, folded on to T with the rules of
:meth:`fluxes.store.eventstore.EventStore.replay` (``until_time``): each
job's entries are folded up to, not including, its first one stamped later
than T, and reading goes on for a margin of Redis' clock past the first such
entry (writers' clocks disagree a little). :func:`fold_until` does that part;
tests check that the result equals ``replay(until_time=T)``.

Nothing here talks to Redis: entries come in as raw journal entries (the
stream id and its flat field list, as ``XRANGE`` returns them unparsed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes.domain.job import events as ev
from fluxes.domain.job.fastfold import fold_common
from fluxes.domain.job.model import TransitionError
from fluxes.domain.job.record import JobRecord, apply_record, unpacked_extra
from fluxes.domain.job.states import JobState

#: A raw journal entry: its stream id and flat field list (j, s, n, t, c, x).
RawEntry = tuple[bytes, list[bytes]]

#: Entries folded between two snapshots at least (more while many jobs are active,
#: so that copying their records costs a bounded share of the fold).
SNAPSHOT_EVERY = 10_000
_PURGE = b"purge"
_SUBMIT = b"submit"
_TERMINAL = frozenset({b"clean", b"invalidate"})
_INACTIVE = JobState.INACTIVE


@dataclass(frozen=True)
class Snapshot:
    """The fold of a partition's journal up to an entry (which one: ``position``)."""

    #: the id of the last entry folded ("0-0": none)
    position: str
    #: entries folded
    count: int
    #: the latest timestamp among them (-inf: none): the snapshot is the state at any
    #: time T >= max_stamp, up to the entries that follow it
    max_stamp: float
    #: the records of the jobs not yet inactive
    records: Mapping[int, JobRecord]
    #: jobs whose entries do not fold, with why
    broken: Mapping[int, str]
    #: how many of the partition's ended jobs (:attr:`PartitionFold.ended`) it includes
    ended: int


EMPTY = Snapshot("0-0", 0, -math.inf, {}, {}, 0)


def entry_name(fields: list[bytes]) -> bytes:
    """The event name of a journal entry (b"" when it has none)."""
    if len(fields) > 5 and fields[4] == b"n":
        return fields[5]
    if len(fields) > 3 and fields[2] == b"n":
        return fields[3]
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"n":
            return fields[i + 1]
    return b""


def job_and_stamp(fields: list[bytes]) -> tuple[int, float] | None:
    """A journal entry's job id and timestamp; None when it lacks either."""
    job = stamp = None
    if len(fields) > 7 and fields[0] == b"j" and fields[6] == b"t":
        job, stamp = fields[1], fields[7]
    else:
        for i in range(0, len(fields) - 1, 2):
            if fields[i] == b"j":
                job = fields[i + 1]
            elif fields[i] == b"t":
                stamp = fields[i + 1]
    try:
        return (int(job), float(stamp)) if job is not None and stamp is not None else None
    except ValueError:
        return None


def id_ms(stream_id: bytes) -> int:
    """The milliseconds part of a stream id (Redis' clock when it was added)."""
    return int(stream_id.partition(b"-")[0])


def decode_entry(fields: list[bytes]) -> tuple[int, int | None, ev.Event, dict[str, Any] | None]:
    """A journal entry's job id, eventlog position (None: journal-only), event and extras
    (None when it has none); EventError when it does not decode."""
    pairs = dict(zip(fields[::2], fields[1::2], strict=False))
    try:
        jobid = int(pairs[b"j"])
        seq = pairs.get(b"s")
        name = pairs[b"n"].decode()
        stamp = float(pairs[b"t"])
        ctx = pairs.get(b"c")
        context = orjson.loads(ctx) if ctx else None
        raw_extra = pairs.get(b"x")
        extra = orjson.loads(raw_extra) if raw_extra else None
    except (KeyError, ValueError) as exc:  # orjson's errors are ValueErrors
        raise ev.EventError(f"journal entry: {str(exc)[:80]}") from None
    if extra is not None:
        extra = unpacked_extra(extra) or {}
    return jobid, int(seq) if seq is not None else None, ev.decode(name, stamp, context), \
        extra or None


def _fold_one(records: dict[int, JobRecord], broken: dict[int, str], sid: bytes,
              fields: list[bytes]) -> None:
    """Fold one entry into ``records`` as replay does (a failure marks the job broken)."""
    try:
        entry = decode_entry(fields)
    except ev.EventError as exc:
        found = job_and_stamp(fields)
        if found is not None:
            broken[found[0]] = str(exc)
            records.pop(found[0], None)
        return
    jobid, seq, event, extra = entry
    if jobid in broken:
        return
    record = records.get(jobid)
    if record is not None and seq is not None and seq < record.job.seq:
        return  # already in the record (a snapshot's jobs may be met again)
    try:
        records[jobid] = apply_record(record, jobid, event, extra)
    except (ev.EventError, TransitionError, ValueError) as exc:
        broken[jobid] = str(exc)
        records.pop(jobid, None)


class PartitionFold:
    """The running fold of one partition's journal, with snapshots along the way.

    ``trimmed``: the journal (and whatever archive is read before it) lost its
    beginning, so an entry of a job first seen without its ``submit`` belongs to
    a job purged long ago and is passed over (as replay does).
    """

    def __init__(self, every: int = SNAPSHOT_EVERY, trimmed: bool = False) -> None:
        self.every = every
        self.trimmed = trimmed
        #: jobs not yet inactive, folded
        self.records: dict[int, JobRecord] = {}
        self.broken: dict[int, str] = {}
        #: jobs that ended, in the order they did (kept after a purge: time travel
        #: shows them as they were)
        self.ended: list[JobRecord] = []
        #: jobid -> its index in :attr:`ended`
        self.ended_at: dict[int, int] = {}
        #: jobid -> the entry count at its ``purge`` entry, and the purge's stamp
        self.purged: dict[int, tuple[int, float]] = {}
        self.count = 0
        self.position = "0-0"
        self.max_stamp = -math.inf
        self.min_stamp = math.inf
        self.snapshots: list[Snapshot] = [EMPTY]
        #: entries that are not journal entries (no job id or time): passed over
        self.malformed = 0
        # jobs first seen at their submit, folded whole when they end (most jobs
        # have the common history, which fold_common folds in one step)
        self._buffered: dict[int, list[RawEntry]] = {}
        self._orphans: set[int] = set()

    def feed(self, entries: Iterable[RawEntry]) -> None:
        """Fold journal entries (in journal order) and take snapshots as they come due."""
        for raw in entries:
            self._feed_one(raw)
            if self.count - self.snapshots[-1].count >= max(self.every, 2 * len(self.records)):
                self.snapshots.append(self.snapshot())

    def _feed_one(self, raw: RawEntry) -> None:
        sid, fields = raw
        found = job_and_stamp(fields)
        if found is None:
            self.malformed += 1
            self.position = sid.decode()
            return
        jobid, stamp = found
        self.count += 1
        self.position = sid.decode()
        self.max_stamp = max(self.max_stamp, stamp)
        self.min_stamp = min(self.min_stamp, stamp)
        name = entry_name(fields)
        if name == _PURGE:
            self._buffered.pop(jobid, None)
            self.records.pop(jobid, None)
            self.broken.pop(jobid, None)
            self.purged[jobid] = (self.count, stamp)
            return
        pending = self._buffered.get(jobid)
        if pending is not None:
            pending.append(raw)
            if name in _TERMINAL:
                del self._buffered[jobid]
                self._fold_whole(jobid, pending)
            return
        if self.trimmed and name != _SUBMIT and jobid not in self.records \
                and jobid not in self.broken:
            self._orphans.add(jobid)
            return
        if jobid in self._orphans:
            return
        if name == _SUBMIT and jobid not in self.records and jobid not in self.broken \
                and jobid not in self.ended_at:
            self._buffered[jobid] = [raw]
            return
        if jobid in self.broken:
            return
        _fold_one(self.records, self.broken, sid, fields)
        self._settle(jobid)

    def _fold_whole(self, jobid: int, raws: list[RawEntry]) -> None:
        record = fold_common(jobid, [fields for _sid, fields in raws])
        if record is not None:
            self.records[jobid] = record
        else:
            for sid, fields in raws:
                if jobid in self.broken:
                    break
                _fold_one(self.records, self.broken, sid, fields)
        self._settle(jobid)

    def _settle(self, jobid: int) -> None:
        """Move a job that became inactive from the active records to the ended list."""
        record = self.records.get(jobid)
        if record is not None and record.job.state is _INACTIVE:
            del self.records[jobid]
            self.ended_at[jobid] = len(self.ended)
            self.ended.append(record)

    def _flush(self) -> None:
        """Fold the buffered jobs (all active) entry by entry: a snapshot needs them."""
        buffered, self._buffered = self._buffered, {}
        for jobid, raws in buffered.items():
            for sid, fields in raws:
                if jobid in self.broken:
                    break
                _fold_one(self.records, self.broken, sid, fields)
            self._settle(jobid)

    def snapshot(self) -> Snapshot:
        """The fold as it stands (not kept: :meth:`feed` keeps its own)."""
        self._flush()
        return Snapshot(self.position, self.count, self.max_stamp, dict(self.records),
                        dict(self.broken), len(self.ended))

    def base_for(self, until_time: float) -> Snapshot:
        """The newest snapshot whose entries are all stamped by ``until_time``."""
        snaps = self.snapshots
        lo, hi = 0, len(snaps)
        while lo < hi:  # max_stamp never decreases along the snapshots
            mid = (lo + hi) // 2
            if snaps[mid].max_stamp <= until_time:
                lo = mid + 1
            else:
                hi = mid
        return snaps[max(lo - 1, 0)]


@dataclass
class PartitionMoment:
    """One partition as it was at a time: what :func:`fold_until` folded on from its base
    snapshot, plus the jobs that had ended by the snapshot."""

    fold: PartitionFold
    base: Snapshot
    #: the records folded on from the base (active at the time, or ended since the base)
    records: dict[int, JobRecord]
    broken: dict[int, str]
    #: jobs purged by the time, met after the base
    dropped: set[int] = field(default_factory=set)

    def _hidden(self, jobid: int) -> bool:
        if jobid in self.dropped:
            return True
        purge = self.fold.purged.get(jobid)
        return purge is not None and purge[0] <= self.base.count

    def get(self, jobid: int) -> JobRecord | None:
        """The job's record at the time (None: not submitted yet, purged, or unknown)."""
        record = self.records.get(jobid)
        if record is not None:
            return record
        at = self.fold.ended_at.get(jobid)
        if at is None or at >= self.base.ended or self._hidden(jobid):
            return None
        return self.fold.ended[at]

    def active(self) -> list[JobRecord]:
        """The jobs active at the time."""
        return [r for r in self.records.values() if r.job.state is not _INACTIVE]

    def ended(self) -> Iterator[JobRecord]:
        """The jobs that had ended by the time, those that ended last first."""
        late = sorted((r for r in self.records.values() if r.job.state is _INACTIVE),
                      key=lambda r: (r.job.t_inactive or 0.0, r.id), reverse=True)
        yield from late
        ended = self.fold.ended
        for i in range(self.base.ended - 1, -1, -1):
            record = ended[i]
            if not self._hidden(record.id):
                yield record


def fold_until(fold: PartitionFold, until_time: float, after_base: Iterable[RawEntry],
               margin_s: float) -> PartitionMoment:
    """The partition at ``until_time``: the base snapshot (:meth:`PartitionFold.base_for`)
    folded on with ``after_base``, the journal entries after the snapshot's position,
    read lazily (reading stops ``margin_s`` of Redis' clock past the first entry
    stamped later than ``until_time``)."""
    base = fold.base_for(until_time)
    records = dict(base.records)
    broken = dict(base.broken)
    dropped: set[int] = set()
    frozen: set[int] = set()
    orphans: set[int] = set()
    stop_ms: int | None = None
    margin_ms = math.ceil(margin_s * 1000)
    for sid, fields in after_base:
        if stop_ms is not None and id_ms(sid) > stop_ms:
            break
        found = job_and_stamp(fields)
        if found is None:
            continue
        jobid, stamp = found
        name = entry_name(fields)
        if name == _PURGE:
            if stamp <= until_time:
                records.pop(jobid, None)
                broken.pop(jobid, None)
                dropped.add(jobid)
            continue
        if jobid in frozen or jobid in orphans:
            continue
        if fold.trimmed and name != _SUBMIT and jobid not in records and jobid not in broken:
            orphans.add(jobid)
            continue
        if stamp > until_time:
            frozen.add(jobid)
            if stop_ms is None:
                stop_ms = id_ms(sid) + margin_ms
            continue
        if jobid in broken:
            continue
        _fold_one(records, broken, sid, fields)
    return PartitionMoment(fold, base, records, broken, dropped)


def merge_newest_first(parts: Sequence[Iterator[JobRecord]]) -> Iterator[JobRecord]:
    """Ended jobs of several partitions, the last to end first."""
    import heapq

    keyed = [((-(r.job.t_inactive or 0.0), -r.id, r) for r in it) for it in parts]
    for _t, _id, record in heapq.merge(*keyed, key=lambda x: (x[0], x[1])):
        yield record
