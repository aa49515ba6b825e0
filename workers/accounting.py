"""The accounting worker: folds every partition's journal into the usage read model.

Each partition is folded by one accounting worker at a time, the holder of the
partition's accounting lease (:mod:`workers.fold`), exactly as the job-list
worker folds the job list; each block is written with the new position in one
fenced step (:mod:`fluxes.store.accounting`).

Usage feeds fair share, which the job manager recomputes every
``reprioritize-interval`` (a minute by default): the worker may lag by a
fraction of a second, so after a small read it waits ``linger_s`` for entries
to gather, which keeps its CPU far from the job path's.
"""

from __future__ import annotations

from fluxes.domain.accounting.usage import Changes
from fluxes.store.accounting import PartitionFolder, UsageStore
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_ACCOUNTING
from fluxes.store.lease import LEASE_TTL_MS
from workers.fold import Folder, FoldWorker


class AccountingWorker(FoldWorker):
    """Folds journal entries into usage (or stands by)."""

    kind = "accounting"
    group = GROUP_ACCOUNTING
    linger_s = 0.25
    small_read = 500
    store: UsageStore

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        self.store = UsageStore(instance.redis, instance.keys)
        super().__init__(instance, name, lease_ttl_ms)
        self.half_life = instance.config().accounting.half_life

    def lease_keys(self, partition: int) -> tuple[str, str]:
        """The partition's accounting lease and fence."""
        return self.keys.acct_lease(partition), self.keys.acct_fence(partition)

    def new_folder(self, partition: int, token: str) -> PartitionFolder:
        """A usage folder of ``partition`` loaded from the usage model."""
        return PartitionFolder(self.store, partition, token, self.dead_letter, self.half_life)

    def pass_over(self, partition: int, position: str, entries_read: int | None,
                  token: str) -> None:
        """Move the folded position past an entry alone."""
        self.store.write(partition, Changes(), position, entries_read, token)

    def active_jobs(self, folder: Folder) -> int:
        """Jobs whose allocation the folder holds open."""
        return len(folder.state.open) if isinstance(folder, PartitionFolder) else 0


def main(instance: Instance) -> int:
    """Run the accounting worker until SIGTERM."""
    return AccountingWorker(instance).run()
