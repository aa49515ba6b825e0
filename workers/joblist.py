"""The job-list worker: keeps the read model in step with the journal.

It reads each partition's journal through the ``joblist`` consumer group,
folds entries into summaries (:mod:`fluxes.joblist.model`) and writes them
with the acknowledgement in one MULTI/EXEC (:mod:`fluxes.joblist.store`).
After a crash it first re-reads its pending entries, whose effects were never
written, then carries on with new ones.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import redis

from fluxes import metrics
from fluxes.instance import Instance
from fluxes.job.events import EventError
from fluxes.job.model import TransitionError
from fluxes.job.states import JobState
from fluxes.joblist.model import Change, JobSummary, apply_entry
from fluxes.joblist.store import JobListStore
from fluxes.store.eventstore import journal_entry
from fluxes.store.groups import read_streams
from fluxes.store.keys import GROUP_JOBLIST
from workers.base import Worker

READ_COUNT = 2000
BLOCK_MS = 1000
#: After a small read, wait this long before the next one so entries gather:
#: a read model may lag by tens of milliseconds, and folding ten entries per
#: round trip instead of one leaves the CPU to the workers jobs wait on.
LINGER_S = 0.02
#: A read of fewer entries than this counts as small.
SMALL_READ = 200


class JobListWorker(Worker):
    """Folds journal entries into the job-list read model."""

    kind = "job-list"

    def __init__(self, instance: Instance, name: str | None = None) -> None:
        super().__init__(instance, name)
        self.store = JobListStore(self.redis, self.keys)
        # One consumer name per partition, stable across restarts, so a
        # restarted worker finds the pending entries of the one that died.
        self.consumer = "joblist"
        self.cache: dict[int, dict[int, JobSummary]] = {}
        self._pending = True
        self.processed = 0
        self._caught_up_from = (0.0, 0)  # when and at which count the backlog re-read began
        self._linger_until = 0.0

    def setup(self) -> None:
        """Create groups and load the active summaries."""
        self.store.ensure_groups()
        self._pending = True
        self._caught_up_from = (time.monotonic(), self.processed)
        for p in range(self.keys.partitions):
            self.cache[p] = self.store.load_active(p)

    def status(self) -> dict[str, Any]:
        """Entries folded so far."""
        return {"processed": self.processed}

    def consumed(self) -> list[tuple[str, str]]:
        """Every partition journal, read through the ``joblist`` group."""
        return [(self.keys.journal(p), GROUP_JOBLIST) for p in range(self.keys.partitions)]

    def collect_metrics(self, record: Mapping[str, Any]) -> None:
        """Lag of the journals, and jobs by state and result from the read model's counters."""
        super().collect_metrics(record)
        metrics.set_job_counts(self.store.counters())

    def step(self) -> None:
        """Fold one block of journal entries per partition."""
        wait = self._linger_until - time.monotonic()
        if wait > 0 and not self.stopping:
            time.sleep(wait)
        start = "0" if self._pending else ">"
        streams = {self.keys.journal(p): start for p in range(self.keys.partitions)}
        reply = read_streams(self.redis, streams, READ_COUNT,
                             None if self._pending else BLOCK_MS, GROUP_JOBLIST, self.consumer)
        got = 0
        for stream, entries in reply or []:
            if entries:
                got += len(entries)
                self.fold(stream.decode(), entries)
        if 0 < got < SMALL_READ:
            self._linger_until = time.monotonic() + LINGER_S
        if self._pending and got == 0:
            self._pending = False  # the backlog of the previous incarnation is done
            began, count = self._caught_up_from
            self.log.info("caught up", extra={"reread": self.processed - count,
                                              "recovery_s": round(time.monotonic() - began, 3)})

    def fold(self, stream: str, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Apply entries of one partition journal and write them with their acks."""
        partition = next(p for p in range(self.keys.partitions)
                         if self.keys.journal(p) == stream)
        cache = self.cache[partition]
        changes: list[Change] = []
        acks: list[bytes] = []
        # A comprehension, not "set - cache.keys()": that copies and walks every cached
        # job (tens of thousands pending), once per block.
        missing = {jobid for jobid in {int(f[b"j"]) for _, f in entries
                                       if f.get(b"j", b"").isdigit()} if jobid not in cache}
        if missing:
            for jobid, summary in zip(sorted(missing),
                                      self.store.get_many(sorted(missing)), strict=True):
                if summary is not None:
                    cache[jobid] = summary
        for msg_id, fields in entries:
            acks.append(msg_id)
            try:
                entry = journal_entry(msg_id, fields)
                change = apply_entry(cache.get(entry.jobid), entry.jobid, entry.event(),
                                     entry.extra_dict())
            except (KeyError, ValueError, EventError, TransitionError) as exc:
                self.dead_letter(stream, msg_id, fields, f"{type(exc).__name__}: {exc}")
                continue
            changes.append(change)
            if change.summary.job.state is JobState.INACTIVE:
                cache.pop(entry.jobid, None)
            else:
                cache[entry.jobid] = change.summary
        try:
            self.store.write(partition, changes, acks)
        except redis.ConnectionError:
            # Nothing was written: drop the cache so it is reloaded from what is stored.
            self.cache[partition] = {}
            self._pending = True
            raise
        self.processed += len(acks)


def main(instance: Instance) -> int:
    """Run the job-list worker until SIGTERM."""
    return JobListWorker(instance).run()
