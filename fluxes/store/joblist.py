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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis

from fluxes.domain.job.record import stored_record
from fluxes.domain.job.states import JobState
from fluxes.domain.joblist.model import Change, JobSummary, removal
from fluxes.store.direct import Direct
from fluxes.store.eventstore import FencedError
from fluxes.store.groups import ensure_group
from fluxes.store.joblist_read import JobListReader, _text, active_ids, id_before
from fluxes.store.keys import GROUP_JOBLIST
from fluxes.store.scripts import lua_source

#: The fenced write: every read-model step goes through it (fluxes/store/lua).
WRITE_LUA = lua_source("joblist_write")
_WRITE_SHA = hashlib.sha1(WRITE_LUA.encode()).hexdigest()
#: Arguments per op at most: Lua's unpack() has a stack limit (8000 in Redis).
_CHUNK = 2000
#: Key indexes in KEYS of the fenced write.
_FENCE, _JOBS, _ACTIVE, _INACTIVE, _COUNTS, _JOURNAL = range(1, 7)


class JobListStore(JobListReader):
    """Atomic updates of the job-list read model (and its reads, JobListReader's)."""

    def ensure_groups(self) -> None:
        """Create the job-list consumer group (the folded position) on every journal."""
        for p in range(self.keys.partitions):
            ensure_group(self.redis, self.keys.journal(p), GROUP_JOBLIST)

    def load_active(self, partition: int, limit: int | None = None) -> dict[int, JobSummary]:
        """Summaries of the active jobs of ``partition`` (a restarted worker's cache):
        every one, or the ``limit`` submitted last, oldest first."""
        ids = active_ids(self.redis, self.keys, partition)
        if limit is not None:
            ids = ids[-limit:] if limit > 0 else []
        return {s.id: s for s in self.get_many(ids) if s is not None}

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
        totals: dict[str, int] = {}
        became_inactive: set[int] = set()
        for change in changes:
            jobid = change.summary.job.id
            latest[jobid] = change
            _add_to(totals, change.counters)
            if change.became_inactive:
                became_inactive.add(jobid)
        ops: list[tuple[Any, ...]] = []
        if latest:
            ops += _chunked("HSET", _JOBS, _flat((j, stored_record(c.summary))
                                                 for j, c in latest.items()))
            actives = [j for j, c in latest.items()
                       if c.summary.job.state is not JobState.INACTIVE]
            ops += _chunked("SADD", _ACTIVE, actives, 1)
        if became_inactive:
            ops += _chunked("SREM", _ACTIVE, list(became_inactive), 1)
            ops += _chunked("ZADD", _INACTIVE, _flat(
                (latest[j].summary.job.t_inactive or 0.0, j) for j in became_inactive))
        if removed:
            gone = sorted(removed)
            for summary in removed.values():
                _add_to(totals, removal(summary))
            ops += _chunked("HDEL", _JOBS, gone, 1)
            ops += _chunked("SREM", _ACTIVE, gone, 1)
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


def _add_to(totals: dict[str, int], deltas: Mapping[str, int]) -> None:
    """Add ``deltas`` to ``totals`` (a plain dict: Counter.update costs more, and this
    runs for every job of every block)."""
    for key, delta in deltas.items():
        totals[key] = totals.get(key, 0) + delta
