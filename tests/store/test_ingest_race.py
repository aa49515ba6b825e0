"""Two ingest workers on one repeated request create its jobs once.

A client that sends a request again under the same id (it timed out), or an
XAUTOCLAIM of a slow worker's pending entry, can put the same request in two
ingest workers' hands at once. Each test steps worker A up to the moment it
has read the request's progress records, lets worker B handle the copy there
(the worst moment: the records A read are stale once B commits), then lets A
go on. Exactly one set of jobs must exist and both answers must name it.
Runs against fakeredis and a real redis-server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis

from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
from fluxes.store.eventstore import ClaimedError, EventStore
from fluxes.store.instance import Instance
from tests.backends import OnFakeRedis, OnRealRedis
from tests.store.test_ingest_progress import announced, created, make_instance, new_ingest
from workers import ingest as ingest_mod
from workers.ingest import IngestWorker

SPEC = Jobspec.from_command(["true"]).to_dict()
JOBS = [{"jobspec": SPEC}] * 7
REQ = "retried-request"


def send_copy(instance: Instance) -> str:
    """XADD the request (always the same id and content, as a retrying client sends it)."""
    keys = instance.keys
    instance.redis.xadd(keys.submit("me"), {"d": orjson.dumps(
        {"t": "submit", "jobs": JOBS, "req": REQ})})
    return keys.reply("me", REQ)


def answers(instance: Instance, reply_key: str, count: int) -> list[list[int]]:
    """The job ids of each of ``count`` answers on ``reply_key``."""
    got = Client(instance, user="me")._wait(reply_key, 1.0, count)
    return [[job["id"] for job in answer["jobs"]] for answer in got]


def after_records_read(worker: IngestWorker, then: Callable[[], None]) -> None:
    """Run ``then`` once, right after ``worker`` read the records of the requests it handles
    (before it commits anything)."""
    real = worker._recorded
    fired: list[bool] = []

    def hooked(requests: list[Any]) -> list[Any]:
        out = real(requests)
        if not fired:
            fired.append(True)
            then()
        return out

    worker._recorded = hooked  # type: ignore[method-assign]


def forget_claims(client: redis.Redis) -> None:
    """What a claim's expiry does (its holder stalled past the claim's lifetime)."""
    for key in client.scan_iter(match="*:claim:*"):
        client.delete(key)


class RaceContract:
    """What must hold on any Redis; subclasses provide ``client``."""

    @pytest.fixture(autouse=True)
    def retry_at_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # a request put aside (another worker holds it) is retried at the next step
        if hasattr(ingest_mod, "DEFER_S"):
            monkeypatch.setattr(ingest_mod, "DEFER_S", 0.0)

    def check_once(self, instance: Instance, reply_key: str) -> None:
        first, second = answers(instance, reply_key, 2)
        assert len(first) == len(JOBS)
        assert first == second
        assert sorted(created(instance)) == sorted(first)
        assert sorted(announced(instance)) == sorted(first)
        assert instance.redis.xpending(instance.keys.submit("me"), "ingest")["pending"] == 0

    @pytest.mark.parametrize("partitions", [1, 2, 3])
    def test_copy_handled_while_the_first_holds_it(
            self, client: redis.Redis, partitions: int) -> None:
        instance = make_instance(client, partitions)
        a = new_ingest(instance, "ingest-a")
        b = new_ingest(instance, "ingest-b")
        reply_key = send_copy(instance)

        def other_worker_handles_the_copy() -> None:
            send_copy(instance)
            b.step()

        after_records_read(a, other_worker_handles_the_copy)
        a.step()
        for _ in range(3):  # B answers its copy once A's commit is there
            b.step()
        self.check_once(instance, reply_key)

    @pytest.mark.parametrize("partitions", [1, 2, 3])
    def test_other_commits_between_read_and_commit(
            self, client: redis.Redis, partitions: int) -> None:
        # A's hold on the request lapsed (it stalled): B takes it, creates the jobs
        # and answers before A commits; A's commit must not create a second set
        instance = make_instance(client, partitions)
        a = new_ingest(instance, "ingest-a")
        b = new_ingest(instance, "ingest-b")
        reply_key = send_copy(instance)

        def other_worker_commits_first() -> None:
            forget_claims(client)
            send_copy(instance)
            b.step()
            assert len(created(instance)) == len(JOBS)

        after_records_read(a, other_worker_commits_first)
        a.step()
        for _ in range(3):  # A answers its copy as a repeated request
            a.step()
        self.check_once(instance, reply_key)


    @pytest.mark.parametrize("partitions", [1, 2])
    def test_a_control_request_is_forwarded_once(
            self, client: redis.Redis, partitions: int) -> None:
        instance = make_instance(client, partitions)
        keys = instance.keys
        a = new_ingest(instance, "ingest-a")
        b = new_ingest(instance, "ingest-b")

        def cancel() -> None:
            client.xadd(keys.submit("me"), {"d": orjson.dumps(
                {"t": "cancel", "ids": [1, 2], "note": "", "req": "cancel-once"})})

        def other_worker_handles_the_copy() -> None:
            cancel()
            b.step()

        cancel()
        after_records_read(a, other_worker_handles_the_copy)
        a.step()
        for _ in range(3):
            b.step()
        forwarded = [client.xrange(keys.jm_ctl(part)) for part in range(partitions)]
        assert [len(entries) for entries in forwarded] == [1] * partitions
        [answer] = Client(instance, user="me")._wait(keys.reply("me", "cancel-once"), 1.0)
        assert "not done twice" in answer["errors"][0]
        assert client.xpending(keys.submit("me"), "ingest")["pending"] == 0

    def test_commit_needs_the_claim_and_its_last_batch_drops_it(
            self, client: redis.Redis) -> None:
        instance = make_instance(client, 1)
        keys = instance.keys
        store = EventStore(client, keys)
        claim, record = keys.request_claim(0, "me:r"), keys.request_done(0, "me:r")

        def recording(token: str, drop: bool = False) -> None:
            batch = store.batch(0)
            batch.claimed(claim, token, drop)
            batch.push_reply(record, b"x", 1000)
            store.commit(batch)

        for holder in (None, "other#1"):  # lapsed, or taken over
            if holder is not None:
                client.set(claim, holder)
            with pytest.raises(ClaimedError):
                recording("me#1")
            assert client.llen(record) == 0
        client.set(claim, "me#1")
        recording("me#1")
        assert client.get(claim) == b"me#1"
        recording("me#1", drop=True)
        assert client.get(claim) is None
        assert client.llen(record) == 2


    @pytest.mark.parametrize("partitions", [1, 2])
    def test_renew_keeps_a_held_claim_and_never_takes_one_back(
            self, client: redis.Redis, partitions: int) -> None:
        """A long block renews its claims; one that lapsed (or another worker took)
        stays with whoever has it, so the commits depending on it are refused."""
        from fluxes.store.request_claims import RequestClaims

        instance = make_instance(client, partitions)
        keys = instance.keys
        mine = RequestClaims(client, keys, "a#1", 10_000)
        assert mine.take(["me:r1", "me:r2"]) == {"me:r1", "me:r2"}
        for part in range(partitions):
            client.pexpire(keys.request_claim(part, "me:r1"), 50)
        client.delete(keys.request_claim(0, "me:r2"))  # lapsed
        mine.renew(["me:r1", "me:r2"])
        for part in range(partitions):
            assert client.pttl(keys.request_claim(part, "me:r1")) > 1000
        assert client.get(keys.request_claim(0, "me:r2")) is None
        client.set(keys.request_claim(0, "me:r2"), "b#1")  # another worker's now
        mine.renew(["me:r2"])
        assert client.get(keys.request_claim(0, "me:r2")) == b"b#1"
        assert client.pttl(keys.request_claim(0, "me:r2")) == -1


class TestFakeRedis(RaceContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(RaceContract, OnRealRedis):
    """The contract on a private redis-server."""
