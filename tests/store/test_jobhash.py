"""The job hash repository and its content-addressed blobs, on fakeredis and a real Redis.

Jobspecs and environments are stored once per distinct content and owner,
counted by the commit that creates the jobs; a release (what a purge calls)
counts them down and deletes a blob no job names; readers get the jobspec
back whatever way it was stored.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.jm.content import job_content, splice
from fluxes.formats.jobspec import Jobspec
from fluxes.store import jobhash
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore, KeyTypeError
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.jobhash import JobHashes, release_job_blobs
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.ingest import IngestWorker

NS = "t"
ME, BOB = 1000, 2000
ENV = {"HOME": "/home/me", "PATH": "/usr/bin:/bin", "SECRET_TOKEN": "x" * 300, "LANG": "é"}
CONFIG = """
[policy.jobspec.defaults.system]
duration = "1h"
"""


def spec(env: dict[str, Any] | None = ENV, **kw: Any) -> dict[str, Any]:
    return Jobspec.from_command(["true"], environment=env, cwd="/tmp", **kw).to_dict()


def blobs(client: redis.Redis) -> dict[str, dict[bytes, bytes]]:
    """Every blob key and its hash."""
    return {k.decode(): client.hgetall(k) for k in client.scan_iter(f"{{{NS}}}:blob:*")}


class JobHashContract:
    """Subclasses provide ``client``."""

    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        keys = Keys(NS)
        client.hset(keys.instance, mapping={"partitions": 1, "owner": "me",
                                            "owner_uid": ME, "config": CONFIG})
        client.hset(keys.users, "bob", BOB)
        return Instance(InstanceURI("redis://unused", NS), client=client)

    @pytest.fixture
    def ingest(self, instance: Instance) -> IngestWorker:
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        return worker

    def submit(self, instance: Instance, ingest: IngestWorker, specs: list[dict[str, Any]],
               user: str = "me") -> list[int]:
        client = Client(instance, user=user)
        [key] = client._send([{"t": "submit", "jobs": [{"jobspec": s} for s in specs]}])
        ingest.step()
        [answer] = client._wait(key, 1.0)
        return [job["id"] for job in answer["jobs"]]

    def test_identical_jobspecs_are_stored_once(self, instance: Instance,
                                                ingest: IngestWorker) -> None:
        ids = self.submit(instance, ingest, [spec()] * 40)
        ids += self.submit(instance, ingest, [spec()] * 10)
        stored = blobs(instance.redis)
        # the jobspec as submitted, with the defaults applied, and the environment
        assert len(stored) == 3
        assert {int(b[b"refs"]) for b in stored.values()} == {50}
        assert all(key.startswith(f"{{{NS}}}:blob:{ME}:") for key in stored)
        [env] = [b[b"data"] for b in stored.values() if b[b"data"].startswith(b'{"HOME"')]
        assert orjson.loads(env) == ENV
        # each job hash names the blobs, and reads give the jobspecs back
        hashes = JobHashes(instance.redis, instance.keys)
        first = hashes.get(ids[0])
        assert first is not None and first.jobspec is not None
        assert orjson.loads(first.jobspec) == spec()
        assert first.jobspec_full is not None
        assert orjson.loads(first.jobspec_full)["attributes"]["system"]["duration"] == 3600
        assert hashes.effective_jobspecs(ids[:2]) == [first.jobspec_full] * 2
        assert first.owner == ME and first.request is not None
        raw = instance.redis.hgetall(instance.keys.job(ids[-1]))
        # with the job's short eventlog index (fluxes.store.jobfacts.INDEX_FIELD)
        # (the urgency left out at its default: ~27 bytes a pending job)
        assert set(raw) == {b"owner", b"spec", b"full", b"env", b"request", b"ev"}
        assert first.urgency == 16
        # the journal's submit summary is packed by position (record.packed_extra)
        extras = [orjson.loads(f[b"x"]) for _i, f in instance.redis.xrange(
            instance.keys.journal(instance.keys.partition_of(ids[-1]))) if f[b"n"] == b"submit"]
        assert extras and all(isinstance(x, list) and x[1] == 1 for x in extras)
        assert max(len(v) for v in raw.values()) < 64  # no jobspec in the hash: a listpack

    def test_jobspecs_differing_outside_the_environment_share_it(
            self, instance: Instance, ingest: IngestWorker) -> None:
        self.submit(instance, ingest, [spec(name=f"job{i}") for i in range(5)])
        refs = sorted(int(b[b"refs"]) for b in blobs(instance.redis).values())
        assert refs == [1] * 10 + [5]  # 5 x (submitted, full), one environment

    def test_distinct_owners_never_share_a_blob(self, instance: Instance,
                                                ingest: IngestWorker) -> None:
        mine = self.submit(instance, ingest, [spec()] * 3)
        bobs = self.submit(instance, ingest, [spec()] * 2, user="bob")
        stored = blobs(instance.redis)
        by_owner = {uid: {k: int(b[b"refs"]) for k, b in stored.items()
                          if k.startswith(f"{{{NS}}}:blob:{uid}:")} for uid in (ME, BOB)}
        assert len(by_owner[ME]) == len(by_owner[BOB]) == 3 and len(stored) == 6
        assert set(by_owner[ME].values()) == {3} and set(by_owner[BOB].values()) == {2}
        hashes = JobHashes(instance.redis, instance.keys)
        [a, b] = hashes.get_many([mine[0], bobs[0]])
        assert a is not None and b is not None and a.jobspec == b.jobspec
        assert (a.owner, b.owner) == (ME, BOB)

    def test_release_counts_down_exactly_and_twice_is_once(
            self, instance: Instance, ingest: IngestWorker) -> None:
        store = EventStore(instance.redis, instance.keys)
        ids = self.submit(instance, ingest, [spec()] * 4)
        [other] = self.submit(instance, ingest, [spec(env={"ONLY": "one"})])
        assert release_job_blobs(store, ids[:3]) == 9
        assert release_job_blobs(store, ids[:3]) == 0  # a purge that runs again
        refs = {k: int(b[b"refs"]) for k, b in blobs(instance.redis).items()}
        # the jobspec without its environment (submitted, full) is the same for all
        # five: 5 -> 2 each; ENV 4 -> 1, the other environment 1
        assert sorted(refs.values()) == [1, 1, 2, 2]
        assert release_job_blobs(store, [ids[3], other], per_batch=1) == 6
        assert blobs(instance.redis) == {}
        for jobid in ids:
            assert not instance.redis.hexists(instance.keys.job(jobid), jobhash.SPEC)

    def test_exec_reads_the_jobspec_spliced_from_the_blobs(self, instance: Instance) -> None:
        store = EventStore(instance.redis, instance.keys)
        keys = instance.keys
        specs = {1: spec(), 2: spec(env=None), 3: spec(env={"A": "\\\"}"}),
                 4: {"attributes": {"system": {"environment": {"X": "1"}}}, "version": 1}}
        batch = store.batch(0)
        for jobid, doc in specs.items():
            content = job_content(orjson.dumps(doc), orjson.dumps({**doc, "v": jobid}))
            jobhash.create(batch, keys, jobid, owner=ME, urgency=16, content=content)
        jobhash.set_result(batch, keys, 4, "COMPLETED", 2.0)
        store.commit(batch)
        hashes = JobHashes(instance.redis, keys)
        got = hashes.for_start([1, 2, 3, 4, 5, 1])
        assert sorted(got) == [1, 2, 3, 4, 5]
        for jobid, doc in specs.items():
            jobspec, r, owner, _result = got[jobid]
            assert jobspec is not None and orjson.loads(jobspec) == {**doc, "v": jobid}
            assert (r, owner) == (None, str(ME).encode())
        assert got[4][3] == b"COMPLETED" and got[5] == (None, None, None, None)
        # nothing of the jobspec is copied into the (public) job hash
        for jobid in specs:
            assert not instance.redis.hexists(keys.job(jobid), jobhash.JOBSPEC_FULL)
        assert hashes.gone([1, 4, 5]) == [False, True, True]  # running, inactive, purged
        full = orjson.loads(hashes.for_start([3])[3][0] or b"")
        assert full["attributes"]["system"]["environment"] == {"A": "\\\"}"}

    def test_a_start_entry_carries_the_facts_exec_would_read(self, instance: Instance
                                                              ) -> None:
        """commit.lua's Y op copies the start fields of the job hashes into the entry;
        read back they give what reading the hashes gives, without reading them."""
        store = EventStore(instance.redis, instance.keys)
        keys = instance.keys
        batch = store.batch(0)
        for jobid in (1, 2):
            doc = spec(env={"N": str(jobid)})
            jobhash.create(batch, keys, jobid, owner=ME, urgency=16,
                           content=job_content(orjson.dumps(doc), orjson.dumps(doc)))
        batch.hset(keys.job(2), {jobhash.R: b'{"version": 1}'})
        batch.hset(keys.job(7), {jobhash.R: b"x" * 5000})  # too large to carry
        instance.redis.set(keys.job(8), "not a hash")  # gives no facts, fails nothing
        stream = keys.exec_rank(0)
        jobs = [(keys.job(j), b"f:%d" % j) for j in (1, 2, 7, 8, 9)]
        batch.xadd_with_facts(stream, {b"d": b"{}"}, jobhash.START_FIELDS, jobs)
        store.commit(batch)
        [(_id, fields)] = instance.redis.xrange(stream)
        assert sorted(fields) == [b"d", b"f:1", b"f:2", b"f:9"]
        carried = {j: jobhash.unpack_facts(fields[b"f:%d" % j]) for j in (1, 2, 9)}
        assert carried[9] == [None] * len(jobhash.START_FIELDS)
        hashes = JobHashes(instance.redis, keys)
        read = hashes.for_start([1, 2, 9])
        assert read[2][1] == b'{"version": 1}'
        instance.redis.delete(keys.job(1), keys.job(2))  # not read again
        packed = {j: fields[b"f:%d" % j] for j in (1, 2, 9)}
        assert hashes.for_start([1, 2, 9], {**packed, 3: b"bad"}) == read
        assert hashes.for_start([1], {1: b"bad"}) == {1: (None, None, None, None)}

    def test_packed_facts_that_do_not_parse_are_none(self) -> None:
        n = len(jobhash.START_FIELDS)
        good = b",".join([b"3:a,b", *[b"-"] * (n - 1)])
        assert jobhash.unpack_facts(good) == [b"a,b", *[None] * (n - 1)]
        for bad in (good + b",", good[:-1], b"9" + good, b"x" * 10, "text", None,
                    b"99999999:" + good, b",".join([b"-"] * (n + 1))):
            assert jobhash.unpack_facts(bad) is None, bad

    def test_a_blob_missing_gives_no_jobspec(self, instance: Instance) -> None:
        store = EventStore(instance.redis, instance.keys)
        keys = instance.keys
        content = job_content(orjson.dumps(spec()))
        batch = store.batch(0)
        jobhash.create(batch, keys, 1, owner=ME, urgency=16, content=content)
        store.commit(batch)
        assert content.env is not None
        instance.redis.delete(keys.blob(0, ME, content.env.digest))
        hashes = JobHashes(instance.redis, keys)
        assert hashes.effective_jobspecs([1]) == [None]
        assert hashes.for_start([1])[1][0] is None

    def test_public_reads_name_no_blob(self, instance: Instance) -> None:
        store = EventStore(instance.redis, instance.keys)
        keys = instance.keys
        batch = store.batch(0)
        jobhash.create(batch, keys, 1, owner=ME, urgency=16, queue="batch",
                       content=job_content(orjson.dumps(spec())))
        store.commit(batch)
        found = JobHashes(instance.redis, keys).public(1)
        assert found is not None and (found.owner, found.urgency, found.queue) == \
            (ME, 16, "batch")
        # another urgency is stored; a hash stored before with the default reads the same
        batch = store.batch(0)
        jobhash.create(batch, keys, 2, owner=ME, urgency=3,
                       content=job_content(orjson.dumps(spec())))
        store.commit(batch)
        instance.redis.hset(keys.job(1), "urgency", "16")
        assert [h.urgency if h else None for h in JobHashes(instance.redis, keys).get_many(
            [1, 2])] == [16, 3]
        assert found.jobspec is None and found.jobspec_full is None
        assert JobHashes(instance.redis, keys).public(3) is None

    def test_commit_refuses_a_blob_whose_count_is_not_a_number(
            self, instance: Instance) -> None:
        store = EventStore(instance.redis, instance.keys)
        keys = instance.keys
        content = job_content(orjson.dumps(spec()))
        key = keys.blob(0, ME, content.spec.digest)
        instance.redis.hset(key, mapping={"data": content.spec.data, "refs": "many"})
        batch = store.batch(0)
        jobhash.create(batch, keys, 1, owner=ME, urgency=16, content=content)
        with pytest.raises(KeyTypeError, match="refs holds many"):
            store.commit(batch)
        assert not instance.redis.exists(keys.job(1))  # nothing written
        instance.redis.set(key, "a string")
        with pytest.raises(KeyTypeError, match="HINCRBY needs a hash"):
            store.commit(batch)

    def test_splices_agree(self) -> None:
        doc = spec()
        content = job_content(orjson.dumps(doc))
        assert content.env is not None
        assert orjson.loads(splice(content.spec.data, content.env.data)) == doc


class TestFakeRedis(JobHashContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(JobHashContract, OnRealRedis):
    """The contract on a real redis-server."""
