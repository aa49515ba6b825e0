"""What the workers that fold the journal into a read model share (job list, accounting).

Each partition's journal is folded by one worker of a kind at a time, the holder
of the partition's lease of that kind; others stand by and take a partition over
within the lease time when its holder dies (at once when it stops cleanly). The
holder reads the journal after the folded position and has a partition folder
(``fluxes.store.joblist_fold``, ``fluxes.store.accounting``) write each block
with the new position in one fenced step, so a new holder goes on exactly where
the last write left off, and a deposed one writes nothing.

A subclass says which lease and group it holds, how a folder is built and how
the position moves past an entry alone; the loop, the leadership and the
refusal of entries that cannot be folded are here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from fluxes.store.eventstore import FencedError
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.joblist_fold import Entry
from fluxes.store.lease import LEASE_TTL_MS, Lease
from workers.base import Worker, not_the_input


class Folder(Protocol):
    """A partition folder as the fold worker drives it."""

    stream: str
    position: str
    entries_read: int | None
    folded: int

    def fold(self, entries: Sequence[Entry]) -> None:
        """Fold ``entries`` and write them with the new position (FencedError if deposed)."""


class FoldStore(Protocol):
    """The store of a read model, as the fold worker uses it."""

    def ensure_groups(self) -> None:
        """Create the consumer groups that keep the folded positions."""


class FoldWorker(Worker):
    """Folds journal entries of the partitions whose lease it holds (or stands by)."""

    #: the read model's store (set by the subclass)
    store: FoldStore

    #: the journal's consumer group that holds the folded position
    group = ""
    #: after a read of fewer than ``small_read`` entries, wait this long for entries to
    #: gather: a read model may lag a little, and folding many entries per round trip
    #: instead of one leaves the CPU to the workers jobs wait on
    linger_s = 0.02
    small_read = 200
    #: journal entries read per partition and round
    read_count = 2000
    #: how long a read waits for entries
    block_ms = 1000
    #: how often a worker tries to take the leases of partitions it does not fold
    acquire_every_s = 0.5

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        super().__init__(instance, name)
        keys = self.keys
        # The holder is the worker's name: a supervised restart under the same
        # name takes its own lease back at once (with a new fencing token).
        self.leases = [Lease(self.redis, *self.lease_keys(p), self.name, lease_ttl_ms)
                       for p in range(keys.partitions)]
        self.folders: dict[int, Folder] = {}
        self._partition_of = {keys.journal(p): p for p in range(keys.partitions)}
        self.processed = 0
        self._linger_until = 0.0
        self._acquire_at = 0.0

    # ------------------------------------------------------------ what a kind says

    def lease_keys(self, partition: int) -> tuple[str, str]:
        """The lease and fencing-token keys of ``partition`` for this kind."""
        raise NotImplementedError

    def new_folder(self, partition: int, token: str) -> Folder:
        """A folder of ``partition`` built from storage, writing under ``token``."""
        raise NotImplementedError

    def pass_over(self, partition: int, position: str, entries_read: int | None,
                  token: str) -> None:
        """Move the folded position of ``partition`` to ``position``, writing nothing else."""
        raise NotImplementedError

    def active_jobs(self, folder: Folder) -> int:
        """Jobs ``folder`` holds in memory (for the log)."""
        return 0

    def read_wait_ms(self) -> int | None:
        """How long this round's read may wait for entries (None: not at all)."""
        return self.block_ms

    def took(self, partition: int, folder: Folder, started: float) -> None:
        """Called once this worker leads ``partition`` (``started``: monotonic time)."""

    def folded_round(self, got: dict[int, int]) -> None:
        """Called after each round with the entries read per partition led."""

    # ------------------------------------------------------------ the worker's facts

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
                "processed": self.processed}

    def consumed(self) -> list[tuple[str, str]]:
        """Every partition journal, whose group of this kind holds the folded position."""
        return [(self.keys.journal(p), self.group) for p in range(self.keys.partitions)]

    # ------------------------------------------------------------ leadership

    def lead(self) -> None:
        """Renew the leases held (dropping lost ones); now and then try to take the others."""
        for p in list(self.folders):
            if not self.leases[p].renew_if_due():
                self.step_down(p, "lease lost")
        now = time.monotonic()
        if len(self.folders) == len(self.leases) or now < self._acquire_at:
            return
        self._acquire_at = now + self.acquire_every_s
        for p, lease in enumerate(self.leases):
            if p in self.folders:
                continue
            token = lease.try_acquire()
            if token is None:
                continue
            started = time.monotonic()
            folder = self.new_folder(p, token)
            self.folders[p] = folder
            self.took(p, folder, started)
            self.log.info("leading", extra={"partition": p, "token": token,
                                            "position": folder.position,
                                            "active_jobs": self.active_jobs(folder),
                                            "restore_s": round(time.monotonic() - started, 3)})

    def step_down(self, partition: int, why: str) -> None:
        """Stop folding ``partition``: another holder folds it now (or will)."""
        self.folders.pop(partition, None)
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
            time.sleep(min(self.acquire_every_s, self.leases[0].ttl_ms / 3000))
            return
        wait = self._linger_until - time.monotonic()
        if wait > 0 and not self.stopping:
            time.sleep(wait)
        streams = {f.stream: f.position for f in self.folders.values()}
        reply = read_streams(self.redis, streams, self.read_count, self.read_wait_ms())
        got: dict[int, int] = {}
        for stream, entries in reply or []:
            p = self._partition_of[stream.decode()]
            if p not in self.folders or not entries:
                continue
            got[p] = len(entries)
            if self._fold(p, entries):
                self.processed += len(entries)
        total = sum(got.values())
        if 0 < total < self.small_read:
            self._linger_until = time.monotonic() + self.linger_s
        self.folded_round(got)

    def _fold(self, partition: int, entries: Sequence[Entry]) -> bool:
        """Fold one block of ``partition``; False if this worker was deposed meanwhile."""
        try:
            try:
                self.folders[partition].fold(entries)
            except FencedError:
                raise
            except Exception as exc:
                if not_the_input(exc):
                    raise
                self._fold_apart(partition, entries, exc)
        except FencedError as exc:
            self.step_down(partition, str(exc))
            return False
        return True

    def _fold_apart(self, partition: int, entries: Sequence[Entry], exc: Exception) -> None:
        """A block whose fold raised something the folder does not refuse by itself.

        The fold wrote nothing, but the folder's state may be half-changed: a folder is
        built again from storage and folds the entries one by one. An entry that raises
        is dead-lettered and the position moved past it (the journal is read by
        position: moving on is its acknowledgement; should the worker die between the
        two, the entry is dead-lettered twice, never lost).
        """
        self.log.error("journal block failed, folding it entry by entry", extra={
            "partition": partition, "error": f"{type(exc).__name__}: {exc}"})
        token = self.leases[partition].token
        assert token is not None
        folder = self.folders[partition] = self.new_folder(partition, token)
        for msg_id, fields in entries:
            try:
                folder.fold([(msg_id, fields)])
            except FencedError:
                raise
            except Exception as err:
                if not_the_input(err):
                    raise
                self.dead_letter(folder.stream, msg_id, fields, f"{type(err).__name__}: {err}")
                folder = self.folders[partition] = self.new_folder(partition, token)
                read = None if folder.entries_read is None else folder.entries_read + 1
                self.pass_over(partition, msg_id.decode(), read, token)
                folder.position, folder.entries_read = msg_id.decode(), read
