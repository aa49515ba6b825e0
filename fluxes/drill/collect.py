"""Reading what the invariants need from an instance: eventlogs and R, in bulk."""

from __future__ import annotations

from collections.abc import Sequence

from fluxes.instance import Instance
from fluxes.job import events as ev
from fluxes.rset import ResourceSet
from fluxes.store.eventstore import decode_entry

BLOCK = 500


def eventlogs(inst: Instance, jobids: Sequence[int]) -> dict[int, list[ev.Event]]:
    """Every job's eventlog, BLOCK jobs per round trip."""
    out: dict[int, list[ev.Event]] = {}
    for i in range(0, len(jobids), BLOCK):
        chunk = jobids[i:i + BLOCK]
        pipe = inst.redis.pipeline(transaction=False)
        for jobid in chunk:
            pipe.xrange(inst.keys.eventlog(jobid))
        for jobid, entries in zip(chunk, pipe.execute(), strict=True):
            out[jobid] = [decode_entry(f[b"n"], f[b"t"], f.get(b"c")) for _sid, f in entries]
    return out


def rsets(inst: Instance, jobids: Sequence[int]) -> dict[int, ResourceSet]:
    """The stored R of each job that has one."""
    out: dict[int, ResourceSet] = {}
    for i in range(0, len(jobids), BLOCK):
        chunk = jobids[i:i + BLOCK]
        pipe = inst.redis.pipeline(transaction=False)
        for jobid in chunk:
            pipe.hget(inst.keys.job(jobid), "R")
        for jobid, raw in zip(chunk, pipe.execute(), strict=True):
            if raw:
                out[jobid] = ResourceSet(raw)
    return out
