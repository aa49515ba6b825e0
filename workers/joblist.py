"""The job-list worker: keeps the read model in step with the journal.

Each partition's journal is folded by one job-list worker at a time, the
holder of the partition's job-list lease (:mod:`workers.fold`). The holder
folds entries into summaries (:mod:`fluxes.domain.joblist.model`) and writes
each block with the new position in one fenced step (:mod:`fluxes.store.joblist`).
It also runs retention for the partitions it leads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fluxes.proc import metrics
from fluxes.store.instance import Instance
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_fold import PartitionFolder
from fluxes.store.keys import GROUP_JOBLIST
from fluxes.store.lease import LEASE_TTL_MS
from fluxes.store.retention import Housekeeper
from workers.fold import Folder, FoldWorker


class JobListWorker(FoldWorker):
    """Folds journal entries into the job-list read model (or stands by)."""

    kind = "job-list"
    group = GROUP_JOBLIST
    #: a read model may lag by tens of milliseconds
    linger_s = 0.02
    small_read = 200
    store: JobListStore

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        self.store = JobListStore(instance.redis, instance.keys)
        super().__init__(instance, name, lease_ttl_ms)
        self._catching_up: dict[int, float] = {}  # partition -> when this worker took it
        self.keeper = Housekeeper(instance, self.log)

    def lease_keys(self, partition: int) -> tuple[str, str]:
        """The partition's job-list lease and fence."""
        return self.keys.joblist_lease(partition), self.keys.joblist_fence(partition)

    def new_folder(self, partition: int, token: str) -> PartitionFolder:
        """A job-list folder of ``partition`` loaded from the read model."""
        return PartitionFolder(self.store, partition, token, self.dead_letter)

    def pass_over(self, partition: int, position: str, entries_read: int | None,
                  token: str) -> None:
        """Move the folded position past an entry alone."""
        self.store.write(partition, [], position, entries_read, token)

    def active_jobs(self, folder: Folder) -> int:
        """Active job summaries the folder caches."""
        return len(folder.cache) if isinstance(folder, PartitionFolder) else 0

    def status(self) -> dict[str, Any]:
        """Leadership and entries folded, with retention's facts, for ``fluxes status``."""
        return {**super().status(), **self.keeper.status()}

    def collect_metrics(self, record: Mapping[str, Any]) -> None:
        """Lag of the journals, and jobs by state and result from the read model's counters."""
        super().collect_metrics(record)
        metrics.set_job_counts(self.store.counters())

    def took(self, partition: int, folder: Folder, started: float) -> None:
        """A partition taken over has a backlog to catch up with: count its recovery."""
        self._catching_up[partition] = started
        metrics.RECOVERY.labels(worker=self.kind).observe(time.monotonic() - started)

    def step_down(self, partition: int, why: str) -> None:
        """Stop folding ``partition``: another holder folds it now (or will)."""
        self._catching_up.pop(partition, None)
        super().step_down(partition, why)

    def read_wait_ms(self) -> int | None:
        """A partition still catching up has entries waiting: do not block on the others."""
        return None if self._catching_up else self.block_ms

    def folded_round(self, got: dict[int, int]) -> None:
        """Note the partitions whose backlog is folded, then run retention."""
        for p, began in list(self._catching_up.items()):
            if got.get(p, 0) < self.read_count and p in self.folders:
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


def main(instance: Instance) -> int:
    """Run the job-list worker until SIGTERM."""
    return JobListWorker(instance).run()
