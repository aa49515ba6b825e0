"""Array requests (``submit --cc``): bounded, within the per-request limit, exactly once.

The client cuts an id range into array requests of at most the instance's
``[ingest] max-jobs-per-request`` jobs; the ingest refuses a bigger one whole
(nothing created, its copies never made) and creates every job of the others
exactly once, also when it dies between commits and the requests are
delivered again, or when the client sends one again. Runs against fakeredis
and a real redis-server.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.domain.ingest import requests as requests_mod
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.store import ingest as ingest_store
from fluxes.store.client import Client
from tests.backends import OnFakeRedis, OnRealRedis
from tests.store.test_ingest_progress import (
    Crashing,
    Killed,
    announced,
    created,
    make_instance,
    new_ingest,
)

#: {cc} in the job name: each copy's own id must reach its jobspec
SPEC = Jobspec.from_command(["true"], name="copy-{cc}").to_dict()


def names(client: redis.Redis, instance: Any, ids: list[Any]) -> list[str]:
    """The job name each job was created with (from its stored jobspec)."""
    from fluxes.store.jobhash import JobHashes

    specs = JobHashes(client, instance.keys).effective_jobspecs(ids)
    return [orjson.loads(s or b"{}")["attributes"]["system"]["job"]["name"] for s in specs]


def with_limit(client: redis.Redis, instance: Any, limit: int) -> None:
    """Set ``[ingest] max-jobs-per-request`` in the stored configuration."""
    client.hset(instance.keys.instance, "config",
                f"[ingest]\nmax-jobs-per-request = {limit}\n")


class ArrayContract:
    """What must hold on any Redis; subclasses provide ``client``."""

    @pytest.fixture(autouse=True)
    def small_batches(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # 5 jobs per commit, at most 12 jobs per block: many cuts at a small size
        monkeypatch.setattr(ingest_store, "MAX_BATCH_EVENTS", 10)
        monkeypatch.setattr(requests_mod, "BLOCK_JOBS", 12)

    def test_over_the_limit_is_refused_whole_and_nothing_is_created(
            self, client: redis.Redis) -> None:
        instance = make_instance(client, 2)
        with_limit(client, instance, 100)
        worker = new_ingest(instance, "ingest-a")
        user = Client(instance, user="me")
        # a billion copies: refused before any is made (this would never end otherwise)
        keys = user._post([proto.SubmitJobs(req="big", jobs=[proto.SubmitItem(jobspec=SPEC)],
                                            cc="1-1000000000"),
                           proto.SubmitJobs(req="list", jobs=[proto.SubmitItem(jobspec=SPEC)]
                                            * 101)])
        worker.step()
        assert [user._answers(k, 1.0)[0].errors for k in keys] == [
            ["request has 1000000000 jobs, the limit is 100"],
            ["request has 101 jobs, the limit is 100"]]
        assert created(instance) == [] and announced(instance) == []
        assert client.xpending(instance.keys.submit("me"), "ingest")["pending"] == 0

    def test_a_range_is_cut_to_the_instance_limit(self, client: redis.Redis) -> None:
        instance = make_instance(client, 1)
        with_limit(client, instance, 7)
        worker = new_ingest(instance, "ingest-a")
        user = Client(instance, user="me")
        assert user.jobs_per_request() == 7
        posted = user._post_array({"jobspec": SPEC}, IDSet("1-20,31"))
        assert [count for count, _key in posted] == [7, 7, 7]
        worker.step()
        ids = user._collect_array(posted, 1.0)
        assert all(isinstance(i, int) for i in ids) and len(set(ids)) == 21
        assert sorted(created(instance)) == sorted(ids)
        assert names(client, instance, ids) == [
            f"copy-{i}" for i in [*range(1, 21), 31]]

    @pytest.mark.parametrize("partitions", [1, 2])
    def test_killed_between_commits_creates_each_job_once(
            self, client: redis.Redis, partitions: int) -> None:
        ids_wanted = IDSet("1-40")
        for allowed in range(0, 12, 2):
            client.flushall()
            instance = make_instance(client, partitions)
            with_limit(client, instance, 15)  # requests of 15, 15 and 10 jobs
            dying = new_ingest(instance, "ingest-a")
            Crashing(dying, allowed)
            user = Client(instance, user="me")
            posted = user._post_array({"jobspec": SPEC}, ids_wanted)
            try:
                dying.step()
            except Killed:
                survivor = new_ingest(instance, "ingest-a")
                for _ in range(4):  # a restarted worker takes its pending requests one by one
                    survivor.step()
            ids = user._collect_array(posted, 1.0)
            assert len(ids) == len(set(ids)) == 40, allowed
            assert sorted(created(instance)) == sorted(ids), allowed
            assert sorted(announced(instance)) == sorted(ids), allowed
            assert names(client, instance, ids) == [
                f"copy-{i}" for i in ids_wanted]

    def test_sent_again_is_answered_again_not_redone(self, client: redis.Redis) -> None:
        instance = make_instance(client, 2)
        worker = new_ingest(instance, "ingest-a")
        user = Client(instance, user="me")
        request = proto.SubmitJobs(req="again", jobs=[proto.SubmitItem(jobspec=SPEC)],
                                   cc="1-10")
        [first_key] = user._post([request])
        worker.step()
        first = user._answers(first_key, 1.0)[0]
        [second_key] = user._post([request])  # a client retrying after a timeout
        worker.step()
        second = user._answers(second_key, 1.0)[0]
        assert first == second and first.jobs is not None and len(first.jobs) == 10
        assert sorted(created(instance)) == sorted(j.id or 0 for j in first.jobs)

    def test_a_malformed_array_is_refused(self, client: redis.Redis) -> None:
        instance = make_instance(client, 1)
        worker = new_ingest(instance, "ingest-a")
        user = Client(instance, user="me")
        item = proto.SubmitItem(jobspec=SPEC)
        keys = user._post([proto.SubmitJobs(req="two", jobs=[item, item], cc="1-3"),
                           proto.SubmitJobs(req="bad", jobs=[item], cc="3-1")])
        worker.step()
        two, bad = (user._answers(k, 1.0)[0] for k in keys)
        assert two.errors == ["cc: an array request holds exactly one job, not 2"]
        assert bad.errors is not None and bad.errors[0].startswith("cc: ")
        assert created(instance) == []

    def test_blocks_hold_at_most_block_jobs(self, client: redis.Redis,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
        instance = make_instance(client, 1)
        worker = new_ingest(instance, "ingest-a")
        blocks: list[int] = []
        real = worker._handle_bounded

        def spy(requests: list[Any], redelivered: bool) -> None:
            blocks.append(sum(requests_mod.job_count(p.request) for p in requests))
            real(requests, redelivered)

        monkeypatch.setattr(worker, "_handle_bounded", spy)
        user = Client(instance, user="me")
        posted = user._post_array({"jobspec": SPEC}, IDSet("1-50"), per_request=5)
        worker.step()  # one read: ten requests of five jobs
        assert len(user._collect_array(posted, 1.0)) == 50
        assert blocks == [10, 10, 10, 10, 10]


class TestFakeRedis(ArrayContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(ArrayContract, OnRealRedis):
    """The contract on a private redis-server."""


def test_reads_take_fewer_requests_while_they_are_big() -> None:
    """What one read holds stays near READ_BYTES: a read of big requests makes the next
    take fewer, small ones let it grow back to READ_COUNT."""
    step = requests_mod.next_read_count
    big = requests_mod.READ_BYTES
    assert step(16, 1000) == 32 and step(400, 1000) == requests_mod.READ_COUNT
    assert step(500, 4 * big) == 125 and step(3, 100 * big) == 1
    assert step(10, big) == 10  # as much as fits: no more
    count = requests_mod.READ_FIRST
    for _ in range(12):  # a burst of 3 MB requests (1,000 jobs each, a big environment)
        count = step(count, count * (3 << 20))
        assert count * (3 << 20) <= 2 * big
