"""The hot standby scheduler in-process against a real redis-server, with the real job
manager: a standby keeps its pool warm from the journals and takes over a dead leader's
leases at once (workers/sched_standby.py, fluxes/store/standby.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fluxes.formats.rset import ResourceSet
from tests.store.test_scheduler_worker import System, spec
from workers.scheduler import SchedulerWorker


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    return System(real_redis)


def spy_reads(standby: SchedulerWorker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The jobs whose stored R ``standby`` reads from now on (filled as it reads)."""
    read: list[int] = []
    allocations = standby.hashes.allocations

    def spy(ids: list[int]) -> Any:
        read.extend(ids)
        return allocations(ids)

    monkeypatch.setattr(standby.hashes, "allocations", spy)
    return read


def test_hot_standby_takes_over_a_dead_leader_with_its_pool_warm(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    for fake in system.execs.values():
        fake.hold = set()
    a, b = system.submit(spec(nnodes=1, ntasks=2, exclusive=True),
                         spec(nnodes=1, ntasks=1))
    for fake in system.execs.values():
        fake.hold |= {a, b}
    system.run(4)
    leader = system.sched
    assert leader.leader and system.events(a)[-1] == "start"
    standby = SchedulerWorker(system.instance, name="standby")
    standby.step()  # the leader is alive: the standby only follows the journals
    standby.step()
    assert not standby.leader and standby.status()["warm"] == 2
    # the leader dies: Redis drops its connections (its lease still runs for 10 s)
    leader._alive.drop()
    read = spy_reads(standby, monkeypatch)
    c = system.submit(spec(ntasks=1))[0]
    for fake in system.execs.values():
        fake.hold.add(c)
    standby.step()
    assert system.redis.get(system.keys.sched_lease(0)) == b"standby"
    assert standby.status()["leader"]
    system.sched = standby
    system.run(4)
    assert read == []  # every held R was in the warm pool already
    pool = standby.pool
    assert pool is not None and sorted(pool.jobids()) == sorted([a, b, c])
    assert system.events(c)[-1] == "start"
    held = [ResourceSet(system.redis.hget(system.keys.job(j), "R")) for j in (a, b, c)]
    assert held[0].ranks.isdisjoint(held[1].ranks | held[2].ranks)  # a is exclusive
    assert held[1].ranks == held[2].ranks  # the one node left, a core each
    [rank] = held[1].ranks
    assert held[1].cores(rank).isdisjoint(held[2].cores(rank))
    # the old leader, alive after all (paused), loses the lease at its next renewal
    for session in leader.sessions:
        session.lease._renewed = 0.0  # due now
    leader.step()
    assert not leader.leader


def test_standby_waits_while_the_leader_lives_and_frees_what_ends(system: System) -> None:
    for fake in system.execs.values():
        fake.hold = set()
    [a] = system.submit(spec(ntasks=1))
    for fake in system.execs.values():
        fake.hold.add(a)
    system.run(4)
    standby = SchedulerWorker(system.instance, name="standby")
    standby.step()
    assert standby.status()["warm"] == 1 and not standby.leader
    for rank in system.execs:
        system.redis.xadd(system.keys.exec_events(0), {"d": orjson.dumps({"e": 0, "m": [
            {"t": "exec", "id": a, "rank": rank, "status": 0, "released": True}]})})
    system.run(4)
    assert system.events(a)[-1] == "clean"
    standby.step()
    assert not standby.leader and standby._warm is not None
    assert standby._warm.pool.jobids() == [] and standby.status()["warm"] == 0


def test_a_standby_follows_jobs_staged_behind_others(
        real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # one core: the second job is staged behind the first, its R overlapping the
    # first's; the warm pool holds both as the leader does, and hands them over
    system = System(real_redis, nodes=1, cores=1)
    sim = {"system": {"exec": {"test": {"run_duration": "1ms"}}}}
    [first] = system.submit(spec(attributes=sim))
    system.hold(first)
    [second] = system.submit(spec(attributes=sim))
    system.hold(second)
    system.run(4)
    assert system.events(first)[-1] == "start" and "alloc" in system.events(second)
    standby = SchedulerWorker(system.instance, name="standby")
    standby.step()
    standby.step()
    warm = standby._warm
    assert warm is not None and standby.status()["warm"] == 2
    assert not standby.status()["leader"]
    assert set(warm.staging.early) == {first} and warm.pool.jobids() == [second]
    system.sched._alive.drop()  # the leader dies
    read = spy_reads(standby, monkeypatch)
    standby.step()
    assert standby.status()["leader"]
    system.sched = standby
    [third] = system.submit(spec(attributes=sim))
    system.hold(third)
    system.run(4)
    assert read == []  # both were in the warm pool
    core = standby.core
    assert core is not None and first in core.staging.early
    # the second's end is followed too: the third is staged behind it
    alloc = next(e for e in system.store.eventlog(third) if e.event_name == "alloc")
    assert second in alloc.context()["annotations"]["sched"]["staged"]["after"]
