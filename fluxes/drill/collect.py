"""Reading what the invariants need from an instance: eventlogs, R and read models, in bulk.

Nothing here raises on bad stored data: an event or R that does not decode
is returned as a reason, for the invariants to report against its job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import TransitionError
from fluxes.domain.joblist.model import ReadModel
from fluxes.formats.rset import ResourceSet
from fluxes.store import jobfacts, jobhash
from fluxes.store.eventstore import decode_entry, journal_entry
from fluxes.store.instance import Instance
from fluxes.store.jobhash import JobHashes
from fluxes.store.joblist import JobListStore
from fluxes.store.keys import GROUP_JOBLIST

BLOCK = 500


@dataclass
class Eventlogs:
    """Decoded eventlogs, and the jobs whose eventlog does not decode (with why)."""

    logs: dict[int, list[ev.Event]] = field(default_factory=dict)
    broken: dict[int, str] = field(default_factory=dict)


def decode_eventlog(entries: Sequence[tuple[bytes, Any]]) -> tuple[list[ev.Event], str | None]:
    """Events of one eventlog's stream entries; stops at the first entry that does not
    decode and says which and why."""
    events: list[ev.Event] = []
    for i, (sid, fields) in enumerate(entries):
        try:
            events.append(decode_entry(fields[b"n"], fields[b"t"], fields.get(b"c")))
        except (KeyError, ValueError) as exc:  # EventError is a ValueError
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            return events, f"event {i} (stream id {sid.decode()}) does not decode: {what}"
    return events, None


def read_eventlogs(inst: Instance, jobids: Sequence[int]) -> Eventlogs:
    """Every job's eventlog, BLOCK jobs per round trip."""
    out = Eventlogs()
    for i in range(0, len(jobids), BLOCK):
        chunk = jobids[i:i + BLOCK]
        found = jobfacts.eventlogs(inst.redis, inst.keys, list(chunk))
        for jobid, entries in zip(chunk, found, strict=True):
            events, why = decode_eventlog(entries)
            if why is None:
                out.logs[jobid] = events
            else:
                out.broken[jobid] = why
    return out


def eventlogs(inst: Instance, jobids: Sequence[int]) -> dict[int, list[ev.Event]]:
    """Every job's eventlog; ValueError naming the first job whose eventlog does not decode."""
    got = read_eventlogs(inst, jobids)
    for jobid, why in got.broken.items():
        raise ValueError(f"job {jobid}: {why}")
    return got.logs


def rsets(inst: Instance, jobids: Sequence[int]) -> dict[int, ResourceSet]:
    """The stored R of each job that has a valid one."""
    return read_rsets(inst, jobids)[0]


def read_rsets(inst: Instance, jobids: Sequence[int]
               ) -> tuple[dict[int, ResourceSet], dict[int, str]]:
    """The stored R of each job that has one, and the jobs whose R does not decode (why)."""
    out: dict[int, ResourceSet] = {}
    broken: dict[int, str] = {}
    for i in range(0, len(jobids), BLOCK):
        chunk = jobids[i:i + BLOCK]
        for jobid, raw in zip(chunk, JobHashes(inst.redis, inst.keys).field(chunk, jobhash.R),
                              strict=True):
            if raw:
                try:
                    out[jobid] = ResourceSet(raw)
                except ValueError as exc:
                    broken[jobid] = f"stored R does not decode: {exc}"
    return out, broken


def read_models(inst: Instance) -> tuple[ReadModel, ReadModel]:
    """A fresh fold of every journal, and the job-list read model as stored.

    The fold passes over entries the job-list worker cannot fold either (it
    parks them in the dead letters), so the two can be compared.
    """
    fresh = ReadModel()
    for p in range(inst.keys.partitions):
        start = "-"
        while True:
            entries = inst.redis.xrange(inst.keys.journal(p), min=start, count=2000)
            for sid, fields in entries:
                try:
                    entry = journal_entry(sid, fields)
                    fresh.feed([(entry.jobid, entry.event(), entry.extra_dict())])
                except (KeyError, ValueError, TransitionError):
                    continue
            if len(entries) < 2000:
                break
            start = "(" + entries[-1][0].decode()
    jl = JobListStore(inst.redis, inst.keys)
    return fresh, ReadModel(jl.all_summaries(), jl.counters())


def joblist_caught_up(inst: Instance) -> bool:
    """True when the job list has folded every journal entry there is."""
    for p in range(inst.keys.partitions):
        key = inst.keys.journal(p)
        last = inst.redis.xrevrange(key, count=1)
        groups = {_text(g["name"]): g for g in inst.redis.xinfo_groups(key)}
        group = groups.get(GROUP_JOBLIST)
        if group is None or group["pending"]:
            return False
        if last and _text(group["last-delivered-id"]) != last[0][0].decode():
            return False
    return True


def published_pool(inst: Instance) -> dict[str, Any] | None:
    """The scheduler's latest published resource summary (``sched:status``), if any."""
    raw = inst.redis.get(inst.keys.sched_status)
    if not raw:
        return None
    try:
        status = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return status if isinstance(status, dict) else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
