"""Direct's replies (fluxes/store/direct.py): read straight from the socket into
hiredis' reader on a real Redis, through redis-py elsewhere, the same either way:
error replies in place, outages raised, push messages skipped."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fluxes.store import direct
from fluxes.store.direct import Direct
from tests.backends import OnFakeRedis, OnRealRedis

ANCHOR = "{t}:x"
COMMANDS: list[tuple[Any, ...]] = [
    ("SET", "{t}:s", "1"),
    ("HSET", "{t}:s", "f", "1"),  # WRONGTYPE: an error reply, in its place
    ("GET", "{t}:none"),
    ("EVAL", "return {1, redis.error_reply('inner'), 3}", 0),
    ("GET", "{t}:s"),
]


class DirectContract:
    def test_error_replies_come_back_in_place(self, client: redis.Redis) -> None:
        got = Direct(client, ANCHOR).execute(COMMANDS)
        assert got[0] in (b"OK", True) and got[2] is None and got[4] == b"1"
        assert isinstance(got[1], redis.ResponseError) and "WRONGTYPE" in str(got[1])
        assert got[3][0] == 1 and got[3][2] == 3
        assert isinstance(got[3][1], redis.ResponseError) and "inner" in str(got[3][1])

    def test_a_reply_read_through_redis_py_is_the_same(self, client: redis.Redis,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        fast = Direct(client, ANCHOR).execute(COMMANDS)
        monkeypatch.setattr(direct, "_read_replies", direct._read_replies_redis_py)
        slow = Direct(client, ANCHOR).execute(COMMANDS)
        assert [type(r) for r in fast] == [type(r) for r in slow]
        assert [str(r) for r in fast] == [str(r) for r in slow]


    def test_one_shared_direct_per_client_and_thread(self, client: redis.Redis) -> None:
        import threading

        first = Direct.of(client, ANCHOR)
        assert Direct.of(client, "{t}:other") is first  # one pool: one for every key
        other_client = redis.Redis(connection_pool=client.connection_pool)
        theirs = Direct.of(other_client, ANCHOR)
        assert theirs is not first and Direct.of(client, ANCHOR) is first
        assert Direct.of(other_client, ANCHOR) is theirs
        in_thread: list[Direct] = []
        worker = threading.Thread(target=lambda: in_thread.append(Direct.of(client, ANCHOR)))
        worker.start()
        worker.join()
        assert in_thread[0] is not first and Direct.of(client, ANCHOR) is first


class TestFakeRedis(DirectContract, OnFakeRedis):
    pass


class TestRealRedis(DirectContract, OnRealRedis):
    def _resp3(self, client: redis.Redis) -> redis.Redis:
        return redis.Redis(unix_socket_path=client.connection_pool.connection_kwargs["path"],
                           protocol=3, socket_timeout=None)

    def test_commands_and_replies_go_through_the_socket(self, client: redis.Redis,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
        # the path under test is taken (redis-py's reply path is never called)
        def refuse(conn: Any, n: int) -> list[Any]:
            raise AssertionError("read through redis-py")

        monkeypatch.setattr(direct, "_read_replies_redis_py", refuse)
        for each in (client, self._resp3(client)):
            d = Direct(each, ANCHOR)
            assert d.execute([("PING",)]) == [b"PONG"]  # connected through redis-py
            with monkeypatch.context() as written:
                written.setattr(redis.connection.AbstractConnection, "send_packed_command",
                                refuse)  # connected: written to the socket itself
                assert d.execute([("PING",), ("ECHO", "x")]) == [b"PONG", b"x"]

    def test_a_push_message_is_skipped(self, client: redis.Redis) -> None:
        client3 = self._resp3(client)
        tracked = Direct(client3, ANCHOR)
        assert tracked.call("CLIENT", "TRACKING", "ON") in (b"OK", "OK", True)
        tracked.call("GET", "{t}:k")  # now tracked by this connection
        client.set("{t}:k", "changed")  # an invalidation push is queued before the next reply
        assert tracked.execute([("ECHO", "after"), ("GET", "{t}:k")]) == [b"after", b"changed"]

    def test_a_dropped_connection_is_raised_then_replaced(self, client: redis.Redis) -> None:
        d = Direct(client, ANCHOR)
        name = d.call("CLIENT", "ID")
        client.execute_command("CLIENT", "KILL", "ID", name)
        with pytest.raises(redis.ConnectionError):
            d.execute([("PING",)])
        assert d.execute([("ECHO", "again")]) == [b"again"]

    def test_a_timeout_is_raised_then_replaced(self, client: redis.Redis) -> None:
        path = client.connection_pool.connection_kwargs["path"]
        impatient = redis.Redis(unix_socket_path=path, socket_timeout=0.2)
        d = Direct(impatient, ANCHOR)
        with pytest.raises(redis.TimeoutError):
            d.execute([("BLPOP", "{t}:empty", 5)])
        assert d.execute([("ECHO", "again")]) == [b"again"]
