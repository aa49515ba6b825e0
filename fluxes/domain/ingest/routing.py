"""Where the ingest sends a user's control requests, pure: each job manager concerned
gets its part (``cancel``, ``raise``, ``signal``, ``urgency``), every one gets a
``killall``, and an ``update`` is checked against the job as stored first, as at
submission."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.jm import update
from fluxes.domain.jm.feasibility import Feasibility
from fluxes.domain.jm.queues import QueueState
from fluxes.domain.job.model import Job
from fluxes.domain.job.states import JobState
from fluxes.errors import FluxesError

#: Control messages by partition.
Forwards = dict[int, list[proto.Control]]


def route(request: proto.Request, uid: int, reply_key: str, partitions: int,
          owner_uid: int, forwards: Forwards) -> str | None:
    """Add to ``forwards`` what the job managers must see of a control request (not an
    update: :func:`check_update`); an error line when it cannot be done."""
    match request:
        case proto.SetUrgency(id=jobid, urgency=urgency):
            forwards.setdefault(jobid % partitions, []).append(proto.UrgencyRequest(
                id=jobid, urgency=urgency, userid=uid, reply=reply_key))
            return None
        case proto.RaiseOnJobs(type=etype) if not etype:
            return "raise request needs a type"
        case proto.KillAll():
            return _killall(request, uid, reply_key, partitions, owner_uid, forwards)
        case proto.CancelJobs(ids=ids) | proto.RaiseOnJobs(ids=ids) | proto.SignalJobs(ids=ids):
            pass
        case _:
            return "submit requests are not forwarded"
    by_part: dict[int, list[int]] = {}
    for jobid in ids:
        by_part.setdefault(jobid % partitions, []).append(jobid)
    for part, part_ids in by_part.items():
        msg: proto.Control
        if isinstance(request, proto.CancelJobs):
            msg = proto.CancelRequest(ids=part_ids, userid=uid, note=request.note,
                                      reply=reply_key)
        elif isinstance(request, proto.SignalJobs):
            msg = proto.SignalRequest(ids=part_ids, userid=uid, signal=request.signal,
                                      reply=reply_key)
        else:
            assert isinstance(request, proto.RaiseOnJobs)
            msg = proto.RaiseRequest(ids=part_ids, userid=uid, type=request.type,
                                     severity=request.severity, note=request.note,
                                     reply=reply_key)
        forwards.setdefault(part, []).append(msg)
    return None


def _killall(request: proto.KillAll, uid: int, reply_key: str, partitions: int,
             owner_uid: int, forwards: Forwards) -> str | None:
    """A ``job killall`` for every partition's job manager (each answers for its jobs);
    only the instance owner may name another user or all of them."""
    target = -1 if request.all_users else uid if request.user is None else request.user
    if uid not in (target, owner_uid):
        return "permission denied: only the instance owner may signal other users' jobs"
    for part in range(partitions):
        forwards.setdefault(part, []).append(proto.KillAllRequest(
            userid=uid, target=target, signal=request.signal, dry_run=request.dry_run,
            reply=reply_key))
    return None


@dataclass(frozen=True, slots=True)
class UpdateContext:
    """What an update is checked against besides the job: the configuration, the queue
    states, the inventory and the instance owner."""

    config: InstanceConfig
    queue_states: Mapping[str | None, QueueState]
    feasibility: Feasibility | None
    owner_uid: int


def check_update(request: proto.UpdateJob, uid: int, reply_key: str, shown: str,
                 job: Job | None, owner: int | None, submitted: bytes, effective: bytes,
                 owner_name: str | None, groups: Sequence[str],
                 ctx: UpdateContext) -> str | proto.Reply | proto.UpdateRequest:
    """A ``fluxes update`` of ``job`` (None: unknown) owned by ``owner``, its jobspec as
    submitted and with defaults (``submitted``, ``effective``: JSON): the message for
    its job manager, the answer itself for a dry run, or an error line (``shown`` names
    the job)."""
    if job is None or not job.state & JobState.ACTIVE or owner is None:
        return f"{shown}: job is inactive or unknown"
    is_owner = uid == ctx.owner_uid
    if uid != owner and not is_owner:
        return f"{shown}: permission denied"
    if not is_owner and update.IMMUTABLE_FLAG in job.set_flags:
        return f"{shown}: job is immutable due to previous instance owner update"
    running = not job.state & JobState.PENDING
    if running and not is_owner:
        return f"{shown}: only the instance owner may update a running job"
    if running and job.state is not JobState.RUN:
        return f"{shown}: job is finishing: it can no longer be updated"
    try:
        plan = update.plan_update(
            orjson.loads(submitted or b"{}"), orjson.loads(effective or b"{}"),
            job.jobspec_updates, request.updates, running=running,
            config=ctx.config, userid=owner, username=owner_name, groups=groups,
            queue_states=ctx.queue_states, check_limits=not is_owner or uid == owner,
            feasibility=ctx.feasibility)
    except (ValueError, FluxesError) as exc:
        return f"{shown}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    if request.dry_run:
        return proto.Reply(ok=[request.id], updates=plan.updates)
    return proto.UpdateRequest(
        id=request.id, userid=uid, updates=plan.updates, base=dict(job.jobspec_updates),
        base_expiration=job.expiration, request=plan.request,
        immutable=is_owner and uid != owner, reply=reply_key)
