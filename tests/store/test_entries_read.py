"""The job manager's reads of single journal entries (every new job's first events)
answered from one read of the span they cover (fluxes/store/jobfacts.entries_read):
the same replies as one read per entry, in fewer commands."""

from __future__ import annotations

from typing import Any

import redis

from fluxes.store import jobfacts
from fluxes.store.direct import Direct
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis

KEYS = Keys("t")
JOURNAL = KEYS.journal(0)


class Recording:
    """A Direct's execute that records the commands it was given."""

    def __init__(self, client: redis.Redis) -> None:
        self.direct = Direct.of(client, JOURNAL)
        self.sent: list[tuple[Any, ...]] = []

    def __call__(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.sent += commands
        return self.direct.execute(commands)


def add(client: redis.Redis, jobid: int, name: str) -> str:
    sid = client.xadd(JOURNAL, {"j": jobid, "s": 0, "n": name, "t": "1.5"})
    return sid.decode() if isinstance(sid, bytes) else str(sid)


def reads(ids: list[str] | list[bytes]) -> list[tuple[Any, ...]]:
    return [("XRANGE", JOURNAL, sid, sid) for sid in ids]


class EntriesReadContract:
    def test_one_span_read_answers_as_one_read_per_entry(self, client: redis.Redis) -> None:
        ids = []
        for jobid in (7, 8, 9):
            ids += [add(client, jobid, "submit"), add(client, jobid, "validate")]
            add(client, 1, "memo")  # someone else's entry in between
        client.xdel(JOURNAL, ids[3])  # one entry gone: read alone, found missing
        # ids as an eventlog index gives them (bytes), and as text
        commands = [("GET", KEYS.eventlog(7)), *reads([i.encode() for i in ids[:3]]),
                    *reads(ids[3:])]
        execute = Recording(client)
        got = jobfacts.entries_read(execute, commands)
        assert got == Direct.of(client, JOURNAL).execute(commands)
        assert got[4] == [] and b"submit" in got[1][0][1]  # fields as Redis sends them
        xranges = [c for c in execute.sent if c[0] == "XRANGE"]
        assert len(xranges) == 2  # the span, then the entry it did not bring

    def test_a_span_longer_than_its_bound_reads_the_rest_one_by_one(
            self, client: redis.Redis) -> None:
        first = add(client, 7, "submit")
        for _ in range(20):
            add(client, 1, "memo")
        last = add(client, 8, "submit")
        commands = reads([first, last])
        execute = Recording(client)
        assert jobfacts.entries_read(execute, commands) == \
            Direct.of(client, JOURNAL).execute(commands)
        assert len(execute.sent) == 2  # the span brought the first only

    def test_an_index_naming_no_id_is_read_as_before(self, client: redis.Redis) -> None:
        sid = add(client, 7, "submit")
        commands = reads([sid, "not-an-id"])
        got = jobfacts.entries_read(Recording(client), commands)
        assert got[0] == Direct.of(client, JOURNAL).execute(commands[:1])[0]
        assert isinstance(got[1], redis.ResponseError)


class TestFakeRedis(EntriesReadContract, OnFakeRedis):
    pass


class TestRealRedis(EntriesReadContract, OnRealRedis):
    pass
