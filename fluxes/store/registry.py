"""The worker registry: one record per running worker, for ``fluxes status``.

A worker writes its record (kind, pid, host, heartbeat, its own facts) under
its name when it starts and with every heartbeat, with its hand-off latency
histograms beside it (``{ns}:hops``, read by ``fluxes bench throughput``), and
removes the record when it stops cleanly: a record that stays with an old
heartbeat is a worker that died.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import redis

from fluxes.store.keys import Keys


class WorkerRegistry:
    """The records of an instance's workers."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def stored(self, name: str) -> bytes | None:
        """The record kept under ``name`` as stored (JSON), or None."""
        raw = self.redis.hget(self.keys.workers, name)
        return raw if isinstance(raw, bytes) or raw is None else str(raw).encode()

    def publish(self, name: str, record: Mapping[str, Any],
                latencies: Mapping[str, Any] | None = None) -> None:
        """Write ``name``'s record, then its latency histograms when it has any."""
        self.redis.hset(self.keys.workers, name, orjson.dumps(record, default=str))
        if latencies:
            self.redis.hset(self.keys.hops, name, orjson.dumps(latencies))

    def remove(self, name: str) -> None:
        """Remove ``name``'s record (a clean stop)."""
        self.redis.hdel(self.keys.workers, name)
