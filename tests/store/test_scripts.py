"""Our Lua steps as Redis functions (fluxes/store/scripts.py): the lines of a script
before its per-call mark run once, when the library loads; the rest on every call,
with nothing of one call's batch left for the next. Run against fakeredis and a real
redis-server."""

from __future__ import annotations

import pytest
import redis

from fluxes.domain.job import events as ev
from fluxes.store import scripts
from fluxes.store.eventstore import EventStore
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from tests.strategies import SUBMIT, T

KEYS = Keys("t")
COUNTER = f"""local calls = 0  -- built once, when the library loads
local function bump(argv)
  calls = calls + 1
  return calls .. ':' .. argv[1]
end
{scripts.PER_CALL}
return bump(ARGV)
"""


class ScriptsContract:
    """Behaviour every Redis (fake or real) must show; subclasses provide ``client``."""

    def test_the_lines_before_the_mark_run_once_at_load(self, client: redis.Redis) -> None:
        scripts.load(client, COUNTER)
        got = [client.execute_command(*scripts.fcall_command(COUNTER, [], [arg]))
               for arg in ("a", "b")]
        assert got == [b"1:a", b"2:b"]
        plain = "return ARGV[1]"  # no mark: the whole text is the function
        scripts.load(client, plain)
        assert client.execute_command(*scripts.fcall_command(plain, [], ["x"])) == b"x"

    def test_a_commit_starts_from_nothing_of_the_call_before(
            self, client: redis.Redis) -> None:
        client.set(KEYS.jm_fence(0), "1")
        store = EventStore(client, KEYS)
        batch = store.batch()
        batch.append(KEYS.eventlog(7), 7, 0, [SUBMIT])
        store.commit(batch, token="1")
        # a call that reads the index, then stops at a malformed op
        batch = store.batch()
        batch.append(KEYS.eventlog(7), 7, 1, [ev.decode("memo", T, {"k": 1})])
        keys, args = batch.script_args("1")
        command = scripts.fcall_command(store.commit_source, keys, [*args, "Q"])
        with pytest.raises(redis.ResponseError, match="BADOP"):
            client.execute_command(*command)
        client.delete(KEYS.job(7))  # the job gone (as a purge leaves it)
        batch = store.batch()
        batch.append(KEYS.eventlog(7), 7, 0, [SUBMIT])
        store.commit(batch, token="1")  # an empty eventlog again: no stale index
        assert [e.event_name for e in store.eventlog(7)] == ["submit"]


class TestFakeRedis(ScriptsContract, OnFakeRedis):
    pass


class TestRealRedis(ScriptsContract, OnRealRedis):
    pass
