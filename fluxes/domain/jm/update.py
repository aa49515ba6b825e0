"""``fluxes update``, pure: which keys may change, relative durations, and the checks a
pending job's new jobspec passes (the submission's own), without Redis.

An update is a set of period-delimited jobspec keys (RFC 21 ``jobspec-update``:
every key under ``attributes.``) and values. The ingest resolves it here
(:func:`plan_update`) against the job as stored, then the job manager applies
it (a ``jobspec-update`` event for a pending job, a ``resource-update`` with a
new expiration for a running one) if the job did not change meanwhile.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from fluxes.config import InstanceConfig
from fluxes.domain.jm.feasibility import Feasibility
from fluxes.domain.jm.queues import QueueState
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.request import Request
from fluxes.errors import PolicyError
from fluxes.formats.fsd import parse_duration
from fluxes.formats.jobspec import Jobspec

DURATION = "attributes.system.duration"
QUEUE = "attributes.system.queue"
NAME = "attributes.system.job.name"

#: Short names for the keys that may be updated, as flux's ``flux update`` takes them.
ALIASES = {"duration": DURATION, "queue": QUEUE, "name": NAME}
#: The keys an update may name (all of a pending job; only the duration of a running one).
UPDATABLE = frozenset(ALIASES.values())
#: Set on a job the instance owner updated past the limits: its owner may not update it.
IMMUTABLE_FLAG = "immutable"


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    """A checked update: the ``jobspec-update`` context, and (pending job) the scheduler's
    new request (``Request.to_wire``; None when it cannot represent the job)."""

    updates: dict[str, Any]
    request: str | None = None


def parse_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` words as an update: a value is JSON when it parses as JSON, else
    the text itself (so ``name=foo`` and ``duration=+1h`` need no quotes)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            value: Any = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        out[key] = value
    return out


def full_key(key: str) -> str:
    """The jobspec path ``key`` stands for (an alias, or a key flux would prefix with
    ``attributes.system.``); PolicyError when it is not one an update may change."""
    path = ALIASES.get(key)
    if path is None:
        top = key.split(".", 1)[0]
        path = key if top in ("attributes", "tasks", "resources") else f"attributes.system.{key}"
    if path not in UPDATABLE:
        raise PolicyError(f"updating {key!r} is not supported (only duration, queue, name)")
    return path


def resolve(updates: Mapping[str, Any], current_duration: float) -> dict[str, Any]:
    """The update with full keys and checked values; a duration ``+FSD``/``-FSD`` is
    relative to ``current_duration`` (seconds, 0 for no limit)."""
    if not updates:
        raise PolicyError("no updates given")
    out: dict[str, Any] = {}
    for key, value in updates.items():
        path = full_key(key)
        if path in out:
            raise PolicyError(f"{key!r} is given twice")
        if path == DURATION:
            out[path] = _duration(value, current_duration)
        elif isinstance(value, str) and value:
            out[path] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = str(value)  # name=123 means the text, as typed
        else:
            raise PolicyError(f"{key}: expected a non-empty string")
    return out


def _duration(value: Any, current: float) -> float:
    """A new duration in seconds from an FSD or a relative ``+FSD``/``-FSD``."""
    sign = value[0] if isinstance(value, str) and value[:1] in ("+", "-") else ""
    try:
        amount = parse_duration(value[1:] if sign else value)
    except ValueError as exc:
        raise PolicyError(f"duration: {exc}") from None
    if not math.isfinite(amount):
        raise PolicyError("duration must be finite (0 means no limit)")
    if not sign:
        return float(amount)
    if not current:
        raise PolicyError("the job has no duration limit: a relative update needs one")
    new = current + amount if sign == "+" else current - amount
    if new <= 0:
        raise PolicyError(f"duration {value} would leave {new:g}s: it must stay > 0")
    return float(new)


def updated_jobspec(jobspec: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``jobspec`` with the updates' paths set."""
    out = copy.deepcopy(dict(jobspec))
    for path, value in updates.items():
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    return out


def plan_update(submitted: Mapping[str, Any], effective: Mapping[str, Any],
                earlier: Mapping[str, Any], updates: Mapping[str, Any], *, running: bool,
                config: InstanceConfig, userid: int, username: str | None,
                groups: Sequence[str] = (),
                queue_states: Mapping[str | None, QueueState] | None = None,
                check_limits: bool = True,
                feasibility: Feasibility | None = None) -> UpdatePlan:
    """Check an update of a job: ``submitted`` its jobspec as submitted, ``effective``
    the one it runs with (defaults applied), ``earlier`` its earlier updates.

    A running job may only have its duration changed (the caller allows that to
    the instance owner only). A pending job's jobspec with every update applied
    goes through the submission's queue checks (``check_limits`` False skips the
    size and duration limits) and, with ``feasibility``, the scheduler's.
    """
    current = earlier.get(DURATION)
    if not isinstance(current, int | float) or isinstance(current, bool):
        current = float(effective.get("attributes", {}).get("system", {}).get("duration", 0)
                        or 0)
    resolved = resolve(updates, float(current))
    if running:
        if set(resolved) != {DURATION}:
            raise PolicyError("only the duration of a running job may be updated")
        if not resolved[DURATION]:
            raise PolicyError("a running job's duration cannot become unlimited")
        return UpdatePlan(resolved)
    try:
        spec = Jobspec.from_dict(updated_jobspec(submitted, {**earlier, **resolved}))
    except ValueError as exc:
        raise PolicyError(str(exc).splitlines()[0]) from None
    admission = config.queues.admit(spec, userid, username, groups, queue_states,
                                    check_limits=check_limits)
    full = admission.jobspec
    if feasibility is not None:
        feasibility.check(full)
    try:
        request: str | None = Request.from_jobspec(full).to_wire()
    except (ValueError, InfeasibleRequest):
        request = None
    return UpdatePlan(resolved, request)


def current_jobspec(jobspec: Mapping[str, Any],
                    updates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The jobspec with the contexts of its ``jobspec-update`` events applied in order
    (RFC 21: each sets period-delimited keys), what ``fluxes job info ID jobspec``
    shows as flux's does; ValueError for a context naming no path."""
    out = copy.deepcopy(dict(jobspec))
    for context in updates:
        for path in context:
            if not isinstance(path, str) or not all(path.split(".")):
                raise ValueError(f"jobspec-update: bad key {str(path)[:40]!r}")
        out = updated_jobspec(out, context)
    return out


def current_r(r: Mapping[str, Any], updates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """R with the contexts of its ``resource-update`` events applied in order (RFC 21:
    ``expiration`` replaces ``execution.expiration``)."""
    out = copy.deepcopy(dict(r))
    for context in updates:
        expiration = context.get("expiration")
        if expiration is None:
            continue
        execution = out.get("execution")
        if not isinstance(execution, dict):
            raise ValueError("resource-update: R has no execution object")
        execution["expiration"] = expiration
    return out
