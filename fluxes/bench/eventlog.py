"""``fluxes bench eventlog``: append, replay, restore and read-model figures.

Runs against a private redis-server (AOF on, appendfsync everysec, as
``fluxes start`` runs it). Each job gets the ten events of a normal life
(submit ... clean), so ``--jobs 100000`` is a million events.
"""

from __future__ import annotations

import random
from typing import Any

from fluxes.bench.common import Stopwatch, private_redis, used_memory
from fluxes.domain.job import events as ev
from fluxes.store.errors import Client
from fluxes.store.eventstore import Batch, EventStore
from fluxes.store.joblist_rebuild import rebuild
from fluxes.store.keys import Keys

NS = "bench"
T0 = 1_700_000_000.0


def lifecycle(t: float) -> list[tuple[ev.Event, dict[str, Any] | None]]:
    """The ten events of a job that runs and completes, with journal extras."""
    return [
        (ev.Submit(timestamp=t, urgency=16, userid=1000),
         {"name": "app", "ntasks": 1, "nnodes": 1, "ncores": 1, "duration": 60.0}),
        (ev.Validate(timestamp=t), None),
        (ev.Depend(timestamp=t), None),
        (ev.Priority(timestamp=t, priority=16), None),
        (ev.Alloc(timestamp=t + 0.001), {"ranks": "0", "nodelist": "node0"}),
        (ev.Start(timestamp=t + 0.002), None),
        (ev.Finish(timestamp=t + 0.003, status=0), None),
        (ev.Release(timestamp=t + 0.003, ranks="all", final=True), None),
        (ev.Free(timestamp=t + 0.004), None),
        (ev.Clean(timestamp=t + 0.004), None),
    ]


def _job_batch(store: EventStore, keys: Keys, jobids: range, upto: int = 10) -> Batch:
    batch = store.batch(0)
    for jobid in jobids:
        evs = lifecycle(T0 + jobid * 1e-3)[:upto]
        batch.append(keys.eventlog(jobid), jobid, 0, [e for e, _ in evs], [x for _, x in evs])
    return batch


def run(jobs: int = 100_000, single: int = 10_000, batch_jobs: int = 100,
        pipeline: int = 8, active_fraction: float = 0.01) -> dict[str, Any]:
    """Measure and return the figures."""
    figures: dict[str, Any] = {"jobs": jobs, "events": jobs * 10}
    with private_redis() as (_server, client):
        keys = Keys(NS)
        client.set(keys.jm_fence(0), "1")
        store = EventStore(client, keys)
        base_memory = used_memory(client)

        # single appends: one event, one round trip
        watch = Stopwatch()
        for i in range(single):
            batch = store.batch(0)
            jobid = 10**12 + i
            batch.append(keys.eventlog(jobid), jobid, 0,
                          [ev.Submit(timestamp=T0, urgency=16, userid=1000)])
            store.commit(batch, "1")
        figures["append_single_events_per_s"] = single / watch.elapsed
        client.delete(*[keys.eventlog(10**12 + i) for i in range(single)], keys.journal(0))

        # batched appends: batch_jobs jobs x 10 events per commit, pipelined
        watch = Stopwatch()
        jobid = 1
        while jobid <= jobs:
            batches = []
            for _ in range(pipeline):
                if jobid > jobs:
                    break
                end = min(jobid + batch_jobs, jobs + 1)
                batches.append(_job_batch(store, keys, range(jobid, end)))
                jobid = end
            store.commit_many(batches, "1")
        figures["append_batched_events_per_s"] = jobs * 10 / watch.elapsed
        figures["redis_bytes_per_job"] = (used_memory(client) - base_memory) / jobs

        # full replay of the journal
        watch = Stopwatch()
        result = store.replay(0)
        figures["replay_events_per_s"] = result.events / watch.elapsed
        figures["replay_s"] = watch.elapsed

        # checkpoint with some jobs still active, then a tail, then restore
        rng = random.Random(1)
        active = max(1, int(jobs * active_fraction))
        first = jobs + 1
        tail_ids = range(first, first + active)
        batch = store.batch(0)
        for jid in tail_ids:
            evs = lifecycle(T0 + jid * 1e-3)[:rng.randint(2, 9)]
            batch.append(keys.eventlog(jid), jid, 0, [e for e, _ in evs], [x for _, x in evs])
        store.commit(batch, "1")
        snapshot = store.replay(0, drop_inactive=True)
        watch = Stopwatch()
        blob = store.checkpoint_blob(snapshot.records.values(), snapshot.last_id)
        client.set(keys.checkpoint(0), blob)
        figures["checkpoint_write_s"] = watch.elapsed
        figures["checkpoint_bytes"] = len(blob)
        figures["active_jobs_at_checkpoint"] = len(snapshot.records)
        # tail: another 1% of new jobs after the checkpoint
        store.commit(_job_batch(store, keys, range(first + active, first + 2 * active)), "1")
        watch = Stopwatch()
        restored, used = store.restore(0)
        figures["restore_from_checkpoint_s"] = watch.elapsed
        figures["restore_used_checkpoint"] = used
        figures["restore_tail_events"] = restored.events

        figures.update(_read_model(client, keys))
    return figures


def _read_model(client: Client, keys: Keys) -> dict[str, Any]:
    """Fold the journal into the job-list read model; time it and weigh it.

    The fold is the job-list worker's own (:class:`fluxes.store.joblist_fold.PartitionFolder`,
    block by block, each block written with its position), driven by the rebuild that
    ``fluxes admin rebuild-joblist`` runs: the read model is empty here, so the two agree.
    """
    before = used_memory(client)
    watch = Stopwatch()
    [done] = rebuild(client, keys, [0], holder="bench")
    elapsed = watch.elapsed
    after = used_memory(client)
    return {"readmodel_fold_entries_per_s": done.entries / max(elapsed, 1e-9),
            "readmodel_bytes_per_job": (after - before) / max(done.jobs, 1)}
