"""Every consumer survives every message, and fencing on who is in charge (issue 14, 1-2).

Ingest, job manager and scheduler run in-process (tests/store/test_scheduler_worker.py's
System) on fakeredis and a real redis-server. Each case was found by an outside test of
a running instance; each test here fails on the code before its fix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.cli.cmd_status import CRASH_LOOP_RESTARTS, count_restarts
from fluxes.domain.jm import core as jm_core
from fluxes.domain.jm.core import JobManagerCore
from fluxes.domain.job import events as ev
from fluxes.domain.liveness import Backoff
from fluxes.store.client import Client
from fluxes.store.deadletters import read_counts
from fluxes.store.eventstore import Batch, EventStore, NotWaitingError
from fluxes.store.keys import GROUP_INGEST, GROUP_JM
from tests import wire
from tests.store.test_poison_messages import letters, runs_a_job
from tests.store.test_scheduler_worker import System, spec
from workers import base as worker_base
from workers import jobmanager
from workers.ingest import IngestWorker
from workers.jobmanager import JobManagerWorker


@pytest.fixture(params=["fake", "real"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """Both backends: fakeredis (with Lua) and a private redis-server."""
    yield request.getfixturevalue("fake_redis" if request.param == "fake" else "real_redis")


@pytest.fixture
def system(client: redis.Redis) -> System:
    return System(client)


@pytest.fixture
def fake_system(fake_redis: redis.Redis) -> System:
    """On fakeredis only: the logic of the workers, not what Redis does."""
    return System(fake_redis)



def held_and_waiting(system: System) -> tuple[int, int]:
    """A job holding both nodes (its tasks never end) and one waiting behind it in SCHED."""
    for fake in system.execs.values():
        fake.hold = set()
    holder = system.submit(spec(nnodes=2, ntasks=2, exclusive=True))[0]
    for fake in system.execs.values():
        fake.hold.add(holder)
    [waiting] = system.submit(spec(ntasks=1))
    system.run(4)
    assert system.events(holder)[-1] == "start" and system.events(waiting)[-1] == "priority"
    return holder, waiting


def release(system: System, jobid: int) -> None:
    """The held job's tasks end on every rank."""
    for rank in system.execs:
        system.redis.xadd(system.keys.exec_events(0), wire.entry([
            {"t": "exec", "id": jobid, "rank": rank, "status": 0, "released": True}]))


class Crash(BaseException):
    """What no ``except Exception`` catches: the worker process dies here (as on a
    segfault or the OOM killer)."""


# -- the job manager: a new job that is not what it says ---------------------------------


def test_new_for_a_job_that_is_not_waiting_is_refused_without_a_rebuild(
        system: System) -> None:
    """It put the job manager into an endless rebuild loop: 3,800 'eventlog conflict'
    lines in 30 s, flux-restart/priority pairs on every queued job, the scheduler's
    epoch driven up."""
    [done] = system.submit(spec())
    system.run()
    assert system.events(done)[-1] == "clean"
    holder, waiting = held_and_waiting(system)
    core = system.jm.core
    assert core is not None
    epoch = system.sched.sessions[0].epoch
    before = system.events(waiting)
    stream = system.keys.jm_new(0)
    ghost = 4096  # partition 0, no such job
    sent = [system.redis.xadd(stream, wire.entry([
        {"t": "new", "id": jobid, "userid": 1000, "urgency": 16, "flags": 0,
         "t_submit": 1.0}])).decode() for jobid in (ghost, done)]
    system.run(3)
    got = letters(system, stream)
    assert [g["id"] for g in got] == sent
    assert f"job {ghost}: no such job" in got[0]["error"]
    assert f"job {done}: not a job waiting to be taken" in got[1]["error"]
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0
    assert system.jm.core is core  # never rebuilt
    assert system.events(waiting) == before  # no flux-restart, no priority
    assert system.sched.sessions[0].epoch == epoch
    assert ghost not in core.jobs
    release(system, holder)
    system.run(6)
    assert system.events(waiting)[-1] == "clean"


def test_new_whose_facts_differ_from_the_stored_submit_is_refused(fake_system: System) -> None:
    """A forged new-job message ahead of the ingest's own (a job stored, not yet taken)."""
    system = fake_system
    runs_a_job(system)  # the job manager leads (a replay would take the stored job)
    client = Client(system.instance, user="me")
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": spec()}]}])
    system.ingest.step()
    [answer] = client._wait(key, 1.0)
    jobid = answer["jobs"][0]["id"]
    stream = system.keys.jm_new(0)
    [(real, _fields)] = system.redis.xrevrange(stream, count=1)
    system.redis.xdel(stream, real)  # the forged one comes first
    forged = system.redis.xadd(stream, wire.entry([
        {"t": "new", "id": jobid, "userid": 0, "urgency": 31, "flags": 0,
         "t_submit": 1.0}])).decode()
    system.run(2)
    [letter] = letters(system, stream)
    assert letter["id"] == forged and "does not match the job's submit event" in letter["error"]
    assert system.jm.core is not None and jobid not in system.jm.core.jobs


# -- the job manager: a reply key of another type ------------------------------------------


def test_control_reply_naming_another_key_or_type_is_refused(system: System) -> None:
    """WRONGTYPE on the reply crash-looped the job manager (96 restarts)."""
    _holder, waiting = held_and_waiting(system)
    string_key = system.keys.reply("me", "x")
    system.redis.set(string_key, "not a list")
    stream = system.keys.jm_ctl(0)
    replies = [string_key, system.keys.journal(0), system.keys.users]
    sent = [system.redis.xadd(stream, wire.entry([
        {"t": "cancel-request", "ids": [waiting], "userid": 1000, "note": "", "reply": key}
    ])).decode() for key in replies]
    system.run(3)
    got = letters(system, stream)
    assert [g["id"] for g in got] == sent
    assert "holds a string, not a list" in got[0]["error"]
    assert "is not under" in got[1]["error"] and "is not under" in got[2]["error"]
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0
    assert "exception" not in system.events(waiting)  # refused: nothing done
    assert system.redis.get(string_key) == b"not a list"
    assert system.redis.type(system.keys.users) in (b"none", b"hash", "none", "hash")


def test_not_the_input_tells_input_errors_from_redis_ones() -> None:
    assert worker_base.not_the_input(redis.ConnectionError("gone"))
    assert worker_base.not_the_input(redis.ResponseError("BUSY a script runs"))
    assert worker_base.not_the_input(redis.ResponseError("NOPERM no permissions"))
    assert not worker_base.not_the_input(redis.ResponseError(
        "WRONGTYPE Operation against a key holding the wrong kind of value"))
    assert not worker_base.not_the_input(ValueError("bad"))


# -- the scheduler ---------------------------------------------------------------------------


def test_alloc_replayed_for_a_job_waiting_for_none_writes_no_R(system: System) -> None:
    """A replayed alloc for a finished job overwrote its stored R."""
    [done] = system.submit(spec())
    system.run()
    for fake in system.execs.values():
        fake.hold = set()
    [holder] = system.submit(spec())  # one core: others stay free to allocate
    for fake in system.execs.values():
        fake.hold.add(holder)
    system.run(3)
    assert system.events(holder)[-1] == "start"
    r_done = system.redis.hget(system.keys.job(done), "R")
    r_holder = system.redis.hget(system.keys.job(holder), "R")
    assert r_done and r_holder
    ghost = 4096
    epoch = system.sched.sessions[0].epoch
    stream = system.keys.sched_req(0)
    sent = {jobid: system.redis.xadd(stream, wire.entry([
        {"t": "alloc", "id": jobid, "priority": 16, "userid": 1000, "t_submit": 1.0}],
        epoch=epoch)).decode() for jobid in (done, ghost, holder)}
    system.run(3, exec_too=False)
    assert system.redis.hget(system.keys.job(done), "R") == r_done
    assert system.redis.hget(system.keys.job(holder), "R") == r_holder
    assert not system.redis.exists(system.keys.job(ghost))
    # the finished job's allocation was made, then taken back when its R was refused
    # (the unknown job has no jobspec to allocate for: denied, to nobody)
    [letter] = letters(system, stream)
    assert letter["id"] == sent[done] and f"job {done} waits for no allocation" in \
        letter["error"]
    pool = system.sched.pool
    assert pool is not None and sorted(pool.jobids()) == [holder]  # nothing else held
    release(system, holder)
    runs_a_job(system)


@pytest.mark.parametrize(("names", "written"), [
    (["submit", "validate", "depend", "priority"], True),
    (["submit", "validate", "depend", "priority", "urgency", "priority"], True),
    # canceled while its request was out: RFC 27 accepts the racing SUCCESS
    (["submit", "validate", "depend", "priority", "exception"], True),
    (["submit", "validate", "depend", "priority", "alloc"], False),
    (["submit", "validate", "depend", "priority", "alloc", "start", "exception"], False),
    (["submit", "validate", "depend", "priority", "exception", "clean"], False),
    ([], False),
])
def test_R_is_written_only_for_a_job_waiting_for_it(client: redis.Redis, names: list[str],
                                                    written: bool) -> None:
    from fluxes.store.keys import Keys

    keys = Keys("t")
    store = EventStore(client, keys)
    jobid = 7
    client.hset(keys.job(jobid), "owner", 1000)
    for name in names:
        client.xadd(keys.eventlog(jobid), {"n": name, "t": "1.0"})
    client.set(keys.sched_fence(0), "3")
    batch = Batch(keys, 0, fence=keys.sched_fence(0))
    batch.set_if_waiting(keys.job(jobid), keys.eventlog(jobid), jobid, "R", b"{}")
    batch.xadd(keys.sched_resp(0), {"d": b"x"})
    if written:
        store.commit(batch, "3")
        assert client.hget(keys.job(jobid), "R") == b"{}"
    else:
        with pytest.raises(NotWaitingError) as info:
            store.commit(batch, "3")
        assert info.value.jobids == [jobid]
        assert client.hget(keys.job(jobid), "R") is None
        assert client.xlen(keys.sched_resp(0)) == 0  # nothing at all was written


@pytest.mark.parametrize("msg", [
    {"t": "prioritize", "jobs": [["x", "y"]]},
    {"t": "alloc", "id": 5, "priority": 1, "userid": 1, "t_submit": "yesterday"},
])
def test_scheduler_survives_strings_where_numbers_belong(fake_system: System,
                                                         msg: dict[str, Any]) -> None:
    """They crashed the scheduler (fixed by typed messages; kept as regressions)."""
    system = fake_system
    runs_a_job(system)
    stream = system.keys.sched_req(0)
    sent = system.redis.xadd(stream, wire.entry([msg], epoch=system.sched.sessions[0].epoch))
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert letter["id"] == sent.decode() and "Expected" in letter["error"]


# -- a worker that dies on an entry ---------------------------------------------------------


def test_job_manager_dying_on_an_entry_refuses_it_after_five_deliveries(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    real = JobManagerCore.on_ctl

    def dies(self: JobManagerCore, fx: Any, msg: Any, ack: Any = None) -> None:
        if getattr(msg, "note", "") == "die":
            raise Crash
        real(self, fx, msg, ack)

    monkeypatch.setattr(JobManagerCore, "on_ctl", dies)
    runs_a_job(system)
    stream = system.keys.jm_ctl(0)
    sent = system.redis.xadd(stream, wire.entry([
        {"t": "cancel-request", "ids": [1], "userid": 1000, "note": "die"}])).decode()
    for _ in range(worker_base.MAX_DELIVERIES):
        # each crash kills the process (its lease lapses); the supervisor starts another
        system.redis.delete(system.keys.jm_lease(0))
        system.jm = JobManagerWorker(system.instance, name="jm-0")
        system.jm.setup()
        with pytest.raises(Crash):
            for _step in range(3):
                system.jm.step()
    system.redis.delete(system.keys.jm_lease(0))
    system.jm = JobManagerWorker(system.instance, name="jm-0")
    system.jm.setup()
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert letter["id"] == sent
    assert f"delivered {worker_base.MAX_DELIVERIES + 1} times" in letter["error"]
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0


def test_ingest_dying_on_a_request_refuses_it_after_five_deliveries(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    import fluxes.domain.ingest.checks
    from fluxes.domain.jm.submission import prepare_job as real

    def dies(item: Any, *args: Any, **kw: Any) -> Any:
        if item.get("jobspec", {}).get("attributes", {}).get("user", {}).get("die"):
            raise Crash
        return real(item, *args, **kw)

    monkeypatch.setattr(fluxes.domain.ingest.checks, "prepare_job", dies)
    poison = spec()
    poison.setdefault("attributes", {}).setdefault("user", {})["die"] = True
    client = Client(system.instance, user="me")
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": poison}]}])
    for _ in range(worker_base.MAX_DELIVERIES):
        system.ingest = IngestWorker(system.instance, name="ingest-0")
        system.ingest.setup()
        with pytest.raises(Crash):
            system.ingest.step()
    system.ingest = IngestWorker(system.instance, name="ingest-0")
    system.ingest.setup()
    system.ingest.step()
    [answer] = client._wait(key, 1.0)
    assert f"delivered {worker_base.MAX_DELIVERIES + 1} times" in answer["errors"][0]
    stream = system.keys.submit("me")
    assert system.redis.xpending(stream, GROUP_INGEST)["pending"] == 0
    assert len(letters(system, stream)) == 1
    runs_a_job(system)


def test_restarts_are_recorded_and_a_crash_loop_reported(fake_system: System) -> None:
    system = fake_system
    for _ in range(CRASH_LOOP_RESTARTS + 1):  # the first start, then the restarts
        worker = IngestWorker(system.instance, name="ingest-loop")
        worker.record_start()
        worker.heartbeat(force=True)
    clean = IngestWorker(system.instance, name="ingest-clean")
    clean.record_start()
    clean.unregister()  # a clean stop forgets the history
    clean = IngestWorker(system.instance, name="ingest-clean")
    clean.record_start()
    now = time.time()
    records = [{**orjson.loads(raw), "name": name.decode(), "alive": True}
               for name, raw in system.redis.hgetall(system.keys.workers).items()]
    count_restarts(records, now)
    by_name = {r["name"]: r for r in records}
    assert by_name["ingest-loop"]["restarts"] == CRASH_LOOP_RESTARTS
    assert by_name["ingest-loop"]["crash_loop"]
    assert by_name["ingest-clean"]["restarts"] == 0 and not by_name["ingest-clean"]["crash_loop"]


# -- fencing on who leads the scheduler session ---------------------------------------------


@pytest.mark.parametrize("kind", ["hello", "ready", "error"])
@pytest.mark.parametrize("age", ["current", "old"])
def test_forged_session_messages_leave_scheduling_working(
        fake_system: System, monkeypatch: pytest.MonkeyPatch, kind: str, age: str) -> None:
    """An older epoch's hello stopped scheduling for good; a forged error suspended it
    until the scheduler restarted. Scheduling heals without any process being killed
    (tests/system/test_hostile.py forges them into a running instance)."""
    system = fake_system
    monkeypatch.setattr(jm_core, "HEAL_AFTER_S", 0.0)
    monkeypatch.setattr(jobmanager, "SCHED_CHECK_S", 0.0)
    runs_a_job(system)
    epoch = system.sched.sessions[0].epoch
    msg: dict[str, Any] = {"t": kind}
    if kind == "ready":
        msg.update(mode="single", limit=1)
    forged = epoch if age == "current" else epoch - 1
    system.redis.xadd(system.keys.sched_resp(0), wire.entry([msg], epoch=forged))
    system.run(2)
    core = system.jm.core
    assert core is not None
    if kind == "hello" or age == "old":
        assert core.session.epoch == system.sched.sessions[0].epoch == epoch  # ignored
    if kind == "ready":
        assert core.session.mode == "unlimited"  # one ready per session
    runs_a_job(system)
    if kind == "error" and age == "current":
        # suspended, then a new session (the scheduler's answer to the reset)
        assert system.sched.sessions[0].epoch > epoch
        assert core.session.epoch == system.sched.sessions[0].epoch


def test_a_paused_schedulers_hello_writes_nothing(fake_system: System) -> None:
    """The scheduler's own hello is fenced: one paused past its lease says nothing."""
    system = fake_system
    runs_a_job(system)
    sched = system.sched
    session = sched.sessions[0]
    system.redis.incr(system.keys.sched_fence(0))  # another scheduler took over
    before = system.redis.xlen(system.keys.sched_resp(0))
    sched._hello(session, bump=False)
    assert system.redis.xlen(system.keys.sched_resp(0)) == before
    assert not sched.leader


# -- the same request twice ---------------------------------------------------------------


def test_same_request_twice_creates_its_jobs_once(system: System) -> None:
    client = Client(system.instance, user="me")
    request = proto.SubmitJobs(req="retry-1", jobs=[proto.SubmitItem(jobspec=spec())] * 2)
    [key, _same] = client._post([request, request])  # one block
    system.ingest.step()
    first = [client._wait(key, 1.0)[0] for _ in range(2)]
    assert first[0] == first[1]
    ids = [j["id"] for j in first[0]["jobs"]]
    client._post([request])  # a client retrying later
    system.ingest.step()
    assert client._wait(key, 1.0)[0] == first[0]
    system.run()
    store = EventStore(system.redis, system.keys)
    submits = [e for e in system.redis.xrange(system.keys.journal(0))
               if e[1][b"n"] == b"submit"]
    assert len(submits) == 2 and all(store.eventlog(j)[-1].event_name == "clean" for j in ids)
    # the same request id for another request: refused, nothing created
    other = proto.SubmitJobs(req="retry-1", jobs=[proto.SubmitItem(jobspec=spec())] * 3)
    client._post([other])
    system.ingest.step()
    assert "was used for another request" in client._wait(key, 1.0)[0]["errors"][0]


def test_same_control_request_twice_is_done_once(fake_system: System) -> None:
    system = fake_system
    _holder, waiting = held_and_waiting(system)
    client = Client(system.instance, user="me")
    # a non-fatal exception: done twice, it would be posted twice
    cancel = proto.RaiseOnJobs(req="raise-1", ids=[waiting], type="test", severity=1)
    [key] = client._post([cancel])
    system.ingest.step()
    system.run(1, exec_too=False)
    assert client._wait(key, 1.0)[0]["ok"] == [waiting]
    client._post([cancel])
    system.ingest.step()
    system.run(1, exec_too=False)
    assert "handled already" in client._wait(key, 1.0)[0]["errors"][0]
    events = [e for e in EventStore(system.redis, system.keys).eventlog(waiting)
              if isinstance(e, ev.JobException)]
    assert len(events) == 1


# -- dead letters per stream ----------------------------------------------------------------


def test_dead_letters_are_counted_per_stream(fake_system: System) -> None:
    system = fake_system
    submit = system.keys.submit("me")
    ctl = system.keys.jm_ctl(0)
    for _ in range(2):
        system.redis.xadd(submit, {"d": "{not json"})
    system.redis.xadd(ctl, {"x": "no d"})
    runs_a_job(system)
    assert read_counts(system.redis, system.keys) == {submit: 2, ctl: 1}



def test_deliveries_of_retries_after_a_redis_stall_are_excused(system: System) -> None:
    """A worker that retried after Redis refused it (OOM lets reads through and refuses
    writes) re-read its entries each time: those deliveries do not count against them."""
    r = system.redis
    stream, group = "{fx}:probe", "g"
    r.xgroup_create(stream, group, id="0", mkstream=True)
    sent = r.xadd(stream, {"d": "x"})
    for _ in range(worker_base.MAX_DELIVERIES + 3):
        r.xreadgroup(group, "c", {stream: "0" if r.xpending(stream, group)["pending"]
                                  else ">"})
    entries = [(sent, {b"d": b"x"})]
    worker = IngestWorker(system.instance, name="ingest-0")
    assert worker.overdelivered(stream, group, "c", entries)  # a crash loop's count
    backoff = Backoff(first=0.0, most=0.0)

    def refused() -> None:
        raise redis.exceptions.OutOfMemoryError("command not allowed when used memory")

    for _ in range(3):  # the loop's retries after stall-like errors
        assert not worker._try(refused, backoff, ends=True)
    assert worker.overdelivered(stream, group, "c", entries) == {}
    assert not worker._try(refused, backoff, ends=True)
    r.xreadgroup(group, "c", {stream: "0"})
    assert worker.overdelivered(stream, group, "c", entries) == {}
    r.xreadgroup(group, "c", {stream: "0"})
    assert worker.overdelivered(stream, group, "c", entries)
