"""The scheduler's pipelined loop: a step's answer goes out with the next read.

Driven step by step like tests/store/test_scheduler_worker.py, with the job manager and
the scheduler both pipelined (as ``fluxes start`` runs them): a scheduler step's R and
responses are written by its next step, in the same write as its read of the requests
and of the resource events.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fluxes.formats.rset import ResourceSet
from fluxes.store.resources import resource_event
from tests import wire
from tests.store import test_hostile
from tests.store.test_poison_messages import letters
from tests.store.test_scheduler_worker import System, spec
from workers.scheduler import SchedulerWorker

DONE = ["submit", "validate", "depend", "priority", "alloc", "start", "finish", "release",
        "free", "clean"]


def pipelined(system: System) -> System:
    system.jm.pipelined = True
    system.sched = SchedulerWorker(system.instance, pipelined=True)
    system.sched.setup()
    return system


def waits(sched: SchedulerWorker) -> bool:
    """Whether an answer of ``sched`` waits for its next read."""
    return sched._unsent is not None


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    return pipelined(System(real_redis))


def test_jobs_run_with_every_answer_sent_with_the_next_read(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    alone: list[Any] = []
    answer = system.sched.streams.answer

    def counted(*args: Any) -> None:
        alone.append(args)
        answer(*args)

    monkeypatch.setattr(system.sched.streams, "answer", counted)
    ids = system.submit(*[spec(ntasks=1)] * 6)
    system.run(20)
    for jobid in ids:
        assert system.events(jobid) == DONE
    assert alone == []  # no answer went out on its own


def test_a_drain_written_before_a_free_applies_first(system: System) -> None:
    holder = system.submit(spec(nnodes=2, ntasks=2, exclusive=True))[0]
    system.hold(holder)
    system.run(10)
    assert system.events(holder)[-1] == "start"
    waiting = system.submit(spec(nnodes=1, ntasks=1))[0]
    system.run(2, exec_too=False)
    assert system.events(waiting)[-1] == "priority"
    # rank 0 is drained, then the holder ends: the scheduler reads both at once
    system.redis.xadd(system.keys.resource_events,
                      {"d": resource_event("drain", "0", "maintenance")})
    test_hostile.release(system, holder)
    system.run(10, exec_too=False)
    assert system.events(waiting)[-1] == "alloc"
    rset = ResourceSet(system.redis.hget(system.keys.job(waiting), "R"))
    assert str(rset.ranks) == "1"  # never the drained rank


def test_a_deposed_scheduler_writes_nothing_of_its_waiting_answer(system: System) -> None:
    system.run(4)  # hello, ready
    old = system.sched
    [first] = system.submit(spec(ntasks=1))
    system.jm.step()
    system.jm.step()  # the alloc request is out
    old.step()  # allocates: its R and SUCCESS wait for the next read
    assert waits(old) and not system.redis.hget(system.keys.job(first), "R")
    # another scheduler takes the lease (a new epoch) before the answer went out
    system.redis.delete(system.keys.sched_lease(0))
    new = SchedulerWorker(system.instance, pipelined=True)
    new.setup()
    new.step()
    old.step()  # its answer is refused with its read: it steps down, nothing written
    assert not old.leader and not waits(old)
    assert not system.redis.hget(system.keys.job(first), "R")
    system.sched = new
    system.run(12)
    assert system.events(first) == DONE  # allocated once, by the new scheduler


def test_an_alloc_replayed_for_a_finished_job_writes_no_R(system: System) -> None:
    [done] = system.submit(spec())
    system.run(12)
    assert system.events(done) == DONE
    stored = system.redis.hget(system.keys.job(done), "R")
    stream = system.keys.sched_req(0)
    sent = system.redis.xadd(stream, wire.entry(
        [{"t": "alloc", "id": done, "priority": 16, "userid": 1000, "t_submit": 1.0}],
        epoch=system.sched.sessions[0].epoch)).decode()
    system.run(4, exec_too=False)
    # allocated, then taken back when the answer sent with the read was refused
    assert system.redis.hget(system.keys.job(done), "R") == stored
    [letter] = letters(system, stream)
    assert letter["id"] == sent and f"job {done} waits for no allocation" in letter["error"]
    pool = system.sched.pool
    assert pool is not None and list(pool.jobids()) == []
    [later] = system.submit(spec())
    system.run(12)
    assert system.events(later) == DONE


def test_with_no_job_pending_the_read_blocks_long(system: System,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # a free leaves the core owing a pass until the next request comes; with no job
    # pending none can run, and a 1 ms block would poll Redis all the while idle
    import workers.scheduler as module
    from fluxes.store.groups import read_streams

    blocks: list[int | None] = []
    answer_then_read = system.sched.streams.answer_then_read

    def answering(*args: Any) -> Any:
        blocks.append(args[-1])
        return answer_then_read(*args)

    def reading(*args: Any) -> Any:
        blocks.append(args[-1])
        return read_streams(*args)

    monkeypatch.setattr(system.sched.streams, "answer_then_read", answering)
    monkeypatch.setattr(module, "read_streams", reading)
    [done] = system.submit(spec())
    system.run(12)
    assert system.events(done) == DONE
    core = system.sched.core
    assert core is not None and not core.sched.pending
    blocks.clear()
    system.sched.step()
    assert blocks == [module.BLOCK_MS]
