"""A job's PMI exchange between its ranks (fluxes/store/pmi_kvs.py and lua/pmi.lua), on
fakeredis and a real Redis: rounds counted once per rank, the last one wakes every rank
through its request stream with a message the exec intake decodes, a rank that leaves
before finalizing breaks the job (waking the ranks in an open round), the last rank to
leave removes the hash."""

from __future__ import annotations

import redis

from fluxes.domain.exec.intake import PmiWake, decode_requests
from fluxes.store.keys import Keys
from fluxes.store.pmi_kvs import PmiKvs
from tests.backends import OnFakeRedis, OnRealRedis

OWNER = 1000
JOB = 2**62 + 12345  # beyond a double's precision: the wake message must keep it exact
RANKS = [3, 5, 9]


def wakes(client: redis.Redis, keys: Keys, rank: int) -> list[PmiWake]:
    out = []
    for _id, fields in client.xrange(keys.exec_rank(rank)):
        for msg in decode_requests(fields):
            assert isinstance(msg, PmiWake)
            out.append(msg)
    return out


class PmiKvsContract:
    def test_the_last_rank_completes_the_round_and_wakes_every_rank(
            self, client: redis.Redis) -> None:
        keys = Keys("t")
        kvs = PmiKvs(client, keys)
        assert kvs.enter(OWNER, JOB, RANKS, 0, 1, {"card-0": "a b"}).state == "wait"
        assert kvs.enter(OWNER, JOB, RANKS, 0, 1, {}).state == "wait"  # counted once
        assert kvs.enter(OWNER, JOB, RANKS, 1, 1, {"card-1": "b"}).state == "wait"
        assert all(wakes(client, keys, r) == [] for r in RANKS)
        assert kvs.enter(OWNER, JOB, RANKS, 2, 1, {}).state == "done"
        for rank in RANKS:
            assert wakes(client, keys, rank) == [PmiWake(id=JOB, round=1)]
        assert kvs.fetch(OWNER, JOB) == {"card-0": "a b", "card-1": "b"}
        # the round's marks are gone: the hash holds the KVS and the barrier state
        fields = set(client.hkeys(keys.pmi(OWNER, JOB)))
        assert fields == {b"k:card-0", b"k:card-1", b"open", b"done"}
        # a repeated step of the complete round (its reply lost) counts nothing
        assert kvs.enter(OWNER, JOB, RANKS, 2, 1, {}).state == "done"
        assert set(client.hkeys(keys.pmi(OWNER, JOB))) == fields
        assert all(len(wakes(client, keys, r)) == 1 for r in RANKS)
        # everyone leaves cleanly: the hash goes with the last
        for node in range(3):
            kvs.leave(OWNER, JOB, RANKS, node, True, "")
        assert not client.exists(keys.pmi(OWNER, JOB))

    def test_an_unclean_leave_wakes_an_open_round_and_refuses_later_rounds(
            self, client: redis.Redis) -> None:
        keys = Keys("t")
        kvs = PmiKvs(client, keys)
        kvs.enter(OWNER, JOB, RANKS, 0, 1, {})
        kvs.leave(OWNER, JOB, RANKS, 2, False, "PMI: task 7 exited before PMI_Finalize")
        kvs.leave(OWNER, JOB, RANKS, 2, False, "again")  # counted once, woken once
        for rank in RANKS:
            assert wakes(client, keys, rank) == [PmiWake(
                id=JOB, round=1, error="PMI: task 7 exited before PMI_Finalize")]
        got = kvs.enter(OWNER, JOB, RANKS, 1, 1, {})
        assert got.state == "broken"
        assert got.reason == "PMI: task 7 exited before PMI_Finalize"

    def test_an_unclean_leave_with_no_open_round_breaks_the_next(
            self, client: redis.Redis) -> None:
        keys = Keys("t")
        kvs = PmiKvs(client, keys)
        kvs.leave(OWNER, JOB, RANKS, 1, False, "PMI: task 1 exited before PMI_Finalize")
        assert all(wakes(client, keys, r) == [] for r in RANKS)
        assert kvs.enter(OWNER, JOB, RANKS, 0, 1, {}).state == "broken"
        kvs.leave(OWNER, JOB, RANKS, 0, False, "x")
        kvs.leave(OWNER, JOB, RANKS, 2, True, "")
        assert not client.exists(keys.pmi(OWNER, JOB))


class TestFakeRedis(PmiKvsContract, OnFakeRedis):
    pass


class TestRealRedis(PmiKvsContract, OnRealRedis):
    pass
