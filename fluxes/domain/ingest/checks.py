"""A submit request's jobs checked, pure: per job its answer or the job ready to store.

Copies of an array (``submit --cc``) are made one at a time as they are
checked (:mod:`fluxes.domain.jm.arrays`); identical jobspecs of one request are
checked once; once banks exist, every job is charged to an association
(:func:`charge`) and counts as active from then on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.domain.accounting.limits import HeldJob, Holdings, check_submit
from fluxes.domain.jm import arrays
from fluxes.domain.jm.feasibility import Feasibility, unknown_target
from fluxes.domain.jm.queues import QueueState
from fluxes.domain.jm.submission import PreparedJob, prepare_job
from fluxes.errors import FluxesError
from fluxes.messages.bounds import one_line

_ENCODER = msgspec.json.Encoder()


@dataclass(slots=True)
class Checked:
    """A submit request after its jobs were checked: a request-wide refusal
    (``answer``), or per job a placeholder or its answer (``results``) and the
    jobs that passed, by index (``prepared``)."""

    answer: proto.Reply | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    prepared: list[tuple[int, PreparedJob]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SubmitRules:
    """What a job is checked against: the configuration, the queue states, the
    inventory (None: the scheduler judges alone) and who owns the instance."""

    config: InstanceConfig
    queue_states: Mapping[str | None, QueueState]
    feasibility: Feasibility | None
    owner_uid: int


#: Charges a checked job to an association (raises ValueError/FluxesError to refuse it).
Charger = Callable[[PreparedJob, str, int], PreparedJob]


def _reason(exc: Exception) -> str:
    """The one line an exception refuses a job with."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_jobs(request: proto.SubmitJobs, user: str, uid: int, rules: SubmitRules,
               groups: Sequence[str] = (), done: Mapping[int, int] | None = None,
               charger: Charger | None = None) -> Checked:
    """Check a request's jobs; jobs in ``done`` (index -> id) exist already."""
    done = done or {}
    limits = rules.config.ingest
    try:
        ids = arrays.array_ids(request)
    except ValueError as exc:
        return Checked(proto.Reply(errors=[one_line(str(exc))]))
    count = len(request.jobs) if ids is None else len(ids)
    if not count:
        return Checked(proto.Reply(errors=["submit request has no jobs"]))
    if count > limits.max_jobs_per_request and not done:
        # before an array is expanded: its copies are never made
        return Checked(proto.Reply(errors=[f"request has {count} jobs, the limit is "
                                           f"{limits.max_jobs_per_request}"]))
    # an array's copies are made one at a time, as they are checked
    jobs = request.jobs if ids is None else arrays.copies(request.jobs[0], ids,
                                                         request.cc_var)
    out = Checked()
    cache: dict[bytes, PreparedJob | str] = {}
    for index, item in enumerate(jobs):
        created = done.get(index)
        if created is not None:
            out.results.append({"id": created})
            continue
        # identical jobspecs in one request (bulk submission) are checked once
        cache_key = _ENCODER.encode(item)
        found = cache.get(cache_key)
        if found is None:
            try:
                found = prepare_job(item_dict(item), uid, user, rules.config,
                                    rules.queue_states, groups=groups,
                                    is_owner=uid == rules.owner_uid,
                                    feasibility=rules.feasibility)
            except (ValueError, FluxesError) as exc:
                found = _reason(exc)
            cache[cache_key] = found
        if not isinstance(found, str) and charger is not None:
            try:
                found = charger(found, user, uid)
            except (ValueError, FluxesError) as exc:
                found = _reason(exc)
        if isinstance(found, str):
            out.results.append({"error": found})
        else:
            out.prepared.append((index, found))
            out.results.append({})
    return out


def charge(accounts: Accounts, held: Holdings, job: PreparedJob, user: str,
           uid: int) -> PreparedJob:
    """The association ``job`` is charged to, in its submit extras (``bank``); a
    PolicyError when the user may not submit it (no association, not in the bank,
    max-active-jobs reached). The job counts as active in ``held`` from here on."""
    info = job.info
    want = info.get("bank")
    duration = info.get("duration")
    pending = HeldJob(uid, want if isinstance(want, str) else None, False,
                      _int(info.get("nnodes")), _int(info.get("ncores")),
                      float(duration) if isinstance(duration, int | float) else 0.0)
    project = info.get("project")
    assoc = check_submit(accounts, held, user, pending, job.queue,
                         project if isinstance(project, str) else None)
    if assoc is None:
        return job
    held.add(accounts, pending._replace(bank=assoc.bank))
    return dataclasses.replace(job, info={
        **info, "bank": assoc.bank,
        "project": project if isinstance(project, str) else assoc.default_project})


def dependency_targets(checked: Iterable[Checked]) -> list[int]:
    """The jobs the checked jobs' dependencies name, each once, in order."""
    return sorted({dep.target for c in checked for _i, job in c.prepared
                   for dep in job.targets if dep.target is not None})


def to_create(checked: Checked, existing: set[int]) -> list[tuple[int, PreparedJob]]:
    """The checked jobs to create (by index); one whose dependency names a job not in
    ``existing`` gets its refusal in ``checked.results`` instead."""
    out = []
    for index, job in checked.prepared:
        missing = unknown_target(job.targets, existing) if job.targets else None
        if missing is not None:
            checked.results[index] = {"error": missing}
        else:
            out.append((index, job))
    return out


def _int(value: Any) -> int:
    """A count from submit extras (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def item_dict(item: proto.SubmitItem) -> dict[str, Any]:
    """A submit item as :func:`~fluxes.domain.jm.submission.prepare_job` reads it."""
    out: dict[str, Any] = {"flags": item.flags}
    if item.yaml is not None:
        out["yaml"] = item.yaml
    if item.jobspec is not None:
        out["jobspec"] = item.jobspec
    if item.urgency is not None:
        out["urgency"] = item.urgency
    return out
