"""Retention on fakeredis and a real Redis: purge, stream and journal trims, the
archive, readers of trimmed history, and lost-write marks."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.jm.content import job_content
from fluxes.domain.job import events as ev
from fluxes.domain.joblist.model import ReadModel
from fluxes.domain.retention import Mark
from fluxes.formats.jobspec import Jobspec
from fluxes.store import accounting, jobfacts, jobhash
from fluxes.store.archive import JournalArchive
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_rebuild import rebuild
from fluxes.store.keys import GROUP_ACCOUNTING, GROUP_JOBLIST, Keys
from fluxes.store.retention import (
    Housekeeper,
    MarkFile,
    purge,
    read_trim_state,
    trim_journal,
    trim_stream,
)
from tests.backends import OnFakeRedis, OnRealRedis
from workers.joblist import JobListWorker

KEYS = Keys("t")
T = 1_000_000.0
ALICE, BOB = 1000, 2000
LIFE: list[tuple[str, dict[str, Any]]]
LIFE = [("depend", {}), ("priority", {"priority": 16}), ("alloc", {}), ("start", {}),
        ("finish", {"status": 0}), ("release", {"ranks": "all", "final": True}),
        ("free", {}), ("clean", {})]


@pytest.fixture(autouse=True)
def _short_blocks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(JobListWorker, "block_ms", 10)
    monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path / "state"))


def _worker(instance: Instance, housekeeping: bool = False) -> JobListWorker:
    """A job-list worker, set up; without ``housekeeping`` its retention duties stay idle
    (the tests call them explicitly)."""
    worker = JobListWorker(instance)
    if not housekeeping:
        worker.keeper.run = lambda led, now=None: None  # type: ignore[method-assign]
    worker.setup()
    return worker


def _spec(env: str) -> bytes:
    return orjson.dumps(Jobspec.from_command(["true"], environment={"HOME": env},
                                             cwd="/tmp").to_dict())


def _create(store: EventStore, jobid: int, owner: int = ALICE, env: str = "/home/a",
            t: float = T) -> None:
    """A job as the ingest stores it: eventlog, journal, hash and blob references."""
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, 0,
                 [ev.decode("submit", t, {"urgency": 16, "userid": owner, "flags": 0,
                                          "version": 1}),
                  ev.decode("validate", t)],
                 [{"name": f"job{jobid}", "queue": "", "ntasks": 1, "nnodes": 1}, None])
    jobhash.create(batch, KEYS, jobid, owner=owner, urgency=16, content=job_content(_spec(env)))
    store.commit(batch)


def _advance(store: EventStore, jobid: int, upto: int, t: float = T) -> None:
    """Take a created job through the first ``upto`` events of LIFE (8: inactive)."""
    for seq, (name, ctx) in enumerate(LIFE[:upto], 2):
        batch = store.batch()
        batch.append(KEYS.eventlog(jobid), jobid, seq, [ev.decode(name, t + seq, ctx)])
        if name == "priority":
            batch.journal_only(jobid, ev.decode("annotations", t, {
                "annotations": {"sched": {"reason_pending": "waiting"}}}))
        store.commit(batch, token="1")


def _jobs(store: EventStore, client: redis.Redis, n: int, done: int) -> list[int]:
    """``n`` jobs, the first ``done`` of them inactive, the rest running; each with an
    exec progress field and an output stream."""
    client.set(KEYS.jm_fence(0), "1")
    ids = list(range(1, n + 1))
    for jobid in ids:
        _create(store, jobid, owner=ALICE if jobid % 2 else BOB,
                env="/home/a" if jobid % 3 else "/home/b")
        _advance(store, jobid, len(LIFE) if jobid <= done else 4)
        client.hset(KEYS.exec_progress(0), str(jobid), "{}")
        client.xadd(KEYS.output(ALICE if jobid % 2 else BOB, jobid), {"r": "0", "d": "hi"})
        # a PMI exchange left behind (a rank lost before it left)
        client.hset(KEYS.pmi(ALICE if jobid % 2 else BOB, jobid), "k:card-0", "x")
    return ids


def _keys_of(client: redis.Redis, jobid: int) -> list[str]:
    """Every key whose name names ``jobid``, and the fields of shared hashes naming it."""
    out = [k.decode() for k in client.scan_iter("*")
           if f":{jobid}:" in k.decode() or k.decode().endswith(f":{jobid}")]
    if client.hexists(KEYS.exec_progress(0), str(jobid)):
        out.append(f"{KEYS.exec_progress(0)}[{jobid}]")
    # SCAN's order changes as the keyspace is rehashed: compare the sets
    return sorted(out)


def _blob_refs(client: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(client.hget(k, "refs") or 0)
            for k in client.scan_iter("*:blob:*")}


def _expected_refs(client: redis.Redis, jobids: list[int]) -> dict[str, int]:
    """What the blob counts must be: one per job hash field naming the blob."""
    out: dict[str, int] = {}
    for jobid in jobids:
        row = client.hmget(KEYS.job(jobid), [*jobhash.BLOB_FIELDS, jobhash.OWNER])
        *digests, owner = row
        for digest in digests:
            if digest:
                key = KEYS.blob(0, int(owner), digest.decode())
                out[key] = out.get(key, 0) + 1
    return out


def _model(client: redis.Redis) -> ReadModel:
    jl = JobListStore(client, KEYS)
    return ReadModel(jl.all_summaries(), jl.counters())


def _journal_model(store: EventStore) -> ReadModel:
    model = ReadModel()
    for block in store.iter_journal(0):
        model.feed((e.jobid, e.event(), e.extra_dict()) for e in block)
    return model


def _fold_all(worker: JobListWorker) -> None:
    for _ in range(4):
        worker.step()


class RetentionContract:
    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        return Instance(InstanceURI("redis://unused", "t"), client=client)

    @pytest.fixture
    def store(self, client: redis.Redis) -> EventStore:
        return EventStore(client, KEYS)

    # ------------------------------------------------------------ purge

    def test_purge_removes_every_key_of_the_job(self, client: redis.Redis,
                                                store: EventStore) -> None:
        ids = _jobs(store, client, 6, done=4)
        before = {j: _keys_of(client, j) for j in ids}
        # eventlog, hash, output, PMI exchange
        assert all(len(found) >= 4 for found in before.values())
        result = purge(client, KEYS, [1, 2, 3])
        assert result.purged == [1, 2, 3] and not result.active and not result.unknown
        for jobid in (1, 2, 3):
            assert _keys_of(client, jobid) == [], jobid
        for jobid in (4, 5, 6):
            assert _keys_of(client, jobid) == before[jobid]
        # each blob counts exactly the jobs left naming it; a blob nobody names is gone
        assert _blob_refs(client) == _expected_refs(client, [4, 5, 6])
        purged = [f for _sid, f in client.xrange(KEYS.journal(0)) if f[b"n"] == b"purge"]
        assert [int(f[b"j"]) for f in purged] == [1, 2, 3]
        # purging again purges nothing and changes nothing
        again = purge(client, KEYS, [1, 2, 3])
        assert again.purged == [] and again.unknown == [1, 2, 3]
        assert _blob_refs(client) == _expected_refs(client, [4, 5, 6])

    def test_purge_takes_the_child_instance_and_its_descendants(
            self, client: redis.Redis, store: EventStore, monkeypatch: pytest.MonkeyPatch,
            instance: Instance, tmp_path: Path) -> None:
        from fluxes.store import children

        monkeypatch.setattr(children, "SCAN_COUNT", 7)  # many small steps
        _jobs(store, client, 3, done=3)
        # job 1 ran a child, which ran a grandchild; job 2 ran a child (kept); a namespace
        # that only starts like job 1's child (t.10) is another job's and stays
        doomed = ["{t.1}:journal", "{t.1}:instance", "{t.1}:job:5:eventlog",
                  "{t.1.5}:journal", "{t.1.5}:jl:jobs", "{t.1.5.9:p1}:journal"]
        kept = ["{t.2}:journal", "{t.10}:journal", "{t.2.1}:journal", "{t}:journal"]
        for key in doomed + kept[:3]:
            client.set(key, "x") if "journal" not in key else client.xadd(key, {"a": "b"})
        for n in range(40):  # keys of kept children spread the SCAN over many steps
            client.set(f"{{t.2}}:filler:{n}", "x")
        client.hset(KEYS.children, mapping={"1": "t.1", "2": "t.2", "10": "t.10"})
        assert purge(client, KEYS, [1]).purged == [1]
        assert client.hgetall(KEYS.children) == {b"2": b"t.2", b"10": b"t.10"}
        assert client.smembers(KEYS.children_purged) == {b"t.1"}
        sweeper = children.ChildSweeper(client, KEYS)
        steps = 0
        while not sweeper.done:
            sweeper.step(scans=1)
            steps += 1
        assert steps > 3 and sweeper.deleted == len(doomed)
        left = {k.decode() for k in client.scan_iter("*")}
        assert not left & set(doomed)
        assert set(kept) <= left
        assert client.scard(KEYS.children_purged) == 0
        assert sweeper.step() == 0  # nothing more to do: a SMEMBERS, no SCAN
        # the job-list worker's housekeeping sweeps what a purge (automatic or not) dooms
        import logging

        assert purge(client, KEYS, [2]).purged == [2]
        keeper = Housekeeper(instance, logging.getLogger("test"), state_dir=tmp_path)
        for tick in range(100):
            keeper.run({0: ("1", "0-0")}, now=1000.0 + tick)
            if not client.scard(KEYS.children_purged):
                break
        left = {k.decode() for k in client.scan_iter("*")}
        assert not any(k.startswith(("{t.2}", "{t.2.")) for k in left)
        assert "{t.10}:journal" in left

    def test_purge_refuses_active_jobs(self, client: redis.Redis, store: EventStore) -> None:
        _jobs(store, client, 4, done=2)
        keys_before = sorted(client.keys("*"))
        journal = client.xlen(KEYS.journal(0))
        result = purge(client, KEYS, [3, 4, 99])
        assert result.purged == [] and set(result.active) == {3, 4} and result.unknown == [99]
        assert result.active[3] == "start"
        assert sorted(client.keys("*")) == keys_before
        assert client.xlen(KEYS.journal(0)) == journal
        # the step itself refuses a batch naming an active job, writing nothing
        from fluxes.store.retention import _PURGE_SHA, PURGE_LUA

        script_keys = [KEYS.journal(0), KEYS.exec_progress(0), KEYS.eventlog(1), KEYS.job(1),
                       KEYS.eventlog(3), KEYS.job(3)]
        client.script_load(PURGE_LUA)
        with pytest.raises(redis.ResponseError, match="ACTIVE 3 start"):
            client.evalsha(_PURGE_SHA, len(script_keys), *script_keys, repr(T), 1, 3, 4, 0,
                           3, 5, 6, 0)
        assert sorted(client.keys("*")) == keys_before

    def test_read_model_and_counters_after_purge_equal_a_rebuild(
            self, instance: Instance, client: redis.Redis, store: EventStore) -> None:
        ids = _jobs(store, client, 12, done=9)
        worker = _worker(instance)
        _fold_all(worker)
        purge(client, KEYS, ids[:3])  # folded before the purge
        for jobid in (10, 11):  # ended and purged before the job list folds either
            for seq, (name, ctx) in enumerate(LIFE[4:], 6):
                batch = store.batch()
                batch.append(KEYS.eventlog(jobid), jobid, seq, [ev.decode(name, T + seq, ctx)])
                store.commit(batch, token="1")
        purge(client, KEYS, [4, 10, 11])
        _fold_all(worker)
        model = _model(client)
        assert sorted(model.summaries) == [5, 6, 7, 8, 9, 12]
        assert model == _journal_model(store)
        assert model.counters["state:INACTIVE"] == 5 and model.counters["state:RUN"] == 1
        assert client.zrange(KEYS.joblist_inactive(0), 0, -1) == [b"5", b"6", b"7", b"8", b"9"]
        rebuild(client, KEYS)
        assert _model(client) == model

    def test_replay_and_restore_drop_purged_jobs(self, instance: Instance,
                                                 client: redis.Redis,
                                                 store: EventStore) -> None:
        _jobs(store, client, 3, done=2)  # 1 and 2 ended, 3 runs
        running = store.replay(0, drop_inactive=True)
        assert sorted(running.records) == [3]
        client.set(KEYS.checkpoint(0), store.checkpoint_blob(running.records.values(),
                                                             running.last_id))
        for seq, (name, ctx) in enumerate(LIFE[4:], 6):  # 3 ends...
            batch = store.batch()
            batch.append(KEYS.eventlog(3), 3, seq, [ev.decode(name, T + seq, ctx)])
            store.commit(batch, token="1")
        purge(client, KEYS, [1, 3])  # ... and goes
        result = store.replay(0)
        assert sorted(result.records) == [2] and result.purged == {1, 3}
        assert not result.broken
        assert store.restore(0)[0].records == {}
        # the job manager's checkpoint may be older than the journal's trim point: a job
        # it holds whose end and purge were trimmed since is dropped all the same
        purge(client, KEYS, [2])
        _create(store, 5)
        _advance(store, 5, 4)
        worker = _worker(instance)
        _fold_all(worker)
        assert trim_journal(client, KEYS, 0, None).trimmed > 0
        first = client.xrange(KEYS.journal(0), count=1)[0][1]
        assert (first[b"j"], first[b"n"]) == (b"5", b"submit")
        restored, used = store.restore(0)
        assert used and sorted(restored.records) == [5] and 3 in restored.purged
        assert sorted(store.replay(0).records) == [5]

    # ------------------------------------------------------------ streams

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_trimming_never_removes_an_unacknowledged_entry(self, client: redis.Redis,
                                                            seed: int) -> None:
        rng = random.Random(seed)
        stream = KEYS.jm_new(0)
        groups = ["jm", "other"]
        for group in groups:
            client.xgroup_create(stream, group, id="0", mkstream=True)
        acked: dict[str, set[bytes]] = {g: set() for g in groups}
        added: list[bytes] = []
        for _ in range(60):
            op = rng.random()
            if op < 0.4:
                added.append(client.xadd(stream, {"d": str(len(added))}))
            elif op < 0.7:
                group = rng.choice(groups)
                reply = client.xreadgroup(group, "c", {stream: ">"}, count=rng.randint(1, 4))
                for _s, entries in reply or []:
                    for sid, _f in entries:
                        if rng.random() < 0.7:
                            client.xack(stream, group, sid)
                            acked[group].add(sid)
            else:
                trim_stream(client, stream)
                left = {sid for sid, _f in client.xrange(stream)}
                for sid in added:
                    if not all(sid in acked[g] for g in groups):
                        assert sid in left, f"{sid!r} went before every group acknowledged it"
        # once every group acknowledged everything, everything goes
        for group in groups:
            while True:
                reply = client.xreadgroup(group, "c", {stream: "0"}, count=100)
                pending = [sid for _s, entries in reply or [] for sid, _f in entries]
                more = client.xreadgroup(group, "c", {stream: ">"}, count=100)
                pending += [sid for _s, entries in more or [] for sid, _f in entries]
                if not pending:
                    break
                client.xack(stream, group, *pending)
        trim_stream(client, stream)
        assert client.xlen(stream) == 0

    def test_sched_req_goes_only_as_far_as_the_scheduler_has_read(
            self, instance: Instance, client: redis.Redis, tmp_path: Path) -> None:
        import logging
        import time

        stream = KEYS.sched_req(0)
        old = [client.xadd(stream, {"d": str(i)}, id=f"{1000 + i}-0") for i in range(6)]
        keeper = Housekeeper(instance, logging.getLogger("test"), state_dir=tmp_path)

        def beat(positions: dict[str, str], age: float = 0.0) -> None:
            client.hset(KEYS.workers, "scheduler-a", orjson.dumps({
                "kind": "scheduler", "heartbeat": time.time() - age,
                "read_positions": positions}))

        beat({stream: old[2].decode()})
        keeper._trim_streams({0: ("1", "0-0")})
        assert [sid for sid, _f in client.xrange(stream)] == old[3:]  # unread, however old
        beat({stream: old[5].decode()}, age=60)  # a scheduler gone: its word counts no more
        fresh = client.xadd(stream, {"d": "new"})
        keeper._trim_streams({0: ("1", "0-0")})
        # by age then: the old entries go, the one just added stays
        assert [sid for sid, _f in client.xrange(stream)] == [fresh]

    def test_a_stream_without_groups_is_left_alone(self, client: redis.Redis) -> None:
        client.xadd(KEYS.queues, {"d": "{}"})
        assert trim_stream(client, KEYS.queues) == 0 and client.xlen(KEYS.queues) == 1

    # ------------------------------------------------------------ journal

    def test_journal_trim_archives_and_time_travel_reads_the_archive(
            self, instance: Instance, client: redis.Redis, store: EventStore,
            tmp_path: Path) -> None:
        ids = _jobs(store, client, 8, done=6)
        worker = _worker(instance)
        past = store.replay(0, until_time=T + 5.5)  # each job halfway through its life
        assert len(past.records) == 8
        archive = JournalArchive(tmp_path, KEYS, 0)
        # the job list has not folded these jobs yet: nothing may go
        purge(client, KEYS, ids[:3])
        assert trim_journal(client, KEYS, 0, archive).trimmed == 0
        _fold_all(worker)
        before = client.xlen(KEYS.journal(0))
        report = trim_journal(client, KEYS, 0, archive)
        # jobs 1-3 were submitted first: their entries up to job 4's submit go
        assert report.trimmed > 0 and client.xlen(KEYS.journal(0)) == before - report.trimmed
        first = client.xrange(KEYS.journal(0), count=1)[0][1]
        assert (first[b"j"], first[b"n"]) == (b"4", b"submit")
        assert read_trim_state(client, KEYS, 0).archived == report.upto
        # time travel sees jobs 1-3 as they were, from the archive
        again = store.replay(0, until_time=T + 5.5, archive=archive)
        assert again.purged_before is None
        assert {j: r.job for j, r in again.records.items()} == \
            {j: r.job for j, r in past.records.items()}
        # without the archive it says history is missing, and from when
        lost = store.replay(0, until_time=T + 5.5)
        assert lost.purged_before is not None and sorted(lost.records) == [4, 5, 6, 7, 8]
        assert not lost.broken
        # the whole replay (eventlog check, drills) drops what was purged
        now = store.replay(0)
        assert sorted(now.records) == [4, 5, 6, 7, 8] and not now.broken
        # the job list rebuilt from the trimmed journal is the same model
        model = _model(client)
        rebuild(client, KEYS)
        assert _model(client) == model
        # the journal command reads the archive, then the journal
        blocks, gap = store.history(0, archive=archive)
        entries = [e for block in blocks for e in block]
        assert gap is None and (entries[0].jobid, entries[0].name) == (1, b"submit")
        assert len(entries) == report.archived + client.xlen(KEYS.journal(0))
        assert store.history(0)[1] is not None  # no archive: history is missing

    def test_without_archive_history_is_purged_before_the_trim(
            self, instance: Instance, client: redis.Redis, store: EventStore,
            capsys: pytest.CaptureFixture[str]) -> None:
        ids = _jobs(store, client, 5, done=5)
        worker = _worker(instance)
        purge(client, KEYS, ids[:2])
        _fold_all(worker)
        report = trim_journal(client, KEYS, 0, None)
        assert report.trimmed > 0
        state = read_trim_state(client, KEYS, 0)
        assert state.lost_until == state.trimmed == report.upto and state.lost_t is not None
        result = store.replay(0, until_time=T + 100)
        assert result.purged_before == state.lost_t
        assert sorted(result.records) == [3, 4, 5]

    def test_trim_never_passes_a_job_that_is_not_purged(
            self, instance: Instance, client: redis.Redis, store: EventStore) -> None:
        _jobs(store, client, 4, done=4)
        worker = _worker(instance)
        purge(client, KEYS, [2, 3, 4])  # not 1, the oldest
        _fold_all(worker)
        assert trim_journal(client, KEYS, 0, None).trimmed == 0
        assert store.replay(0).records.keys() == {1}

    def test_accounting_rebuild_after_a_trim_starts_from_its_base(
            self, instance: Instance, client: redis.Redis, store: EventStore,
            monkeypatch: pytest.MonkeyPatch) -> None:
        from workers.accounting import AccountingWorker

        monkeypatch.setattr(AccountingWorker, "block_ms", 10)
        monkeypatch.setattr(AccountingWorker, "linger_s", 0.0)
        ids = _jobs(store, client, 6, done=6)
        folder = AccountingWorker(instance)
        folder.setup()
        for _ in range(4):
            folder.step()
        worker = _worker(instance)
        purge(client, KEYS, ids[:4])
        _fold_all(worker)
        for _ in range(3):
            folder.step()
        usage = client.hgetall(KEYS.acct_usage(0))
        assert usage and client.hlen(KEYS.acct_jobs(0)) == 2  # the purged jobs' records went
        report = trim_journal(client, KEYS, 0, None)
        assert report.trimmed > 0
        base = accounting.load_base(client, KEYS, 0)
        assert base is not None
        info = {g["name"].decode(): g for g in client.xinfo_groups(KEYS.journal(0))}
        assert base.position == info[GROUP_ACCOUNTING]["last-delivered-id"].decode()
        half_life = float(usage[accounting.HALF_LIFE_FIELD.encode()])
        accounting.rebuild(client, KEYS, half_life)
        assert client.hgetall(KEYS.acct_usage(0)) == usage

    # ------------------------------------------------------------ the worker's part

    def test_the_worker_purges_by_age_and_trims(self, client: redis.Redis,
                                                store: EventStore) -> None:
        import time

        client.hset(KEYS.instance, mapping={
            "partitions": 1, "owner": "me", "owner_uid": ALICE, "created": "1",
            "config": '[job-manager]\ninactive-age-limit = "1h"\njournal-archive = ""\n'})
        instance = Instance(InstanceURI("redis://unused", "t"), client=client)
        client.set(KEYS.jm_fence(0), "1")
        now = time.time()
        for jobid in range(1, 6):  # 1-3 ended a day ago, 4 and 5 just now
            t = now - 86_400 if jobid <= 3 else now - 20
            _create(store, jobid, t=t)
            _advance(store, jobid, len(LIFE), t=t)
        worker = _worker(instance, housekeeping=True)
        _fold_all(worker)
        assert sorted(JobListStore(client, KEYS).all_summaries()) == [4, 5]
        assert jobfacts.which_exist(client, KEYS, list(range(1, 6))) == [False] * 3 + [True] * 2
        assert worker.status()["purged"] == 3
        first = client.xrange(KEYS.journal(0), count=1)[0][1]
        assert (first[b"j"], first[b"n"]) == (b"4", b"submit")

    def test_lost_journal_entries_are_reported(self, client: redis.Redis,
                                               store: EventStore, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
        client.hset(KEYS.instance, mapping={"partitions": 1, "owner": "me",
                                            "owner_uid": ALICE, "created": "42"})
        instance = Instance(InstanceURI("redis://unused", "t"), client=client)
        _jobs(store, client, 4, done=2)
        worker = JobListWorker(instance)
        worker.keeper = Housekeeper(instance, worker.log, state_dir=tmp_path)
        worker.setup()
        _fold_all(worker)  # folds, and records what it saw
        mark = MarkFile(tmp_path, KEYS, 0).load()
        assert mark == Mark("42", client.xrevrange(KEYS.journal(0), count=1)[0][0].decode())
        assert "lost_writes" not in worker.status()
        # Redis comes back without its newest journal entries (a power cut)
        entries = client.xrange(KEYS.journal(0))
        client.delete(KEYS.journal(0))
        for sid, fields in entries[:-3]:
            client.xadd(KEYS.journal(0), fields, id=sid)
        client.xgroup_create(KEYS.journal(0), GROUP_JOBLIST, id=entries[-4][0])
        restarted = JobListWorker(instance)
        restarted.keeper = Housekeeper(instance, restarted.log, state_dir=tmp_path)
        restarted.setup()
        with caplog.at_level("ERROR"):
            restarted.step()
        lost = restarted.status()["lost_writes"]
        assert mark.journal in lost and entries[-4][0].decode() in lost
        assert any("writes lost" in r.getMessage() for r in caplog.records)


class TestFakeRedis(RetentionContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(RetentionContract, OnRealRedis):
    """The contract on a private redis-server."""
