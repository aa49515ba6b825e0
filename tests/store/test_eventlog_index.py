"""Every event stored once: a job's eventlog is an index of its journal entries.

Run against fakeredis and a real redis-server: commit.lua appends the journal ids to
the index, readers (the event store, jobfacts, the follower, purge.lua, the R op) read
the journal through it, and an eventlog of the previous layout (a stream of the events
themselves, as an instance written before the upgrade holds) is read and appended to
as it is.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fluxes.domain.job import events as ev
from fluxes.errors import FluxesError
from fluxes.store import jobfacts, jobhash, scripts
from fluxes.store.eventstore import ConflictError, EventStore, NotWaitingError, encode_context
from fluxes.store.exec_streams import ExecStreams
from fluxes.store.keys import Keys
from fluxes.store.retention import purge
from tests.backends import OnFakeRedis, OnRealRedis
from tests.strategies import SUBMIT, T

KEYS = Keys("t")
LIFE = ["submit", "validate", "depend", "priority", "alloc", "start", "finish", "release",
        "free", "clean"]
CONTEXT: dict[str, dict[str, Any]] = {"priority": {"priority": 16}, "finish": {"status": 0},
           "memo": {"k": 1},
           "release": {"ranks": "all", "final": True}}


def _event(name: str) -> ev.Event:
    return SUBMIT if name == "submit" else ev.decode(name, T, CONTEXT.get(name))


def _commit(store: EventStore, jobid: int, seq: int, names: list[str]) -> None:
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, seq, [_event(n) for n in names])
    store.commit(batch, token="1")


def _index(client: redis.Redis, jobid: int) -> bytes | None:
    """A job's eventlog index, wherever it is: the job hash's field while short, the
    eventlog key once longer."""
    key: bytes | None = client.get(KEYS.eventlog(jobid))
    field: bytes | None = client.hget(KEYS.job(jobid), jobfacts.INDEX_FIELD)
    assert key is None or field is None  # never both
    return key if key is not None else field


def _old_layout(client: redis.Redis, jobid: int, names: list[str]) -> None:
    """An eventlog as the previous layout wrote it: a stream of the events themselves
    (the journal held a copy of each)."""
    for seq, name in enumerate(names):
        event = _event(name)
        fields: dict[str, str | bytes] = {"n": name, "t": repr(event.timestamp)}
        if event.context():
            fields["c"] = encode_context(event.context())
        client.xadd(KEYS.eventlog(jobid), fields)
        client.xadd(KEYS.journal(0), {"j": jobid, "s": seq, **fields})


class EventlogIndexContract:
    """Behaviour every Redis (fake or real) must show; subclasses provide ``client``."""

    @pytest.fixture
    def store(self, client: redis.Redis) -> EventStore:
        client.set(KEYS.jm_fence(0), "1")
        return EventStore(client, KEYS)

    def test_each_event_is_stored_once_and_the_eventlog_names_it(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 7, 0, LIFE[:4])
        _commit(store, 8, 0, LIFE[:2])
        # a short index is a field of the job hash: no key of its own
        index = client.hget(KEYS.job(7), jobfacts.INDEX_FIELD)
        assert not client.exists(KEYS.eventlog(7)) and index is not None
        assert store.job_exists(7) and jobfacts.which_exist(client, KEYS, [7, 8, 9]) == [
            True, True, False]
        ids = jobfacts.index_ids(index)
        journal = {sid: f for sid, f in client.xrange(KEYS.journal(0))}
        assert [journal[i][b"n"] for i in ids] == [n.encode() for n in LIFE[:4]]
        assert all(journal[i][b"j"] == b"7" for i in ids)
        entries = store.eventlog_entries(7)
        assert [sid.encode() for sid, _e in entries] == ids
        assert [e.event_name for _s, e in entries] == LIFE[:4]
        assert store.eventlog(7)[3] == _event("priority")
        assert store.eventlog(9) == [] and not store.job_exists(9)
        [(_sid, last)] = [e for e in jobfacts.last_events(client, KEYS, [7]) if e]
        assert last == {b"n": b"priority", b"t": repr(T).encode(), b"c": b'{"priority":16}'}
        heads = store.eventlog_heads([7, 8, 9], count=3)
        assert [[h.name for h in head] for head in heads if isinstance(head, list)] == [
            [b"submit", b"validate", b"depend"], [b"submit", b"validate"], []]

    def test_later_ids_are_relative_and_whole_ids_of_before_still_read(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 7, 0, LIFE[:2])
        _commit(store, 7, 2, LIFE[2:4])
        index = _index(client, 7)
        assert index is not None
        first, *later = index.split()
        base = int(first.split(b"-")[0])
        assert later and all(int(t.split(b"-")[0]) < base for t in later)
        assert len(index) <= 44  # an embedded string in Redis
        # an index of whole ids, as written before: read, appended to, purged
        whole = jobfacts.index_ids(index)
        client.set(KEYS.eventlog(7), b" ".join(whole) + b" ")
        client.hdel(KEYS.job(7), jobfacts.INDEX_FIELD)
        assert [sid.encode() for sid, _e in store.eventlog_entries(7)] == whole
        _commit(store, 7, 4, LIFE[4:])
        assert [e.event_name for _s, e in store.eventlog_entries(7)] == LIFE
        assert purge(client, KEYS, [7]).purged == [7]
        # an index past the whole rewrite's limit is appended to: still relative
        _commit(store, 8, 0, LIFE[:4])
        for seq in range(4, 64, 4):
            _commit(store, 8, seq, ["memo"] * 4)
        # grown past the field's limit: moved to the eventlog key
        assert client.hget(KEYS.job(8), jobfacts.INDEX_FIELD) is None
        ids = jobfacts.index_ids(client.get(KEYS.eventlog(8)) or b"")
        assert len(ids) == 64 and len(set(ids)) == 64
        assert [e.event_name for _s, e in store.eventlog_entries(8)] == LIFE[:4] + [
            "memo"] * 60
        assert purge(client, KEYS, [8]).active == {8: "memo"}

    def test_a_short_index_is_the_hash_field_and_moves_to_the_key_once_long(
            self, store: EventStore, client: redis.Redis) -> None:
        assert jobfacts.INDEX_FIELD == jobhash.INDEX
        client.hset(KEYS.job(7), mapping={"owner": "1", "urgency": "16"})
        _commit(store, 7, 0, ["submit"])
        seq = 1
        while client.hget(KEYS.job(7), jobfacts.INDEX_FIELD) is not None:
            field = client.hget(KEYS.job(7), jobfacts.INDEX_FIELD) or b""
            assert len(field) <= 64 and not client.exists(KEYS.eventlog(7))
            _commit(store, 7, seq, ["memo"])
            seq += 1
        # moved whole, in the step that made it longer than 64 bytes
        index = client.get(KEYS.eventlog(7)) or b""
        assert len(index) > 64 and len(jobfacts.index_ids(index)) == seq
        assert [e.event_name for e in store.eventlog(7)] == ["submit"] + ["memo"] * (seq - 1)
        assert client.hget(KEYS.job(7), "owner") == b"1"  # the rest of the hash stays
        _commit(store, 7, seq, ["memo"])
        assert len(store.eventlog(7)) == seq + 1 and store.job_exists(7)
        with pytest.raises(ConflictError):
            _commit(store, 7, seq, ["memo"])

    def test_expected_length_counts_the_indexed_events(self, store: EventStore) -> None:
        _commit(store, 7, 0, LIFE[:2])
        with pytest.raises(ConflictError) as caught:
            _commit(store, 7, 1, ["depend"])
        assert caught.value.conflicts == {7: 2}
        _commit(store, 7, 2, ["depend"])
        assert len(store.eventlog(7)) == 3

    def test_counts_with_leading_zeros_read_as_their_numbers(
            self, client: redis.Redis) -> None:
        """commit.lua keeps the texts of short counts and gives XADD the event's sequence
        as the count's text: a count written "00" or "0002" still means 0 or 2, and the
        journal holds the sequence numbers as before ("1", never "01")."""
        client.set(KEYS.jm_fence(0), "1")
        commit = scripts.Function(client, "commit")
        hash_key, log_key = KEYS.job(7), KEYS.eventlog(7)
        keys = [KEYS.jm_fence(0), KEYS.journal(0), log_key, hash_key]
        for expected, n, names in (("00", "0002", ["submit", "validate"]),
                                   ("002", "01", ["depend"]), ("0003", "1", ["priority"])):
            args = ["1", "E", "3", "4", "7", expected, n]
            for name in names:
                args += [name, repr(T), "", ""]
            commit(keys, args)
        with pytest.raises(redis.ResponseError, match="CONFLICT 7:4"):
            commit(keys, ["1", "E", "3", "4", "7", "003", "1", "memo", repr(T), "", ""])
        entries = [f for _sid, f in client.xrange(KEYS.journal(0))]
        assert [(f[b"s"], f[b"n"]) for f in entries] == [
            (b"0", b"submit"), (b"1", b"validate"), (b"2", b"depend"), (b"3", b"priority")]
        index = _index(client, 7)
        assert index is not None and len(jobfacts.index_ids(index)) == 4

    def test_r_is_written_only_while_the_indexed_job_waits(
            self, store: EventStore, client: redis.Redis) -> None:
        client.hset(KEYS.job(7), "owner", "1")
        _commit(store, 7, 0, LIFE[:4])
        batch = store.batch()
        batch.set_if_waiting(KEYS.job(7), KEYS.eventlog(7), 7, "R", b"{}")
        store.commit(batch, token="1")
        assert client.hget(KEYS.job(7), "R") == b"{}"
        _commit(store, 7, 4, ["alloc"])
        batch = store.batch()
        batch.set_if_waiting(KEYS.job(7), KEYS.eventlog(7), 7, "R", b"{x}")
        with pytest.raises(NotWaitingError):
            store.commit(batch, token="1")

    def test_the_r_op_reads_every_layout_and_looks_past_events_saying_nothing(
            self, store: EventStore, client: redis.Redis) -> None:
        def waits(jobid: int) -> bool:
            batch = store.batch()
            batch.set_if_waiting(KEYS.job(jobid), KEYS.eventlog(jobid), jobid, "R", b"{}")
            try:
                store.commit(batch, token="1")
            except NotWaitingError:
                return False
            return True

        # the index in the field: a relative last id; then events saying nothing
        _commit(store, 7, 0, LIFE[:4])
        assert client.hget(KEYS.job(7), jobfacts.INDEX_FIELD) is not None
        assert waits(7)
        _commit(store, 7, 4, ["memo", "memo"])
        assert waits(7)
        # the index in the key (grown past the field): the last id first, then back
        for seq in range(6, 30, 4):
            _commit(store, 7, seq, ["memo"] * 4)
        assert client.hget(KEYS.job(7), jobfacts.INDEX_FIELD) is None
        assert client.type(KEYS.eventlog(7)) == b"string" and waits(7)
        _commit(store, 7, 30, ["alloc", "memo"])
        assert not waits(7)
        # an index of whole ids, as written before
        _commit(store, 8, 0, LIFE[:4])
        whole = jobfacts.index_ids(_index(client, 8) or b"")
        client.hset(KEYS.job(8), "owner", "1")
        client.hdel(KEYS.job(8), jobfacts.INDEX_FIELD)
        client.set(KEYS.eventlog(8), b" ".join(whole) + b" ")
        assert waits(8)
        client.set(KEYS.eventlog(8), b" ".join(whole[:-1]) + b" ")  # up to depend
        assert waits(8)
        client.set(KEYS.eventlog(8), whole[0] + b" ")  # one id: submit
        assert waits(8)
        # an eventlog of the previous layout, a memo last
        _old_layout(client, 9, [*LIFE[:4], "memo"])
        client.hset(KEYS.job(9), "owner", "1")
        assert waits(9)
        _old_layout(client, 10, [*LIFE[:5], "memo"])
        client.hset(KEYS.job(10), "owner", "1")
        assert not waits(10)
        # no job hash, a job hash of another type, no eventlog, a broken index
        client.delete(KEYS.job(9))
        assert not waits(9)
        client.set(KEYS.job(9), "x")
        assert not waits(9)
        client.hset(KEYS.job(11), "owner", "1")
        assert not waits(11)
        client.hset(KEYS.job(11), jobfacts.INDEX_FIELD, "not-an-id ")
        with pytest.raises(FluxesError, match="stream ID"):
            waits(11)  # XRANGE refuses the id, as before

    def test_purge_reads_the_last_event_through_the_index(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 7, 0, LIFE[:5])
        result = purge(client, KEYS, [7])
        assert result.active == {7: "alloc"} and store.job_exists(7)
        _commit(store, 7, 5, LIFE[5:])
        assert purge(client, KEYS, [7]).purged == [7]
        assert not store.job_exists(7) and store.eventlog(7) == []
        assert not client.exists(KEYS.job(7), KEYS.eventlog(7))
        # a short index (in the field) purged with its hash
        _commit(store, 9, 0, ["submit", "invalidate"])
        assert client.hget(KEYS.job(9), jobfacts.INDEX_FIELD) is not None
        result = purge(client, KEYS, [9])
        assert result.purged == [9] and not client.exists(KEYS.job(9))

    def test_a_follower_sees_the_history_then_only_its_jobs_new_events(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 7, 0, LIFE[:2])
        follower = jobfacts.EventlogFollower(client, KEYS, 7)
        assert follower.exists and follower.key == KEYS.journal(0)
        assert [f[b"n"] for _s, f in follower.history] == [b"submit", b"validate"]
        _commit(store, 8, 0, LIFE[:2])  # another job's
        batch = store.batch()
        batch.journal_only(7, ev.decode("annotations", T, {"annotations": {}}))
        store.commit(batch, token="1")  # journal-only: not part of the eventlog
        _commit(store, 7, 2, ["depend"])
        got = []
        for _stream, entries in jobfacts.read_new(client, follower.streams()):
            got += follower.take(entries)
        assert [f[b"n"] for _s, f in got] == [b"depend"]
        assert jobfacts.read_new(client, follower.streams()) == []
        assert not jobfacts.EventlogFollower(client, KEYS, 9).exists

    def test_a_follower_starts_after_events_already_read(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 8, 0, LIFE[:2])
        _commit(store, 7, 0, LIFE[:2])
        follower = jobfacts.EventlogFollower(client, KEYS, 7)
        # no event of the history comes again: the position is past every one
        assert jobfacts.read_new(client, follower.streams()) == []

    def test_an_eventlog_of_the_previous_layout_is_read_and_appended_to(
            self, store: EventStore, client: redis.Redis) -> None:
        _old_layout(client, 7, LIFE[:4])
        assert [e.event_name for e in store.eventlog(7)] == LIFE[:4]
        [(_sid, last)] = [e for e in jobfacts.last_events(client, KEYS, [7]) if e]
        assert last[b"n"] == b"priority"
        [head] = store.eventlog_heads([7], count=2)
        assert isinstance(head, list) and [h.name for h in head] == [b"submit", b"validate"]
        follower = jobfacts.EventlogFollower(client, KEYS, 7)
        assert follower.key == KEYS.eventlog(7) and len(follower.history) == 4
        client.hset(KEYS.job(7), "owner", "1")
        batch = store.batch()
        batch.set_if_waiting(KEYS.job(7), KEYS.eventlog(7), 7, "R", b"{}")
        store.commit(batch, token="1")
        with pytest.raises(ConflictError):
            _commit(store, 7, 3, ["alloc"])
        _commit(store, 7, 4, LIFE[4:])
        assert client.type(KEYS.eventlog(7)) == b"stream"  # still its own stream
        assert [e.event_name for e in store.eventlog(7)] == LIFE
        got = [e for _s, entries in jobfacts.read_new(client, follower.streams())
               for e in follower.take(entries)]
        assert [f[b"n"] for _s, f in got] == [n.encode() for n in LIFE[4:]]
        assert purge(client, KEYS, [7]).purged == [7]
        assert not client.exists(KEYS.eventlog(7))

    def test_the_exec_worker_reads_each_owner_from_the_submit_event(
            self, store: EventStore, client: redis.Redis) -> None:
        _commit(store, 7, 0, LIFE[:2])
        _old_layout(client, 8, LIFE[:2])
        client.set(KEYS.eventlog(9), "not-an-id ")  # a broken index names no one
        client.hset(KEYS.users, "alice", "1000")
        got = ExecStreams(client, KEYS, [0]).identities([7, 8, 9, 10])
        assert got.submitters == {7: 1000, 8: 1000, 9: None, 10: None}  # SUBMIT.userid
        assert got.registered == {1000}


class TestFakeRedis(EventlogIndexContract, OnFakeRedis):
    pass


class TestRealRedis(EventlogIndexContract, OnRealRedis):
    def test_the_job_hash_stays_a_listpack_with_its_longest_field_index(
            self, store: EventStore, client: redis.Redis) -> None:
        client.hset(KEYS.job(7), mapping={"owner": "1", "urgency": "16"})
        seq = 0
        longest = b""
        while not client.exists(KEYS.eventlog(7)):
            longest = client.hget(KEYS.job(7), jobfacts.INDEX_FIELD) or b""
            assert client.object("encoding", KEYS.job(7)) == b"listpack"
            _commit(store, 7, seq, ["memo"] if seq else ["submit"])
            seq += 1
        assert 50 < len(longest) <= 64
        assert client.object("encoding", KEYS.job(7)) == b"listpack"
