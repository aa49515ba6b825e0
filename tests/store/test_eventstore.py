"""The event store contract, run against fakeredis and against a real redis-server."""

from __future__ import annotations

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, apply, replay
from fluxes.domain.job.states import JobState
from fluxes.store.eventstore import (
    MAX_MESSAGE_FIELDS,
    BadBatchError,
    Batch,
    ConflictError,
    EventStore,
    FencedError,
    KeyTypeError,
    commit_error,
    encode_context,
)
from fluxes.store.keys import Keys
from fluxes.store.scripts import lua_source
from tests.backends import OnFakeRedis, OnRealRedis
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

    # ------------------------------------------------ nothing is half-written

    @pytest.mark.parametrize("case", [
        "job hash holds a string", "eventlog holds a hash", "journal holds a list",
        "message stream holds a hash", "acknowledged stream holds a string",
        "checkpoint holds a hash", "reply list holds a string", "hdel key holds a list",
        "fence holds a hash", "two ops disagree on a new key"])
    def test_key_of_the_wrong_type_refuses_the_commit_and_writes_nothing(
            self, store: EventStore, client: redis.Redis, case: str) -> None:
        token = _token(client)
        msg = _pending_input(client)
        store.commit(_create(store, 1))
        corrupt = {
            "job hash holds a string": lambda: client.set(KEYS.job(1), "x"),
            "eventlog holds a hash": lambda: client.hset(KEYS.eventlog(2), "n", "submit"),
            "journal holds a list": lambda: (client.delete(KEYS.journal(0)),
                                             client.rpush(KEYS.journal(0), "x")),
            "message stream holds a hash": lambda: client.hset("t:out", "d", "x"),
            "acknowledged stream holds a string": lambda: (client.delete("t:in"),
                                                           client.set("t:in", "x")),
            "checkpoint holds a hash": lambda: client.hset(KEYS.checkpoint(0), "a", "b"),
            "reply list holds a string": lambda: client.set("t:reply", "x"),
            "hdel key holds a list": lambda: client.rpush("t:old", "x"),
            "fence holds a hash": lambda: (client.delete(KEYS.jm_fence(0)),
                                           client.hset(KEYS.jm_fence(0), "a", "b")),
            "two ops disagree on a new key": lambda: None,
        }[case]
        corrupt()
        # every kind of op, the one meeting the wrong type as late as possible
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 1, events("validate"))
        batch.journal_only(1, ev.decode("annotations", T, {"annotations": {"a": 1}}))
        batch.xadd("t:out", {"d": "hello"})
        batch.xack("t:in", "g", [msg])
        batch.set(KEYS.checkpoint(0), b"blob")
        batch.push_reply("t:reply", b"answer", 60_000)
        batch.hdel("t:old", ["f"])
        if case == "two ops disagree on a new key":
            batch.hset("t:new", {"f": "v"})
            batch.xadd("t:new", {"d": "x"})
        batch.append(KEYS.eventlog(2), 2, 0, events("submit"))
        batch.hset(KEYS.job(1), {"R": "{}"})
        before = _snapshot(client)
        with pytest.raises(KeyTypeError, match=r"nothing written: \w+ needs a \w+ but \S+ holds a \w+$"):
            store.commit(batch, token=token)
        assert _snapshot(client) == before

    @pytest.mark.parametrize(("case", "fragment"), [
        ("bad stream id", "bad stream id"),
        ("unknown op", "unknown op"),
        ("no such key", "no such key index"),
        ("arguments missing", "arguments missing"),
        ("message too large", f"at most {MAX_MESSAGE_FIELDS} fields"),
        ("bad ttl", "bad ttl"),
        ("empty hset", "bad count"),
    ])
    def test_malformed_op_refuses_the_commit_and_writes_nothing(
            self, store: EventStore, client: redis.Redis, case: str, fragment: str) -> None:
        store.commit(_create(store, 1))
        # a journal entry and a message first: ops pass 2 would have written
        ok = ["J", "1", "annotations", repr(T), "", "X", "3", "1", "d", "x"]
        cases: dict[str, list[str | int]] = {
            "bad stream id": ["A", "3", "g", "2", "1-1", "1-x"],
            "unknown op": ["Q", "3"],
            "no such key": ["H", "9", "1", "f", "v"],
            "arguments missing": ["H", "3", "2", "f", "v"],
            "message too large": ["X", "3", MAX_MESSAGE_FIELDS + 1,
                                  *["f", "v"] * (MAX_MESSAGE_FIELDS + 1)],
            "bad ttl": ["S", "4", "-5", "v"],
            "empty hset": ["H", "4", "0"],
        }
        bad = cases[case]
        keys = [KEYS.jm_fence(0), KEYS.journal(0), "t:out", "t:other"]
        before = _snapshot(client)
        with pytest.raises(redis.ResponseError) as info:
            client.eval(lua_source("commit"), len(keys), *keys, "", *ok, *bad)
        error = commit_error(info.value)
        assert isinstance(error, BadBatchError) and fragment in str(error)
        assert _snapshot(client) == before

    def test_batch_refuses_a_bad_ack_id_and_writes_nothing(self, store: EventStore,
                                                         client: redis.Redis) -> None:
        msg = _pending_input(client)
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 0, events("submit"))
        batch.xack("t:in", "g", [msg, "not-an-id"])
        before = _snapshot(client)
        with pytest.raises(BadBatchError, match="bad stream id not-an-id"):
            store.commit(batch)
        assert _snapshot(client) == before

    def test_message_size_is_checked_when_added(self, store: EventStore) -> None:
        batch = store.batch()
        with pytest.raises(ValueError, match="1 to 500 fields, got 501"):
            batch.xadd("t:out", {f"f{i}": i for i in range(501)})
        with pytest.raises(ValueError, match="got 0"):
            batch.xadd("t:out", {})
        assert not batch

    def test_large_acks_and_hashes_commit_in_one_step(self, store: EventStore,
                                                      client: redis.Redis) -> None:
        # far more values than Lua can unpack into one call
        client.xgroup_create("t:in", "g", id="0", mkstream=True)
        pipe = client.pipeline(transaction=False)
        for i in range(20_000):
            pipe.xadd("t:in", {"d": i})
        ids = pipe.execute()
        client.xreadgroup("g", "c", {"t:in": ">"}, count=20_000)
        assert client.xpending("t:in", "g")["pending"] == 20_000
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 0, events("submit"))
        batch.hset(KEYS.job(1), {f"f{i}": i for i in range(10_000)})
        batch.hset(KEYS.job(2), {f"g{i}": i for i in range(10_000)})
        batch.hdel(KEYS.job(2), [f"g{i}" for i in range(9_999)])
        batch.xack("t:in", "g", ids)
        result = store.commit(batch)
        assert result.events == 1
        assert client.xpending("t:in", "g")["pending"] == 0
        # and the field holding the job's (short) eventlog index
        assert client.hlen(KEYS.job(1)) == 10_001 and client.hget(KEYS.job(1), "f9999") == b"9999"
        assert client.hgetall(KEYS.job(2)) == {b"g9999": b"9999"}

    # ------------------------------------------------ time travel

    def test_time_travel_with_writers_whose_clocks_disagree(self, store: EventStore,
                                                            client: redis.Redis) -> None:
        # Two writers: A stamps by Redis' clock, B 20 s behind it. The journal
        # (stream ids: Redis' clock, in ms) is in commit order, not stamp order.
        journal = KEYS.journal(0)
        submit = encode_context(SUBMIT.context())

        def entry(redis_s: float, jobid: int, seq: int, name: str, t: float) -> None:
            fields: dict[str, bytes | str | int] = {"j": jobid, "s": seq, "n": name, "t": repr(t)}
            if name == "submit":
                fields["c"] = submit
            client.xadd(journal, fields, id=f"{round(redis_s * 1000)}-{jobid}")

        entry(100.0, 1, 0, "submit", 100.0)   # A
        entry(100.1, 2, 0, "submit", 80.1)    # B
        entry(100.2, 1, 1, "validate", 100.2)  # A
        entry(100.3, 2, 1, "validate", 80.3)  # B
        entry(100.4, 5, 0, "submit", 98.0)    # A
        entry(100.5, 5, 1, "validate", 99.5)  # A: after the moment asked for...
        entry(100.6, 5, 2, "depend", 80.6)    # B: ...so this one is not folded either
        entry(150.0, 3, 0, "submit", 95.0)    # B, committed late but within the margin
        entry(150.1, 3, 1, "validate", 130.0)  # B
        entry(170.0, 4, 0, "submit", 90.0)    # B, committed later than the margin
        result = store.replay(0, until_time=99.0, until_margin=60.0)
        assert {jobid: job.state for jobid, job in result.jobs.items()} == {
            2: JobState.DEPEND, 3: JobState.NEW, 5: JobState.NEW}
        assert result.broken == {}
        assert result.jobs[5].seq == 1  # folded up to its first later stamp only
        # further back, B's jobs are gone too; further on, everything is in
        assert store.replay(0, until_time=80.2).jobs.keys() == {2}
        late = store.replay(0, until_time=1000.0, until_margin=60.0)
        assert {jobid: job.state for jobid, job in late.jobs.items()} == {
            1: JobState.DEPEND, 2: JobState.DEPEND, 3: JobState.DEPEND,
            4: JobState.NEW, 5: JobState.PRIORITY}
        # a job manager's replay (drop_inactive) follows the same rule
        assert store.replay(0, until_time=99.0, drop_inactive=True).jobs.keys() == {2, 3, 5}


def _pending_input(client: redis.Redis) -> bytes:
    """One message of ``t:in`` delivered to group ``g`` and not yet acknowledged."""
    client.xgroup_create("t:in", "g", id="0", mkstream=True)
    msg: bytes = client.xadd("t:in", {"d": "x"})
    client.xreadgroup("g", "c", {"t:in": ">"})
    return msg


def _snapshot(client: redis.Redis) -> dict[bytes, object]:
    """Every key's type and content (and each stream's consumer groups)."""
    out: dict[bytes, object] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        value: object = None
        if kind == b"string":
            value = client.get(key)
        elif kind == b"hash":
            value = client.hgetall(key)
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"stream":
            groups = [(g["name"], client.xpending(key, g["name"])["pending"])
                      for g in client.xinfo_groups(key)]
            value = (client.xrange(key), groups)
        out[key] = (kind, value)
    return out


def _create(store: EventStore, jobid: int) -> Batch:
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, 0, [SUBMIT])
    return batch


def _token(client: redis.Redis) -> str:
    token = client.get(KEYS.jm_fence(0))
    if token is None:
        client.set(KEYS.jm_fence(0), "1")
        return "1"
    return str(token.decode())


class TestFakeRedis(EventStoreContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(EventStoreContract, OnRealRedis):
    """The contract on a private redis-server."""


def test_replay_matches_pure_replay() -> None:
    # sanity: the pure fold used by the contract agrees with model.replay
    log = events("submit", "validate")
    assert replay(1, log).state == JobState.DEPEND
