"""Reading the job-list read model (fluxes.store.joblist writes it): the summaries,
the active and inactive indexes, the counters, and how far the model has folded
the journals (read-your-writes for ``fluxes jobs`` and ``job wait``).

No redis-py import here: ``fluxes jobs`` reads through the small client of
fluxes.store.lite (start-up time, issue 26), so only commands that client offers
are sent, and Redis' refusals are told by their type's name.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from fluxes.domain.job.record import record_from_stored
from fluxes.domain.job.states import JobState
from fluxes.domain.joblist.model import JobSummary
from fluxes.store.keys import GROUP_JOBLIST, Keys


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing this ACL user (redis-py's NoPermissionError)."""
    return type(exc).__name__ == "NoPermissionError"


def _no_such_key(exc: BaseException) -> bool:
    """Whether ``exc`` is an error reply of Redis (redis-py's ResponseError or a kind of
    it): for XINFO, the stream does not exist yet."""
    return any(kind.__name__ == "ResponseError" for kind in type(exc).__mro__)


def active_ids(client: Any, keys: Keys, partition: int) -> list[int]:
    """The job ids of a partition's active index, in id (submission) order.

    The index is a set (~48 bytes a pending job less than the sorted set by submit
    time it was); a model written before holds a sorted set, read as such until the
    job-list worker's next write turns it into a set (lua/joblist_write.lua). A user
    whose ACL rules were given before may not send SMEMBERS: the active jobs are then
    read from the records (slower; ``fluxes admin adduser NAME`` again gives the
    rules of now).
    """
    key = keys.joblist_active(partition)
    try:
        members = client.smembers(key)
    except Exception as exc:
        if _refused(exc):
            records = client.hgetall(keys.joblist_jobs(partition))
            return sorted(jobid for jobid, raw in ((int(f), r) for f, r in records.items())
                          if record_from_stored(jobid, raw).job.state is not JobState.INACTIVE)
        if not _no_such_key(exc) or "WRONGTYPE" not in str(exc):
            raise
        members = client.zrange(key, 0, -1)
    return sorted(int(m) for m in members)


class JobListReader:
    """Reads of the job-list read model."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

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
                found[jobid] = record_from_stored(jobid, raw) if raw else None
        return [found[j] for j in jobids]

    def folded_position(self, partition: int) -> str | None:
        """The folded position, read without writing anything (:meth:`position` may
        create the group): "0-0" before anything was folded, None when a user's ACL
        does not allow reading it."""
        journal = self.keys.journal(partition)
        try:
            groups = self.redis.xinfo_groups(journal)
        except Exception as exc:
            if _refused(exc):
                return None
            if _no_such_key(exc):
                return "0-0"  # no journal yet
            raise
        for group in groups:
            if _text(group["name"]) != GROUP_JOBLIST:
                continue
            last = _text(group["last-delivered-id"])
            if group["pending"]:
                # read by an older folder and never written: not folded
                last = id_before(_text(self.redis.xpending(journal, GROUP_JOBLIST)["min"]))
            return last
        return "0-0"

    def journal_marks(self) -> dict[int, str]:
        """The id of the newest entry of every partition's journal ("0-0" when empty):
        what a reader must see folded to see every job written before it asked."""
        pipe = self.redis.pipeline(transaction=False)
        for p in range(self.keys.partitions):
            pipe.xrevrange(self.keys.journal(p), count=1)
        return {p: (_text(last[0][0]) if last else "0-0")
                for p, last in enumerate(pipe.execute())}

    def behind(self, marks: dict[int, str]) -> dict[int, str]:
        """Those of ``marks`` (partition -> journal id) the read model has not folded
        up to yet. A partition whose position cannot be read counts as caught up:
        a reader without the right to see it gets the read model as it is."""
        out = {}
        for partition, mark in marks.items():
            if mark == "0-0":
                continue
            folded = self.folded_position(partition)
            if folded is not None and stream_id_key(folded) < stream_id_key(mark):
                out[partition] = mark
        return out

    def catch_up(self, timeout: float, pause: float = 0.02) -> dict[int, str]:
        """Wait (up to ``timeout`` seconds) until the read model includes every journal
        entry written before this call: read-your-writes for a reader that then reads
        the model. Returns the partitions still behind (empty once caught up)."""
        left = self.behind(self.journal_marks())
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            time.sleep(pause)
            left = self.behind(left)
        return left

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
            for field, raw in self.redis.hgetall(self.keys.joblist_jobs(p)).items():
                summary = record_from_stored(int(field), raw)
                out[summary.id] = summary
        return out

    def list_ids(self, active: bool = True, inactive: bool = False,
                 limit: int | None = None) -> list[int]:
        """Job ids, active ones newest submission first (by id: a FLUID is its
        submission's time), then inactive ones newest first."""
        out: list[int] = []
        if active:
            for p in range(self.keys.partitions):
                out += active_ids(self.redis, self.keys, p)
            # active: newest submission first, as flux jobs lists
            out.sort(reverse=True)
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """A stream id as a pair of numbers, for comparing ids in order."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def id_before(stream_id: str) -> str:
    """The greatest stream id smaller than ``stream_id`` (reading after it gives it again)."""
    ms, _, seq = stream_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    if int(ms) > 0:
        return f"{int(ms) - 1}-{2**64 - 1}"
    return "0-0"
