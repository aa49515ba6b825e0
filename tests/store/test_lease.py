"""Leader leases across a Redis stall (fluxes/store/lease.py, lease.lua): a lease that
expired during a stall goes back to its holder, not to a standby that Redis has not
answered for a whole TTL since."""

from __future__ import annotations

import time

import pytest
import redis

from fluxes.domain.liveness import AnswerClock
from fluxes.store import reachability
from fluxes.store.lease import Lease
from tests.backends import OnFakeRedis, OnRealRedis

TTL_MS = 10_000


@pytest.fixture
def _own_clock() -> AnswerClock:
    return reachability.CLOCK  # a fresh one per test (tests/conftest.py)


def expire(client: redis.Redis) -> None:
    """What a stall longer than the TTL leaves: the key gone, the fence as it was."""
    client.delete("lease")


class LeaseContract:
    def test_a_holder_renews_a_lease_that_expired_while_nobody_took_it(
            self, client: redis.Redis) -> None:
        leader = Lease(client, "lease", "fence", "a", TTL_MS)
        token = leader.try_acquire()
        assert token == "1"
        expire(client)
        leader._renewed = 0.0  # due
        assert leader.renew_if_due()
        assert client.get("lease") == b"a" and leader.token == "1"

    def test_a_holder_that_was_replaced_does_not_renew(self, client: redis.Redis) -> None:
        leader = Lease(client, "lease", "fence", "a", TTL_MS)
        leader.try_acquire()
        expire(client)
        assert Lease(client, "lease", "fence", "b", TTL_MS).try_acquire() == "2"
        expire(client)
        leader._renewed = 0.0
        assert not leader.renew_if_due()

    def test_after_a_stall_a_standby_waits_and_the_last_holder_takes_it_again(
            self, client: redis.Redis, _own_clock: AnswerClock) -> None:
        leader = Lease(client, "lease", "fence", "a", TTL_MS)
        leader.try_acquire()
        leader.token = None  # stepped down on the stall's errors, as workers do
        expire(client)
        _own_clock.unanswered(time.monotonic())
        standby = Lease(client, "lease", "fence", "b", TTL_MS)
        assert standby.try_acquire() is None
        assert leader.try_acquire() == "2"
        assert client.get("lease") == b"a"

    def test_without_a_stall_a_standby_takes_a_free_lease_at_once(
            self, client: redis.Redis) -> None:
        Lease(client, "lease", "fence", "a", TTL_MS).try_acquire()
        expire(client)
        assert Lease(client, "lease", "fence", "b", TTL_MS).try_acquire() == "2"


class TestFakeRedis(LeaseContract, OnFakeRedis):
    pass


class TestRealRedis(LeaseContract, OnRealRedis):
    pass
