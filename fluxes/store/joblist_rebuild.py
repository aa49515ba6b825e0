"""Rebuild the job-list read model from the journal (``fluxes admin rebuild-joblist``).

The protocol with running job-list workers is the lease's: for each
partition the rebuild takes the partition's job-list lease whoever holds it
(a new fencing token), so the worker that folded it has its next write
refused and stands by. Holding the lease, it empties the partition's read
model and moves the folded position to the journal's start in one step, then
folds the journal block by block exactly as a worker does (each block written
with its position), and finally releases the lease; a job-list worker then
takes the partition back and goes on from where the rebuild stopped.

Every step leaves read model and position in agreement, so a rebuild that
dies half way is harmless: a worker takes over when its lease expires and
finishes the fold. While it runs, ``fluxes jobs`` sees a partial list.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import redis

from fluxes.store.eventstore import FencedError
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_fold import PartitionFolder
from fluxes.store.keys import Keys
from fluxes.store.lease import LEASE_TTL_MS, Lease

#: Journal entries per read and write.
BLOCK = 2000


@dataclass
class Rebuilt:
    """What the rebuild of one partition did."""

    partition: int
    #: journal entries read (the bad ones included)
    entries: int
    #: jobs in the rebuilt read model
    jobs: int
    #: entries that cannot be folded (malformed, or an impossible event)
    skipped: int
    #: who held the partition's job-list lease before (None: nobody)
    took_over_from: str | None
    #: the journal id the rebuilt model includes entries up to
    position: str


def rebuild(client: redis.Redis, keys: Keys, partitions: Iterable[int] | None = None,
            holder: str | None = None, ttl_ms: int = LEASE_TTL_MS) -> list[Rebuilt]:
    """Refold the read model of ``partitions`` (default: all) from their journals."""
    store = JobListStore(client, keys)
    store.ensure_groups()
    name = holder or f"rebuild-joblist@{socket.gethostname()}:{os.getpid()}"
    wanted = range(keys.partitions) if partitions is None else partitions
    return [_rebuild_partition(client, store, p, name, ttl_ms) for p in wanted]


def _rebuild_partition(client: redis.Redis, store: JobListStore, partition: int, holder: str,
                       ttl_ms: int) -> Rebuilt:
    keys = store.keys
    if not 0 <= partition < keys.partitions:
        raise ValueError(f"no partition {partition}: the instance has {keys.partitions}")
    previous = store.lease_holder(partition)
    token = store.take_over(partition, holder, ttl_ms)
    lease = Lease(client, keys.joblist_lease(partition), keys.joblist_fence(partition), holder,
                  ttl_ms)
    lease.token = token  # taken by take_over; the Lease renews and releases it
    skipped: list[str] = []

    def bad(_stream: str, _msg_id: bytes, _fields: Mapping[bytes, bytes], error: str) -> None:
        # the worker that first met the entry parked it in the dead letters already
        skipped.append(error)

    try:
        store.reset(partition, token)
        folder = PartitionFolder(store, partition, token, bad)
        while True:
            start = "-" if folder.position == "0-0" else "(" + folder.position
            entries = client.xrange(folder.stream, min=start, count=BLOCK)
            folder.fold(entries)
            if not lease.renew_if_due():
                raise FencedError(f"job list of partition {partition}: lost the lease while "
                                  "rebuilding (another rebuild took it over?)")
            if len(entries) < BLOCK:
                break
        jobs = int(client.hlen(keys.joblist_jobs(partition)))
    finally:
        lease.release()
    return Rebuilt(partition, folder.folded, jobs, len(skipped),
                   previous if previous != holder else None, folder.position)
