"""The scheduler session's writes (fluxes/store/sched_session.py) on both backends."""

from __future__ import annotations

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.store.eventstore import EventStore, FencedError, NotWaitingError
from fluxes.store.keys import Keys
from fluxes.store.sched_session import SessionStreams
from tests.backends import OnFakeRedis, OnRealRedis

KEYS = Keys("t")
EPOCH = 5


def streams(client: redis.Redis) -> SessionStreams:
    client.set(KEYS.sched_fence(0), str(EPOCH))
    return SessionStreams(client, KEYS, EventStore(client, KEYS))


def entries(client: redis.Redis, key: str) -> list[dict[bytes, bytes]]:
    return [fields for _id, fields in client.xrange(key)]


class SessionStreamsContract:
    def test_say_is_fenced_by_the_epoch(self, client: redis.Redis) -> None:
        s = streams(client)
        s.say(0, EPOCH, [proto.Hello()])
        [entry] = entries(client, KEYS.sched_resp(0))
        epoch, msgs = proto.decode_entry(proto.SCHED_RESPONSES, entry)
        assert (epoch, msgs) == (EPOCH, [proto.Hello()])
        with pytest.raises(FencedError):
            s.say(0, EPOCH - 1, [proto.Hello()])
        assert len(entries(client, KEYS.sched_resp(0))) == 1

    def test_last_request_is_where_a_new_epoch_reads_from(self, client: redis.Redis
                                                          ) -> None:
        s = streams(client)
        assert s.last_request(0) == "0-0"
        last = client.xadd(KEYS.sched_req(0), {"d": b"x"})
        assert s.last_request(0) == last.decode()

    def test_r_for_a_job_that_waits_for_none_writes_nothing(self, client: redis.Redis
                                                            ) -> None:
        s = streams(client)
        success = proto.AllocResponse(id=7, type=proto.ALLOC_SUCCESS, ranks="0")
        with pytest.raises(NotWaitingError) as caught:
            s.answer(0, EPOCH, {7: b"{}"}, [success])  # job 7 does not exist
        assert caught.value.jobids == [7]
        assert entries(client, KEYS.sched_resp(0)) == [] and not client.exists(KEYS.job(7))
        s.answer(0, EPOCH, {}, [proto.FreeResponse(id=3)])
        [entry] = entries(client, KEYS.sched_resp(0))
        assert proto.decode_entry(proto.SCHED_RESPONSES, entry)[1] == [
            proto.FreeResponse(id=3)]

    def test_reports_and_liveness(self, client: redis.Redis) -> None:
        s = streams(client)
        s.report([("drain", "1", "allocation of job 9 not recovered", False)],
                 {0: [proto.RaiseRequest(ids=[9], userid=1, type="scheduler", severity=0,
                                         note="lost")]})
        [raised] = entries(client, KEYS.jm_ctl(0))
        assert proto.decode_entry(proto.CONTROL, raised)[1][0].ids == [9]  # type: ignore[union-attr]
        [drain] = entries(client, KEYS.resource_events)
        event = proto.decode_resource_event(drain)
        assert isinstance(event, proto.Drain) and event.ranks == "1"
        s.report_liveness("2", "", {"pending": 0})
        assert orjson.loads(client.get(KEYS.sched_status) or b"") == {"pending": 0}
        events = [proto.decode_resource_event(f) for f in entries(client, KEYS.resource_events)]
        assert [(type(e).__name__, e.ranks, e.auto) for e in events] == [
            ("Drain", "1", False), ("Drain", "2", True)]
        told = [proto.decode_entry(proto.CONTROL, f)[1][0]
                for f in entries(client, KEYS.jm_ctl(0))]
        assert told[-1] == proto.LostRanks(ranks="2")


class TestFakeRedis(SessionStreamsContract, OnFakeRedis):
    pass


class TestRealRedis(SessionStreamsContract, OnRealRedis):
    pass
