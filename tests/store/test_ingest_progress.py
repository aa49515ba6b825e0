"""A submit request is done once, even when the ingest dies between its commits.

The ingest is killed (an exception out of its commit path, which is what a
kill leaves in storage) after every possible number of committed batches,
with one and several partitions; a second ingest (the same consumer name
restarted, or another one claiming the request) then handles the
redelivered request. Exactly N jobs must exist and the client gets N ids.
Runs against fakeredis and a real redis-server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
import redis

from fluxes.formats.jobspec import Jobspec
from fluxes.store import ingest as ingest_store
from fluxes.store.client import Client
from fluxes.store.eventstore import Batch, CommitResult, EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests import wire
from tests.backends import OnFakeRedis, OnRealRedis
from workers import ingest as ingest_mod
from workers.ingest import IngestWorker

NS = "t"
SPEC = Jobspec.from_command(["true"]).to_dict()
BAD = {"version": 1}  # refused by the ingest: no resources


class Killed(Exception):
    """Stands for SIGKILL: the worker stops between two writes."""


class Crashing:
    """Lets ``allowed`` batch commits through, then kills the worker at its next write."""

    def __init__(self, worker: IngestWorker, allowed: int) -> None:
        self.allowed = allowed
        self.committed = 0
        store = worker.store
        real = EventStore.commit

        def commit_many(batches: Sequence[Batch], token: str = "") -> list[CommitResult]:
            out = []
            for batch in batches:
                if self.committed >= self.allowed:
                    raise Killed
                out.append(real(store, batch, token))
                self.committed += 1
            return out

        store.commit_many = commit_many  # type: ignore[method-assign]
        client = worker.redis
        crashing = self

        class Proxy:
            """The worker's client; its pipelines after the last allowed commit die."""

            def __getattr__(self, name: str) -> Any:
                return getattr(client, name)

            def pipeline(self, *args: Any, **kw: Any) -> Any:
                if crashing.committed >= crashing.allowed:
                    raise Killed
                return client.pipeline(*args, **kw)

        # the worker's Redis calls are its store's (fluxes.store.ingest)
        worker.redis = worker.requests.redis = Proxy()


def make_instance(client: redis.Redis, partitions: int) -> Instance:
    client.hset(Keys(NS).instance, mapping={"partitions": partitions, "owner": "me",
                                            "owner_uid": 1000})
    return Instance(InstanceURI("redis://unused", NS), client=client)


def new_ingest(instance: Instance, name: str) -> IngestWorker:
    worker = IngestWorker(instance, name=name)
    worker.setup()
    return worker


def send(instance: Instance, *requests: list[dict[str, Any]]) -> list[str]:
    return Client(instance, user="me")._send([{"t": "submit", "jobs": jobs}
                                              for jobs in requests])


def answer(instance: Instance, reply_key: str) -> list[dict[str, Any]]:
    [got] = Client(instance, user="me")._wait(reply_key, 1.0)
    jobs: list[dict[str, Any]] = got["jobs"]
    return jobs


def created(instance: Instance) -> list[int]:
    """Every job id with a submit event in some journal (duplicates kept)."""
    keys = instance.keys
    out = []
    for part in range(keys.partitions):
        for _sid, fields in instance.redis.xrange(keys.journal(part)):
            if fields[b"n"] == b"submit":
                out.append(int(fields[b"j"]))
    return out


def announced(instance: Instance) -> list[int]:
    """Every job id the job managers were told about (jm:new), duplicates kept."""
    keys = instance.keys
    out = []
    for part in range(keys.partitions):
        for _sid, fields in instance.redis.xrange(keys.jm_new(part)):
            out += [m["id"] for m in wire.messages(fields)]
    return out


def total_commits(client: redis.Redis, partitions: int, requests: list[list[Any]]) -> int:
    """How many batch commits the requests take when nothing goes wrong."""
    instance = make_instance(client, partitions)
    worker = new_ingest(instance, "probe")
    probe = Crashing(worker, 10**9)
    send(instance, *requests)
    worker.step()
    client.flushall()
    return probe.committed


class ProgressContract:
    """What must hold on any Redis; subclasses provide ``client``."""

    @pytest.fixture(autouse=True)
    def small_batches(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # 10 jobs per batch: the cuts of a 5,000-job request, at a size fakeredis runs fast
        monkeypatch.setattr(ingest_store, "MAX_BATCH_EVENTS", 20)

    @pytest.mark.parametrize("partitions", [1, 2, 3])
    @pytest.mark.parametrize("takeover", ["restart", "claim"])
    def test_kill_between_batches_creates_each_job_once(
            self, client: redis.Redis, partitions: int, takeover: str,
            monkeypatch: pytest.MonkeyPatch) -> None:
        # two requests in one read, with refused jobs between accepted ones
        first = [{"jobspec": SPEC}] * 23
        second = [{"jobspec": BAD if i % 4 == 1 else SPEC} for i in range(17)]
        expected = 23 + sum(1 for i in range(17) if i % 4 != 1)
        commits = total_commits(client, partitions, [first, second])
        assert commits >= 3
        if takeover == "claim":
            monkeypatch.setattr(ingest_mod, "CLAIM_IDLE_MS", 0)
        for allowed in range(commits + 1):
            client.flushall()
            instance = make_instance(client, partitions)
            dying = new_ingest(instance, "ingest-a")
            Crashing(dying, allowed)
            reply_keys = send(instance, first, second)
            try:
                dying.step()
            except Killed:
                if takeover == "claim":
                    # another worker takes the dead one's requests once they are idle,
                    # which is when its claims on them lapse (a restart takes them at once)
                    for key in client.scan_iter(match="*:claim:*"):
                        client.delete(key)
                survivor = new_ingest(instance, "ingest-a" if takeover == "restart"
                                      else "ingest-b")
                # a restarted worker takes its pending requests one per step
                for _ in range(2):
                    survivor.step()
            else:
                # nothing is written after the last commit with one partition
                assert allowed == commits and partitions == 1
            results = answer(instance, reply_keys[0]) + answer(instance, reply_keys[1])
            ids = [r["id"] for r in results if "id" in r]
            assert len(ids) == len(set(ids)) == expected, allowed
            assert sorted(created(instance)) == sorted(ids), allowed
            assert sorted(announced(instance)) == sorted(ids), allowed
            assert ["error" in r for r in results[23:]] == [i % 4 == 1 for i in range(17)]
            for jobid in ids:
                assert len(EventStore(client, instance.keys).eventlog(jobid)) == 2
                assert client.hget(instance.keys.job(jobid), "owner") == b"1000"
            assert client.xpending(instance.keys.submit("me"), "ingest")["pending"] == 0

    def test_a_request_done_whole_is_answered_again_not_redone(
            self, client: redis.Redis) -> None:
        # killed after every commit, before the acks (which, with several
        # partitions, live in another slot than the jobs)
        jobs = [{"jobspec": SPEC}] * 25
        commits = total_commits(client, 2, [jobs])
        instance = make_instance(client, 2)
        dying = new_ingest(instance, "ingest-a")
        Crashing(dying, commits)
        [reply_key] = send(instance, jobs)
        with pytest.raises(Killed):
            dying.step()
        before = created(instance)
        assert len(before) == 25
        new_ingest(instance, "ingest-a").step()
        assert sorted(r["id"] for r in answer(instance, reply_key)) == sorted(before)
        assert sorted(created(instance)) == sorted(before)

    def test_one_commit_request_is_recorded_too(self, client: redis.Redis) -> None:
        # jobs and acknowledgement in one atomic step: recorded all the same, since
        # its client may send it again (ingest is idempotent on user and request id)
        instance = make_instance(client, 1)
        worker = new_ingest(instance, "ingest-a")
        [reply_key] = send(instance, [{"jobspec": SPEC}] * 5)
        worker.step()
        ids = [r["id"] for r in answer(instance, reply_key)]
        [key] = client.keys(f"{{{NS}}}:req:*")
        runs = [run for blob in client.lrange(key, 0, -1)
                for run in orjson.loads(blob)["runs"]]
        assert [run[1] + k * run[3] for run in runs for k in range(run[2])] == ids
        assert 0 < client.pttl(key) <= ingest_store.PROGRESS_TTL_MS

    def test_records_of_a_cut_request_name_the_user_and_request(
            self, client: redis.Redis) -> None:
        instance = make_instance(client, 1)
        worker = new_ingest(instance, "ingest-a")
        [reply_key] = send(instance, [{"jobspec": SPEC}] * 25)
        worker.step()
        ids = [r["id"] for r in answer(instance, reply_key)]
        req = reply_key.rsplit(":", 1)[1]
        key = instance.keys.request_done(0, f"me:{req}")
        runs = [run for blob in client.lrange(key, 0, -1)
                for run in orjson.loads(blob)["runs"]]
        # each batch records its jobs (the last one with the acknowledgement)
        recorded = [run[1] + k * run[3] for run in runs for k in range(run[2])]
        assert recorded == ids
        assert 0 < client.pttl(key) <= ingest_store.PROGRESS_TTL_MS

    def test_a_big_request_starts_small_and_grows(
            self, client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        # the job manager learns of the first jobs after a small commit, not after the
        # whole request: commits of 4, 16, 64, then MAX_BATCH_EVENTS events
        monkeypatch.setattr(ingest_store, "FIRST_BATCH_EVENTS", 4)
        monkeypatch.setattr(ingest_store, "MAX_BATCH_EVENTS", 100)
        instance = make_instance(client, 1)
        worker = new_ingest(instance, "ingest-a")
        [reply_key] = send(instance, [{"jobspec": SPEC}] * 200)
        worker.step()
        ids = [r["id"] for r in answer(instance, reply_key)]
        entries = client.xrange(instance.keys.jm_new(0))
        sizes = [len(wire.messages(fields)) for _sid, fields in entries]
        assert sizes == [2, 8, 32, 50, 50, 50, 8]
        assert announced(instance) == ids and sorted(created(instance)) == sorted(ids)
        # a block of a few jobs is still one commit
        [reply_key] = send(instance, [{"jobspec": SPEC}] * 2)
        worker.step()
        assert len(client.xrange(instance.keys.jm_new(0))) == len(entries) + 1


class TestFakeRedis(ProgressContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(ProgressContract, OnRealRedis):
    """The contract on a private redis-server."""


def test_audit_case_5000_jobs_killed_before_the_last_commit(real_redis: redis.Redis) -> None:
    """The audit's reproduction, at full size: 5,000 jobs, up to 4,000 events per batch."""
    instance = make_instance(real_redis, 1)
    jobs = [{"jobspec": SPEC}] * 5000
    dying = new_ingest(instance, "ingest-a")
    # batches of 32, 128, 512, 2,000 and 2,000 jobs commit; the last (328) does not
    Crashing(dying, 5)
    [reply_key] = send(instance, jobs)
    with pytest.raises(Killed):
        dying.step()
    assert len(created(instance)) == 4672
    new_ingest(instance, "ingest-a").step()
    ids = [r["id"] for r in answer(instance, reply_key)]
    assert len(ids) == len(set(ids)) == 5000
    assert sorted(created(instance)) == sorted(ids)
