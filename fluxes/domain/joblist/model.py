"""Pure fold of journal entries into job summaries and counters (no Redis).

A summary is the job's :class:`~fluxes.domain.job.model.Job` record plus the
descriptive facts the journal carries in its extras (name, queue, task and
node counts on ``submit``; nodelist and ranks on ``alloc``). Counters count
jobs per state, per result and per queue, as ``flux jobs --stats`` shows.
"""

from __future__ import annotations

import functools
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

_INACTIVE = JobState.INACTIVE


def counter_keys(summary: JobSummary) -> tuple[str, ...]:
    """The counters a job in its current state contributes to."""
    job = summary.job
    return _counter_keys(job.state, summary.queue, job.result)


@functools.lru_cache(maxsize=1024)
def _counter_keys(state: JobState, queue: str | None, result: JobResult | None
                  ) -> tuple[str, ...]:
    """The counter keys of a job in ``state`` (of ``queue``, with ``result``): a few
    distinct combinations, built once each (every job of every block the job list
    folds asks)."""
    name = state.name or "NEW"
    keys = [f"state:{name}"]
    if queue:
        keys.append(f"queue:{queue}:state:{name}")
    if result is not None:
        keys.append(f"result:{result.name}")
        if queue:
            keys.append(f"queue:{queue}:result:{result.name}")
    return tuple(keys)


@dataclass(slots=True)
class Change:
    """The effect of one journal entry on the read model (``counters``: key -> delta)."""

    summary: JobSummary
    created: bool
    became_inactive: bool
    counters: dict[str, int]


def apply_entry(summary: JobSummary | None, jobid: int, event: ev.Event,
                extra: Mapping[str, Any]) -> Change:
    """Fold one journal entry into ``summary`` and say what changed for the counters."""
    return change_between(summary, apply_record(summary, jobid, event, extra))


def change_between(old: JobSummary | None, new: JobSummary) -> Change:
    """What the read model must change to go from ``old`` (None: the job was unknown)
    to ``new``: one change for any number of entries folded in between, so a block
    that takes a job through its whole life counts it once, not once per entry."""
    # Plain dict arithmetic: a job's keys are distinct, and this runs for every job of
    # every block the job list folds (a Counter's constructor and subtract cost ~4x more).
    added = counter_keys(new)
    inactive = new.job.state is _INACTIVE
    if old is None:
        return Change(new, True, inactive, dict.fromkeys(added, 1))
    removed = counter_keys(old)
    if removed is added:  # the keys are interned per (state, queue, result): the usual case
        return Change(new, False, inactive and old.job.state is not _INACTIVE, {})
    delta: dict[str, int] = {}
    if removed != added:
        delta = dict.fromkeys(added, 1)
        for key in removed:
            if delta.pop(key, 0) == 0:
                delta[key] = -1
    return Change(new, False, inactive and old.job.state is not _INACTIVE, delta)


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
