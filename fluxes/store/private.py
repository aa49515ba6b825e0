"""The owner-private text of jobs' events in Redis (:mod:`fluxes.domain.job.privacy`).

Writers put it in ``{p}:private:<owner uid>:<job id>`` with the events
(:meth:`fluxes.store.eventstore.Batch.append`); this module reads it back: for
the job manager's restore (it must pair a dependency's ``dependency-remove``
with its ``dependency-add`` and know the jobs' dependencies), and for readers
(``fluxes job eventlog/info``, ``fluxes jobs``), who get the text when their
Redis user may read the hash (the owner, the instance owner) and the public
stand-ins otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job
from fluxes.domain.job.privacy import (
    MASK_PREFIX,
    PLACEHOLDER,
    SUMMARY_FIELD,
    fatal_note,
    originals,
    reveal,
)
from fluxes.domain.job.record import JobRecord
from fluxes.domain.job.states import JobState
from fluxes.store.keys import Keys


def ensure_salt(client: Any, keys: Keys) -> bytes:
    """The instance's secret key for masking dependency descriptions (created the first
    time: SET NX, so every job manager gets the same)."""
    import secrets  # here: readers (fluxes jobs, fluxes run) never make the salt

    client.set(keys.private_salt, secrets.token_hex(32), nx=True)
    salt = client.get(keys.private_salt)
    return bytes(salt) if salt else b""


def read_private(client: Any, keys: Keys, jobs: Iterable[tuple[int, int]]
                 ) -> dict[int, dict[str, Any]]:
    """The private fields of ``jobs`` ((job id, owner uid) pairs): job id -> field -> the
    decoded value. A job whose hash this Redis user may not read (another user's)
    or that has none is left out. One round trip per slot."""
    wanted = list(dict.fromkeys(jobs))
    if not wanted:
        return {}
    replies = _grouped(client, [
        (keys.private(keys.partition_of(j), uid, j),
         ("HGETALL", keys.private(keys.partition_of(j), uid, j))) for j, uid in wanted])
    out: dict[int, dict[str, Any]] = {}
    for (jobid, _uid), reply in zip(wanted, replies, strict=True):
        if isinstance(reply, Exception):
            if _denied(reply):
                continue
            raise reply
        if not reply:
            continue
        pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2],
                                                                  strict=True)
        fields: dict[str, Any] = {}
        for field, value in pairs:
            try:
                fields[field.decode()] = orjson.loads(value)
            except (orjson.JSONDecodeError, UnicodeDecodeError):
                continue
        out[jobid] = fields
    return out


def _grouped(client: Any, commands: Sequence[tuple[str, tuple[str, str]]]) -> list[Any]:
    """``execute_grouped``, imported only for redis-py's clients: the CLI's small client
    (``fluxes run``, ``job attach``) sends the few commands itself without redis-py."""
    raw = getattr(client, "execute_raw", None)
    if raw is not None:
        answers: list[Any] = raw([command for _anchor, command in commands])
        return answers
    from fluxes.store.direct import execute_grouped

    return execute_grouped(client, commands)


def _denied(error: Exception) -> bool:
    """Whether ``error`` says this Redis user may not read the key (another user's)."""
    # imported only with an error in hand (redis-py built it): fluxes run and attach
    # come here without redis-py (fluxes.store.lite)
    from redis.exceptions import NoPermissionError

    return isinstance(error, NoPermissionError)


def reveal_records(client: Any, keys: Keys, records: dict[int, JobRecord]) -> None:
    """Put the private text back into the records of jobs waiting in DEPEND (the job
    manager's restore): their summary's dependencies and their outstanding dependency
    descriptions, in place."""
    waiting = [(j, r.job.userid) for j, r in records.items()
               if r.job.state is JobState.DEPEND and r.job.userid is not None]
    if not waiting:
        return
    found = read_private(client, keys, waiting)
    for jobid, fields in found.items():
        record = records[jobid]
        info = dict(record.info)
        summary = fields.get(SUMMARY_FIELD)
        if isinstance(summary, Mapping):
            info.update(summary)
        known = originals(fields)
        job = record.job
        if known:
            job = job.replace(dependencies=frozenset(known.get(d, d)
                                                     for d in job.dependencies))
        records[jobid] = JobRecord(job, info)


def revealed_events(client: Any, keys: Keys, jobid: int, events: Sequence[ev.Event]
                    ) -> list[tuple[float, str, dict[str, Any]]]:
    """``(timestamp, name, context)`` of a job's ``events`` (its eventlog, in order), with
    the private text put back when this Redis user may read it."""
    owner = next((e.userid for e in events if isinstance(e, ev.Submit)), None)
    private = read_private(client, keys, [(jobid, owner)]).get(jobid, {}) \
        if owner is not None else {}
    return [(e.timestamp, e.event_name, reveal(e.context(), private.get(str(seq))))
            for seq, e in enumerate(events)]


def hidden(records: Sequence[JobRecord]) -> list[tuple[int, int]]:
    """(job id, owner) of the ``records`` showing a stand-in for private text: masked
    outstanding dependencies, or a fatal exception's note."""
    return [(r.id, r.job.userid) for r in records
            if (r.job.state is JobState.DEPEND
                and any(d.startswith(MASK_PREFIX) for d in r.job.dependencies))
            or (r.job.fatal is not None and r.job.fatal.note == PLACEHOLDER)]


def reveal_for_reader(client: Any, keys: Keys, records: Sequence[JobRecord]
                      ) -> list[JobRecord]:
    """``records`` (from the public job list) with the private text of those this Redis
    user may read put back: outstanding dependencies and the fatal exception's note
    (``fluxes jobs``). One round trip per slot, for the jobs showing any."""
    wanted = hidden(records)
    if not wanted:
        return list(records)
    found = read_private(client, keys, wanted)
    out = []
    for record in records:
        fields = found.get(record.id)
        if not fields:
            out.append(record)
            continue
        job = record.job
        known = originals(fields)
        if known:
            job = job.replace(dependencies=frozenset(known.get(d, d)
                                                     for d in job.dependencies))
        note = fatal_note(fields)
        if job.fatal is not None and note is not None:
            job = job.replace(fatal=dataclasses.replace(job.fatal, note=note))
        out.append(JobRecord(job, record.info))
    return out


def revealed_job(client: Any, keys: Keys, job: Job) -> Job:
    """``job`` with its fatal exception's note put back when this Redis user may read it
    (``job attach``, ``job wait``)."""
    return reveal_for_reader(client, keys, [JobRecord(job)])[0].job
