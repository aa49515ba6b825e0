"""Submission checks, pure: a user's request in, jobs ready to store (or errors) out.

The ingest worker (``workers/ingest.py``) reads requests, calls
:func:`prepare_job` for each jobspec, assigns FLUIDs and commits what this
module prepared. Nothing here touches Redis, so every rejection path is unit
tested. A job no configured node could ever run is refused here with the
scheduler's note (:class:`fluxes.domain.jm.feasibility.Feasibility`); the job ids its
dependencies name are returned for the worker to look up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from fluxes.config import InstanceConfig
from fluxes.domain.jm.content import JobContent, job_content, json_bytes
from fluxes.domain.jm.depend import Dependency
from fluxes.domain.jm.feasibility import Feasibility, dependency_targets
from fluxes.domain.jm.priority import DEFAULT_URGENCY, MAX_URGENCY, MIN_URGENCY
from fluxes.domain.jm.queues import QueueState
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.request import Request
from fluxes.errors import JobspecError, PolicyError
from fluxes.formats.jobspec import Jobspec


@dataclass(frozen=True, slots=True)
class PreparedJob:
    """A job that passed every check, ready to be given an id and stored."""

    jobspec: bytes  # as submitted (JSON)
    jobspec_full: bytes | None  # with defaults applied, when different
    queue: str | None
    urgency: int
    flags: int
    info: dict[str, Any]  # the journal extras of its submit event
    #: its dependencies that name a job: each target must exist (the worker looks)
    targets: tuple[Dependency, ...] = ()
    #: what it asks the scheduler for (``Request.to_wire``); None when the scheduler
    #: cannot represent it (it then reads the jobspec and denies it with its note)
    request: str | None = None
    #: the jobspecs as content-addressed blobs, as they are stored
    content: JobContent | None = None


def prepare_job(item: Any, userid: int, username: str | None, config: InstanceConfig,
                queue_states: Mapping[str | None, QueueState] | None = None,
                is_owner: bool = False, groups: Sequence[str] = (),
                feasibility: Feasibility | None = None) -> PreparedJob:
    """Check one submission item ``{"jobspec": obj | "yaml": text, "urgency", "flags"}``.

    Raises JobspecError or PolicyError (both ValueError) with one clear line,
    or InfeasibleRequest with the scheduler's note when ``feasibility`` (the
    instance's inventory) says no node could ever run the job.
    """
    if not isinstance(item, Mapping):
        raise JobspecError("submission item must be an object")
    limits = config.ingest
    urgency = item.get("urgency", DEFAULT_URGENCY)
    if isinstance(urgency, bool) or not isinstance(urgency, int) \
            or not MIN_URGENCY <= urgency <= MAX_URGENCY:
        raise PolicyError(f"urgency must be an integer {MIN_URGENCY}-{MAX_URGENCY}")
    if urgency > DEFAULT_URGENCY and not is_owner:
        raise PolicyError("only the instance owner can submit with urgency > default")
    flags = item.get("flags", 0)
    if isinstance(flags, bool) or not isinstance(flags, int) or flags < 0:
        raise PolicyError("flags must be a non-negative integer")
    if "yaml" in item:
        text = item["yaml"]
        if not isinstance(text, str | bytes):
            raise JobspecError("yaml must be a string")
        spec = Jobspec.from_yaml(text, max_bytes=limits.max_jobspec_bytes)
        original = json_bytes(spec.to_dict())
    else:
        obj = item.get("jobspec")
        if not isinstance(obj, Mapping):
            raise JobspecError("jobspec must be an object")
        try:
            original = json_bytes(obj)
        except orjson.JSONEncodeError as exc:  # a TypeError: not what a JSON request holds
            raise JobspecError(f"jobspec is not JSON: {exc}") from None
        if len(original) > limits.max_jobspec_bytes:
            raise JobspecError(f"jobspec is {len(original)} bytes, the limit is "
                               f"{limits.max_jobspec_bytes}")
        spec = Jobspec.from_dict(obj)
    _check_sizes(spec, config)
    admission = config.queues.admit(spec, userid, username, groups, queue_states)
    full = admission.jobspec
    request = _request_of(full)
    if feasibility is not None:
        feasibility.check(full)  # with the queue's requires and defaults, as scheduled
    full_json = json_bytes(full.to_dict())
    info: dict[str, Any] = {
        "name": full.name, "ntasks": _ntasks(full), "nnodes": full.nnodes,
        "ncores": full.ncores, "ngpus": full.ngpus, "duration": full.duration,
    }
    if admission.queue is not None:
        info["queue"] = admission.queue
    # the accounting the job asks for (-B, --setattr=system.project=...)
    info.update({key: value for key, value in (("bank", full.bank), ("project", full.project))
                 if value is not None})
    if full.dependencies:
        info["dependencies"] = list(full.dependencies)
    if full.cwd:
        info["cwd"] = full.cwd
    stored_full = None if full_json == original else full_json
    return PreparedJob(original, stored_full, admission.queue, urgency, flags, info,
                       dependency_targets(full), request, job_content(original, stored_full))


def _request_of(spec: Jobspec) -> str | None:
    """The scheduler's request for ``spec`` (queue ``requires`` and defaults applied) in
    wire form, so the scheduler never parses the jobspec again; None when it cannot
    be represented."""
    try:
        return Request.from_jobspec(spec).to_wire()
    except (ValueError, InfeasibleRequest):
        return None


def _ntasks(spec: Jobspec) -> int:
    """Total tasks requested (per_slot x slots, per_resource x resources, or the total)."""
    total = 0
    for task in spec.tasks:
        count = task.get("count", {})
        if "total" in count:
            total += int(count["total"])
        elif "per_slot" in count:
            total += int(count["per_slot"]) * max(spec.nslots, 1)
        elif "per_resource" in count:
            # every resource of that type in the request (an upper bound when the
            # type also appears outside the slot): a limit must not be bypassed
            per = count["per_resource"]
            total += int(per["count"]) * max(spec.resource_counts.get(per["type"], 0), 1)
        else:
            total += max(spec.nslots, 1)
    return total


#: Largest resource total a job may request: totals multiply through nested
#: counts, and past 64 bits they could not even be written to the journal.
MAX_TOTAL = 2**63 - 1


def _amount(n: int) -> str:
    """``n`` for a message; nested counts can multiply into hundreds of digits."""
    return str(n) if n <= MAX_TOTAL else "more than 2^63-1"


def _check_sizes(spec: Jobspec, config: InstanceConfig) -> None:
    limits = config.ingest
    ntasks = _ntasks(spec)
    if ntasks > limits.max_tasks:
        raise PolicyError(f"job requests {_amount(ntasks)} tasks, the limit is "
                          f"{limits.max_tasks}")
    for noun, total in (("nodes", spec.nnodes), ("slots", spec.nslots), ("cores", spec.ncores),
                        ("gpus", spec.ngpus)):
        if total > MAX_TOTAL:
            raise PolicyError(f"job requests {_amount(total)} {noun}")
    for task in spec.tasks:  # every task's command, not just the first one's
        size = sum(len(arg.encode()) + 1 for arg in task["command"])
        if size > limits.max_command_bytes:
            raise PolicyError(f"command line is {size} bytes, the limit is "
                              f"{limits.max_command_bytes}")
    env = spec.environment or {}
    env_size = sum(len(k.encode()) + len((v or "").encode()) + 2 for k, v in env.items())
    if env_size > limits.max_environment_bytes:
        raise PolicyError(f"environment is {env_size} bytes, the limit is "
                          f"{limits.max_environment_bytes}")
