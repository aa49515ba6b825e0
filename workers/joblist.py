"""The job-list worker: keeps the read model in step with the journal.

Each partition's journal is folded by one job-list worker at a time, the
holder of the partition's job-list lease; other job-list workers stand by
and take a partition over within the lease time when its holder dies (at
once when it stops cleanly). The holder reads the journal after the folded
position, folds entries into summaries (:mod:`fluxes.domain.joblist.model`) and
writes each block with the new position in one fenced step
(:mod:`fluxes.store.joblist`), so a new holder goes on exactly where the
last write left off, and a deposed one writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from fluxes.proc import metrics
from fluxes.store.eventstore import FencedError
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_fold import Entry, PartitionFolder
from fluxes.store.keys import GROUP_JOBLIST
from fluxes.store.lease import LEASE_TTL_MS, Lease
from fluxes.store.retention import Housekeeper
from workers.base import Worker, not_the_input

READ_COUNT = 2000
BLOCK_MS = 1000
#: After a small read, wait this long before the next one so entries gather:
#: a read model may lag by tens of milliseconds, and folding ten entries per
#: round trip instead of one leaves the CPU to the workers jobs wait on.
LINGER_S = 0.02
#: A read of fewer entries than this counts as small.
SMALL_READ = 200
#: How often a worker tries to take the leases of partitions it does not fold.
ACQUIRE_EVERY_S = 0.5


class JobListWorker(Worker):
    """Folds journal entries into the job-list read model (or stands by)."""

    kind = "job-list"

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        super().__init__(instance, name)
        self.store = JobListStore(self.redis, self.keys)
        keys = self.keys
        # The holder is the worker's name: a supervised restart under the same
        # name takes its own lease back at once (with a new fencing token).
        self.leases = [Lease(self.redis, keys.joblist_lease(p), keys.joblist_fence(p),
                             self.name, lease_ttl_ms) for p in range(keys.partitions)]
        self.folders: dict[int, PartitionFolder] = {}
        self._partition_of = {keys.journal(p): p for p in range(keys.partitions)}
        self._catching_up: dict[int, float] = {}  # partition -> when this worker took it
        self.processed = 0
        self._linger_until = 0.0
        self._acquire_at = 0.0
        self.keeper = Housekeeper(instance, self.log)

    def setup(self) -> None:
        """Create the groups that keep the folded positions (leadership comes in ``step``)."""
        self.store.ensure_groups()

    def reconnected(self) -> None:
        """After a Redis outage: forget what is in memory; lead again from storage."""
        self.step_down_all("redis unavailable")
        super().reconnected()

    def status(self) -> dict[str, Any]:
        """Leadership and entries folded, for ``fluxes status``."""
        return {"leader": bool(self.folders), "partitions": sorted(self.folders),
                "processed": self.processed, **self.keeper.status()}

    def consumed(self) -> list[tuple[str, str]]:
        """Every partition journal, whose ``joblist`` group holds the folded position."""
        return [(self.keys.journal(p), GROUP_JOBLIST) for p in range(self.keys.partitions)]

    def collect_metrics(self, record: Mapping[str, Any]) -> None:
        """Lag of the journals, and jobs by state and result from the read model's counters."""
        super().collect_metrics(record)
        metrics.set_job_counts(self.store.counters())

    # ------------------------------------------------------------ leadership

    def lead(self) -> None:
        """Renew the leases held (dropping lost ones); now and then try to take the others."""
        for p in list(self.folders):
            if not self.leases[p].renew_if_due():
                self.step_down(p, "lease lost")
        now = time.monotonic()
        if len(self.folders) == len(self.leases) or now < self._acquire_at:
            return
        self._acquire_at = now + ACQUIRE_EVERY_S
        for p, lease in enumerate(self.leases):
            if p in self.folders:
                continue
            token = lease.try_acquire()
            if token is None:
                continue
            started = time.monotonic()
            folder = PartitionFolder(self.store, p, token, self.dead_letter)
            self.folders[p] = folder
            self._catching_up[p] = started
            restore = time.monotonic() - started
            metrics.RECOVERY.labels(worker=self.kind).observe(restore)
            self.log.info("leading", extra={"partition": p, "token": token,
                                            "position": folder.position,
                                            "active_jobs": len(folder.cache),
                                            "restore_s": round(restore, 3)})

    def step_down(self, partition: int, why: str) -> None:
        """Stop folding ``partition``: another holder folds it now (or will)."""
        self.folders.pop(partition, None)
        self._catching_up.pop(partition, None)
        self.leases[partition].token = None
        self.log.warning("stepping down", extra={"partition": partition, "why": why})

    def step_down_all(self, why: str) -> None:
        """Stop folding every partition (what is in memory may be ahead of the store)."""
        for p in list(self.folders):
            self.step_down(p, why)

    def teardown(self) -> None:
        """Clean stop: hand the leases over at once."""
        for lease in self.leases:
            lease.release()

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """Lead (or wait to), then fold one block of journal entries per partition led."""
        self.lead()
        if not self.folders:
            time.sleep(min(ACQUIRE_EVERY_S, self.leases[0].ttl_ms / 3000))
            return
        wait = self._linger_until - time.monotonic()
        if wait > 0 and not self.stopping:
            time.sleep(wait)
        streams = {f.stream: f.position for f in self.folders.values()}
        # A partition still catching up has entries waiting: do not block on the others.
        block = None if self._catching_up else BLOCK_MS
        reply = read_streams(self.redis, streams, READ_COUNT, block)
        got: dict[int, int] = {}
        for stream, entries in reply or []:
            p = self._partition_of[stream.decode()]
            folder = self.folders.get(p)
            if folder is None or not entries:
                continue
            got[p] = len(entries)
            try:
                try:
                    folder.fold(entries)
                except FencedError:
                    raise
                except Exception as exc:
                    if not_the_input(exc):
                        raise
                    self._fold_apart(p, entries, exc)
            except FencedError as exc:
                self.step_down(p, str(exc))
                continue
            self.processed += len(entries)
        total = sum(got.values())
        if 0 < total < SMALL_READ:
            self._linger_until = time.monotonic() + LINGER_S
        for p, began in list(self._catching_up.items()):
            if got.get(p, 0) < READ_COUNT and p in self.folders:
                # this read reached the end of the journal: the backlog is folded
                del self._catching_up[p]
                self.log.info("caught up", extra={"partition": p,
                                                  "folded": self.folders[p].folded,
                                                  "recovery_s": round(time.monotonic() - began,
                                                                      3)})
        self.housekeeping()

    def housekeeping(self) -> None:
        """Retention for the partitions led (:class:`fluxes.store.retention.Housekeeper`):
        the purge policy of ``[job-manager]``, trims of acknowledged stream entries and
        of the journal (archived first), and the check that the stored history did
        not go backwards since this host last saw it (writes lost in a power cut)."""
        self.keeper.run({p: (self.leases[p].token or "", folder.position)
                         for p, folder in self.folders.items()})


    def _fold_apart(self, partition: int, entries: Sequence[Entry], exc: Exception) -> None:
        """A block whose fold raised something the folder does not refuse by itself.

        The fold wrote nothing, but its cache may be half-changed: a folder is
        built again from storage and folds the entries one by one. An entry
        that raises is dead-lettered and the position moved past it (the
        journal is read by position: moving on is its acknowledgement; should
        the worker die between the two, the entry is dead-lettered twice,
        never lost).
        """
        self.log.error("journal block failed, folding it entry by entry", extra={
            "partition": partition, "error": f"{type(exc).__name__}: {exc}"})
        token = self.leases[partition].token
        assert token is not None
        folder = self.folders[partition] = PartitionFolder(self.store, partition, token,
                                                           self.dead_letter)
        for msg_id, fields in entries:
            try:
                folder.fold([(msg_id, fields)])
            except FencedError:
                raise
            except Exception as err:
                if not_the_input(err):
                    raise
                self.dead_letter(folder.stream, msg_id, fields, f"{type(err).__name__}: {err}")
                folder = self.folders[partition] = PartitionFolder(
                    self.store, partition, token, self.dead_letter)
                read = None if folder.entries_read is None else folder.entries_read + 1
                self.store.write(partition, [], msg_id.decode(), read, token)
                folder.position, folder.entries_read = msg_id.decode(), read


def main(instance: Instance) -> int:
    """Run the job-list worker until SIGTERM."""
    return JobListWorker(instance).run()
