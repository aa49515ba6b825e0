"""Reading the live state a forecast starts from, read-only, and a short-lived cache.

:func:`read_snapshot` gathers what :func:`fluxes.forecast.forecast` needs from
the instance: the configuration and inventory, the job list's active jobs
(running ones with the R the scheduler wrote, waiting ones with the request
it would read), the ranks the scheduler's last published summary says are
drained or down, the banks (running limits) and, for the history predictor,
the run times of each user's newest finished jobs. It only reads: a forecast
never writes to the instance (``fluxes.cli.forecasting`` runs and caches it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import orjson

from fluxes.domain.jm.feasibility import inventory_table
from fluxes.domain.job.states import JobResult, JobState
from fluxes.domain.sched.request import Request
from fluxes.forecast.history import KEPT
from fluxes.forecast.model import Running, Snapshot, Waiting
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet
from fluxes.store.accounting import load_accounts
from fluxes.store.jobhash import REQUEST, JobHashes
from fluxes.store.jobhash import R as R_FIELD
from fluxes.store.joblist import JobListStore
from fluxes.store.resources import load_inventory, published_summary, recorded_resources

if TYPE_CHECKING:
    from fluxes.domain.job.record import JobRecord
    from fluxes.store.instance import Instance

__all__ = ["HISTORY_JOBS", "read_snapshot"]

#: Finished jobs read for the history predictor (the newest, all users together).
HISTORY_JOBS: Final = 5000
_CHUNK: Final = 2000


def read_snapshot(instance: Instance, now: float | None = None,
                  history: bool = False) -> Snapshot:
    """The live state (see the module); ``history``: read the users' recent run times.
    FluxesError when the instance has no resources."""
    config = instance.config()
    raw_r = recorded_resources(instance.redis, instance.keys)
    inventory = load_inventory(instance)
    table = inventory_table(raw_r, config) or None
    store = JobListStore(instance.redis, instance.keys)
    records = _records(store, store.list_ids(active=True))
    run_ids = [r.id for r in records if r.job.state & JobState.RUNNING and r.job.has_resources]
    sched_ids = [r.id for r in records if r.job.state == JobState.SCHED]
    excluded = {r.id: _why_not(r) for r in records
                if r.job.state & (JobState.DEPEND | JobState.PRIORITY)}
    by_id = {r.id: r for r in records}
    hashes = JobHashes(instance.redis, instance.keys)
    running = _running(hashes, [by_id[j] for j in run_ids], inventory.ranks)
    stopped = _stopped_queues(instance)
    for jobid in list(sched_ids):
        rec = by_id[jobid]
        if rec.job.priority == 0 or rec.job.urgency == 0:
            excluded[jobid] = "held"
        elif (rec.queue or None) in stopped:
            excluded[jobid] = "its queue is stopped"
        else:
            continue
        sched_ids.remove(jobid)
    waiting, unreadable = _waiting(hashes, [by_id[j] for j in sched_ids])
    excluded.update(unreadable)
    accounts = load_accounts(instance.redis, instance.keys)
    return Snapshot(
        now=time.time() if now is None else now, config=config, inventory=inventory,
        running=tuple(running), waiting=tuple(waiting),
        drained=_drained(instance) & inventory.ranks, table=table,
        accounts=accounts if accounts.enabled else None,
        history=_history(store) if history else {}, excluded=excluded)


def _stopped_queues(instance: Instance) -> set[str | None]:
    """Queues nothing is scheduled from now (``fluxes queue stop``)."""
    from fluxes import messages as proto
    from fluxes.domain.jm.queues import fold_queue_events

    log = []
    for _sid, fields in instance.redis.xrange(instance.keys.queues):
        try:
            log.append(proto.load_queue_event(fields))
        except proto.MessageError:
            continue
    states = fold_queue_events(instance.config().queues, log)
    return {name for name, state in states.items() if not state.started}


def _records(store: JobListStore, ids: Sequence[int]) -> list[JobRecord]:
    out: list[JobRecord] = []
    for i in range(0, len(ids), _CHUNK):
        out += [rec for rec in store.get_many(ids[i:i + _CHUNK]) if rec is not None]
    return out


def _why_not(rec: JobRecord) -> str:
    if rec.job.state == JobState.DEPEND:
        return "waits on its dependencies"
    return "not yet given a priority"


def _running(hashes: JobHashes, records: list[JobRecord], ranks: IDSet) -> list[Running]:
    """Running jobs with the R the scheduler wrote (jobs without one are left out: their
    resources look free, as they would to a restarted scheduler)."""
    out: list[Running] = []
    for rec, raw in zip(records, hashes.field([r.id for r in records], R_FIELD), strict=True):
        if not raw:
            continue
        try:
            rset = ResourceSet(raw)
        except ValueError:
            continue
        if not rset.ranks.issubset(ranks):
            continue
        job = rec.job
        expiration = job.expiration or rset.expiration or None
        bank = rec.info.get("bank")
        out.append(Running(rec.id, job.userid, rset, job.t_run or job.t_submit,
                           expiration, bank if isinstance(bank, str) else None))
    return out


def _waiting(hashes: JobHashes, records: list[JobRecord]
             ) -> tuple[list[Waiting], dict[int, str]]:
    """Waiting jobs with their scheduler request: the stored one, else their jobspec's."""
    ids = [r.id for r in records]
    wires = hashes.field(ids, REQUEST)
    missing = [j for j, w in zip(ids, wires, strict=True) if not w]
    specs = dict(zip(missing, hashes.effective_jobspecs(missing), strict=True))
    out: list[Waiting] = []
    bad: dict[int, str] = {}
    parsed: dict[bytes, str] = {}
    for rec, wire in zip(records, wires, strict=True):
        job = rec.job
        text = wire.decode() if isinstance(wire, bytes) else None
        if not text:
            spec = specs.get(rec.id)
            try:
                if spec is None:
                    raise ValueError("no jobspec")
                text = parsed.get(spec)
                if text is None:
                    text = parsed[spec] = Request.from_jobspec(orjson.loads(spec)).to_wire()
            except (ValueError, TypeError) as exc:
                bad[rec.id] = f"its request cannot be read: {exc}"
                continue
        priority = job.priority if job.priority is not None else job.urgency
        out.append(Waiting(rec.id, job.userid, job.urgency, priority, job.t_submit,
                           dict(rec.info), text))
    return out, bad


def _drained(instance: Instance) -> IDSet:
    """Ranks the scheduler's last published summary says get no new work."""
    summary = published_summary(instance.redis, instance.keys) or {}
    out = IDSet()
    drained = summary.get("drained")
    if isinstance(drained, dict):
        for rank in drained:
            try:
                out = out | IDSet(str(rank))
            except ValueError:
                continue
    down = summary.get("down")
    if isinstance(down, dict) and down.get("ranks"):
        try:
            out = out | IDSet(str(down["ranks"]))
        except ValueError:
            pass
    return out


def _history(store: JobListStore) -> dict[int, tuple[float, ...]]:
    """Each user's newest run times (oldest first), from the newest finished jobs that
    ran to completion or failure (canceled and timed-out jobs say little of their kind)."""
    ids = store.list_ids(active=False, inactive=True, limit=HISTORY_JOBS)
    out: dict[int, list[tuple[float, float]]] = {}
    for rec in _records(store, ids):
        job = rec.job
        if job.t_run is None or job.t_cleanup is None or job.result is None:
            continue
        if job.result not in (JobResult.COMPLETED, JobResult.FAILED):
            continue
        ran = job.t_cleanup - job.t_run
        if ran >= 0 and math.isfinite(ran):
            out.setdefault(job.userid, []).append((job.t_cleanup, ran))
    return {u: tuple(r for _t, r in sorted(v)[-KEPT:]) for u, v in out.items()}
