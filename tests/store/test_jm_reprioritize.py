"""The job manager reprioritizes soon after the accounting worker folded a change of
usage (at most every ``reprioritize-min-interval``), not only every
``reprioritize-interval``, and applies new ``[accounting]`` priority settings without a
restart (docs/accounting.md, "How it is wired")."""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from fluxes.domain.accounting.banks import AccountEvent, BankAdd, UserAdd
from fluxes.domain.accounting.usage import Accum, Changes, Figures
from fluxes.store import jm_priority
from fluxes.store.accounting import UsageStore
from tests.store.test_ingest_jobmanager import System

CONFIG = """[accounting]
priority-plugin = "multifactor"
half-life = "1h"
reprioritize-interval = "1h"
reprioritize-min-interval = "{min}"
[accounting.weights]
fairshare = {weight}
"""


def admin(system: System, event: AccountEvent) -> None:
    system.redis.xadd(system.keys.accounting, {"d": orjson.dumps(event.to_dict())})


def priority(system: System, jobid: int) -> int:
    prio = [e.priority for e in system.store.eventlog(jobid)  # type: ignore[attr-defined]
            if e.event_name == "priority"]
    return int(prio[-1])


def charge(system: System, core_seconds: float) -> None:
    """What the accounting worker writes after a block in which a job of uid 1000 ended."""
    client, keys = system.redis, system.keys
    store = UsageStore(client, keys)
    store.ensure_groups()
    client.set(keys.acct_fence(0), "1")
    usage = Figures(core_seconds, 0.0, 0.0)
    last = client.xrevrange(keys.journal(0), count=1)[0][0].decode()
    store.write(0, Changes(accums={(1000, "root"): Accum(usage, usage, time.time(), 1)}),
                last, None, "1")


def settle(system: System) -> None:
    for _ in range(3):
        system.jm.step()


@pytest.fixture
def system(real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> System:
    monkeypatch.setattr(jm_priority, "LOOK_EVERY_S", 0.0)
    out = System(real_redis)
    out.redis.hset(out.keys.instance, "config", CONFIG.format(min="0s", weight=100000))
    t = time.time()
    admin(out, BankAdd(timestamp=t, bank="root", shares=1))
    admin(out, UserAdd(timestamp=t, username="me", userid=1000, bank="root"))
    return out


def test_a_change_of_usage_reprioritizes_before_the_interval(system: System) -> None:
    system.jm.step()  # leads, with the multi-factor plugin
    [jobid] = system.submit()  # no scheduler: it waits in SCHED
    settle(system)
    before = priority(system, jobid)
    assert before >= 100000  # no usage yet: a fair-share factor of 1
    system.jm.step()
    assert priority(system, jobid) == before  # nothing moved: nothing recomputed
    charge(system, 1000.0)
    system.jm.step()
    assert priority(system, jobid) < before - 40000  # the factor fell to 1/2 at once
    # one number: the job list (jobs -o {priority}, job priority's first line) folds
    # the same last priority event
    from fluxes.store.joblist import JobListStore
    from fluxes.store.joblist_rebuild import rebuild

    rebuild(system.redis, system.keys)
    [rec] = JobListStore(system.redis, system.keys).get_many([jobid])
    assert rec is not None and rec.job.priority == priority(system, jobid)


def test_usage_changes_reprioritize_at_most_every_min_interval(system: System) -> None:
    system.redis.hset(system.keys.instance, "config", CONFIG.format(min="1h", weight=100000))
    system.jm.step()
    [jobid] = system.submit()
    settle(system)
    before = priority(system, jobid)
    charge(system, 1000.0)
    system.jm.step()
    assert priority(system, jobid) == before  # reprioritized less than an hour ago


def test_new_priority_settings_apply_without_a_restart(system: System) -> None:
    system.jm.step()
    [jobid] = system.submit()
    settle(system)
    before = priority(system, jobid)
    system.redis.hset(system.keys.instance, "config", CONFIG.format(min="0s", weight=10))
    system.jm.step()
    assert priority(system, jobid) < before - 90000  # the fair-share weight went down
    system.redis.hset(system.keys.instance, "config", "[accounting]\n")
    system.jm.step()
    assert priority(system, jobid) == 16  # the default plugin: the urgency
    system.redis.hset(system.keys.instance, "config", "[accounting]\nbad-key = 1\n")
    system.jm.step()  # refused with a warning: the plugin stays
    assert priority(system, jobid) == 16

