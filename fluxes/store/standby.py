"""The hot standby scheduler's store side: the leader's liveness signal, the takeover of a
dead leader's leases, and the allocation events a standby follows.

A lease alone tells a standby that its leader died only when the lease lapses
(10 s). A process that dies (kill -9, a crash, the OOM killer) also loses its
Redis connections at once, and Redis drops their subscriptions with them: the
leader keeps one subscription to its liveness channel (``Keys.sched_alive``,
never published to) on a connection of its own, and a standby that sees the
channel's subscriber count at 0 while the leases still name that leader takes
them over (``lease_takeover.lua``: a new epoch, which fences out anything the
dead leader's name still writes). A leader that is alive but stuck or cut off
keeps its connection (or its TCP peer does not notice) and is replaced only
when its lease lapses, as before.

The subscription is a sharded one (SSUBSCRIBE, Redis >= 7), so that in a
Cluster it is bound to the slot of the instance's hash tag; the count is
``PUBSUB SHARDNUMSUB`` (a cluster client asks every node and sums). A
standby trusts a count of 0 only for a holder whose worker record (the
registry its heartbeat writes) says it holds its subscription: a leader that
could not subscribe (a server without sharded pub/sub, an ACL without the
channel, a version without the signal) is replaced only when its lease lapses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import redis

from fluxes.store.groups import read_streams
from fluxes.store.keys import Keys
from fluxes.store.scripts import lua_source

#: Journal entries read per stream per call while following.
FOLLOW_COUNT = 1000
#: How long a subscription waits for Redis to confirm it.
CONFIRM_S = 2.0
#: The worker record field saying its process holds its liveness subscription.
SIGNALLED = "alive_signal"


class AliveSignal:
    """The leader's side: one subscription whose connection dies with the process."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.client = client
        self.channel = channel
        self._pubsub: Any = None

    def raise_(self) -> None:
        """Subscribe (again, on a fresh connection) to the liveness channel; nothing on a
        server without sharded pub/sub."""
        self.drop()
        pubsub = self.client.pubsub()
        try:
            pubsub.ssubscribe(self.channel)
            # the confirmation, or the refusal (Redis < 7, an ACL without the channel)
            reply = pubsub.get_message(timeout=CONFIRM_S)
        except redis.ResponseError:
            reply = None
        if not isinstance(reply, dict) or reply.get("type") != "ssubscribe":
            pubsub.close()  # no signal: standbys wait for the lease
            return
        self._pubsub = pubsub

    @property
    def subscribed(self) -> bool:
        """True while this process holds its subscription (as far as it knows)."""
        return self._pubsub is not None

    def up(self) -> bool:
        """True when Redis counts this leader's subscription (one round trip)."""
        if self._pubsub is None:
            return False
        counts = subscribers(self.client, [self.channel])
        return counts is None or counts.get(self.channel, 0) > 0

    def drop(self) -> None:
        """Unsubscribe and close the connection (no longer leading)."""
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except redis.RedisError:
                pass  # the connection is gone already: so is the subscription


def subscribers(client: redis.Redis, channels: Iterable[str]) -> dict[str, int] | None:
    """The sharded subscriber count of each channel (PUBSUB SHARDNUMSUB; the channels
    share one slot); None when the server cannot tell (no sharded pub/sub)."""
    names = list(channels)
    if not names:
        return {}
    try:
        reply = client.pubsub_shardnumsub(*names)
    except redis.ResponseError:
        return None
    return {(c.decode() if isinstance(c, bytes) else str(c)): int(n) for c, n in reply}


def lease_holders(client: redis.Redis, keys: Keys) -> list[str | None]:
    """Who holds each partition's scheduler lease (None: nobody), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for p in range(keys.partitions):
        pipe.get(keys.sched_lease(p))
    return [raw.decode(errors="replace") if raw else None for raw in pipe.execute()]


def dead_holders(client: redis.Redis, keys: Keys, holders: Iterable[str]) -> set[str]:
    """The holders of ``holders`` that held a liveness subscription (their worker record
    says so) and whose channel has no subscriber now: their process died (or lost its
    connection to Redis, which makes it step down anyway)."""
    names = sorted(set(holders))
    if not names:
        return set()
    records = client.hmget(keys.workers, names)
    wanted = {h for h, raw in zip(names, records, strict=True) if _signalled(raw)}
    if not wanted:
        return set()
    counts = subscribers(client, [keys.sched_alive(h) for h in wanted])
    if counts is None:
        return set()  # no signal to go by: the lease decides
    return {h for h in wanted if counts.get(keys.sched_alive(h), 0) == 0}


def take_over(client: redis.Redis, lease_key: str, fence_key: str, dead: str, holder: str,
              ttl_ms: int) -> str | None:
    """Take the lease from ``dead`` (or take it free): the new fencing token, or None when
    another holder has it now."""
    script = client.register_script(lua_source("lease_takeover"))
    token = script(keys=[lease_key, fence_key], args=[dead, holder, ttl_ms])
    if token is None or token is False:
        return None
    return str(int(token))


def allocation_events(client: redis.Redis, positions: dict[str, str], block_ms: int | None
                      ) -> list[tuple[int, bool]]:
    """The ``alloc`` (True) and ``free`` (False) events of the journals since
    ``positions`` (stream -> last id read, updated), in order, as (jobid, allocated)."""
    out: list[tuple[int, bool]] = []
    for stream, entries in read_streams(client, positions, FOLLOW_COUNT, block_ms) or []:
        positions[stream.decode()] = entries[-1][0].decode()
        for _sid, fields in entries:
            name = fields.get(b"n")
            if name not in (b"alloc", b"free"):
                continue
            try:
                out.append((int(fields[b"j"]), name == b"alloc"))
            except (KeyError, ValueError):
                continue  # not the job manager's: the leader's hello reply decides anyway
    return out


def _signalled(raw: bytes | None) -> bool:
    """True when a worker record says its process holds its liveness subscription."""
    if not raw:
        return False
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict) and record.get(SIGNALLED) is True
