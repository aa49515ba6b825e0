"""The web server's time index answers what ``EventStore.replay(until_time=T)`` answers,
from snapshots: for every moment of a random history, built at once or followed."""

from __future__ import annotations

import random
import time
from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.job import events as ev
from fluxes.domain.job.record import JobRecord
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from fluxes.web.timeindex import Moment, TimeIndex
from tests.backends import OnFakeRedis, OnRealRedis

NS = "tt"
T = 1000.0
LIFE: list[tuple[str, dict[str, Any]]]
LIFE = [("depend", {}), ("priority", {"priority": 16}), ("alloc", {}), ("start", {}),
        ("finish", {"status": 0}), ("release", {"ranks": "all", "final": True}),
        ("free", {}), ("clean", {})]


def _instance(client: redis.Redis) -> Instance:
    client.hset(Keys(NS).instance, mapping={"partitions": 1})
    return Instance(InstanceURI("redis://unused", NS), client=client)


def _write(store: EventStore, client: redis.Redis, jobs: range, seed: int,
           base: float = T) -> None:
    """Jobs submitted and pushed a random distance through their lives, interleaved,
    stamped out of journal order (clocks of several hosts), with annotations, a
    cancel, a purge and a job whose entries do not fold."""
    keys = store.keys
    client.set(keys.jm_fence(0), "1")
    rng = random.Random(seed)
    T = base  # noqa: N806 (the stamps' origin)
    progress = {}
    for jobid in jobs:
        batch = store.batch()
        batch.append(keys.eventlog(jobid), jobid, 0,
                     [ev.decode("submit", T + jobid + rng.random(),
                                {"urgency": 16, "userid": 1000 + jobid % 3, "flags": 0,
                                 "version": 1}),
                      ev.decode("validate", T + jobid)],
                     [{"name": f"job{jobid}", "queue": rng.choice(["a", "b"]), "ntasks": 1},
                      None])
        store.commit(batch)
        progress[jobid] = (2, rng.randint(0, len(LIFE)))
    while any(done < 2 + goal for done, goal in progress.values()):
        jobid = rng.choice([j for j, (d, g) in progress.items() if d < 2 + g])
        done, goal = progress[jobid]
        name, ctx = LIFE[done - 2]
        stamp = T + jobid + done * 3 + rng.uniform(-2.0, 2.0)
        if name == "alloc" and rng.random() < 0.15:
            # canceled while it waited: exception, then clean
            batch = store.batch()
            batch.append(keys.eventlog(jobid), jobid, done, [
                ev.decode("exception", stamp, {"type": "cancel", "severity": 0, "note": ""}),
                ev.decode("clean", stamp + 0.5)])
            store.commit(batch, token="1")
            progress[jobid] = (2 + len(LIFE), len(LIFE))
            continue
        batch = store.batch()
        batch.append(keys.eventlog(jobid), jobid, done, [ev.decode(name, stamp, ctx)],
                     [{"ranks": "0", "nodelist": "node0"} if name == "alloc" else None])
        if name == "priority" and rng.random() < 0.5:
            batch.journal_only(jobid, ev.decode("annotations", stamp, {
                "annotations": {"sched": {"reason_pending": "testing"}}}))
        store.commit(batch, token="1")
        progress[jobid] = (done + 1, goal)
    ended = [j for j, (d, g) in progress.items() if d == 2 + len(LIFE)]
    for jobid in ended[:2]:  # purged, as retention does it
        client.xadd(keys.journal(0), {"j": jobid, "n": "purge", "t": repr(T + 900 + jobid)})
    # an entry that cannot fold (alloc of a job never submitted): a broken job
    client.xadd(keys.journal(0), {"j": 99_999, "s": 4, "n": "alloc", "t": repr(T + 50)})


def _records(moment: Moment) -> dict[int, JobRecord]:
    out = {r.id: r for r in moment.active()}
    out.update({r.id: r for r in moment.ended()})
    return out


def _moments(store: EventStore) -> list[float]:
    """Every stamp in the journal, just before and after each, and beyond both ends."""
    stamps = sorted({float(f[b"t"]) for _sid, f in store.redis.xrange(store.keys.journal(0))})
    return [stamps[0] - 10, *(s + d for s in stamps[::3] for d in (-1e-6, 0.0, 1e-6)),
            stamps[-1] + 10]


def _check(index: TimeIndex, store: EventStore, margin: float) -> None:
    for at in _moments(store):
        expected = store.replay(0, until_time=at, until_margin=margin)
        moment = index.moment(at)
        assert _records(moment) == expected.records, at
        assert set(moment.parts[0].broken) == set(expected.broken), at


class TimeIndexContract:
    @pytest.mark.parametrize(("seed", "margin"), [(1, 0.0), (2, 60.0)])
    def test_every_moment_equals_replay(self, client: redis.Redis, seed: int,
                                        margin: float) -> None:
        inst = _instance(client)
        store = EventStore(client, inst.keys)
        _write(store, client, range(1, 40), seed)
        # a snapshot every few entries: most moments start from one
        index = TimeIndex(inst, every=7, margin_s=margin)
        index.build()
        assert len(index.folds[0].snapshots) > 5
        _check(index, store, margin)

    def test_followed_entries_fold_like_a_build(self, client: redis.Redis) -> None:
        inst = _instance(client)
        store = EventStore(client, inst.keys)
        _write(store, client, range(1, 20), 3)
        index = TimeIndex(inst, every=5)
        index.build()
        _write(store, client, range(100, 120), 4)
        got = index.follow(block_ms=10)
        assert {int(dict(zip(f[::2], f[1::2], strict=True))[b"j"]) for _p, (_s, f) in got} \
            >= set(range(100, 120))
        _check(index, store, 60.0)

    def test_steps_walk_the_journal_in_time_order(self, client: redis.Redis) -> None:
        inst = _instance(client)
        store = EventStore(client, inst.keys)
        # stamps close to the stream ids, as a real journal's are (steps read around
        # the ids of the moment asked for)
        _write(store, client, range(1, 6), 5, base=time.time() - 100)
        index = TimeIndex(inst)
        index.build()
        first, last = index.span()
        assert first is not None and last is not None
        forward = index.steps(first - 1, 5)
        assert [s[0] for s in forward] == sorted(s[0] for s in forward)
        assert forward[0][0] == first
        backward = index.steps(last + 1, 3, backwards=True)
        assert backward[0][0] == last and backward == sorted(backward, reverse=True)
        names = {name for _t, _j, name in index.steps(first - 1, 1000)}
        assert {"submit", "validate"} <= names


class TestFakeRedis(TimeIndexContract, OnFakeRedis):
    pass


class TestRealRedis(TimeIndexContract, OnRealRedis):
    pass


def test_a_job_pending_then_running_is_seen_pending_before_its_alloc(
        real_redis: redis.Redis) -> None:
    inst = _instance(real_redis)
    store = EventStore(real_redis, inst.keys)
    real_redis.set(inst.keys.jm_fence(0), "1")
    batch = store.batch()
    batch.append(inst.keys.eventlog(7), 7, 0, [
        ev.decode("submit", 100.0, {"urgency": 16, "userid": 1, "flags": 0, "version": 1}),
        ev.decode("validate", 100.0), ev.decode("depend", 100.1),
        ev.decode("priority", 100.2, {"priority": 16})], [{"name": "x"}, None, None, None])
    store.commit(batch, token="1")
    batch = store.batch()
    batch.append(inst.keys.eventlog(7), 7, 4, [ev.decode("alloc", 200.0)],
                 [{"ranks": "0", "nodelist": "node0"}])
    store.commit(batch, token="1")
    index = TimeIndex(inst, every=1)
    index.build()
    before = index.moment(150.0).get(7, 1)
    after = index.moment(250.0).get(7, 1)
    assert before is not None and before.job.state.name == "SCHED"
    assert after is not None and after.job.state.name == "RUN"
    assert after.info["nodelist"] == "node0"
    assert index.moment(50.0).get(7, 1) is None  # not submitted yet
    assert orjson.loads(orjson.dumps(after.to_obj()))  # records stay serializable
