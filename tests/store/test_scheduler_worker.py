"""The scheduler worker in-process against a real redis-server, with the real job manager.

Covers RFC 27 over streams: hello/ready, alloc SUCCESS with R stored in the
same step, DENY notes, cancel, free, and recovery of allocations after the
scheduler is replaced (no core handed to two jobs).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.sched import session as session_core
from fluxes.domain.sched.pool import ResourcePool
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.store import jobhash
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests import wire
from tests.store.test_ingest_jobmanager import FakeExec
from workers.ingest import IngestWorker
from workers.jobmanager import JobManagerWorker
from workers.scheduler import SchedulerWorker

NS = "t"


class System:
    def __init__(self, client: redis.Redis, nodes: int = 2, cores: int = 2,
                 config: str | None = None) -> None:
        resources = {"config": [{"hosts": f"node[0-{nodes - 1}]", "cores": f"0-{cores - 1}"}]}
        client.hset(Keys(NS).instance, mapping={
            "partitions": 1, "owner": "me", "owner_uid": 1000,
            "resources": orjson.dumps(resources)})
        if config is not None:
            client.hset(Keys(NS).instance, "config", config)
        self.instance = Instance(InstanceURI("redis://unused", NS), client=client)
        self.redis = client
        self.keys = self.instance.keys
        self.ingest = IngestWorker(self.instance)
        self.ingest.setup()
        self.jm = JobManagerWorker(self.instance)
        self.jm.setup()
        self.sched = SchedulerWorker(self.instance)
        self.sched.setup()
        self.execs = {r: FakeExec(client, self.keys) for r in range(nodes)}
        for rank, fake in self.execs.items():
            fake.rank = rank  # type: ignore[attr-defined]
        self.store = EventStore(client, self.keys)

    def submit(self, *specs: dict[str, Any]) -> list[int]:
        from fluxes.store.client import Client

        client = Client(self.instance, user="me")
        keys = client._send([{"t": "submit", "jobs": [{"jobspec": s} for s in specs]}])
        self.ingest.step()
        return [r.get("id", r.get("error")) for r in client._wait(keys[0], 1.0)[0]["jobs"]]

    def run(self, rounds: int = 8, exec_too: bool = True) -> None:
        for _ in range(rounds):
            self.jm.step()
            self.sched.step()
            self.jm.step()
            if exec_too:
                for rank in self.execs:
                    _exec_step(self.redis, self.keys, rank, self.execs[rank])

    def events(self, jobid: int) -> list[str]:
        return [e.event_name for e in self.store.eventlog(jobid)]

    def hold(self, *jobids: int) -> None:
        """Every fake exec starts these jobs and keeps them running (no end reported)."""
        for fake in self.execs.values():
            fake.hold.update(jobids)


def _exec_step(client: redis.Redis, keys: Keys, rank: int, fake: FakeExec) -> None:

    entries = client.xread({keys.exec_rank(rank): fake.pos}, count=1000)
    for _s, items in entries or []:
        for sid, fields in items:
            fake.pos = sid.decode()
            for msg in wire.messages(fields):
                jobid = msg["id"]
                if msg["t"] == "start" and jobid in fake.hold:
                    report: dict[str, Any] = {"started": True}
                elif msg["t"] == "start":
                    report = {"started": True, "status": 0, "released": True}
                else:
                    report = {"status": msg["signal"], "released": True}
                client.xadd(keys.exec_events(0), wire.entry(
                    [{"t": "exec", "id": jobid, "rank": rank, **report}]))


def spec(**kw: Any) -> dict[str, Any]:
    return Jobspec.from_command(["true"], **kw).to_dict()


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    return System(real_redis)


def test_allocations_run_and_R_is_stored(system: System) -> None:
    ids = system.submit(spec(ntasks=2), spec(nnodes=2, ntasks=2))
    system.run()
    for jobid in ids:
        assert system.events(jobid)[-1] == "clean"
        rset = ResourceSet(system.redis.hget(system.keys.job(jobid), "R"))
        assert rset.ncores == 2
    alloc = next(e for e in system.store.eventlog(ids[1]) if e.event_name == "alloc")
    assert alloc.context()["annotations"]["sched"]["resource_summary"].startswith("rank")


def test_infeasible_job_is_denied_with_a_note(system: System) -> None:
    # the ingest refuses such a job; this one was admitted before the inventory shrank
    system.ingest.feasibility = None
    [jobid] = system.submit(spec(nnodes=3, ntasks=3))
    system.run()
    events = system.store.eventlog(jobid)
    exc = next(e for e in events if e.event_name == "exception")
    assert exc.context()["type"] == "alloc" and "3 nodes" in _note(system, jobid)
    assert events[-1].event_name == "clean"


def test_jobs_wait_for_resources_then_run(system: System) -> None:
    first = system.submit(spec(nnodes=2, ntasks=2, exclusive=True))[0]
    system.hold(first)
    second = system.submit(spec(ntasks=1))[0]
    system.run(4)
    assert system.events(first)[-1] == "start"
    assert system.events(second)[-1] == "priority"  # pending: no room
    record = system.jm.core.jobs[second].rec if system.jm.core else None
    assert record is not None and record.job.annotations is not None
    from fluxes.store.client import Client

    Client(system.instance, user="me").cancel  # noqa: B018 - the API exists
    # end the first job: the second runs
    for rank in system.execs:
        system.redis.xadd(system.keys.exec_events(0), {"d": orjson.dumps({"e": 0, "m": [
            {"t": "exec", "id": first, "rank": rank, "status": 0, "released": True}]})})
    system.run(6)
    assert system.events(first)[-1] == "clean"
    assert system.events(second)[-1] == "clean"


def test_scheduler_replaced_recovers_allocations(system: System) -> None:
    a, b = system.submit(spec(nnodes=1, ntasks=2, exclusive=True),
                         spec(nnodes=1, ntasks=2, exclusive=True))
    system.hold(a, b)
    system.run(4)
    assert system.events(a)[-1] == "start" and system.events(b)[-1] == "start"
    # the scheduler dies; a new one takes over once the lease is free
    system.redis.delete(system.keys.sched_lease(0))
    system.sched = SchedulerWorker(system.instance)
    c = system.submit(spec(ntasks=1))[0]
    system.run(4)
    pool = system.sched.pool
    assert pool is not None and sorted(pool.jobids()) == sorted([a, b])
    assert system.events(c)[-1] == "priority"  # still no free core
    held = [ResourceSet(system.redis.hget(system.keys.job(j), "R")) for j in (a, b)]
    assert held[0].ranks != held[1].ranks


def test_allocation_that_cannot_be_recovered_fails_the_job_and_keeps_its_ranks(
        system: System) -> None:
    # As flux's schedulers do: a job whose allocation hello cannot put back
    # gets a fatal exception, and its node stays out of use until it is freed
    # (its tasks may still run there).
    [a] = system.submit(spec(nnodes=1, ntasks=2, exclusive=True))
    system.hold(a)
    system.run(4)
    assert system.events(a)[-1] == "start"
    rank = ResourceSet(system.redis.hget(system.keys.job(a), "R")).ranks.first()
    assert rank is not None
    system.redis.hset(system.keys.job(a), "R", b"{not R")  # e.g. a corrupted hash
    system.redis.delete(system.keys.sched_lease(0))
    system.sched = SchedulerWorker(system.instance)
    system.run(3, exec_too=False)
    exc = [e for e in system.store.eventlog(a) if e.event_name == "exception"]
    assert exc and exc[0].context()["type"] == "scheduler"
    assert exc[0].context()["severity"] == 0
    assert system.sched.drained.get(rank, ("", False))[0] == f"allocation of job {a} not recovered"
    # meanwhile a job wanting that node's cores waits: only the other node is usable
    [b] = system.submit(spec(nnodes=2, ntasks=2))
    system.run(2, exec_too=False)
    assert system.events(b)[-1] == "priority"
    # the job's tasks end (the kill of its cleanup): free returns the node
    system.redis.xadd(system.keys.exec_events(0), {"d": orjson.dumps({"e": 0, "m": [
        {"t": "exec", "id": a, "rank": rank, "status": 9, "released": True}]})})
    for fake in system.execs.values():
        fake.hold = set()
    system.run(6)
    assert system.events(a)[-1] == "clean"
    assert rank not in system.sched.drained
    assert system.events(b)[-1] == "clean"


def _alloc_messages(system: System) -> list[dict[str, Any]]:

    out = []
    for _sid, fields in system.redis.xrange(system.keys.sched_req(0)):
        out += [m for m in wire.messages(fields) if m["t"] == "alloc"]
    return out


def _forget_jobspecs(system: System, jobids: list[int]) -> None:
    """Delete what the job hashes hold of the jobspecs (the request stays)."""
    for jobid in jobids:
        system.redis.hdel(system.keys.job(jobid), *jobhash.JOBSPEC_FIELDS)


def test_alloc_carries_the_request_and_the_jobspec_is_never_read(system: System) -> None:
    ids = system.submit(spec(ntasks=2), spec(nnodes=2, ntasks=2))
    _forget_jobspecs(system, ids)
    system.run()
    for jobid in ids:
        assert system.events(jobid)[-2:] == ["free", "clean"]  # ran, not denied
    stored = [system.redis.hget(system.keys.job(j), jobhash.REQUEST) for j in ids]
    assert [m.get("request") for m in _alloc_messages(system)] == \
        [s.decode() for s in stored if s] and len(stored) == 2


def test_jobs_without_a_request_fall_back_to_their_jobspec(
        system: System, monkeypatch: pytest.MonkeyPatch) -> None:
    # jobs stored before requests were (or a request this scheduler cannot read)
    import fluxes.domain.jm.submission

    monkeypatch.setattr(fluxes.domain.jm.submission, "_request_of", lambda spec: None)
    system.ingest.feasibility = None
    good, too_big = system.submit(spec(ntasks=2), spec(nnodes=3, ntasks=3))
    assert system.redis.hget(system.keys.job(good), jobhash.REQUEST) is None
    [unreadable] = system.submit(spec(ntasks=1))
    system.redis.hset(system.keys.job(unreadable), jobhash.REQUEST, '{"z":1}')
    system.run()
    assert system.events(good)[-1] == "clean"
    assert system.events(unreadable)[-1] == "clean"
    assert "3 nodes" in _note(system, too_big)
    # (the job manager took the lease after the submissions: it read the stored requests)
    assert sorted(m.get("request") or "" for m in _alloc_messages(system)) == ["", "", '{"z":1}']


def test_restarted_job_manager_sends_the_stored_request(system: System) -> None:
    system.jm.step()  # leader, but no scheduler yet: the job waits in SCHED
    [jobid] = system.submit(spec(ntasks=2))
    for _ in range(3):
        system.jm.step()
    assert system.events(jobid)[-1] == "priority" and not _alloc_messages(system)
    system.redis.delete(system.keys.jm_lease(0))
    system.jm = JobManagerWorker(system.instance)
    system.jm.setup()
    _forget_jobspecs(system, [jobid])
    system.run()
    assert system.events(jobid)[-2:] == ["free", "clean"]
    stored = system.redis.hget(system.keys.job(jobid), jobhash.REQUEST)
    assert stored and [m["request"] for m in _alloc_messages(system)] == [stored.decode()]


def test_recovery_reads_the_stored_request(system: System) -> None:
    [a] = system.submit(spec(nnodes=1, ntasks=2, exclusive=True))
    system.hold(a)
    system.run(4)
    _forget_jobspecs(system, [a])
    system.redis.delete(system.keys.sched_lease(0))
    system.sched = SchedulerWorker(system.instance)
    system.run(3, exec_too=False)
    pool = system.sched.pool
    assert isinstance(pool, ResourcePool) and pool.jobids() == [a]
    assert not [e for e in system.store.eventlog(a) if e.event_name == "exception"]
    # adopted as the request says (R alone cannot tell an exclusive allocation)
    [held] = pool.save()["allocations"]
    assert held["jobid"] == a and held["exclusive"] is True



def memory_spec(memory: int, rack: bool) -> dict[str, Any]:
    """``[rack[1] ->] node[1] -> slot[1] -> (core[1], memory[memory])`` (GB)."""
    node = {"type": "node", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "task",
         "with": [{"type": "core", "count": 1}, {"type": "memory", "count": memory}]}]}
    top = {"type": "rack", "count": 1, "with": [node]} if rack else node
    return Jobspec.from_dict({
        "version": 1, "resources": [top],
        "tasks": [{"command": ["true"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 0}}}).to_dict()


def test_on_a_graph_recovery_takes_back_what_the_subgraph_lists(real_redis: redis.Redis
                                                                 ) -> None:
    from fluxes.domain.graph.pool import GraphPool
    from fluxes.domain.graph.table import recorded_table

    system = System(real_redis, nodes=4)
    table = recorded_table({"graph-recipe": "cluster[1] -> rack[2] -> node[2] -> core[2], "
                                            "memory[2] x 1 GB"})
    real_redis.hset(system.keys.instance, "resources", orjson.dumps(table))
    real_redis.hdel(system.keys.instance, "resources_digest")
    system.ingest.refresh(force=True)
    # a rack-level job (only a graph reads it) holding all the memory of its node
    [a] = system.submit(memory_spec(2, rack=True))
    system.hold(a)
    system.run(4)
    assert isinstance(system.sched.pool, GraphPool)
    assert system.events(a)[-1] == "start"
    stored = orjson.loads(system.redis.hget(system.keys.job(a), "R"))
    assert "scheduling" in stored
    system.redis.delete(system.keys.sched_lease(0))
    system.sched = SchedulerWorker(system.instance)
    [b] = system.submit(memory_spec(1, rack=False))
    system.hold(b)
    system.run(4)
    pool = system.sched.pool
    assert isinstance(pool, GraphPool) and sorted(pool.jobids()) == sorted([a, b])
    # R_lite says one core of a's node; its subgraph also says all its memory: b, which
    # needs memory, went to another node though a core is free on a's
    held_b = ResourceSet(system.redis.hget(system.keys.job(b), "R")).ranks
    assert held_b.first() != ResourceSet(stored).ranks.first()


def _t_estimate(system: System, jobid: int) -> float | None:
    """The ``t_estimate`` the scheduler last published for a pending job."""
    assert system.jm.core is not None
    ann = system.jm.core.jobs[jobid].rec.job.annotations or {}
    return ann.get("sched", {}).get("t_estimate")


def test_extended_running_job_moves_the_plan_and_a_new_scheduler_keeps_it(
        real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # fluxes update of a running job's duration: the scheduler's plan must stop
    # counting on its nodes at the old end, now and after a scheduler restart
    monkeypatch.setattr(session_core, "FULL_PASS_S", 0.0)  # every pass annotates
    system = System(real_redis, config='[policy.scheduler]\npolicy = "easy"\n')
    [a] = system.submit(spec(nnodes=2, ntasks=2, exclusive=True, duration=100.0))
    system.hold(a)
    system.run(4)
    assert system.events(a)[-1] == "start"
    start = ResourceSet(system.redis.hget(system.keys.job(a), "R")).starttime
    assert start is not None
    # the head job blocks: its reservation (and t_estimate) is at a's end
    [b] = system.submit(spec(nnodes=2, ntasks=2, exclusive=True, duration=10.0))
    system.run(3, exec_too=False)
    assert _t_estimate(system, b) == pytest.approx(start + 100.0, abs=1.0)

    from fluxes.store.client import Client

    client = Client(system.instance, user="me")
    [reply] = client._send([{"t": "update", "id": a, "updates": {"duration": 1000.0}}])
    system.ingest.step()
    system.run(3, exec_too=False)
    answer = client._wait(reply, 1.0)[0]
    assert answer.get("ok") == [a], answer
    assert system.events(a)[-1] == "resource-update"
    pool = system.sched.pool
    assert isinstance(pool, ResourcePool)
    assert pool.allocation_of(a).expiration == pytest.approx(start + 1000.0, abs=1.0)
    # no longer planned at the old end
    assert _t_estimate(system, b) == pytest.approx(start + 1000.0, abs=1.0)
    # the stored R is the scheduler's and keeps the first end
    stored = ResourceSet(system.redis.hget(system.keys.job(a), "R"))
    assert stored.expiration == pytest.approx(start + 100.0, abs=1.0)

    # the scheduler dies; the new one recovers a's allocation with the new end
    system.redis.delete(system.keys.sched_lease(0))
    system.sched = SchedulerWorker(system.instance)
    system.run(4, exec_too=False)
    pool = system.sched.pool
    assert isinstance(pool, ResourcePool) and pool.jobids() == [a]
    assert pool.allocation_of(a).expiration == pytest.approx(start + 1000.0, abs=1.0)
    assert pool.reservations()[b][0] == pytest.approx(start + 1000.0, abs=1.0)
    assert system.events(b)[-1] == "priority"


def _note(system: System, jobid: int) -> str:
    """The note of the job's exception: private to its owner (docs/security.md), so read
    back as the owner reads it."""
    from fluxes.store.private import revealed_events

    shown = revealed_events(system.redis, system.keys, jobid, system.store.eventlog(jobid))
    return next(str(c["note"]) for _t, name, c in shown if name == "exception")


@pytest.mark.parametrize("config", [None, "[sched]\nstage-depth = 0\n"])
def test_a_job_ending_soon_has_the_next_staged_behind_it(real_redis: redis.Redis,
                                                          config: str | None) -> None:
    system = System(real_redis, nodes=1, cores=1, config=config)
    sim = {"system": {"exec": {"test": {"run_duration": "1ms"}}}}
    first = system.submit(spec(attributes=sim))[0]
    system.hold(first)  # the fake exec keeps it running
    second = system.submit(spec(attributes=sim))[0]
    system.run(4)
    assert system.events(first)[-1] == "start"
    core = system.sched.core
    assert core is not None
    if config is None:  # the defaults: depth 3, a 20 ms horizon
        assert (core.staging.depth, core.staging.horizon) == (3, 0.02)
        assert "alloc" in system.events(second) and set(core.staging.early) == {first}
        alloc = next(e for e in system.store.eventlog(second) if e.event_name == "alloc")
        staged = alloc.context()["annotations"]["sched"]["staged"]
        assert staged["after"] == [first]
    else:
        assert core.staging.depth == 0 and "alloc" not in system.events(second)
