"""Ingest and job manager driven step by step in-process, with a fake scheduler and exec.

The fakes speak the real stream protocol, so this exercises the commit
scripts, consumer groups, fencing and replies end to end, without timing.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from fluxes.formats.jobid import encode
from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from fluxes.store.lease import Lease
from tests import wire
from workers.ingest import IngestWorker
from workers.jobmanager import JobManagerWorker

NS = "t"


class FakeScheduler:
    """Grants every alloc on rank 0 (or denies when told), answers frees."""

    def __init__(self, client: redis.Redis, keys: Keys, deny: set[int] | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.lease = Lease(client, keys.sched_lease(0), keys.sched_fence(0), "fake-sched")
        self.epoch = 0
        self.pos = "$"
        self.deny = deny or set()
        self.allocated: set[int] = set()

    def hello(self) -> None:
        last = self.redis.xrevrange(self.keys.sched_req(0), count=1)
        self.pos = last[0][0].decode() if last else "0-0"
        token = self.lease.try_acquire() if not self.epoch else self.lease.bump()
        assert token is not None
        self.epoch = int(token)
        self.send([{"t": "hello"}])

    def send(self, msgs: list[dict[str, Any]]) -> None:
        self.redis.xadd(self.keys.sched_resp(0), wire.entry(msgs, self.epoch))

    def step(self) -> None:
        self.lease.renew_if_due()  # a scheduler whose lease lapses is taken for gone
        entries = self.redis.xread({self.keys.sched_req(0): self.pos}, count=1000)
        out: list[dict[str, Any]] = []
        for _stream, items in entries or []:
            for sid, fields in items:
                self.pos = sid.decode()
                epoch, msgs = wire.epoch_of(fields), wire.messages(fields)
                for msg in msgs:
                    kind = msg["t"]
                    if kind == "reset":
                        self.hello()
                        return
                    if epoch != self.epoch:
                        continue
                    if kind == "hello-reply":
                        self.allocated = {a["id"] for a in msg["alloc"]}
                        out.append({"t": "ready", "mode": "unlimited"})
                    elif kind == "alloc":
                        jobid = msg["id"]
                        if jobid in self.deny:
                            out.append({"t": "alloc-response", "id": jobid, "type": 2,
                                        "note": "never"})
                            continue
                        self.redis.hset(self.keys.job(jobid), "R", "{}")
                        self.allocated.add(jobid)
                        out.append({"t": "alloc-response", "id": jobid, "type": 0,
                                    "ranks": "0", "nodelist": "node0"})
                    elif kind == "free":
                        self.allocated.discard(msg["id"])
                        out.append({"t": "free-response", "id": msg["id"]})
                    elif kind == "cancel":
                        out.append({"t": "alloc-response", "id": msg["id"], "type": 3})
        if out:
            self.send(out)


class FakeExec:
    """Runs every job on rank 0 instantly (or holds it until killed)."""

    def __init__(self, client: redis.Redis, keys: Keys, hold: set[int] | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.pos = "0-0"
        self.hold = hold or set()
        self.signals: list[tuple[int, int]] = []  # (job, signal) of signal requests

    def step(self) -> None:
        entries = self.redis.xread({self.keys.exec_rank(0): self.pos}, count=1000)
        for _stream, items in entries or []:
            for sid, fields in items:
                self.pos = sid.decode()
                msgs = wire.messages(fields)
                for msg in msgs:
                    jobid = msg["id"]
                    if msg["t"] == "signal":  # the tasks get it; nothing to report
                        self.signals.append((jobid, msg["signal"]))
                        continue
                    report: dict[str, Any]
                    if msg["t"] == "start" and jobid in self.hold:
                        report = {"started": True}
                    elif msg["t"] == "start":
                        report = {"started": True, "status": 0, "released": True}
                    else:
                        report = {"status": msg["signal"], "released": True}
                    self.redis.xadd(self.keys.exec_events(0), wire.entry(
                        [{"t": "exec", "id": jobid, "rank": 0, **report}]))


class System:
    def __init__(self, client: redis.Redis) -> None:
        client.hset(Keys(NS).instance, mapping={"partitions": 1, "owner": "me",
                                                "owner_uid": 1000})
        self.instance = Instance(InstanceURI("redis://unused", NS), client=client)
        self.redis = client
        self.keys = self.instance.keys
        self.ingest = IngestWorker(self.instance)
        self.ingest.setup()
        self.jm = JobManagerWorker(self.instance)
        self.jm.setup()
        self.sched = FakeScheduler(client, self.keys)
        self.exec = FakeExec(client, self.keys)
        self.client = Client(self.instance, user="me")
        self.store = EventStore(client, self.keys)

    def submit(self, n: int = 1, **kw: Any) -> list[int]:
        spec = Jobspec.from_command(["true"], **kw).to_dict()
        keys = self.client._send([{"t": "submit", "jobs": [{"jobspec": spec}] * n}])
        self.ingest.step()
        answer = self.client._wait(keys[0], 1.0)[0]
        return [r["id"] for r in answer["jobs"]]

    def run(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            self.jm.step()
            self.sched.step()
            self.jm.step()
            self.exec.step()

    def events(self, jobid: int) -> list[str]:
        return [e.event_name for e in self.store.eventlog(jobid)]


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    return System(real_redis)


def test_jobs_run_to_inactive(system: System) -> None:
    system.jm.step()  # becomes leader
    system.sched.hello()
    ids = system.submit(5)
    system.run()
    for jobid in ids:
        assert system.events(jobid) == ["submit", "validate", "depend", "priority", "alloc",
                                        "start", "finish", "release", "free", "clean"]
        assert system.redis.hget(system.keys.job(jobid), "result") == b"COMPLETED"
    assert system.jm.core is not None and system.jm.core.jobs == {}


def test_bad_jobspec_is_refused_and_nothing_stored(system: System) -> None:
    keys = system.client._send([{"t": "submit", "jobs": [
        {"jobspec": {"version": 1}}, {"jobspec": Jobspec.from_command(["true"]).to_dict()}]}])
    system.ingest.step()
    answer = system.client._wait(keys[0], 1.0)[0]
    assert "error" in answer["jobs"][0] and "id" in answer["jobs"][1]
    assert system.redis.xlen(system.keys.journal(0)) == 2  # only the good job


def test_cancel_forwarded_and_answered(system: System) -> None:
    system.jm.step()
    [jobid] = system.submit()
    system.jm.step()
    keys = system.client._send([{"t": "cancel", "ids": [jobid, 12345]}])
    system.ingest.step()
    system.jm.step()
    answer = system.client._wait(keys[0], 1.0)[0]
    assert answer["ok"] == [jobid] and len(answer["errors"]) == 1
    assert system.events(jobid)[-2:] == ["exception", "clean"]


def test_leader_restart_continues_and_stale_leader_is_fenced(system: System) -> None:
    system.jm.step()
    system.sched.hello()
    system.exec.hold = set()
    ids = system.submit(3)
    system.jm.step()
    system.sched.step()
    old = system.jm
    # a second job manager takes over once the lease is free
    system.redis.delete(system.keys.jm_lease(0))
    new = JobManagerWorker(system.instance)
    new.setup()
    new.step()
    assert new.token is not None and int(new.token) > int(old.token or 0)
    system.jm = new
    system.run()
    for jobid in ids:
        assert system.events(jobid)[-1] == "clean"
        names = system.events(jobid)
        assert names.count("alloc") == 1
    # the old leader's next write is refused and it steps down; the input it
    # read stays pending and the new leader picks it up
    [late] = system.submit()
    old._rescan_at = float("inf")
    old.step()
    assert old.token is None
    system.jm._rescan_at = 0.0
    system.run()
    assert system.events(late)[-1] == "clean"
    assert system.events(late).count("depend") == 1


def test_checkpoint_taken_with_unread_new_jobs_loses_nothing(system: System) -> None:
    system.jm.step()  # leader
    [first] = system.submit()
    system.jm.step()  # processes first
    [second] = system.submit()  # its jm:new is not read yet
    system.jm.checkpoint()
    system.jm.step()  # now second gets depend + priority, after the checkpoint
    assert system.events(second)[-1] == "priority"
    jobs = _restarted(system)
    assert second in jobs and first in jobs
    assert jobs[second].job.seq == len(system.events(second))


def _restarted(system: System) -> dict[int, Any]:
    """The jobs a new job manager holds once the old one's lease is gone."""
    system.redis.delete(system.keys.jm_lease(0))
    fresh = JobManagerWorker(system.instance)
    fresh.setup()
    fresh.step()
    assert fresh.core is not None
    return dict(fresh.core.jobs)


def test_checkpoint_bounds_unread_jobs_by_their_submits(system: System) -> None:
    system.jm.step()  # leader
    [job] = system.submit()
    # Redis' clock runs on inside the ingest's commit: the new-job entry can be
    # stamped milliseconds after the job's submit (seen as a rare failure above)
    key = system.keys.jm_new(0)
    [(sid, fields)] = system.redis.xrange(key)
    system.redis.xdel(key, sid)
    system.redis.xadd(key, fields, id=f"{int(sid.split(b'-')[0]) + 50}-0")
    system.jm.checkpoint()  # the job's new-job entry is unread
    for _ in range(3):  # takes the job after the checkpoint
        system.jm.step()
    assert system.events(job)[-1] == "priority"
    jobs = _restarted(system)
    assert job in jobs and jobs[job].job.seq == len(system.events(job))


def test_commit_with_writes_in_another_slot_keeps_its_journal_position(
        real_redis: redis.Redis) -> None:
    # two partitions: a reply list ({ns}) is not in the journal's slot ({ns:p0}), so the job
    # manager writes it after the commit; that must not stand in for the commit's result
    real_redis.hset(Keys(NS).instance, mapping={"partitions": 2, "owner": "me",
                                                 "owner_uid": 1000})
    instance = Instance(InstanceURI("redis://unused", NS), client=real_redis)
    keys = instance.keys
    ingest = IngestWorker(instance)
    ingest.setup()
    jm = JobManagerWorker(instance, partition=0)
    jm.setup()
    jm.step()  # leads partition 0
    client = Client(instance, user="me")
    spec = Jobspec.from_command(["true"]).to_dict()
    [sent] = client._send([{"t": "submit", "jobs": [{"jobspec": spec}] * 4}])
    ingest.step()
    ids = [r["id"] for r in client._wait(sent, 1.0)[0]["jobs"]]
    mine = [j for j in ids if keys.partition_of(j) == 0]
    assert mine and not keys.same_slot(keys.reply("me", "x"), keys.journal(0))
    jm.step()  # takes the new jobs
    [sent] = client._send([{"t": "cancel", "ids": mine}])
    ingest.step()
    jm.step()  # events and the reply (in another slot) in one step
    assert client._wait(sent, 1.0)[0]["ok"] == mine
    store = EventStore(real_redis, keys)
    for jobid in mine:
        assert [e.event_name for e in store.eventlog(jobid)][-2:] == ["exception", "clean"]
    last = real_redis.xrevrange(keys.journal(0), count=1)[0][0].decode()
    assert jm._last_journal_id == last


def ask(system: System, client: Client, request: dict[str, Any]) -> dict[str, Any]:
    """Send ``request`` as ``client``'s user, let ingest and job manager handle it."""
    [key] = client._send([request])
    system.ingest.step()
    system.jm.step()
    return client._wait(key, 1.0)[0]


def test_signals_and_updates_are_checked_per_user(system: System) -> None:
    system.redis.hset(system.keys.users, "bob", 2000)
    system.ingest.refresh(force=True)
    bob = Client(system.instance, user="bob")
    system.jm.step()
    system.sched.hello()
    spec = Jobspec.from_command(["true"], duration=60).to_dict()
    [key] = bob._send([{"t": "submit", "jobs": [{"jobspec": spec}, {"jobspec": spec,
                                                                     "urgency": 0}]}])
    system.ingest.step()
    running, held = (r["id"] for r in bob._wait(key, 1.0)[0]["jobs"])
    [mine] = system.submit()
    system.exec.hold |= {running, mine}
    system.run()
    assert system.events(running)[-1] == "start" and system.events(held)[-1] == "priority"

    # signals: bob's own running job only; killall of everyone's is the owner's
    assert ask(system, bob, {"t": "kill", "ids": [running, mine], "signal": 10}) == {
        "ok": [running], "errors": [f"{encode(mine, 'f58')}: permission denied"]}
    assert ask(system, bob, {"t": "killall", "all_users": True}) == {
        "errors": ["permission denied: only the instance owner may signal other users' jobs"]}
    assert ask(system, bob, {"t": "killall", "dry_run": True})["ok"] == [running]
    assert ask(system, system.client, {"t": "killall", "all_users": True, "signal": 12}
               )["ok"] == sorted([running, mine])
    system.exec.step()
    assert sorted(system.exec.signals) == sorted([(running, 10), (running, 12), (mine, 12)])
    assert system.events(running)[-1] == "start"  # still running

    # updates: a dry run is the ingest's answer, nothing recorded
    answer = ask(system, bob, {"t": "update", "id": held, "updates": {"duration": "+1m"},
                               "dry_run": True})
    assert answer == {"ok": [held], "updates": {"attributes.system.duration": 120.0}}
    assert "jobspec-update" not in system.events(held)
    assert ask(system, bob, {"t": "update", "id": running, "updates": {"duration": "+1m"}}
               )["errors"] == [f"{encode(running, 'f58')}: only the instance owner may "
                               "update a running job"]
    assert ask(system, bob, {"t": "update", "id": mine, "updates": {"name": "x"}}
               )["errors"] == [f"{encode(mine, 'f58')}: permission denied"]
    assert ask(system, bob, {"t": "update", "id": held, "updates": {"name": "b"}})["ok"] == \
        [held]
    # the owner's update of bob's job may pass limits: bob may not update it any more
    assert ask(system, system.client, {"t": "update", "id": held,
                                       "updates": {"duration": "1d"}})["ok"] == [held]
    assert ask(system, bob, {"t": "update", "id": held, "updates": {"name": "c"}}
               )["errors"] == [f"{encode(held, 'f58')}: job is immutable due to previous "
                               "instance owner update"]
    assert [e for e in system.events(held) if e in ("jobspec-update", "set-flags")] == \
        ["jobspec-update", "set-flags", "jobspec-update"]
    # the owner extends the running job: a resource-update
    assert ask(system, system.client, {"t": "update", "id": running,
                                       "updates": {"duration": "+1h"}})["ok"] == [running]
    assert system.events(running)[-1] == "resource-update"
