"""The event store contract, run against fakeredis and against a real redis-server."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxes.job import events as ev
from fluxes.job.model import Job, apply, replay
from fluxes.job.states import JobState
from fluxes.store.eventstore import ConflictError, EventStore, FencedError
from fluxes.store.keys import Keys
from tests.strategies import SUBMIT, T, histories

KEYS = Keys("t")


def events(*names: str) -> list[ev.Event]:
    return [SUBMIT if n == "submit" else ev.decode(n, T) for n in names]


class EventStoreContract:
    """Behaviour every Redis (fake or real) must show; subclasses provide ``client``."""

    @pytest.fixture
    def store(self, client: redis.Redis) -> EventStore:
        return EventStore(client, KEYS)

    def test_atomic_append_writes_eventlog_journal_messages_and_acks(
            self, store: EventStore, client: redis.Redis) -> None:
        client.xgroup_create("t:in", "g", id="0", mkstream=True)
        msg = client.xadd("t:in", {"d": "x"})
        client.xreadgroup("g", "c", {"t:in": ">"})
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 0, events("submit", "validate"))
        batch.append(KEYS.eventlog(2), 2, 0, events("submit"))
        batch.hset(KEYS.job(1), {"jobspec": "{}", "owner": 5})
        batch.xadd("t:out", {"d": "hello"})
        batch.xack("t:in", "g", [msg])
        result = store.commit(batch)
        assert result.events == 3
        assert [e.event_name for e in store.eventlog(1)] == ["submit", "validate"]
        assert store.replay_job(1).state == JobState.DEPEND
        assert client.xlen(KEYS.journal(0)) == 3
        assert client.hget(KEYS.job(1), "owner") == b"5"
        assert client.xlen("t:out") == 1
        assert client.xpending("t:in", "g")["pending"] == 0
        assert result.journal_id == store.journal_last_id(0)

    def test_fencing_refuses_the_stale_writer_and_writes_nothing(
            self, store: EventStore, client: redis.Redis) -> None:
        first = str(client.incr(KEYS.jm_fence(0)))
        store.commit(_create(store, 1), token=first)
        second = str(client.incr(KEYS.jm_fence(0)))  # a new leader takes over
        stale = store.batch()
        stale.append(KEYS.eventlog(1), 1, 1, events("validate"))
        stale.xadd("t:out", {"d": "x"})
        with pytest.raises(FencedError, match="stale writer"):
            store.commit(stale, token=first)
        assert len(store.eventlog(1)) == 1 and client.xlen("t:out") == 0
        store.commit(stale, token=second)
        assert len(store.eventlog(1)) == 2

    def test_unfenced_writer_may_only_create(self, store: EventStore) -> None:
        store.commit(_create(store, 1))
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 1, events("validate"))
        with pytest.raises(FencedError, match="only create"):
            store.commit(batch)

    def test_expected_length_conflict_writes_nothing(self, store: EventStore,
                                                     client: redis.Redis) -> None:
        store.commit(_create(store, 1))
        batch = store.batch()
        batch.append(KEYS.eventlog(2), 2, 0, events("submit"))
        batch.append(KEYS.eventlog(1), 1, 0, events("submit"))  # 1 already has an event
        with pytest.raises(ConflictError) as info:
            store.commit(batch)
        assert info.value.conflicts == {1: 1}
        assert not store.job_exists(2)
        assert client.xlen(KEYS.journal(0)) == 1

    def test_commit_many_in_one_round_trip(self, store: EventStore) -> None:
        results = store.commit_many([_create(store, i) for i in range(1, 6)])
        assert [r.events for r in results] == [1] * 5
        assert all(store.job_exists(i) for i in range(1, 6))

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.differing_executors])
    @given(st.lists(histories(), min_size=1, max_size=6), st.integers(1, 5), st.data())
    def test_replay_equals_incremental_state(self, store: EventStore, client: redis.Redis,
                                             logs: list[list[ev.Event]], chunk: int,
                                             data: st.DataObject) -> None:
        client.flushall()
        expected: dict[int, Job] = {}
        pending = {jobid: list(log) for jobid, log in enumerate(logs, start=1)}
        seq = dict.fromkeys(pending, 0)
        # interleave the jobs' events, a few per batch, as a job manager would
        while pending:
            jobid = data.draw(st.sampled_from(sorted(pending)))
            take, pending[jobid] = pending[jobid][:chunk], pending[jobid][chunk:]
            if not pending[jobid]:
                del pending[jobid]
            batch = store.batch()
            token = _token(client)
            for e in take:  # keep journal order: eventlog events and annotations interleave
                if isinstance(e, ev.Annotations):
                    batch.journal_only(jobid, e)
                else:
                    batch.append(KEYS.eventlog(jobid), jobid, seq[jobid], [e])
                    seq[jobid] += 1
            store.commit(batch, token=token)
            job = expected.get(jobid, Job(jobid))
            for e in take:
                job = apply(e, job)
            expected[jobid] = job
        result = store.replay(0)
        assert result.broken == {}
        assert result.jobs == expected
        for jobid, job in expected.items():
            own = store.replay_job(jobid)
            assert own.state == job.state and own.seq == job.seq

    def test_checkpoint_plus_tail_equals_full_replay(self, store: EventStore,
                                                     client: redis.Redis) -> None:
        token = _token(client)
        for jobid in range(1, 11):
            store.commit(_create(store, jobid))
        mid = store.replay(0, drop_inactive=True)
        blob = store.checkpoint_blob(mid.records.values(), mid.last_id)
        client.set(KEYS.checkpoint(0), blob)
        for jobid in range(1, 11):
            batch = store.batch()
            names = ["validate", "depend"] if jobid % 2 else ["validate"]
            batch.append(KEYS.eventlog(jobid), jobid, 1, events(*names))
            store.commit(batch, token=token)
        restored, used = store.restore(0)
        assert used
        full = store.replay(0, drop_inactive=True)
        assert restored.jobs == full.jobs
        assert restored.events == 15  # only the tail was read

    def test_corrupt_or_missing_checkpoint_falls_back_to_full_replay(
            self, store: EventStore, client: redis.Redis) -> None:
        for jobid in range(1, 4):
            store.commit(_create(store, jobid))
        restored, used = store.restore(0)
        assert not used and len(restored.jobs) == 3
        client.set(KEYS.checkpoint(0), b"\x78\x01garbage")
        restored, used = store.restore(0)
        assert not used and len(restored.jobs) == 3
        good = store.checkpoint_blob(restored.records.values(), restored.last_id)
        client.set(KEYS.checkpoint(0), good[:-3] + b"xyz")  # bit rot at the end
        restored, used = store.restore(0)
        assert not used and len(restored.jobs) == 3

    def test_inactive_jobs_drop_out_of_a_job_manager_replay(self, store: EventStore,
                                                           client: redis.Redis) -> None:
        token = _token(client)
        store.commit(_create(store, 1))
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 1, [
            ev.decode("validate", T),
            ev.decode("exception", T, {"type": "cancel", "severity": 0, "note": ""}),
            ev.decode("clean", T)])
        store.commit(batch, token=token)
        assert store.replay(0, drop_inactive=True).jobs == {}
        assert store.replay(0).jobs[1].state == JobState.INACTIVE

    def test_broken_eventlog_is_reported_not_fatal(self, store: EventStore,
                                                   client: redis.Redis) -> None:
        store.commit(_create(store, 1))
        store.commit(_create(store, 2))
        # A foreign writer puts an impossible event straight into the journal.
        client.xadd(KEYS.journal(0), {"j": 1, "s": 1, "n": "start", "t": "1.0"})
        result = store.replay(0)
        assert "start" in result.broken[1]
        assert 2 in result.jobs and 1 not in result.jobs

    def test_export_rfc18(self, store: EventStore) -> None:
        store.commit(_create(store, 1))
        assert store.export_rfc18(1) == [
            {"timestamp": T, "name": "submit",
             "context": {"urgency": 16, "userid": 1000, "flags": 0, "version": 1}}]

    def test_time_travel_stops_at_until_time(self, store: EventStore,
                                             client: redis.Redis) -> None:
        token = _token(client)
        store.commit(_create(store, 1))
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 1, [ev.decode("validate", T + 10)])
        store.commit(batch, token=token)
        assert store.replay(0, until_time=T + 5).jobs[1].state == JobState.NEW
        assert store.replay(0).jobs[1].state == JobState.DEPEND


def _create(store: EventStore, jobid: int) -> object:
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, 0, [SUBMIT])
    return batch


def _token(client: redis.Redis) -> str:
    token = client.get(KEYS.jm_fence(0))
    if token is None:
        client.set(KEYS.jm_fence(0), "1")
        return "1"
    return str(token.decode())


class TestFakeRedis(EventStoreContract):
    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


class TestRealRedis(EventStoreContract):
    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis


def test_replay_matches_pure_replay() -> None:
    # sanity: the pure fold used by the contract agrees with model.replay
    log = events("submit", "validate")
    assert replay(1, log).state == JobState.DEPEND
