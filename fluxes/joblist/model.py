"""Pure fold of journal entries into job summaries and counters (no Redis).

A summary is the job's :class:`~fluxes.job.model.Job` record plus the
descriptive facts the journal carries in its extras (name, queue, task and
node counts on ``submit``; nodelist and ranks on ``alloc``). Counters count
jobs per state, per result and per queue, as ``flux jobs --stats`` shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes.job import events as ev
from fluxes.job.codec import job_from_json, job_to_json
from fluxes.job.model import Job, apply
from fluxes.job.states import JobResult, JobState


@dataclass(slots=True)
class JobSummary:
    """What the job list knows of one job."""

    job: Job
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> int:
        """The job id."""
        return self.job.id

    @property
    def queue(self) -> str:
        """The job's queue ("" for the anonymous queue)."""
        queue = self.info.get("queue")
        return queue if isinstance(queue, str) else ""

    def to_json(self) -> bytes:
        """Compact JSON for the read-model hash."""
        return orjson.dumps({"j": job_to_json(self.job), "i": self.info})

    @classmethod
    def from_json(cls, raw: bytes | str) -> JobSummary:
        """Decode what :meth:`to_json` wrote; ValueError when it is not a summary."""
        try:
            obj = orjson.loads(raw)
            return cls(job_from_json(obj["j"]), dict(obj.get("i") or {}))
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"bad job summary: {exc}") from None


def counter_keys(summary: JobSummary) -> list[str]:
    """The counters a job in its current state contributes to."""
    job = summary.job
    state = job.state.name or "NEW"
    keys = [f"state:{state}"]
    queue = summary.queue
    if queue:
        keys.append(f"queue:{queue}:state:{state}")
    result = job.result
    if result is not None:
        keys.append(f"result:{result.name}")
        if queue:
            keys.append(f"queue:{queue}:result:{result.name}")
    return keys


@dataclass
class Change:
    """The effect of one journal entry on the read model."""

    summary: JobSummary
    created: bool
    became_inactive: bool
    counters: Counter[str]


def apply_entry(summary: JobSummary | None, jobid: int, event: ev.Event,
                extra: Mapping[str, Any]) -> Change:
    """Fold one journal entry into ``summary`` (None for a job not seen before).

    Raises TransitionError/EventError like :func:`fluxes.job.model.apply`.
    """
    created = summary is None
    if summary is None:
        summary = JobSummary(Job(jobid))
        before: list[str] = []
    else:
        before = counter_keys(summary)
    was_inactive = summary.job.state is JobState.INACTIVE
    job = apply(event, summary.job)
    info = summary.info
    if extra:
        info = {**info, **extra}
    if isinstance(event, ev.JobspecUpdate):
        info = _apply_jobspec_update(info, event.updates)
    new = JobSummary(job, info)
    delta: Counter[str] = Counter()
    for key in before:
        delta[key] -= 1
    for key in counter_keys(new):
        delta[key] += 1
    delta = Counter({k: v for k, v in delta.items() if v})
    return Change(new, created, job.state is JobState.INACTIVE and not was_inactive, delta)


def _apply_jobspec_update(info: dict[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(info)
    if "attributes.system.duration" in updates:
        out["duration"] = updates["attributes.system.duration"]
    if "attributes.system.queue" in updates:
        out["queue"] = updates["attributes.system.queue"]
    if "attributes.system.job.name" in updates:
        out["name"] = updates["attributes.system.job.name"]
    return out


@dataclass
class ReadModel:
    """A whole read model in memory: what the Redis one must equal after any crash."""

    summaries: dict[int, JobSummary] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)

    def feed(self, entries: Iterable[tuple[int, ev.Event, Mapping[str, Any]]]) -> None:
        """Fold journal entries (jobid, event, extras) in order."""
        for jobid, event, extra in entries:
            change = apply_entry(self.summaries.get(jobid), jobid, event, extra)
            self.summaries[jobid] = change.summary
            self.counters.update(change.counters)
            self.counters = +self.counters  # drop zero counts, as Redis HINCRBY to 0 keeps them


def result_name(job: Job) -> str:
    """Short result text (``COMPLETED``...) or "" while active."""
    result = job.result
    return result.name if isinstance(result, JobResult) and result.name else ""
