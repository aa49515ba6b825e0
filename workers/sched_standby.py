"""The hot standby scheduler's pool: built before it leads, kept as the leader's.

A scheduler that does not lead follows the partitions' journals (``alloc``
and ``free`` events) and reads the stored R of every allocated job into a
pool of its own, as the leader's hello recovery would (:func:`adopt_followed`,
which that recovery uses too: an R that overlaps a job the pool holds, staged
behind it, takes its place, and the staging follows both, handed over with
the pool). When it takes the leases over (see
:mod:`fluxes.store.standby`), its hello recovery finds almost every held job
in this pool already and reads only the rest: ready follows the job
manager's hello reply at once instead of after reading and parsing every
running job's R.
"""

from __future__ import annotations

from typing import Any

from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.sched.session import Requests
from fluxes.domain.sched.staging import Staging
from fluxes.domain.sched.standby import Mirror, adopt_followed
from fluxes.store import jobhash
from fluxes.store.instance import Instance
from fluxes.store.resources import load_pool, recorded_resources
from fluxes.store.standby import allocation_events
from workers.base import not_the_input

#: Jobs whose R a standby reads per step (one round trip).
READ_BATCH = 2000


class WarmPool:
    """A standby's pool of every allocation the journals name, with its R read."""

    def __init__(self, instance: Instance, staging: tuple[int, float] = (0, 0.0)) -> None:
        self.redis = instance.redis
        self.keys = instance.keys
        self.hashes = jobhash.JobHashes(self.redis, self.keys)
        # the record the pool was built from: another one at takeover means start afresh
        self.resources = recorded_resources(self.redis, self.keys)
        self.pool = load_pool(instance)
        self.graph = isinstance(self.pool, GraphPool)
        #: requests decoded so far (the session core takes them over with the pool)
        self.requests = Requests(self.graph)
        self.mirror = Mirror()
        self.positions = {self.keys.journal(p): "0-0" for p in range(self.keys.partitions)}
        #: (nnodes, ncores) of each job the pool holds (or freed early), for the limits
        #: gate at takeover
        self.sizes: dict[int, tuple[int, int]] = {}
        #: the jobs freed early and staged behind them, as the leader's (the leader sets
        #: its own depth and horizon when it takes this over)
        self.staging = Staging(*staging)

    def follow(self, block_ms: int | None) -> None:
        """Read the journals on (waiting up to ``block_ms`` for news) and the R of up to
        :data:`READ_BATCH` newly allocated jobs."""
        events = allocation_events(self.redis, self.positions, block_ms)
        for jobid in self.mirror.apply(events, self.sizes):
            self.sizes.pop(jobid, None)
            if self.staging.freed(jobid):
                continue  # freed early: the pool holds nothing of it
            try:
                self.pool.free(jobid)
            except ValueError:
                pass  # not held: nothing to take back
        ids = self.mirror.take(READ_BATCH)
        if not ids:
            return
        # what decoding says is not logged here: the hello recovery says it again
        unsaid: list[tuple[str, str, dict[str, Any]]] = []
        for jobid, (raw_r, wire, spec) in zip(ids, self.hashes.allocations(ids), strict=True):
            if not raw_r:
                continue  # purged, or not written: the hello recovery decides
            try:
                rset = adopt_followed(self.pool, self.graph, self.staging, jobid, raw_r,
                                      self.requests.of_stored(wire, spec, unsaid))
            except Exception as exc:
                if not_the_input(exc):
                    raise
                continue  # the hello recovery reads it again and says why
            self.sizes[jobid] = (rset.nnodes, rset.ncores)

    def current(self) -> bool:
        """True while the recorded resources are those this pool was built from."""
        return bool(recorded_resources(self.redis, self.keys) == self.resources)
