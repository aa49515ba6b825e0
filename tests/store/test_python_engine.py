"""The Python API's engine (fluxes/job/handle.py) against Redis: submissions go out
batched, replies are matched to futures, and a followed job's journal entries read
before its submission's reply are kept and delivered once the reply names the job."""

from __future__ import annotations

import orjson
import redis

from fluxes import messages as proto
from fluxes.job.handle import Flux
from fluxes.store.instance import Instance, InstanceURI
from tests.backends import OnFakeRedis, OnRealRedis


class Recorder:
    """A follower that records what it is told."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ended = False

    def _event(self, event: object) -> None:
        self.events.append(event.name)  # type: ignore[attr-defined]

    def _end(self) -> None:
        self.ended = True


def journal(client: redis.Redis, handle: Flux, jobid: int, seq: int, name: str) -> None:
    client.xadd(handle.keys.journal(0), {"j": jobid, "s": seq, "n": name, "t": "1.5",
                                         "c": orjson.dumps({"status": 0}) if name == "finish"
                                         else b"{}"})


def answer(client: redis.Redis, handle: Flux, ids: list[int]) -> list[str]:
    """Answer every request in the user's submit stream with ``ids``; their reply keys."""
    keys = []
    for _sid, fields in client.xrange(handle.keys.submit(handle.client.user)):
        request = orjson.loads(fields[b"d"])
        key = handle.keys.reply(handle.client.user, request["req"])
        reply = proto.Reply(jobs=[proto.JobResult(id=i) for i in ids[:len(request["jobs"])]])
        client.rpush(key, proto.encode_reply(reply))
        keys.append(key)
    return keys


class EngineContract:
    def handle(self, client: redis.Redis) -> Flux:
        return Flux.of_instance(Instance(InstanceURI("redis://unused", "t"), client=client))

    def test_queued_submissions_go_out_as_one_request(self, client: redis.Redis) -> None:
        h = self.handle(client)
        futures = [h.queue_submit({"jobspec": {"version": 1}, "flags": 0}) for _ in range(3)]
        h.step(0.01)
        assert client.xlen(h.keys.submit(h.client.user)) == 1
        answer(client, h, [7, 8, 9])
        h.step(0.01)
        assert [f.get_id() for f in futures] == [7, 8, 9]

    def test_entries_read_before_the_reply_reach_the_follower(self, client: redis.Redis
                                                              ) -> None:
        h = self.handle(client)
        follower = Recorder()
        future = h.queue_submit({"jobspec": {"version": 1}, "flags": 0}, follow=follower)
        h.step(0.01)  # posted; the journal position was taken before
        journal(client, h, 42, 0, "submit")
        journal(client, h, 41, 0, "submit")  # someone else's job
        journal(client, h, 42, 1, "start")
        h.step(0.01)  # read before the reply: buffered
        assert follower.events == []
        answer(client, h, [42])
        journal(client, h, 42, 2, "finish")
        journal(client, h, 42, 3, "clean")
        while not follower.ended:
            h.step(0.01)
        assert future.get_id() == 42
        assert follower.events == ["submit", "start", "finish", "clean"]
        h.step(0.01)
        assert h._orphans == {}  # nothing pending or followed: the buffer is dropped

    def test_a_step_counts_the_entries_it_read(self, client: redis.Redis) -> None:
        # the executor pauses after reads that brought few entries (fluxes/job/executor.py)
        h = self.handle(client)
        follower = Recorder()
        h.queue_submit({"jobspec": {"version": 1}, "flags": 0}, follow=follower)
        assert h.step(0.01) == 0  # posted, nothing in the journal yet
        answer(client, h, [42])
        for seq, name in enumerate(("submit", "start", "finish")):
            journal(client, h, 42, seq, name)
        read = 0
        while len(follower.events) < 3:
            read += h.step(0.01)
        assert read == 3

    def test_a_follower_knows_the_job_before_its_events(self, client: redis.Redis
                                                          ) -> None:
        # an executor callback on clean asks for the job's id: the whole life read
        # before the reply once deadlocked the executor's thread on that question
        h = self.handle(client)
        follower = Binder()
        h.queue_submit({"jobspec": {"version": 1}, "flags": 0}, follow=follower)
        h.step(0.01)
        for seq, name in enumerate(("submit", "start", "finish", "clean")):
            journal(client, h, 42, seq, name)
        h.step(0.01)  # the whole life read before the reply: buffered
        answer(client, h, [42])
        while not follower.ended:
            h.step(0.01)
        assert follower.seen == [(42, "submit"), (42, "start"), (42, "finish"),
                                 (42, "clean")]

    def test_a_journal_entry_without_a_name_is_skipped(self, client: redis.Redis) -> None:
        # hostile or foreign entries in the journal must not stop the engine (nor
        # every future it serves)
        h = self.handle(client)
        follower = Recorder()
        h.queue_submit({"jobspec": {"version": 1}, "flags": 0}, follow=follower)
        h.step(0.01)
        answer(client, h, [42])
        h.step(0.01)
        client.xadd(h.keys.journal(0), {"j": 42, "s": 0, "t": "1.5"})
        for seq, name in enumerate(("submit", "finish", "clean"), start=1):
            journal(client, h, 42, seq, name)
        while not follower.ended:
            h.step(0.01)
        assert follower.events == ["submit", "finish", "clean"]


class Binder(Recorder):
    """A follower that must be told its job before any event (as the executor's)."""

    def __init__(self) -> None:
        super().__init__()
        self.jobid: int | None = None
        self.seen: list[tuple[int | None, str]] = []

    def _bind(self, jobid: int) -> None:
        self.jobid = jobid

    def _event(self, event: object) -> None:
        self.seen.append((self.jobid, event.name))  # type: ignore[attr-defined]


class TestFakeRedis(EngineContract, OnFakeRedis):
    pass


class TestRealRedis(EngineContract, OnRealRedis):
    pass
