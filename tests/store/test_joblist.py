"""The job-list read model: folded from the journal, crash-safe, equal to a rebuild."""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

from fluxes.domain.job import events as ev
from fluxes.domain.job.record import JobRecord
from fluxes.domain.job.states import JobState
from fluxes.domain.joblist.model import ReadModel, change_between
from fluxes.store import joblist_fold
from fluxes.store.eventstore import EventStore
from fluxes.store.groups import ensure_group
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist import JobListStore
from fluxes.store.keys import GROUP_JOBLIST, Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.joblist import JobListWorker

KEYS = Keys("t")
T = 1000.0


@pytest.fixture(autouse=True)
def _short_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once caught up, every step blocks waiting for new entries: keep that short."""
    monkeypatch.setattr(JobListWorker, "block_ms", 10)


def _submit(jobid: int, queue: str = "batch") -> tuple[list[ev.Event], dict[str, object]]:
    return ([ev.decode("submit", T + jobid, {"urgency": 16, "userid": 1000 + jobid % 3,
                                            "flags": 0, "version": 1}),
             ev.decode("validate", T + jobid)],
            {"name": f"job{jobid}", "queue": queue, "ntasks": 1, "nnodes": 1})


LIFE: list[tuple[str, dict[str, Any]]]
LIFE = [("depend", {}), ("priority", {"priority": 16}), ("alloc", {}), ("start", {}),
        ("finish", {"status": 0}), ("release", {"ranks": "all", "final": True}),
        ("free", {}), ("clean", {})]


def _folded(instance: Instance, client: redis.Redis, seed: int
            ) -> tuple[EventStore, JobListWorker]:
    """A workload of 30 jobs written, and a job list worker that folded it."""
    store = EventStore(client, KEYS)
    _write_workload(store, client, 30, seed=seed)
    worker = JobListWorker(instance)
    worker.setup()
    for _ in range(5):
        worker.step()
    return store, worker


def _write_workload(store: EventStore, client: redis.Redis, njobs: int, seed: int) -> None:
    """Submit njobs and push each a random distance through its life, interleaved."""
    client.set(KEYS.jm_fence(0), "1")
    rng = random.Random(seed)
    progress = {}
    for jobid in range(1, njobs + 1):
        events, extra = _submit(jobid, rng.choice(["batch", "debug"]))
        batch = store.batch()
        batch.append(KEYS.eventlog(jobid), jobid, 0, events, [extra, None])
        store.commit(batch)
        progress[jobid] = (2, rng.randint(0, len(LIFE)))
    while any(done < 2 + goal for done, goal in progress.values()):
        jobid = rng.choice([j for j, (d, g) in progress.items() if d < 2 + g])
        done, goal = progress[jobid]
        name, ctx = LIFE[done - 2]
        if name == "finish" and rng.random() < 0.3:
            ctx = {"status": 256}
        batch = store.batch()
        batch.append(KEYS.eventlog(jobid), jobid, done, [ev.decode(name, T + done, ctx)])
        if name == "priority" and rng.random() < 0.5:
            batch.journal_only(jobid, ev.decode("annotations", T, {
                "annotations": {"sched": {"reason_pending": "testing"}}}))
        store.commit(batch, token="1")
        progress[jobid] = (done + 1, goal)


def _expected(store: EventStore) -> ReadModel:
    model = ReadModel()
    for block in store.iter_journal(0):
        model.feed((e.jobid, e.event(), e.extra_dict()) for e in block)
    return model


def _redis_model(client: redis.Redis) -> ReadModel:
    jl = JobListStore(client, KEYS)
    return ReadModel(jl.all_summaries(), jl.counters())


class _WithoutSmembers:
    """A client whose ACL user may not send SMEMBERS (rules given before the set)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def smembers(self, key: str) -> set[bytes]:
        raise redis.exceptions.NoPermissionError("this user has no permissions to run "
                                                 "the 'smembers' command")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class JobListContract:
    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        return Instance(InstanceURI("redis://unused", "t"), client=client)

    def test_the_active_index_is_a_set_and_a_sorted_set_of_before_stays_until_empty(
            self, instance: Instance, client: redis.Redis) -> None:
        """The active index is a set of the active jobs (~48 bytes a pending job less
        than a sorted set by submit time); a model written before, with the sorted set,
        reads the same and is written as it is until it empties; then it is a set."""
        store, worker = _folded(instance, client, seed=3)
        key = KEYS.joblist_active(0)
        reader = JobListStore(client, KEYS)
        summaries = reader.all_summaries()
        active = sorted(j for j, s in summaries.items() if s.job.state is not JobState.INACTIVE)
        assert active and client.type(key) == b"set"
        assert reader.list_ids() == active[::-1]  # newest submission first
        # the previous layout
        client.delete(key)
        client.zadd(key, {str(j): summaries[j].job.t_submit for j in active})
        assert reader.list_ids() == active[::-1]
        assert list(reader.load_active(0, limit=2)) == active[-2:]
        events, extra = _submit(31)
        batch = store.batch()
        batch.append(KEYS.eventlog(31), 31, 0, events, [extra, None])
        store.commit(batch)
        for _ in range(3):
            worker.step()
        assert client.type(key) == b"zset"  # not turned into a set at once: no long step
        assert reader.list_ids() == [31, *active[::-1]]
        # a user whose ACL rules were given before this layout may not send SMEMBERS:
        # the active jobs are read from the records
        assert JobListStore(_WithoutSmembers(client), KEYS).list_ids() == [31, *active[::-1]]
        # emptied, the next write makes it a set
        client.set(KEYS.joblist_fence(0), "tok")
        reader._run(0, "tok", [("SREM", 3, *active, 31)])
        assert client.exists(key) == 0
        reader._run(0, "tok", [("SADD", 3, 32)])
        assert client.type(key) == b"set" and reader.list_ids() == [32]

    def test_fold_equals_rebuild(self, instance: Instance, client: redis.Redis) -> None:
        store, _worker = _folded(instance, client, seed=1)
        assert _redis_model(client) == _expected(store)
        counts = JobListStore(client, KEYS).counters()
        assert sum(v for k, v in counts.items() if k.startswith("state:")) == 30

    @pytest.mark.parametrize("seed", [2, 3, 4])
    def test_survives_kills_between_batches(self, instance: Instance, client: redis.Redis,
                                            seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
        store = EventStore(client, KEYS)
        _write_workload(store, client, 40, seed=seed)
        monkeypatch.setattr(JobListWorker, "read_count", 7)
        rng = random.Random(seed)
        for _ in range(30):
            worker = JobListWorker(instance)
            worker.setup()
            for _ in range(rng.randint(0, 3)):
                worker.step()
            if rng.random() < 0.5:
                # killed after reading a block but before writing it: the entries
                # stay pending for the next incarnation
                client.xreadgroup(GROUP_JOBLIST, "joblist",
                                  {KEYS.journal(0): ">"}, count=5)
        worker = JobListWorker(instance)
        worker.setup()
        for _ in range(40):
            worker.step()
        assert _redis_model(client) == _expected(store)

    @pytest.mark.parametrize("cached", [1, 3])
    def test_a_small_cache_folds_the_same(self, instance: Instance, client: redis.Redis,
                                          cached: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """Summaries beyond the folder's cache are read back from the read model: the
        model is the same, and the folder holds no more than its cache allows."""
        store = EventStore(client, KEYS)
        _write_workload(store, client, 40, seed=5)
        monkeypatch.setattr(joblist_fold, "CACHED_JOBS", cached)
        monkeypatch.setattr(JobListWorker, "read_count", 7)
        worker = JobListWorker(instance)
        worker.setup()
        for _ in range(60):
            worker.step()
            assert all(len(f.cache) <= cached for f in worker.folders.values()
                       if isinstance(f, joblist_fold.PartitionFolder))
        assert _redis_model(client) == _expected(store)
        assert worker.folders, "the worker never led the partition"

    @pytest.mark.parametrize("block", [1, 7, 500])
    def test_the_fast_fold_writes_what_the_general_fold_writes(
            self, client: redis.Redis, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
        """The common entries are folded from their fields (fastapply.py), the others the
        general way: the same model, and the same entries refused, as the general fold
        of every entry; odd entries among them included (a stray entry of a purged job,
        a second submit, a context RFC 21 refuses, a job never submitted)."""
        store = EventStore(client, KEYS)
        _write_workload(store, client, 30, seed=7)
        journal = KEYS.journal(0)
        for fields in ({"j": "3", "n": "purge", "t": "2000"},
                       {"j": "3", "s": "9", "n": "clean", "t": "2001"},
                       {"j": "4", "s": "0", "n": "submit", "t": "2002",
                        "c": '{"urgency":16,"userid":1,"flags":0,"version":1}'},
                       {"j": "5", "s": "9", "n": "priority", "t": "2003",
                        "c": '{"priority":true}'},
                       {"j": "77", "s": "1", "n": "validate", "t": "2004"}):
            client.xadd(journal, fields)
        jl = JobListStore(client, KEYS)
        jl.ensure_groups()
        client.set(KEYS.joblist_fence(0), "1")

        def fold() -> tuple[ReadModel, list[str]]:
            jl.reset(0, "1")
            refused: list[str] = []
            folder = joblist_fold.PartitionFolder(jl, 0, "1",
                                                  lambda *bad: refused.append(bad[3]))
            while entries := client.xrange(journal, min="(" + folder.position
                                           if folder.position != "0-0" else "-",
                                           count=block):
                folder.fold(entries)
            return _redis_model(client), refused

        fast = fold()
        monkeypatch.setattr(joblist_fold, "fast_apply", lambda *_args: None)
        general = fold()
        assert fast == general
        assert len(fast[1]) >= 3 and 3 not in fast[0].summaries

    def test_compact_records_and_the_previous_form_read_back(self, client: redis.Redis
                                                            ) -> None:
        """The read model stores records compact (the known facts by position, no id),
        and a record stored before in the object form still reads."""
        full = {"name": "a", "ntasks": 2, "nnodes": 1, "ncores": 2, "ngpus": 0,
                "duration": 60.0, "queue": "batch", "ranks": "0"}
        records = {}
        for jobid, info in ((1, full), (2, {"name": "b", "ntasks": 1})):
            events, _extra = _submit(jobid)
            records[jobid] = ReadModel()
            records[jobid].feed((jobid, e, info if i == 0 else {})
                                for i, e in enumerate(events))
        jl = JobListStore(client, KEYS)
        client.set(KEYS.joblist_fence(0), "1")
        ensure_group(client, KEYS.journal(0), GROUP_JOBLIST)
        changes = [change_between(None, records[j].summaries[j]) for j in (1, 2)]
        jl.write(0, changes, "0-1", 1, "1")
        raw = client.hget(KEYS.joblist_jobs(0), 1)
        assert raw is not None and raw.startswith(b"[") and b'"ntasks"' not in raw
        assert b'"queue":"batch"' in raw
        # t_depend is t_submit: stored as "the time before it"
        assert raw.count(repr(T + 1).encode()) == 1 and b'"="' in raw
        old = records[2].summaries[2]
        client.hset(KEYS.joblist_jobs(0), 3, JobRecord(old.job.replace(id=3),
                                                      {**old.info, "name": "old"}).to_json())
        got = jl.get_many([1, 2, 3, 4])
        assert got[:2] == [records[1].summaries[1], records[2].summaries[2]]
        assert got[2] is not None and got[2].id == 3 and got[2].info["name"] == "old"
        assert got[3] is None
        assert sorted(jl.all_summaries()) == [1, 2, 3]

    def test_poison_entry_goes_to_dead_letters(self, instance: Instance,
                                               client: redis.Redis) -> None:
        store = EventStore(client, KEYS)
        _write_workload(store, client, 2, seed=5)
        client.xadd(KEYS.journal(0), {"j": "notanumber", "n": "submit", "t": "1"})
        client.xadd(KEYS.journal(0), {"j": "9", "n": "start", "t": "1"})  # impossible
        worker = JobListWorker(instance)
        worker.setup()
        for _ in range(3):
            worker.step()
        letters = client.xrange(KEYS.dead_letters)
        assert len(letters) == 2
        assert b"before submit" in letters[1][1][b"error"]
        assert client.xpending(KEYS.journal(0), GROUP_JOBLIST)["pending"] == 0


    def test_wait_all_sees_a_job_folded_while_it_reads(
            self, instance: Instance, client: redis.Redis,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """``job wait --all`` must not miss a job the job list folds between its reads
        of the job list and of the journal (it used to be in neither)."""
        from fluxes.cli import waitjobs
        from fluxes.service import jobs as selection

        store = EventStore(client, KEYS)
        client.set(KEYS.jm_fence(0), "1")
        worker = JobListWorker(instance)
        worker.setup()
        for jobid in (3, 6):  # both of user 1000
            events, extra = _submit(jobid)
            batch = store.batch()
            batch.append(KEYS.eventlog(jobid), jobid, 0, events, [extra, None])
            store.commit(batch)
        real_select = selection.select_jobs

        def select_then_fold(*args: object, **kwargs: object) -> object:
            found = real_select(*args, **kwargs)  # type: ignore[arg-type]
            worker.step()  # the job-list worker folds both jobs right after the read
            return found

        monkeypatch.setattr(selection, "select_jobs", select_then_fold)
        monkeypatch.setattr(selection, "user_id", lambda inst, user=None: 1000)
        assert waitjobs.active_jobs_of(instance) == [3, 6]

    def test_catch_up_waits_for_what_was_written_before(
            self, instance: Instance, client: redis.Redis) -> None:
        store = EventStore(client, KEYS)
        lists = JobListStore(client, KEYS)
        worker = JobListWorker(instance)
        worker.setup()
        assert lists.catch_up(timeout=0) == {}
        events, extra = _submit(1)
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 0, events, [extra, None])
        store.commit(batch)
        mark = lists.journal_marks()[0]
        assert lists.catch_up(timeout=0.05) == {0: mark}
        worker.step()
        assert lists.catch_up(timeout=0) == {}
        assert lists.folded_position(0) == mark


    def test_jobs_reads_its_own_writes(self, instance: Instance, client: redis.Redis,
                                       capsys: pytest.CaptureFixture[str]) -> None:
        """``fluxes jobs`` run after a job's end was written lists its final record,
        even when the job list folds it only a moment later."""
        import threading

        from fluxes.service import jobs as selection

        store = EventStore(client, KEYS)
        client.set(KEYS.jm_fence(0), "1")
        worker = JobListWorker(instance)
        worker.setup()
        events, extra = _submit(3)
        batch = store.batch()
        batch.append(KEYS.eventlog(3), 3, 0, events, [extra, None])
        store.commit(batch)
        worker.step()
        for seq, (name, ctx) in enumerate(LIFE, 2):  # the job runs to its end...
            batch = store.batch()
            batch.append(KEYS.eventlog(3), 3, seq, [ev.decode(name, T + seq, ctx)])
            store.commit(batch, token="1")
        # ...and the job list folds that only a little later
        folder = threading.Timer(0.2, worker.step)
        folder.start()
        try:
            found = selection.select_jobs(instance, states="active,inactive", everyone=True)
        finally:
            folder.join()
        assert [(r.id, r.job.state.name) for r in found] == [(3, "INACTIVE")]
        assert capsys.readouterr().err == ""

    def test_jobs_says_when_the_job_list_is_behind(
            self, instance: Instance, client: redis.Redis,
            capsys: pytest.CaptureFixture[str]) -> None:
        from fluxes.service import jobs as selection

        store = EventStore(client, KEYS)
        JobListWorker(instance).setup()  # a group, but nobody folding
        events, extra = _submit(1)
        batch = store.batch()
        batch.append(KEYS.eventlog(1), 1, 0, events, [extra, None])
        store.commit(batch)
        selection.caught_up(instance, timeout=0.05)
        assert "the job list has not folded the newest journal entries of partition(s) 0" \
            in capsys.readouterr().err


class TestFakeRedis(JobListContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(JobListContract, OnRealRedis):
    """The contract on a private redis-server."""
