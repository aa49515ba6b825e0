"""The job manager takes a big submission a slice a step, between its other inputs.

Driven step by step like tests/store/test_ingest_jobmanager.py, with one new-job
entry per slice (INGEST_SLICE_S = 0) and four jobs per entry.
"""

from __future__ import annotations

import pytest
import redis

from fluxes.store import ingest as ingest_store
from tests.store.test_ingest_jobmanager import System
from workers import jobmanager

PRIORITY = ["submit", "validate", "depend", "priority"]


@pytest.fixture
def system(real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> System:
    monkeypatch.setattr(ingest_store, "MESSAGES_PER_ENTRY", 4)
    monkeypatch.setattr(jobmanager, "INGEST_SLICE_S", 0.0)
    out = System(real_redis)
    out.jm.step()  # leads
    out.jm.step()  # nothing pending: normal steps from now on
    out.jm._rescan_at = float("inf")
    return out


def taken(system: System, ids: list[int]) -> list[int]:
    """The jobs of ``ids`` the job manager has taken (their priority is written)."""
    return [j for j in ids if system.events(j)[:4] == PRIORITY]


def test_entries_are_taken_one_slice_a_step_in_order_each_once(system: System) -> None:
    ids = system.submit(10)  # entries of 4, 4 and 2 jobs
    cancel = system.client._send([{"t": "cancel", "ids": [ids[-1]]}])
    system.ingest.step()
    jm = system.jm
    jm.step()
    assert taken(system, ids) == ids[:4]
    assert len(jm._held) == 3  # two new-job entries, then the cancel's
    pending = system.redis.xpending(system.keys.jm_new(0), "jm")["pending"]
    assert pending == 2  # held entries are acknowledged only once handled
    jm._rescan_at = 0.0
    jm.step()
    assert not jm._pending  # no rescan while entries are held: it would read them again
    assert taken(system, ids) == ids[:8]
    jm.step()
    assert taken(system, ids) == ids
    assert system.events(ids[-1])[-2:] == PRIORITY[-2:]  # the cancel waits its turn
    jm.step()
    assert not jm._held
    [answer] = system.client._wait(cancel[0], 1.0)
    assert answer["ok"] == [ids[-1]]
    assert system.events(ids[-1])[-2:] == ["exception", "clean"]
    for jobid in ids:
        assert system.events(jobid).count("priority") == 1
    assert system.redis.xpending(system.keys.jm_new(0), "jm")["pending"] == 0


def test_the_other_inputs_are_not_held_up(system: System) -> None:
    system.sched.hello()
    [first] = system.submit()
    for _ in range(3):  # the hello, the ready, the job's allocation
        system.jm.step()
        system.sched.step()
    system.jm.step()  # the start goes to the exec worker
    assert system.events(first)[-1] == "alloc"
    more = system.submit(12)
    system.exec.step()  # the first job starts and ends
    system.jm.step()
    # its end is taken in this step, with one slice of the new jobs, not after all
    assert system.events(first)[-3:] == ["start", "finish", "release"]
    assert taken(system, more) == more[:4]
    system.run(rounds=8)
    for jobid in [first, *more]:
        assert system.events(jobid)[-1] == "clean"


def test_a_leader_that_rebuilds_reads_the_held_entries_again(system: System) -> None:
    ids = system.submit(12)
    jm = system.jm
    jm.step()
    assert taken(system, ids) == ids[:4] and jm._held
    jm.core = None  # memory given up (a refused commit): rebuilt from storage
    for _ in range(6):
        jm.step()
    assert taken(system, ids) == ids and not jm._held
    for jobid in ids:  # each taken once (a restart posts its own priority again)
        assert system.events(jobid).count("depend") == 1
