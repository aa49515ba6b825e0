"""RFC 27 finalization on real streams: a scheduler error or a scheduler that went
away suspends scheduling until the next hello, and nothing is lost meanwhile."""

from __future__ import annotations

import pytest
import redis

from tests import wire
from tests.store.test_ingest_jobmanager import FakeScheduler, System
from workers import jobmanager


class LiveScheduler(FakeScheduler):
    """The fake scheduler, keeping its lease as a live one does."""

    def step(self) -> None:
        self.lease.renew_if_due()
        super().step()


@pytest.fixture
def system(real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> System:
    # idle job-manager steps return at once instead of blocking for a second
    monkeypatch.setattr(jobmanager, "MAX_BLOCK_MS", 5)
    # the lease is checked on every step, not once a second
    monkeypatch.setattr(jobmanager, "SCHED_CHECK_S", 0.0)
    made = System(real_redis)
    made.sched = LiveScheduler(real_redis, made.keys)
    return made


def sched_requests(system: System, after: str) -> tuple[list[dict[str, object]], str]:
    """Messages the job manager sent the scheduler after stream id ``after``."""
    out: list[dict[str, object]] = []
    for sid, fields in system.redis.xrange(system.keys.sched_req(0), min="(" + after):
        after = sid.decode()
        out += wire.messages(fields)
    return out, after


def last_id(system: System) -> str:
    last = system.redis.xrevrange(system.keys.sched_req(0), count=1)
    return last[0][0].decode() if last else "0-0"


def test_scheduler_whose_lease_expired_gets_nothing_until_a_new_hello(
        system: System, real_redis: redis.Redis) -> None:
    system.jm.step()  # leader
    system.sched.hello()
    [first] = system.submit()
    system.run()
    assert system.events(first)[-1] == "clean"
    core = system.jm.core
    assert core is not None and core.session.ready
    # the scheduler dies; its lease expires
    real_redis.delete(system.keys.sched_lease(0))
    system.jm.step()
    assert core.session.suspended is not None and "went away" in core.session.suspended
    mark = last_id(system)
    ids = system.submit(3)
    for _ in range(3):
        system.jm.step()
    sent, _ = sched_requests(system, mark)
    assert sent == []
    assert all(system.events(j)[-1] == "priority" for j in ids)
    # a new scheduler takes the lease: a new epoch, hello, and every job is requested
    system.sched = LiveScheduler(real_redis, system.keys)
    system.sched.hello()
    system.run()
    for jobid in ids:
        assert system.events(jobid)[-1] == "clean"
        assert system.events(jobid).count("alloc") == 1


def test_live_scheduler_is_not_suspended(system: System) -> None:
    system.jm.step()
    system.sched.hello()
    system.run(2)
    core = system.jm.core
    assert core is not None
    system.jm.step()
    assert core.session.ready and core.session.suspended is None


def test_scheduler_error_message_suspends(system: System) -> None:
    system.jm.step()
    system.sched.hello()
    system.run(2)
    system.sched.send([{"t": "error", "note": "cannot read the resource inventory"}])
    system.jm.step()
    core = system.jm.core
    assert core is not None
    assert core.session.suspended == "scheduler error: cannot read the resource inventory"
    mark = last_id(system)
    [jobid] = system.submit()
    for _ in range(3):
        system.jm.step()
    assert sched_requests(system, mark)[0] == []
    system.sched.hello()  # the same scheduler, a new epoch
    system.run()
    assert system.events(jobid)[-1] == "clean"
