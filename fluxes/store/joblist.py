"""The job-list read model in Redis: summaries, active/inactive indexes and counters.

One job-list worker at a time folds a partition's journal: it holds the
partition's job-list lease. It reads the journal with plain XREAD, which
changes nothing in Redis, from the folded position, which is kept as the
``joblist`` consumer group's last-delivered id (so ``XINFO GROUPS``, the lag
metrics and ``fluxes status`` show how far the read model is behind). Each
block of entries is written in one step together with the new position, so
after a crash position and read model always agree, and folding on from the
position gives the same model as a rebuild from scratch.

Every step carries the lease's fencing token and is refused
(:class:`~fluxes.store.eventstore.FencedError`) once another holder took the
lease: two folders of one journal would fold entries out of order and count
them twice, so a deposed one (paused, partitioned, or replaced by ``fluxes
admin rebuild-joblist``) writes nothing. Reading through the group instead
would not be safe: a deposed reader's late XREADGROUP would move entries into
the group's pending list, out of the new folder's sight.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis

from fluxes.domain.job.states import JobState
from fluxes.domain.joblist.model import Change, JobSummary, removal
from fluxes.store.direct import Direct
from fluxes.store.eventstore import FencedError
from fluxes.store.groups import ensure_group
from fluxes.store.keys import GROUP_JOBLIST, Keys
from fluxes.store.scripts import lua_source

#: The fenced write: every read-model step goes through it (fluxes/store/lua).
WRITE_LUA = lua_source("joblist_write")
_WRITE_SHA = hashlib.sha1(WRITE_LUA.encode()).hexdigest()
#: Arguments per op at most: Lua's unpack() has a stack limit (8000 in Redis).
_CHUNK = 2000
#: Key indexes in KEYS of the fenced write.
_FENCE, _JOBS, _ACTIVE, _INACTIVE, _COUNTS, _JOURNAL = range(1, 7)


class JobListStore:
    """Reads and atomic updates of the job-list read model."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def ensure_groups(self) -> None:
        """Create the job-list consumer group (the folded position) on every journal."""
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

    def _keys(self, partition: int) -> list[str]:
        """KEYS of the fenced write for ``partition``, in the ``_FENCE``... order."""
        k = self.keys
        return [k.joblist_fence(partition), k.joblist_jobs(partition),
                k.joblist_active(partition), k.joblist_inactive(partition),
                k.joblist_counts(partition), k.journal(partition)]

    def _run(self, partition: int, token: str, ops: Sequence[tuple[Any, ...]]) -> None:
        """Run ``ops`` (name, key index, arguments...) in one fenced step."""
        args: list[Any] = [token]
        for name, key, *rest in ops:
            args += (name, key, len(rest), *rest)
        keys = self._keys(partition)
        try:
            Direct.of(self.redis, keys[0]).evalsha(_WRITE_SHA, WRITE_LUA, keys, args)
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise FencedError(f"job list of partition {partition}: token {token} is "
                                  f"stale (now {str(exc).split()[-1]})") from None
            raise

    def write(self, partition: int, changes: Iterable[Change], position: str,
              entries_read: int | None, token: str,
              removed: Mapping[int, JobSummary | None] | None = None) -> None:
        """Apply ``changes``, take the ``removed`` jobs (purged: jobid -> their summary
        as stored before, None if never stored) out of the model with their counts,
        and move the partition's folded position to ``position`` (the
        journal id of the last entry they include; ``entries_read``: its index counted
        from the first ever entry, None when unknown) in one step fenced by ``token``.

        Raises FencedError, having written nothing, when another holder took the
        partition's job-list lease since ``token`` was handed out.
        """
        latest: dict[int, Change] = {}
        totals: Counter[str] = Counter()
        became_inactive: set[int] = set()
        for change in changes:
            latest[change.summary.id] = change
            totals.update(change.counters)
            if change.became_inactive:
                became_inactive.add(change.summary.id)
        ops: list[tuple[Any, ...]] = []
        if latest:
            ops += _chunked("HSET", _JOBS, _flat((j, c.summary.to_json())
                                                 for j, c in latest.items()))
            actives = [(c.summary.job.t_submit, j) for j, c in latest.items()
                       if c.summary.job.state is not JobState.INACTIVE]
            ops += _chunked("ZADD", _ACTIVE, _flat(actives))
        if became_inactive:
            ops += _chunked("ZREM", _ACTIVE, list(became_inactive), 1)
            ops += _chunked("ZADD", _INACTIVE, _flat(
                (latest[j].summary.job.t_inactive or 0.0, j) for j in became_inactive))
        if removed:
            gone = sorted(removed)
            for summary in removed.values():
                totals.update(removal(summary))
            ops += _chunked("HDEL", _JOBS, gone, 1)
            ops += _chunked("ZREM", _ACTIVE, gone, 1)
            ops += _chunked("ZREM", _INACTIVE, gone, 1)
        ops += [("HINCRBY", _COUNTS, key, delta) for key, delta in totals.items() if delta]
        ops.append(_position(position, entries_read))
        self._run(partition, token, ops)

    def reset(self, partition: int, token: str) -> None:
        """Empty the partition's read model and move its position to the journal's start, in
        one step fenced by ``token``: what the holder then folds is a rebuild."""
        self._run(partition, token, [("UNLINK", _JOBS), ("UNLINK", _ACTIVE),
                                     ("UNLINK", _INACTIVE), ("UNLINK", _COUNTS),
                                     _position("0-0", 0)])

    def position(self, partition: int) -> tuple[str, int | None]:
        """Where folding the partition's journal goes on: the id of the last entry the read
        model includes and its index from the first ever entry (None when Redis cannot
        tell).

        The position is the ``joblist`` group's last-delivered id. Entries still
        pending in the group were read by a version that folded through the group
        and never written (their acknowledgement went with their effects), so the
        position is then just before the oldest of them.
        """
        journal = self.keys.journal(partition)
        ensure_group(self.redis, journal, GROUP_JOBLIST)
        info = next(g for g in self.redis.xinfo_groups(journal)
                    if _text(g["name"]) == GROUP_JOBLIST)
        last = _text(info["last-delivered-id"])
        read = info.get("entries-read")
        entries_read = int(read) if read is not None else (0 if last == "0-0" else None)
        if not info["pending"]:
            return last, entries_read
        oldest = _text(self.redis.xpending(journal, GROUP_JOBLIST)["min"])
        if entries_read is not None:
            entries_read -= len(self.redis.xrange(journal, min=oldest, max=last))
            if entries_read < 0:
                entries_read = None  # the group's count was off: let Redis estimate
        return id_before(oldest), entries_read

    def folded_position(self, partition: int) -> str | None:
        """The folded position, read without writing anything (:meth:`position` may
        create the group): "0-0" before anything was folded, None when a user's ACL
        does not allow reading it."""
        journal = self.keys.journal(partition)
        try:
            groups = self.redis.xinfo_groups(journal)
        except redis.exceptions.NoPermissionError:
            return None
        except redis.ResponseError:
            return "0-0"  # no journal yet
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

    def take_over(self, partition: int, holder: str, ttl_ms: int) -> str:
        """Take the partition's job-list lease whoever holds it; the new fencing token.

        Safe because every write is fenced: the holder it was taken from has its
        next write refused and stands by. For ``fluxes admin rebuild-joblist``.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.keys.joblist_lease(partition), holder, px=ttl_ms)
        pipe.incr(self.keys.joblist_fence(partition))
        _ok, token = pipe.execute()
        return str(int(token))

    def lease_holder(self, partition: int) -> str | None:
        """Who holds the partition's job-list lease (None: nobody)."""
        raw = self.redis.get(self.keys.joblist_lease(partition))
        return raw.decode("utf-8", "replace") if raw is not None else None

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


def _chunked(name: str, key: int, args: Sequence[Any], width: int = 2) -> list[tuple[Any, ...]]:
    """Ops ``name`` on KEYS[``key``] taking ``args`` (``width`` to a member) a chunk at a time."""
    step = _CHUNK - _CHUNK % width
    return [(name, key, *args[i:i + step]) for i in range(0, len(args), step)]


def _position(position: str, entries_read: int | None) -> tuple[Any, ...]:
    return ("POSITION", _JOURNAL, GROUP_JOBLIST, position,
            "" if entries_read is None else entries_read)


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
