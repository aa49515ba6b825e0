"""The drill's readers turn bad stored data into violations naming the job, never a traceback."""

from __future__ import annotations

import pytest
import redis

from fluxes.drill import collect
from fluxes.drill.invariants import check_jobs, check_read_model
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys

KEYS = Keys("t")


@pytest.fixture(params=["fake", "real"])
def inst(request: pytest.FixtureRequest) -> Instance:
    client: redis.Redis = request.getfixturevalue(f"{request.param}_redis")
    return Instance(InstanceURI("redis://unused", "t"), client=client)


def test_undecodable_event_is_a_replay_violation(inst: Instance) -> None:
    good, bad = KEYS.eventlog(1), KEYS.eventlog(2)
    inst.redis.xadd(good, {"n": "submit", "t": "1.0", "c": b'{"urgency":16,"userid":1,'
                                                          b'"flags":0,"version":1}'})
    inst.redis.xadd(bad, {"n": "submit", "t": "1.0", "c": b'{"urgency":16,"userid":1,'
                                                         b'"flags":0,"version":1}'})
    inst.redis.xadd(bad, {"n": "priority", "t": "2.0", "c": b"not json"})
    inst.redis.xadd(bad, {"t": "3.0"})  # no name at all
    got = collect.read_eventlogs(inst, [1, 2])
    assert [e.event_name for e in got.logs[1]] == ["submit"]
    assert set(got.broken) == {2} and "event 1" in got.broken[2]
    _jobs, report = check_jobs(got.logs, broken=got.broken)
    assert any(v.invariant == "replays cleanly" and v.jobs == (2,) for v in report.violations)
    with pytest.raises(ValueError, match="job 2: event 1"):
        collect.eventlogs(inst, [1, 2])


def test_missing_name_field_is_reported(inst: Instance) -> None:
    inst.redis.xadd(KEYS.eventlog(3), {"t": "3.0"})
    got = collect.read_eventlogs(inst, [3])
    assert "missing field" in got.broken[3]


def test_undecodable_r_is_reported(inst: Instance) -> None:
    inst.redis.hset(KEYS.job(4), "R", "{not R")
    rsets, broken = collect.read_rsets(inst, [4, 5])
    assert rsets == {} and "R does not decode" in broken[4]


def test_fresh_fold_passes_over_entries_the_job_list_cannot_fold(inst: Instance) -> None:
    inst.redis.xadd(KEYS.journal(0), {"j": "x", "n": "submit", "t": "1"})
    inst.redis.xadd(KEYS.journal(0), {"j": "9", "n": "start", "t": "1"})
    fresh, stored = collect.read_models(inst)
    assert fresh.summaries == {} and stored.summaries == {}
    assert check_read_model(fresh, stored) == []
