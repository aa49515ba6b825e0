"""The accounting worker: folds every partition's journal into the usage read model.

Each partition is folded by one accounting worker at a time, the holder of the
partition's accounting lease; others stand by and take it over within the
lease time when the holder dies (at once when it stops cleanly). The holder
reads the journal after the folded position and writes each block with the
new position in one fenced step (:mod:`fluxes.store.accounting`), exactly as
the job-list worker does, so a new holder goes on where the last write left
off and a deposed one writes nothing.

Usage feeds fair share, which the job manager recomputes every
``reprioritize-interval`` (a minute by default): the worker may lag by a
fraction of a second, so after a small read it waits ``LINGER_S`` for entries
to gather, which keeps its CPU far from the job path's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fluxes.domain.accounting.usage import Changes
from fluxes.store.accounting import Entry, PartitionFolder, UsageStore
from fluxes.store.eventstore import FencedError
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_ACCOUNTING
from fluxes.store.lease import LEASE_TTL_MS, Lease
from workers.base import Worker, not_the_input

READ_COUNT = 2000
BLOCK_MS = 1000
#: After a small read, wait this long before the next one so entries gather.
LINGER_S = 0.25
#: A read of fewer entries than this counts as small.
SMALL_READ = 500
#: How often a worker tries to take the leases of partitions it does not fold.
ACQUIRE_EVERY_S = 0.5


class AccountingWorker(Worker):
    """Folds journal entries into usage (or stands by)."""

    kind = "accounting"

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        super().__init__(instance, name)
        self.store = UsageStore(self.redis, self.keys)
        keys = self.keys
        # the worker's name holds the lease: a restart under it takes it back at once
        self.leases = [Lease(self.redis, keys.acct_lease(p), keys.acct_fence(p), self.name,
                             lease_ttl_ms) for p in range(keys.partitions)]
        self.folders: dict[int, PartitionFolder] = {}
        self._partition_of = {keys.journal(p): p for p in range(keys.partitions)}
        self.half_life = instance.config().accounting.half_life
        self.processed = 0
        self._linger_until = 0.0
        self._acquire_at = 0.0

    def setup(self) -> None:
        """Create the groups that keep the folded positions."""
        self.store.ensure_groups()

    def reconnected(self) -> None:
        """After a Redis outage: forget what is in memory; lead again from storage."""
        for p in list(self.folders):
            self.step_down(p, "redis unavailable")
        super().reconnected()

    def status(self) -> dict[str, Any]:
        """Leadership and entries folded, for ``fluxes status``."""
        return {"leader": bool(self.folders), "partitions": sorted(self.folders),
                "processed": self.processed}

    def consumed(self) -> list[tuple[str, str]]:
        """Every partition journal, whose ``accounting`` group holds the folded position."""
        return [(self.keys.journal(p), GROUP_ACCOUNTING) for p in range(self.keys.partitions)]

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
            folder = PartitionFolder(self.store, p, token, self.dead_letter, self.half_life)
            self.folders[p] = folder
            self.log.info("leading", extra={"partition": p, "token": token,
                                            "position": folder.position,
                                            "active_jobs": len(folder.state.open)})

    def step_down(self, partition: int, why: str) -> None:
        """Stop folding ``partition``: another holder folds it now (or will)."""
        self.folders.pop(partition, None)
        self.leases[partition].token = None
        self.log.warning("stepping down", extra={"partition": partition, "why": why})

    def teardown(self) -> None:
        """Clean stop: hand the leases over at once."""
        for lease in self.leases:
            lease.release()

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
        reply = read_streams(self.redis, streams, READ_COUNT, BLOCK_MS)
        total = 0
        for stream, entries in reply or []:
            p = self._partition_of[stream.decode()]
            folder = self.folders.get(p)
            if folder is None or not entries:
                continue
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
            total += len(entries)
        self.processed += total
        if 0 < total < SMALL_READ:
            self._linger_until = time.monotonic() + LINGER_S

    def _fold_apart(self, partition: int, entries: Sequence[Entry], exc: Exception) -> None:
        """A block whose fold raised something the fold does not refuse by itself (a bug):
        nothing was written, but the folder's state may be half-changed, so a new one is
        built from storage and folds the entries one by one; one that raises is
        dead-lettered and the position moved past it."""
        self.log.error("journal block failed, folding it entry by entry", extra={
            "partition": partition, "error": f"{type(exc).__name__}: {exc}"})
        token = self.leases[partition].token
        assert token is not None

        def fresh() -> PartitionFolder:
            folder = PartitionFolder(self.store, partition, token, self.dead_letter,
                                     self.half_life)
            self.folders[partition] = folder
            return folder

        folder = fresh()
        for msg_id, fields in entries:
            try:
                folder.fold([(msg_id, fields)])
            except FencedError:
                raise
            except Exception as err:
                if not_the_input(err):
                    raise
                self.dead_letter(folder.stream, msg_id, fields, f"{type(err).__name__}: {err}")
                folder = fresh()
                read = None if folder.entries_read is None else folder.entries_read + 1
                self.store.write(partition, Changes(), msg_id.decode(), read, token)
                folder.position, folder.entries_read = msg_id.decode(), read


def main(instance: Instance) -> int:
    """Run the accounting worker until SIGTERM."""
    return AccountingWorker(instance).run()
