"""The job manager's pipelined loop: a step's commit goes out with the next read.

Driven step by step like tests/store/test_ingest_jobmanager.py: a step's effects
are written by the next step (in the same write as its read of the inputs), so
the fakes see them one job-manager step later.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.store.test_ingest_jobmanager import System
from workers.jobmanager import JobManagerWorker

DONE = ["submit", "validate", "depend", "priority", "alloc", "start", "finish", "release",
        "free", "clean"]


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    out = System(real_redis)
    out.jm.pipelined = True
    return out


def lead(jm: JobManagerWorker) -> None:
    """Take the lease, then the steps that take pending inputs one by one (none)."""
    jm.step()
    jm.step()
    jm._rescan_at = float("inf")
    assert jm.token is not None and not jm._careful


def test_jobs_run_to_inactive_with_one_round_trip_per_step(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    system.jm.step()  # becomes leader (its restart commit is written at once)
    system.sched.hello()
    ids = system.submit(5)
    alone: list[Any] = []
    commit = system.jm.writes.commit

    def counted(*args: Any) -> Any:
        alone.append(args)
        return commit(*args)

    monkeypatch.setattr(system.jm.writes, "commit", counted)
    system.run(rounds=12)
    for jobid in ids:
        assert system.events(jobid) == DONE
        assert system.redis.hget(system.keys.job(jobid), "result") == b"COMPLETED"
    assert system.jm.core is not None and system.jm.core.jobs == {}
    # every step's commit went out with the next read, none on its own
    assert alone == []


def test_effects_wait_for_the_next_read_and_a_checkpoint_writes_them(system: System) -> None:
    lead(system.jm)
    [jobid] = system.submit()
    system.jm.step()  # takes the job: depend and priority wait for the next read
    assert system.events(jobid) == ["submit", "validate"]
    system.jm.checkpoint()  # writes what waits first: the checkpoint includes it
    assert system.events(jobid) == ["submit", "validate", "depend", "priority"]
    system.redis.delete(system.keys.jm_lease(0))
    fresh = JobManagerWorker(system.instance)
    fresh.setup()
    fresh.step()
    assert fresh.core is not None
    assert fresh.core.jobs[jobid].job.seq == len(system.events(jobid))
    assert system.events(jobid)[:4] == ["submit", "validate", "depend", "priority"]


def test_stale_leader_writes_nothing_and_its_inputs_run_once(system: System) -> None:
    lead(system.jm)
    system.sched.hello()
    system.exec.hold = set()
    old = system.jm
    [first] = system.submit()
    old.step()  # takes the job; its effects wait for the next read
    system.redis.delete(system.keys.jm_lease(0))
    new = JobManagerWorker(system.instance, pipelined=True)
    new.setup()
    new.step()  # leads: a new fencing token
    [late] = system.submit()
    old.step()  # its commit is refused with its read: it steps down
    assert old.token is None and old.core is None
    system.jm = new
    new._rescan_at = 0.0
    system.run(rounds=12)
    for jobid in (first, late):
        assert system.events(jobid) == DONE  # each event once: the stale step wrote nothing
