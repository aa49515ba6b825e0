"""The job-list read model in Redis: summaries, active/inactive indexes and counters.

Each batch of journal entries is written with MULTI/EXEC together with the
XACK of those entries, so after a crash the consumer group position and the
read model always agree, and replaying from the group gives the same model
as a rebuild from scratch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from fluxes.job.states import JobState
from fluxes.joblist.model import Change, JobSummary
from fluxes.store.direct import Direct
from fluxes.store.groups import ensure_group
from fluxes.store.keys import GROUP_JOBLIST, Keys


class JobListStore:
    """Reads and atomic updates of the job-list read model."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def ensure_groups(self) -> None:
        """Create the job-list consumer group on every partition journal."""
        for p in range(self.keys.partitions):
            ensure_group(self.redis, self.keys.journal(p), GROUP_JOBLIST)

    def load_active(self, partition: int) -> dict[int, JobSummary]:
        """Summaries of every active job of ``partition`` (a restarted worker's cache)."""
        ids = [int(x) for x in self.redis.zrange(self.keys.joblist_active(partition), 0, -1)]
        return {s.id: s for s in self.get_many(ids) if s is not None}

    def get_many(self, jobids: Sequence[int]) -> list[JobSummary | None]:
        """Summaries of ``jobids`` (None where unknown), one round trip per partition."""
        if not jobids:
            return []
        by_part: dict[int, list[int]] = {}
        for jobid in jobids:
            by_part.setdefault(self.keys.partition_of(jobid), []).append(jobid)
        pipe = self.redis.pipeline(transaction=False)
        order = []
        for part, ids in by_part.items():
            pipe.hmget(self.keys.joblist_jobs(part), ids)
            order.append(ids)
        found: dict[int, JobSummary | None] = {}
        for ids, raws in zip(order, pipe.execute(), strict=True):
            for jobid, raw in zip(ids, raws, strict=True):
                found[jobid] = JobSummary.from_json(raw) if raw else None
        return [found[j] for j in jobids]

    def write(self, partition: int, changes: Iterable[Change], ack_ids: Sequence[bytes | str],
              pipe: redis.client.Pipeline | None = None) -> None:
        """Apply ``changes`` and acknowledge ``ack_ids`` in one MULTI/EXEC."""
        keys = self.keys
        jobs_key = keys.joblist_jobs(partition)
        active = keys.joblist_active(partition)
        inactive = keys.joblist_inactive(partition)
        counts = keys.joblist_counts(partition)
        latest: dict[int, Change] = {}
        totals: Counter[str] = Counter()
        became_inactive: set[int] = set()
        for change in changes:
            latest[change.summary.id] = change
            totals.update(change.counters)
            if change.became_inactive:
                became_inactive.add(change.summary.id)
        commands: list[tuple[Any, ...]] = []
        if latest:
            commands.append(("HSET", jobs_key, *_flat((j, c.summary.to_json())
                                                      for j, c in latest.items())))
            actives = [(c.summary.job.t_submit, j) for j, c in latest.items()
                       if c.summary.job.state is not JobState.INACTIVE]
            if actives:
                commands.append(("ZADD", active, *_flat(actives)))
        if became_inactive:
            commands.append(("ZREM", active, *became_inactive))
            commands.append(("ZADD", inactive, *_flat(
                (latest[j].summary.job.t_inactive or 0.0, j) for j in became_inactive)))
        for key, delta in totals.items():
            if delta:
                commands.append(("HINCRBY", counts, key, delta))
        if ack_ids:
            commands.append(("XACK", keys.journal(partition), GROUP_JOBLIST, *ack_ids))
        if pipe is not None:
            for command in commands:
                pipe.execute_command(*command)
        elif commands:
            Direct(self.redis, jobs_key).transaction(commands)

    def counters(self) -> Counter[str]:
        """Counters summed over partitions (zero counts left out)."""
        total: Counter[str] = Counter()
        for p in range(self.keys.partitions):
            for key, value in self.redis.hgetall(self.keys.joblist_counts(p)).items():
                total[key.decode()] += int(value)
        return +total

    def all_summaries(self) -> dict[int, JobSummary]:
        """Every summary of every partition (for checks and small instances)."""
        out = {}
        for p in range(self.keys.partitions):
            for raw in self.redis.hvals(self.keys.joblist_jobs(p)):
                summary = JobSummary.from_json(raw)
                out[summary.id] = summary
        return out

    def list_ids(self, active: bool = True, inactive: bool = False,
                 limit: int | None = None) -> list[int]:
        """Job ids, active ones by submit time then inactive ones newest first."""
        ids: list[tuple[float, int]] = []
        for p in range(self.keys.partitions):
            if active:
                for raw, score in self.redis.zrange(self.keys.joblist_active(p), 0, -1,
                                                    withscores=True):
                    ids.append((-score, int(raw)))
        # active: newest submission first, as flux jobs lists
        ids.sort()
        out = [j for _, j in ids]
        if inactive:
            more: list[tuple[float, int]] = []
            stop = -1 if limit is None else max(limit - len(out), 0) - 1
            if stop != -1 or limit is None:
                for p in range(self.keys.partitions):
                    for raw, score in self.redis.zrevrange(self.keys.joblist_inactive(p), 0,
                                                           stop, withscores=True):
                        more.append((-score, int(raw)))
            more.sort()
            out += [j for _, j in more]
        return out if limit is None else out[:limit]


def _flat(pairs: Iterable[tuple[Any, Any]]) -> list[Any]:
    """Pairs as one flat argument list (HSET field value ..., ZADD score member ...)."""
    out: list[Any] = []
    for a, b in pairs:
        out += (a, b)
    return out
