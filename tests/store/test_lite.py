"""fluxes.store.lite: the small client short commands use answers as redis-py does.

Every command it offers gives redis-py's reply shape, and its errors are
redis-py's exception types; URLs it cannot serve soundly go to redis-py.
Runs against the session's real redis-server (a socket: fakeredis has none).
"""

from __future__ import annotations

import pytest
import redis

from fluxes.proc.redis_server import RedisServer
from fluxes.store.instance import Instance, InstanceURI, _client
from fluxes.store.keys import Keys
from fluxes.store.lite import LiteRedis, lite_target


@pytest.fixture
def lite(redis_server: RedisServer, real_redis: redis.Redis) -> LiteRedis:
    target = lite_target(redis_server.url)
    assert target is not None
    return LiteRedis(target, client_name="lite-test")


def test_replies_are_shaped_as_redis_py_shapes_them(lite: LiteRedis,
                                                    real_redis: redis.Redis) -> None:
    real_redis.hset("h", mapping={"a": "1", "b": b"\xff"})
    for client in (lite, real_redis):
        assert client.hget("h", "a") == b"1"
        assert client.hget("h", "zz") is None
        assert client.hmget("h", ["a", "zz", "b"]) == [b"1", None, b"\xff"]
        assert client.hgetall("h") == {b"a": b"1", b"b": b"\xff"}
        assert client.hgetall("nothing") == {}
        assert client.exists("h", "nothing", "h") == 2
    first = lite.xadd("s", {"k": "v", b"n": 3})
    second = real_redis.xadd("s", {"k": "w"})
    assert lite.xrange("s") == real_redis.xrange("s") == [
        (first, {b"k": b"v", b"n": b"3"}), (second, {b"k": b"w"})]
    assert lite.xrange("s", min="-", max="+", count=1) == real_redis.xrange("s", count=1)
    assert lite.xread({"s": "0-0"}, count=10) == real_redis.xread({"s": "0-0"}, count=10)
    assert lite.xread({"s": second.decode()}, block=1) == real_redis.xread(
        {"s": second.decode()}, block=1) == []
    real_redis.rpush("l", b"x")
    assert lite.blpop(["l"], timeout=1) == (b"l", b"x")
    assert lite.blpop(["l"], timeout=0.01) is None
    pipe = lite.pipeline(transaction=False)
    pipe.xadd("p", {"d": b"1"}).hget("h", "a")
    added, got = pipe.execute()
    assert got == b"1" and real_redis.xrange("p")[0][0] == added
    assert real_redis.client_list(_type="normal") and any(
        c["name"] == "lite-test" for c in real_redis.client_list())


def test_the_job_lists_reads_are_shaped_as_redis_py_shapes_them(
        lite: LiteRedis, real_redis: redis.Redis) -> None:
    """What ``fluxes jobs`` reads (fluxes.store.joblist_read) through the small client."""
    real_redis.zadd("z", {"a": 1.5, "b": 2, "c": 3})
    real_redis.hset("h", mapping={"a": "1", "b": "2"})
    for sid in ("1-1", "2-1", "3-1"):
        real_redis.xadd("j", {"n": sid}, id=sid)
    real_redis.xgroup_create("j", "g", id="0")
    real_redis.xreadgroup("g", "c1", {"j": ">"}, count=2)
    for client in (lite, real_redis):
        assert client.zrange("z", 0, -1) == [b"a", b"b", b"c"]
        assert client.zrange("z", 0, -1, withscores=True) == [(b"a", 1.5), (b"b", 2.0),
                                                               (b"c", 3.0)]
        assert client.zrevrange("z", 0, 1, withscores=True) == [(b"c", 3.0), (b"b", 2.0)]
        assert client.zrevrange("z", 0, -1) == [b"c", b"b", b"a"]
        assert sorted(client.hvals("h")) == [b"1", b"2"]
        assert client.hexists("h", "a") and not client.hexists("h", "zz")
        assert client.xrevrange("j", count=1) == [(b"3-1", {b"n": b"3-1"})]
    assert lite.xinfo_groups("j") == real_redis.xinfo_groups("j")
    assert lite.xpending("j", "g") == real_redis.xpending("j", "g")
    assert lite.xpending("j", "g")["min"] == b"1-1"
    for client in (lite, real_redis):
        pipe = client.pipeline(transaction=False)
        pipe.hmget("h", ["a", "zz"]).hgetall("h").exists("h", "nothing")
        pipe.xrange("j", count=1).xrevrange("j", count=1)
        assert pipe.execute() == [[b"1", None], {b"a": b"1", b"b": b"2"}, 1,
                                  [(b"1-1", {b"n": b"1-1"})], [(b"3-1", {b"n": b"3-1"})]]


def test_errors_are_redis_py_errors(lite: LiteRedis, real_redis: redis.Redis,
                                    redis_server: RedisServer) -> None:
    real_redis.set("str", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        lite.hget("str", "a")
    pipe = lite.pipeline()
    pipe.hget("str", "a").hget("h", "a")
    wrong, missing = pipe.execute(raise_on_error=False)
    assert isinstance(wrong, redis.ResponseError) and missing is None
    real_redis.acl_setuser("u", enabled=True, passwords=["+pw"], commands=["+@all"],
                           keys=["*"])
    try:
        target = lite_target(f"unix://u:wrong@{redis_server.socket}")
        assert target is not None
        with pytest.raises(redis.AuthenticationError):
            LiteRedis(target).hget("h", "a")
        target = lite_target(f"unix://u:pw@{redis_server.socket}")
        assert target is not None
        with pytest.raises(redis.ResponseError):
            LiteRedis(target).hget("str", "zz")  # WRONGTYPE, once authenticated
    finally:
        real_redis.acl_deluser("u")
    gone = lite_target(f"unix://{redis_server.socket}.missing")
    assert gone is not None
    with pytest.raises(redis.ConnectionError):
        LiteRedis(gone).hget("h", "a")


@pytest.mark.parametrize(("url", "lite"), [
    ("unix:///tmp/r.sock", True), ("unix:///tmp/r.sock?db=3", True),
    ("redis://u:p@host:6380/2", True), ("redis://host?socket_connect_timeout=2", True),
    ("rediss://host", False), ("redis+sentinel://h:26379/svc", False),
    ("redis+cluster://h:7000", False), ("redis://host?health_check_interval=5", False),
])
def test_only_plain_single_servers_are_served(url: str, lite: bool) -> None:
    assert (lite_target(url) is not None) == lite


def test_an_instance_reads_its_partitions_through_it(redis_server: RedisServer,
                                                     real_redis: redis.Redis) -> None:
    real_redis.hset(Keys("t").instance, "partitions", 3)
    inst = Instance(InstanceURI(redis_server.url, "t"), lite=True)
    assert isinstance(inst.redis, LiteRedis) and inst.keys.partitions == 3
    assert not isinstance(_client(redis_server.url, None, lite=False), LiteRedis)


def test_eventlogs_read_alike_through_both_clients(lite: LiteRedis,
                                                   real_redis: redis.Redis) -> None:
    from fluxes.store import jobfacts
    from fluxes.store.eventstore import EventStore
    from tests.store.test_eventlog_index import LIFE, _commit, _old_layout

    keys = Keys("t")
    real_redis.set(keys.jm_fence(0), "1")
    _commit(EventStore(real_redis, keys), 7, 0, LIFE[:4])  # an index of the journal
    _old_layout(real_redis, 8, LIFE[:2])  # a stream of the previous layout
    for client in (lite, real_redis):
        logs = jobfacts.eventlogs(client, keys, [7, 8, 9])
        assert [[f[b"n"] for _s, f in log] for log in logs] == [
            [n.encode() for n in LIFE[:4]], [b"submit", b"validate"], []]
        [last7, last8, none] = jobfacts.last_events(client, keys, [7, 8, 9])
        assert last7 is not None and last7[1][b"n"] == b"priority" and none is None
        assert last8 is not None and last8[1][b"n"] == b"validate"
        follower = jobfacts.EventlogFollower(client, keys, 7)
        assert len(follower.history) == 4 and jobfacts.read_new(client, follower.streams()) == []
