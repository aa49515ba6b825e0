"""Several job-list workers: one folds each partition (lease + fencing), the others stand by;
``rebuild`` refolds the read model from the journal while workers run."""

from __future__ import annotations

import random

import pytest
import redis

from fluxes.domain.job import events as ev
from fluxes.domain.joblist.model import ReadModel
from fluxes.store import joblist_rebuild as rebuild_module
from fluxes.store.eventstore import EventStore, FencedError, journal_entry
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_read import id_before
from fluxes.store.joblist_rebuild import rebuild
from tests.backends import OnFakeRedis, OnRealRedis
from tests.store.test_joblist import KEYS, LIFE, T, _expected, _redis_model, _submit
from workers.joblist import JobListWorker


@pytest.fixture(autouse=True)
def _short_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once caught up, every step blocks waiting for new entries: keep that short."""
    monkeypatch.setattr(JobListWorker, "block_ms", 10)
    monkeypatch.setattr(JobListWorker, "acquire_every_s", 0.0)


class Workload:
    """Jobs pushed through their life a random step at a time, written in small pieces."""

    def __init__(self, client: redis.Redis, njobs: int, seed: int) -> None:
        self.store = EventStore(client, KEYS)
        client.set(KEYS.jm_fence(0), "1")
        self.rng = random.Random(seed)
        self.njobs = njobs
        self.next_id = 1
        self.progress: dict[int, int] = {}

    def more(self, n: int) -> None:
        """Write ``n`` more events (new jobs or the next event of a job)."""
        for _ in range(n):
            movable = [j for j, done in self.progress.items() if done < 2 + len(LIFE)]
            if self.next_id <= self.njobs and (not movable or self.rng.random() < 0.3):
                jobid, self.next_id = self.next_id, self.next_id + 1
                events, extra = _submit(jobid)
                batch = self.store.batch()
                batch.append(KEYS.eventlog(jobid), jobid, 0, events, [extra, None])
                self.store.commit(batch)
                self.progress[jobid] = 2
            elif movable:
                jobid = self.rng.choice(movable)
                done = self.progress[jobid]
                name, ctx = LIFE[done - 2]
                batch = self.store.batch()
                batch.append(KEYS.eventlog(jobid), jobid, done, [ev.decode(name, T + done, ctx)])
                self.store.commit(batch, token="1")
                self.progress[jobid] = done + 1


class LeaseContract:
    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        return Instance(InstanceURI("redis://unused", "t"), client=client)

    def worker(self, instance: Instance, name: str) -> JobListWorker:
        w = JobListWorker(instance, name)
        w.setup()
        return w

    def test_second_worker_stands_by_and_the_model_equals_a_rebuild(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 30, seed=1)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        for _ in range(40):
            load.more(7)
            a.step()
            b.step()
        for _ in range(3):
            a.step()
            b.step()
        assert b.processed == 0 and not b.folders  # one folder only: entries stay in order
        assert a.processed == client.xlen(KEYS.journal(0))
        assert client.xlen(KEYS.dead_letters) == 0
        assert _redis_model(client) == _expected(load.store)

    def test_standby_takes_over_where_the_dead_leader_stopped(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 30, seed=2)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        load.more(60)
        a.step()
        b.step()
        assert a.folders and not b.folders
        # a dies without a word: its lease runs out
        client.delete(KEYS.joblist_lease(0))
        load.more(60)
        for _ in range(3):
            b.step()
        assert b.folders and b.processed > 0
        assert _redis_model(client) == _expected(load.store)

    def test_clean_stop_hands_over_at_once(self, instance: Instance,
                                           client: redis.Redis) -> None:
        load = Workload(client, 10, seed=3)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        load.more(20)
        a.step()
        a.teardown()
        load.more(20)
        b.step()
        b.step()
        assert b.folders
        assert _redis_model(client) == _expected(load.store)

    def test_deposed_leader_writes_nothing(self, instance: Instance,
                                           client: redis.Redis) -> None:
        load = Workload(client, 30, seed=4)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        load.more(40)
        a.step()
        # a is paused long enough to lose its lease, b takes over and folds on
        client.delete(KEYS.joblist_lease(0))
        load.more(40)
        b.step()
        b.step()
        # a wakes up: its renewal is not due yet, so it folds what it reads; the
        # write is refused and it stands by
        load.more(10)
        folded = a.processed
        a.step()
        assert a.processed == folded and not a.folders
        b.step()
        assert _redis_model(client) == _expected(load.store)

    def test_fenced_write_raises_and_writes_nothing(self, client: redis.Redis) -> None:
        store = JobListStore(client, KEYS)
        store.ensure_groups()
        token = store.take_over(0, "x", 10_000)
        store.take_over(0, "y", 10_000)
        with pytest.raises(FencedError):
            store.write(0, [], "5-0", 3, token)
        assert store.position(0) == ("0-0", 0)

    def test_a_step_that_would_fail_half_way_writes_nothing(self, instance: Instance,
                                                             client: redis.Redis) -> None:
        load = Workload(client, 5, seed=9)
        load.more(10)
        client.hset(KEYS.joblist_counts(0), "state:SCHED", "garbage")  # HINCRBY would fail
        a = self.worker(instance, "a")
        with pytest.raises(redis.ResponseError, match="KEYTYPE HINCRBY"):
            a.step()
        assert client.hlen(KEYS.joblist_jobs(0)) == 0
        assert JobListStore(client, KEYS).position(0) == ("0-0", 0)
        client.set(KEYS.joblist_active(0), "not a set")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            JobListWorker(instance, "a").step()  # a restarted a cannot even load its cache
        assert client.hlen(KEYS.joblist_jobs(0)) == 0
        # the way out: a rebuild empties whatever the keys hold and refolds
        [done] = rebuild(client, KEYS)
        assert done.entries == client.xlen(KEYS.journal(0))
        assert _redis_model(client) == _expected(load.store)

    def test_position_and_lag_follow_the_fold(self, instance: Instance, client: redis.Redis,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
        load = Workload(client, 10, seed=5)
        load.more(30)
        monkeypatch.setattr(JobListWorker, "read_count", 12)
        a = self.worker(instance, "a")
        a.step()
        [group] = client.xinfo_groups(KEYS.journal(0))
        total = client.xlen(KEYS.journal(0))
        assert group["entries-read"] == 12 and group["lag"] == total - 12
        assert group["pending"] == 0
        for _ in range(4):
            a.step()
        [group] = client.xinfo_groups(KEYS.journal(0))
        last = client.xrevrange(KEYS.journal(0), count=1)[0][0]
        assert group["last-delivered-id"] == last and group["lag"] == 0

    def test_rebuild_repairs_the_model_and_the_workers_go_on(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 30, seed=6)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        load.more(80)
        a.step()
        b.step()
        # the read model goes wrong (as two unfenced folders once made it)
        client.hincrby(KEYS.joblist_counts(0), "state:SCHED", 5)
        client.hdel(KEYS.joblist_jobs(0), "3")
        [done] = rebuild(client, KEYS, holder="rebuild-test")
        assert done.took_over_from == "a" and done.skipped == 0
        assert done.entries == client.xlen(KEYS.journal(0))
        assert _redis_model(client) == _expected(load.store)
        load.more(40)
        for _ in range(4):
            a.step()
            b.step()
        assert _redis_model(client) == _expected(load.store)
        assert client.xlen(KEYS.dead_letters) == 0

    def test_rebuild_that_dies_half_way_is_finished_by_a_worker(
            self, instance: Instance, client: redis.Redis,
            monkeypatch: pytest.MonkeyPatch) -> None:
        load = Workload(client, 30, seed=7)
        load.more(100)
        monkeypatch.setattr(rebuild_module, "BLOCK", 15)
        calls = 0
        real = JobListStore.write

        def dies(self: JobListStore, *args: object, **kwargs: object) -> None:
            nonlocal calls
            calls += 1
            if calls == 3:
                raise KeyboardInterrupt  # killed between two blocks
            real(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(JobListStore, "write", dies)
        with pytest.raises(KeyboardInterrupt):
            rebuild(client, KEYS, holder="rebuild-test")
        monkeypatch.setattr(JobListStore, "write", real)
        assert client.get(KEYS.joblist_lease(0)) is None  # released on the way out
        a = self.worker(instance, "a")
        for _ in range(4):
            a.step()
        assert _redis_model(client) == _expected(load.store)

    def test_rebuild_skips_and_counts_bad_entries(self, client: redis.Redis) -> None:
        load = Workload(client, 5, seed=8)
        load.more(10)
        client.xadd(KEYS.journal(0), {"j": "notanumber", "n": "submit", "t": "1"})
        [done] = rebuild(client, KEYS)
        assert done.skipped == 1 and done.took_over_from is None
        assert _redis_model(client) == _expected_without_bad(load.store)

    def test_rebuild_refuses_an_unknown_partition(self, client: redis.Redis) -> None:
        with pytest.raises(ValueError, match="no partition 3"):
            rebuild(client, KEYS, partitions=[3])


def _expected_without_bad(store: EventStore) -> ReadModel:
    """The fold of the journal's well-formed entries."""
    model = ReadModel()
    for raw_id, fields in store.redis.xrange(KEYS.journal(0)):
        if fields[b"j"].isdigit():
            e = journal_entry(raw_id, fields)
            model.feed([(e.jobid, e.event(), e.extra_dict())])
    return model


def test_id_before() -> None:
    assert id_before("5-3") == "5-2"
    assert id_before("5-0") == f"4-{2**64 - 1}"
    assert id_before("0-0") == "0-0"


class TestFakeRedis(LeaseContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(LeaseContract, OnRealRedis):
    """The contract on a private redis-server."""
