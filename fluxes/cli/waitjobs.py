"""Waiting for many jobs at once (``fluxes job wait ID... | --all``).

Rather than one blocking read per job, the waiter blocks on the partition
journals, where every event is appended together with the job's own
eventlog, and takes each ``clean`` (or ``invalidate``) of a job it waits
for as that job's end; the job's outcome is then replayed from its eventlog.
The journal positions are taken before the jobs are first checked, so a job
that ends between the check and the first read is still seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from fluxes.cli.attach import Outcome
from fluxes.cli.display import shown_id
from fluxes.errors import FluxesError
from fluxes.store.jobfacts import last_events

if TYPE_CHECKING:
    from fluxes.store.instance import Instance

#: Events after which a job is inactive and its eventlog ends.
_LAST = frozenset({b"clean", b"invalidate"})
#: Eventlogs checked per pipeline when the wait starts.
_CHUNK = 1000


def active_jobs_of(inst: Instance, user: str | None = None) -> list[int]:
    """The active jobs of ``user`` (default: you), oldest first.

    The job list's folded positions are read first, then the job list, then
    the journal entries after those positions: the job list read second
    includes at least everything up to the positions, and the journal holds
    the rest, so a job folded while this runs is in one or the other (read
    the other way round, it could be in neither).
    """
    from fluxes.service.jobs import select_jobs, user_id
    from fluxes.store.joblist import JobListStore

    uid = user_id(inst, user)
    lists = JobListStore(inst.redis, inst.keys)
    positions = {p: lists.folded_position(p) for p in range(inst.keys.partitions)}
    ids = [rec.id for rec in select_jobs(inst, states="active", user=str(uid))]
    ids.reverse()
    seen = set(ids)
    for jobid in _unfolded_submissions(inst, uid, positions):
        if jobid not in seen:
            seen.add(jobid)
            ids.append(jobid)
    return ids


def _unfolded_submissions(inst: Instance, uid: int,
                          positions: dict[int, str | None]) -> Iterable[int]:
    """Jobs of ``uid`` submitted in journal entries after ``positions`` (partition ->
    folded position).

    Users without the right to read the job list's position (``XINFO``) get
    none: for them the job list alone answers, a few milliseconds behind.
    """
    import orjson

    from fluxes.store.eventstore import EventStore

    events = EventStore(inst.redis, inst.keys)
    for partition, position in positions.items():
        if position is None:
            continue
        for entries in events.iter_journal(partition, after=position):
            for entry in entries:
                if entry.name != b"submit" or not entry.context:
                    continue
                try:
                    ctx = orjson.loads(entry.context)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(ctx, dict) and ctx.get("userid") == uid:
                    yield entry.jobid


def wait_jobs(inst: Instance, ids: Sequence[int], report: Callable[[Outcome], None],
              progress: Callable[[int], None] | None = None,
              timeout: float | None = None) -> None:
    """Block until every job of ``ids`` is inactive, calling ``report`` as each ends.

    ``progress`` gets the number of jobs ended so far. Raises FluxesError for
    a job that does not exist (before waiting) and on timeout.
    """
    from fluxes.store.eventstore import EventStore
    from fluxes.store.groups import read_streams
    from fluxes.store.private import revealed_job

    keys = inst.keys
    store = EventStore(inst.redis, keys)
    deadline = None if timeout is None else time.monotonic() + timeout
    positions = {keys.journal(p): store.journal_last_id(p) for p in range(keys.partitions)}
    remaining = set(ids)
    done = 0

    def finish(jobid: int) -> None:
        nonlocal done
        remaining.discard(jobid)
        report(Outcome(revealed_job(inst.redis, keys, store.replay_job(jobid))))
        done += 1
        if progress is not None:
            progress(done)

    if progress is not None:
        progress(0)
    for jobid in _ended(inst, list(ids)):
        finish(jobid)
    while remaining:
        block = 1000
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FluxesError(f"job wait: timeout with {len(remaining)} of {len(ids)} "
                                  "jobs unfinished")
            block = max(1, min(block, int(left * 1000)))
        for stream, entries in read_streams(inst.redis, positions, 1000, block):
            positions[stream.decode()] = entries[-1][0].decode()
            for _sid, fields in entries:
                if fields.get(b"n") in _LAST:
                    jobid = int(fields.get(b"j", b"0"))
                    if jobid in remaining:
                        finish(jobid)


def _ended(inst: Instance, ids: list[int]) -> list[int]:
    """Those of ``ids`` that are inactive already; FluxesError for an unknown one."""
    ended = []
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i:i + _CHUNK]
        for jobid, last in zip(chunk, last_events(inst.redis, inst.keys, chunk), strict=True):
            if last is None:
                raise FluxesError(f"job {shown_id(jobid)} not found")
            if last[1].get(b"n") in _LAST:
                ended.append(jobid)
    return ended
