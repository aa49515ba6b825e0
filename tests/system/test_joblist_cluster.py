"""The job list on a three-node Redis Cluster with four partitions: each partition's lease,
fenced write and position live in that partition's slot, and two workers fold it all."""

from __future__ import annotations

import pytest

from fluxes.domain.job import events as ev
from fluxes.domain.joblist.model import ReadModel
from fluxes.drill.invariants import check_read_model
from fluxes.store.connection import connect
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist import JobListStore
from fluxes.store.joblist_rebuild import rebuild
from fluxes.store.keys import Keys
from tests.system.test_connections import cluster, servers  # noqa: F401 (fixtures)
from workers.joblist import JobListWorker

pytestmark = pytest.mark.system

SUBMIT = {"urgency": 16, "userid": 1000, "flags": 0, "version": 1}


def test_two_workers_fold_four_partitions_on_a_cluster(cluster: str,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(JobListWorker, "block_ms", 10)
    client = connect(cluster)
    keys = Keys("jlc", 4)
    store = EventStore(client, keys)
    client.hset(keys.instance, "partitions", 4)
    for p in range(4):
        client.set(keys.jm_fence(p), "1")
    for jobid in range(1, 41):
        batch = store.batch(keys.partition_of(jobid))
        batch.append(keys.eventlog(jobid), jobid, 0,
                     [ev.decode("submit", 1.0 + jobid, SUBMIT), ev.decode("validate", 2.0)],
                     [{"name": f"j{jobid}"}, None])
        store.commit(batch, token="1")
    inst = Instance(InstanceURI(cluster, "jlc"), client=client)
    a, b = JobListWorker(inst, "a"), JobListWorker(inst, "b")
    a.setup()
    b.setup()
    # b holds partition 3 first: the two split the partitions
    b.leases[3].try_acquire()
    for _ in range(4):
        a.step()
        b.step()
    assert sorted(a.folders) == [0, 1, 2] and sorted(b.folders) == [3]
    fresh = ReadModel()
    for p in range(4):
        for block in store.iter_journal(p):
            fresh.feed((e.jobid, e.event(), e.extra_dict()) for e in block)
    jl = JobListStore(client, keys)
    assert check_read_model(fresh, ReadModel(jl.all_summaries(), jl.counters())) == []
    done = rebuild(client, keys)
    assert sum(r.jobs for r in done) == 40
    assert {r.took_over_from for r in done} == {"a", "b"}
    assert check_read_model(fresh, ReadModel(jl.all_summaries(), jl.counters())) == []
    client.close()
