"""Pure fold of journal entries into job summaries and counters (no Redis).

A summary is the job's :class:`~fluxes.domain.job.model.Job` record plus the
descriptive facts the journal carries in its extras (name, queue, task and
node counts on ``submit``; nodelist and ranks on ``alloc``). Counters count
jobs per state, per result and per queue, as ``flux jobs --stats`` shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job
from fluxes.domain.job.record import JobRecord, apply_record
from fluxes.domain.job.states import JobResult, JobState
from fluxes.domain.retention import PURGE_EVENT

#: The read model keeps one record per job.
JobSummary = JobRecord


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
    """Fold one journal entry into ``summary`` and say what changed for the counters."""
    return change_between(summary, apply_record(summary, jobid, event, extra))


def change_between(old: JobSummary | None, new: JobSummary) -> Change:
    """What the read model must change to go from ``old`` (None: the job was unknown)
    to ``new``: one change for any number of entries folded in between, so a block
    that takes a job through its whole life counts it once, not once per entry."""
    delta: Counter[str] = Counter(counter_keys(new))
    if old is not None:
        delta.subtract(counter_keys(old))
    delta = Counter({k: v for k, v in delta.items() if v})
    was_inactive = old is not None and old.job.state is JobState.INACTIVE
    return Change(new, old is None, new.job.state is JobState.INACTIVE and not was_inactive,
                  delta)


def removal(old: JobSummary | None) -> Counter[str]:
    """The counter changes of a job leaving the read model (purged): its counts go."""
    delta: Counter[str] = Counter()
    if old is not None:
        delta.subtract(counter_keys(old))
    return delta


@dataclass
class ReadModel:
    """A whole read model in memory: what the Redis one must equal after any crash."""

    summaries: dict[int, JobSummary] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)

    def feed(self, entries: Iterable[tuple[int, ev.Event, Mapping[str, Any]]]) -> None:
        """Fold journal entries (jobid, event, extras) in order; a ``purge`` entry takes
        its job out, with its counts."""
        for jobid, event, extra in entries:
            if event.event_name == PURGE_EVENT:
                self.counters.update(removal(self.summaries.pop(jobid, None)))
                self.counters = +self.counters
                continue
            change = apply_entry(self.summaries.get(jobid), jobid, event, extra)
            self.summaries[jobid] = change.summary
            self.counters.update(change.counters)
            self.counters = +self.counters  # drop zero counts, as Redis HINCRBY to 0 keeps them


def result_name(job: Job) -> str:
    """Short result text (``COMPLETED``...) or "" while active."""
    result = job.result
    return result.name if isinstance(result, JobResult) and result.name else ""
