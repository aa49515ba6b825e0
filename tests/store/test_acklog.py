"""The ingest's acknowledgement log on fakeredis and a real Redis: every job id answered
is on disk before the answer, and the acknowledged jobs Redis lost are found by id."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
import redis

from fluxes.formats.jobspec import Jobspec
from fluxes.store import acklog
from fluxes.store.client import Client
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from fluxes.store.retention import purge
from tests.backends import OnFakeRedis, OnRealRedis
from tests.forge import forge_event
from workers.ingest import IngestWorker

KEYS = Keys("t")
SPEC = Jobspec.from_command(["true"]).to_dict()


def make_instance(client: redis.Redis) -> Instance:
    client.hset(KEYS.instance, mapping={"partitions": 1, "owner": "me", "owner_uid": 1000,
                                        "created": "1234.5"})
    return Instance(InstanceURI("redis://unused", KEYS.ns), client=client)


def submit(instance: Instance, worker: IngestWorker, n: int) -> list[int]:
    client = Client(instance, user="me")
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": SPEC}] * n}])
    worker.step()
    [got] = client._wait(key, 1.0)
    return [j["id"] for j in got["jobs"]]


def acks_file(tmp_path: Path, name: str) -> Path:
    return tmp_path / "acks" / f"{KEYS.ns}-{name}.log"


def recorded(path: Path) -> list[int]:
    return [row[0] for line in path.read_bytes().splitlines()
            for row in orjson.loads(line)["a"]]


def lose_after(client: redis.Redis, jobids: list[int]) -> None:
    """What an AOF cut back does to these jobs: their keys and journal entries are gone."""
    doomed = {str(j).encode() for j in jobids}
    for sid, fields in client.xrange(KEYS.journal(0)):
        if fields.get(b"j") in doomed:
            client.xdel(KEYS.journal(0), sid)
    for jobid in jobids:
        client.delete(KEYS.job(jobid), KEYS.eventlog(jobid))


class AckLogContract:
    @pytest.fixture
    def state(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
        monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path))
        return tmp_path

    def test_answers_are_recorded_and_lost_ones_reported(self, client: redis.Redis,
                                                         state: Path) -> None:
        instance = make_instance(client)
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        first = submit(instance, worker, 3)
        second = submit(instance, worker, 2)
        assert recorded(acks_file(state, "ingest-a")) == first + second
        # the newest block is lost, as a power cut inside Redis' fsync window loses it
        lose_after(client, second)
        worker.setup()  # what a reconnection does
        third = submit(instance, worker, 1)
        lost = acklog.lost_jobs(client, KEYS)
        assert sorted(lost) == sorted(second)
        assert lost[second[0]]["user"] == "me" and lost[second[0]]["by"] == "ingest-a"
        # checked: the log holds only what was answered since
        assert recorded(acks_file(state, "ingest-a")) == third
        assert acklog.clear_lost_jobs(client, KEYS, [second[0]]) == 1
        assert acklog.clear_lost_jobs(client, KEYS) == 1
        assert acklog.lost_jobs(client, KEYS) == {}

    def test_purged_trimmed_and_surviving_jobs_are_not_lost(self, client: redis.Redis,
                                                            state: Path) -> None:
        instance = make_instance(client)
        log = acklog.AckLog(state, KEYS, "w")
        worker = IngestWorker(instance, name="w")
        worker.setup()
        worker._acks = log
        jobs = submit(instance, worker, 4)
        # a purge on purpose (its entries stay in the journal until trimmed)
        forge_event(client, KEYS, jobs[0], {"n": "clean", "t": "1"})
        assert purge(client, KEYS, [jobs[0]]).purged == [jobs[0]]
        assert acklog.find_lost(client, KEYS, [
            acklog.Acked(j, 0, e[0].decode(), "me", "r")
            for j in jobs for e in [client.xrevrange(KEYS.journal(0), count=1)[0]]]) == []
        # gone from the journal but trimmed on purpose: not lost
        rows = [acklog.Acked(jobs[1], 0, "99999999999999-0", "me", "r")]
        client.delete(KEYS.job(jobs[1]), KEYS.eventlog(jobs[1]))
        assert acklog.find_lost(client, KEYS, rows) == rows
        client.hset(KEYS.retention(0), "trimmed", "99999999999999-5")
        assert acklog.find_lost(client, KEYS, rows) == []
        # a job whose journal id is gone but whose keys are there survived
        assert acklog.find_lost(client, KEYS, [
            acklog.Acked(jobs[2], 0, "99999999999999-9", "me", "r")]) == []

    def test_records_of_another_instance_say_nothing(self, client: redis.Redis,
                                                     state: Path) -> None:
        make_instance(client)
        log = acklog.AckLog(state, KEYS, "w")
        log.record("another", [acklog.Acked(5, 0, "1-0", "me", "r")])
        log.record("1234.5", [acklog.Acked(6, 0, "2-0", "me", "r")])
        assert [a.jobid for a in log.check(client, logging.getLogger("t"))] == [6]
        assert not log.lines()

    def test_the_log_rotates_and_a_torn_line_is_skipped(self, client: redis.Redis,
                                                        state: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
        make_instance(client)
        monkeypatch.setattr(acklog, "ROTATE_BYTES", 200)
        log = acklog.AckLog(state, KEYS, "w")
        for n in range(10):
            log.record("1234.5", [acklog.Acked(n, 0, f"{n + 1}-0", "me", "r")])
        assert log.previous.exists()
        with log.path.open("ab") as out:
            out.write(b'{"i": "1234.5", "a": [[99, 0')  # a crash in the middle of a write
        seen = [a.jobid for line in log.lines() for a in acklog._parse(line)]
        assert 9 in seen and 99 not in seen and len(seen) < 10
        assert len(log.check(client, logging.getLogger("t"))) == len(seen)
        assert not log.previous.exists() and log.lines() == []


class TestFakeRedis(AckLogContract, OnFakeRedis):
    pass


class TestRealRedis(AckLogContract, OnRealRedis):
    pass


