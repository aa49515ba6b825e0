"""Folding one partition's journal into its read model, as the holder of its lease.

The job-list worker keeps one :class:`PartitionFolder` per partition it
leads; ``fluxes admin rebuild-joblist`` uses one to refold a partition from
the start. A folder is only valid while its fencing token is: once a write
raises (fenced, or Redis gone), what it caches may be ahead of what is stored,
so its owner drops it and builds a new one from storage.

The folder keeps in memory the summaries of at most :data:`CACHED_JOBS` active jobs,
those that had an entry most recently: a job's entries mostly come within seconds
of each other, while a pending job may wait for hours, and the read model in
Redis holds every summary anyway. A job that had no entry for a while is read
back from there (one round trip per block, as for a job not seen before) when
its next entry comes, so the memory of the job-list worker is bounded however
many jobs are pending (issue 26: ~700 B a pending job before).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from fluxes.domain.job.events import EventError
from fluxes.domain.job.model import TransitionError
from fluxes.domain.job.record import apply_record
from fluxes.domain.job.states import JobState
from fluxes.domain.joblist.fastapply import fast_apply
from fluxes.domain.joblist.model import JobSummary, change_between
from fluxes.domain.retention import PURGE_EVENT
from fluxes.store.eventstore import journal_entry
from fluxes.store.joblist import JobListStore
from fluxes.store.retention import read_trim_state

#: Active job summaries a folder keeps in memory at most (~0.7 KB each).
CACHED_JOBS = 10_000

#: The journal-only entry of a purged job.
_PURGE = PURGE_EVENT.encode()

#: A journal entry as a stream read returns it: (id, {field: value}).
Entry = tuple[bytes, Mapping[bytes, bytes]]
#: Called for an entry that cannot be folded: (stream, id, fields, error).
BadEntry = Callable[[str, bytes, Mapping[bytes, bytes], str], None]


class PartitionFolder:
    """The in-memory state of folding one partition: active summaries and the position."""

    def __init__(self, store: JobListStore, partition: int, token: str,
                 on_bad: BadEntry, cached_jobs: int | None = None) -> None:
        self.store = store
        #: summaries kept in memory at most (the least recently changed go first)
        self.cached_jobs = max(CACHED_JOBS if cached_jobs is None else cached_jobs, 1)
        self.partition = partition
        self.token = token
        self.on_bad = on_bad
        self.stream = store.keys.journal(partition)
        #: active summaries by job id, least recently changed first
        self.cache: dict[int, JobSummary] = store.load_active(partition, self.cached_jobs)
        self.position, self.entries_read = store.position(partition)
        #: the journal was trimmed: entries of jobs whose submit went with the trim
        #: (purged jobs, fluxes/store/retention.py) are passed over, not refused
        self.trimmed = read_trim_state(store.redis, store.keys, partition).was_trimmed
        #: entries folded by this folder, bad ones included
        self.folded = 0

    def fold(self, entries: Sequence[Entry]) -> None:
        """Fold ``entries`` (the next ones after :attr:`position`, in order) and write them
        with the new position in one fenced step.

        Entries that cannot be folded go to ``on_bad`` and are passed over.
        Raises FencedError when the token is stale (nothing written).
        """
        if not entries:
            return
        cache = self.cache
        self._load_missing(entries)
        # Each job's summary before the block and its newest: the read model gets one
        # change per job and block, however many of its entries the block holds.
        before: dict[int, JobSummary | None] = {}
        newest: dict[int, JobSummary] = {}
        purged: set[int] = set()
        for msg_id, fields in entries:
            name = fields.get(b"n")
            if name == _PURGE:
                raw = fields.get(b"j", b"")
                if not raw.isdigit():
                    self.on_bad(self.stream, msg_id, fields, "purge entry without a job id")
                    continue
                jobid = int(raw)
                if jobid not in before:
                    before[jobid] = cache.get(jobid)
                newest.pop(jobid, None)
                purged.add(jobid)
                continue
            raw = fields.get(b"j", b"")
            summary = None
            if raw.isdigit():
                # the common entries, read straight from their fields (fastapply.py)
                jobid = int(raw)
                current = newest.get(jobid)
                if current is None:
                    current = cache.get(jobid)
                if jobid not in purged:
                    summary = fast_apply(current, jobid, fields)
            if summary is None:
                folded = self._fold_entry(msg_id, fields, newest, purged)
                if folded is None:
                    continue
                jobid, current, summary = folded
            if jobid not in before:
                before[jobid] = current
            newest[jobid] = summary
        changes = [change_between(before[jobid], summary) for jobid, summary in newest.items()]
        self._update_cache(newest, purged)
        position = entries[-1][0].decode()
        read = None if self.entries_read is None else self.entries_read + len(entries)
        self.store.write(self.partition, changes, position, read, self.token,
                         {jobid: before[jobid] for jobid in purged})
        self.position, self.entries_read = position, read
        self.folded += len(entries)

    def _fold_entry(self, msg_id: bytes, fields: Mapping[bytes, bytes],
                    newest: Mapping[int, JobSummary], purged: set[int]
                    ) -> tuple[int, JobSummary | None, JobSummary] | None:
        """Fold one entry the general way: its job, its summary before and after; None
        when it changes nothing (refused: given to ``on_bad``; or passed over)."""
        name = fields.get(b"n")
        try:
            entry = journal_entry(msg_id, fields)
            jobid = entry.jobid
            if jobid in purged:
                return None  # nothing follows a purge; a stray entry changes nothing
            current = newest.get(jobid)
            if current is None:
                current = self.cache.get(jobid)
            if current is None and self.trimmed and name != b"submit":
                return None  # a job whose beginning was trimmed: purged, see above
            summary = apply_record(current, jobid, entry.event(), entry.extra_dict())
        except (KeyError, ValueError, EventError, TransitionError) as exc:
            self.on_bad(self.stream, msg_id, fields, f"{type(exc).__name__}: {exc}")
            return None
        return jobid, current, summary

    def _load_missing(self, entries: Sequence[Entry]) -> None:
        """Read into the cache the summaries of the jobs of ``entries`` it does not hold."""
        cache = self.cache
        # A comprehension, not "set - cache.keys()": that copies and walks every cached
        # job (tens of thousands pending), once per block.
        missing = {jobid for jobid in {int(f[b"j"]) for _, f in entries
                                       if f.get(b"j", b"").isdigit()} if jobid not in cache}
        if missing:
            for jobid, summary in zip(sorted(missing), self.store.get_many(sorted(missing)),
                                      strict=True):
                if summary is not None:
                    cache[jobid] = summary

    def _update_cache(self, newest: dict[int, JobSummary], purged: set[int]) -> None:
        """Keep the newest summaries of active jobs, most recently changed last; forget
        inactive and purged ones, and the least recently changed beyond
        :attr:`cached_jobs` (they are in the read model)."""
        cache = self.cache
        for jobid, summary in newest.items():
            # popped first: a dict keeps insertion order, so changed jobs move to the end
            cache.pop(jobid, None)
            if summary.job.state is not JobState.INACTIVE:
                cache[jobid] = summary
        for jobid in purged:
            cache.pop(jobid, None)
        excess = len(cache) - self.cached_jobs
        if excess > 0:
            for jobid in list(itertools.islice(cache, excess)):
                del cache[jobid]
