"""The store functions the CLI, the web and the service layer call instead of raw Redis
(issue 25): the users table, the children table and instance marks, the queue admin
stream, the job facts and what ``fluxes status`` reads."""

from __future__ import annotations

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.store import jobfacts
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from fluxes.store.nesting import ChildTable, has_mark, instance_of, set_mark
from fluxes.store.queues import administered, post_queue_event, queue_events
from fluxes.store.status import (
    dead_letter_tail,
    instance_facts,
    lease_states,
    newest_dead_letters,
    registered_exec_ranks,
)
from fluxes.store.users import UserTable
from tests.backends import OnFakeRedis, OnRealRedis

KEYS = Keys("t", 2)


class NamedReadsContract:
    def test_the_users_table(self, client: redis.Redis) -> None:
        table = UserTable(client, KEYS)
        assert table.uid("alice") is None and table.entries() == {} and table.readable()
        table.add("alice", 1001)
        client.hset(KEYS.users, "bad", "x")  # not a number: left out, never an error
        assert table.uid("alice") == 1001 and table.uid("bad") is None
        assert table.entries() == {"alice": 1001}
        assert table.remove("alice") and not table.remove("alice")

    def test_children_and_instance_marks(self, client: redis.Redis) -> None:
        children = ChildTable(client, KEYS)
        assert children.namespace_of(7) is None and children.all() == {}
        client.hset(KEYS.children, mapping={"7": "t.7", "9": "t.9"})
        assert children.namespace_of(7) == "t.7"
        assert children.namespaces_of([9, 8, 7]) == ["t.9", None, "t.7"]
        assert children.namespaces_of([]) == []
        assert children.all() == {7: "t.7", 9: "t.9"}
        child = Keys("t.7")
        assert not has_mark(client, child, "stopped")
        set_mark(client, child, "stopped", "1")
        assert has_mark(client, child, "stopped")
        inst = Instance(InstanceURI("redis://unused", "t"), client=client)
        assert instance_of(inst, "t.7").keys.ns == "t.7"
        assert instance_of(inst, "t.7").redis is client

    def test_queue_events_round_trip(self, client: redis.Redis) -> None:
        assert not administered(client, KEYS) and queue_events(client, KEYS) == []
        post_queue_event(client, KEYS, {"kind": "stop", "queue": "batch", "timestamp": 10.0})
        post_queue_event(client, KEYS, {"kind": "start", "queue": "batch", "timestamp": 20.0})
        client.xadd(KEYS.queues, {"d": b"{not json"})  # hostile: skipped
        assert administered(client, KEYS)
        assert [e["kind"] for e in queue_events(client, KEYS)] == ["stop", "start"]
        assert [e["kind"] for e in queue_events(client, KEYS, until=15.0)] == ["stop"]
        for p in range(KEYS.partitions):  # every job manager is told to re-read them
            notes = [proto.decode_entry(proto.CONTROL, fields)[1]
                     for _sid, fields in client.xrange(KEYS.jm_ctl(p))]
            assert [type(m) for [m] in notes] == [proto.QueuesChanged] * 2

    def test_job_facts(self, client: redis.Redis) -> None:
        assert jobfacts.which_exist(client, KEYS, []) == []
        assert jobfacts.last_events(client, KEYS, [5]) == [None]
        for n in ("submit", "clean"):
            client.xadd(KEYS.eventlog(5), {"n": n, "t": "1.0"})
        assert jobfacts.which_exist(client, KEYS, [5, 6]) == [True, False]
        [(_sid, last)] = [e for e in jobfacts.last_events(client, KEYS, [5]) if e]
        assert last[b"n"] == b"clean"
        [log5, log6] = jobfacts.eventlogs(client, KEYS, [5, 6])
        assert [f[b"n"] for _s, f in log5] == [b"submit", b"clean"] and log6 == []
        key = KEYS.eventlog(5)
        first = log5[0][0].decode()
        [(stream, entries)] = jobfacts.read_new(client, {key: first})
        assert stream == key.encode() and [f[b"n"] for _s, f in entries] == [b"clean"]
        assert jobfacts.read_new(client, {key: log5[1][0].decode()}) == []
        assert [f[b"n"] for _s, f in jobfacts.read_last(client, key)] == [b"clean"]
        assert len(jobfacts.read_range(client, key, first, first)) == 1

    def test_what_status_reads(self, client: redis.Redis) -> None:
        client.hset(KEYS.instance, mapping={"owner": "root", "other": "x"})
        assert instance_facts(client, KEYS, ("owner", "started")) == {"owner": "root"}
        client.set(KEYS.jm_lease(0), "jm-a", px=5000)
        client.set(KEYS.jm_fence(0), 3)
        [(holder, ttl, epoch), (nobody, _ttl, no_epoch)] = lease_states(
            client, KEYS, [(KEYS.jm_lease(0), KEYS.jm_fence(0)),
                           (KEYS.jm_lease(1), KEYS.jm_fence(1))])
        assert holder == b"jm-a" and 0 < ttl <= 5000 and epoch == b"3"
        assert nobody is None and no_epoch is None
        client.hset(KEYS.exec_registry, mapping={"0": orjson.dumps({}), "x": b"{}"})
        assert registered_exec_ranks(client, KEYS) == [0]
        assert dead_letter_tail(client, KEYS) == (0, None)
        for n in range(3):
            client.xadd(KEYS.dead_letters, {"error": str(n)})
        count, last = dead_letter_tail(client, KEYS)
        assert count == 3 and last is not None and last[b"error"] == b"2"
        assert [f[b"error"] for _s, f in newest_dead_letters(client, KEYS, 2)] == [b"2", b"1"]


class TestFakeRedis(NamedReadsContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(NamedReadsContract, OnRealRedis):
    """The contract on a real redis-server."""


@pytest.mark.parametrize("refused", [True, False])
def test_a_user_refused_the_users_table_falls_back(refused: bool) -> None:
    """A user's own connection may not read the users table: not known here, no error."""
    class NoPermissionError(Exception):
        pass

    class Refusing:
        def hget(self, *_a: object) -> object:
            raise NoPermissionError("NOPERM") if refused else RuntimeError("down")

        hgetall = hlen = hget

    table = UserTable(Refusing(), KEYS)
    if refused:
        assert table.uid("x") is None and table.entries() == {} and not table.readable()
    else:
        with pytest.raises(RuntimeError):
            table.uid("x")
