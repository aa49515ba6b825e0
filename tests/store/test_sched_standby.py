"""The hot standby scheduler's store side (fluxes/store/standby.py), on both backends."""

from __future__ import annotations

import orjson
import redis

from fluxes.store.keys import Keys
from fluxes.store.lease import Lease
from fluxes.store.standby import (
    SIGNALLED,
    AliveSignal,
    allocation_events,
    dead_holders,
    lease_holders,
    take_over,
)
from tests.backends import OnFakeRedis, OnRealRedis

KEYS = Keys("t", 2)


def _state(signal: AliveSignal) -> tuple[bool, bool]:
    """(subscribed as the process knows, counted by Redis)."""
    return signal.subscribed, signal.up()


class StandbyContract:
    def test_a_holder_is_dead_once_its_signal_drops(self, client: redis.Redis) -> None:
        signal = AliveSignal(client, KEYS.sched_alive("a"))
        # only holders whose record says they hold their subscription are judged by it
        client.hset(KEYS.workers, mapping={"a": orjson.dumps({SIGNALLED: True}),
                                           "b": orjson.dumps({SIGNALLED: True}),
                                           "c": orjson.dumps({SIGNALLED: False}),
                                           "d": b"not json"})
        assert dead_holders(client, KEYS, ["a", "b", "c", "d", "e"]) == {"a", "b"}
        signal.raise_()
        assert _state(signal) == (True, True)
        assert dead_holders(client, KEYS, ["a", "b"]) == {"b"}
        signal.raise_()  # again, on a fresh connection: still one subscriber
        assert dead_holders(client, KEYS, ["a"]) == set()
        signal.drop()
        assert _state(signal) == (False, False)
        assert dead_holders(client, KEYS, ["a"]) == {"a"}

    def test_take_over_only_from_the_dead_holder(self, client: redis.Redis) -> None:
        lease = Lease(client, KEYS.sched_lease(0), KEYS.sched_fence(0), "a")
        first = lease.try_acquire()
        assert first is not None and lease_holders(client, KEYS) == ["a", None]
        assert take_over(client, KEYS.sched_lease(0), KEYS.sched_fence(0), "x", "b",
                         10_000) is None
        token = take_over(client, KEYS.sched_lease(0), KEYS.sched_fence(0), "a", "b", 10_000)
        assert token is not None and int(token) == int(first) + 1
        assert lease_holders(client, KEYS) == ["b", None]
        assert 0 < client.pttl(KEYS.sched_lease(0)) <= 10_000
        assert lease._call("renew") == 0  # a is deposed: its renewal fails
        # a free lease is taken as well
        assert take_over(client, KEYS.sched_lease(1), KEYS.sched_fence(1), "a", "b",
                         10_000) == "1"

    def test_allocation_events_in_order(self, client: redis.Redis) -> None:
        j0, j1 = KEYS.journal(0), KEYS.journal(1)
        client.xadd(j0, {"j": 5, "n": "submit"})
        client.xadd(j0, {"j": 5, "n": "alloc"})
        client.xadd(j1, {"j": 6, "n": "alloc"})
        client.xadd(j0, {"j": "x", "n": "alloc"})  # not a job id: skipped
        client.xadd(j0, {"j": 5, "n": "free"})
        positions = {j0: "0-0", j1: "0-0"}
        events = allocation_events(client, positions, None)
        assert sorted(events) == [(5, False), (5, True), (6, True)]
        assert events.index((5, True)) < events.index((5, False))
        assert allocation_events(client, positions, None) == []


def test_a_refused_subscription_gives_no_signal(real_redis: redis.Redis) -> None:
    # an ACL user without the channel: the refusal comes with the confirmation
    real_redis.execute_command("ACL", "SETUSER", "nochan", "on", ">pw", "resetchannels",
                               "~*", "+@all")
    kwargs = real_redis.connection_pool.connection_kwargs
    client = redis.Redis(unix_socket_path=kwargs["path"], username="nochan", password="pw")
    try:
        signal = AliveSignal(client, KEYS.sched_alive("a"))
        signal.raise_()
        assert _state(signal) == (False, False)
    finally:
        client.close()
        real_redis.execute_command("ACL", "DELUSER", "nochan")


class TestFakeRedis(StandbyContract, OnFakeRedis):
    pass


class TestRealRedis(StandbyContract, OnRealRedis):
    pass
