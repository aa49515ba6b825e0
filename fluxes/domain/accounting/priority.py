"""The multi-factor priority plugin (Slurm's ``priority/multifactor``, flux-accounting's
``mf_priority``): priority = the sum of weight x factor over five factors, each 0..1.

* **fairshare**: the job's association's fair-share factor
  (:mod:`fluxes.domain.accounting.fairshare`);
* **age**: time since submission over ``max-age``, at most 1;
* **job_size**: the larger of the job's share of the instance's cores and of
  its nodes (``1 -`` that with ``favor-small``);
* **queue**: the queue's ``queue-priority`` over the largest one configured;
* **urgency**: the urgency over 31.

The plugin implements :class:`fluxes.domain.jm.priority.PriorityPlugin`; hold
(urgency 0) and expedite (31) stay with :func:`~fluxes.domain.jm.priority.job_priority`,
around any plugin. A computed priority is kept within 1..MAX_PRIORITY-1, so
that no factor can make a job look held or expedited.

:class:`~fluxes.domain.jm.priority.PriorityInput` carries the urgency, user,
submit time and queue; the bank and the size come from ``facts(jobid)``, which
the job manager answers from its job records (the journal's submit extras).
``update(table)`` installs a new fair-share table and says whether any factor
changed: that is when the job manager reprioritizes every pending job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple

from fluxes.domain.accounting.config import Weights
from fluxes.domain.accounting.fairshare import FairShareTable
from fluxes.domain.jm.priority import (
    MAX_PRIORITY,
    MAX_URGENCY,
    PriorityInput,
    job_priority,
)

#: Factor names, in the order a breakdown shows them.
FACTORS: Final = ("fairshare", "age", "job_size", "queue", "urgency")


class JobFacts(NamedTuple):
    """What the plugin needs beyond :class:`PriorityInput`: the bank charged (None: the
    user's default) and the job's size."""

    bank: str | None = None
    ncores: int = 1
    nnodes: int = 0


class Breakdown(NamedTuple):
    """Why a job has its priority: each factor, its weight and what it adds."""

    jobid: int
    factors: dict[str, float]
    weights: dict[str, int]
    #: weight x factor, by factor name
    parts: dict[str, float]
    #: what the plugin computes (before hold/expedite)
    computed: int
    #: what the job gets (hold and expedite applied)
    priority: int
    bank: str | None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (``fluxes job priority --json``)."""
        return {"id": self.jobid, "priority": self.priority, "computed": self.computed,
                "bank": self.bank,
                "factors": {name: {"factor": self.factors[name], "weight": self.weights[name],
                                   "priority": self.parts[name]} for name in FACTORS}}


def facts_from_info(info: Mapping[str, Any]) -> JobFacts:
    """A job's facts from its record's journal extras (``bank``, ``ncores``, ``nnodes`` of
    the submit entry): what the job manager's ``facts`` callback returns."""
    bank = info.get("bank")

    def count(key: str, default: int) -> int:
        value = info.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    return JobFacts(bank if isinstance(bank, str) and bank else None, count("ncores", 1),
                    count("nnodes", 0))


def _no_facts(_jobid: int) -> JobFacts | None:
    return None


def _with_edits(weights: Weights, table: FairShareTable) -> Weights:
    """``weights`` with the weights ``fluxes account edit-factor`` and the queue priorities
    ``add-queue`` set (in the table)."""
    if not table.weights and not table.queue_priority:
        return weights
    edits: dict[str, Any] = {name: value for name, value in table.weights.items()
                             if name in FACTORS}
    if table.queue_priority:
        edits["queue_priority"] = {**weights.queue_priority, **table.queue_priority}
    return replace(weights, **edits)


class MultiFactorPriority:
    """Priority from fair share, age, job size, queue and urgency (see the module)."""

    name: Final = "multifactor"

    def __init__(self, weights: Weights, table: FairShareTable | None = None, *,
                 facts: Callable[[int], JobFacts | None] = _no_facts,
                 clock: Callable[[], float] = time.time, total_cores: int = 0,
                 total_nodes: int = 0) -> None:
        #: the configuration's weights; ``self.weights`` adds the table's edit-factor ones
        self.base_weights = weights
        self.table = table if table is not None else FairShareTable()
        self.facts = facts
        self.clock = clock
        self.total_cores = total_cores
        self.total_nodes = total_nodes
        self._set_weights(_with_edits(weights, self.table))

    def _set_weights(self, weights: Weights) -> None:
        self.weights = weights
        self._queue_top = max(weights.queue_priority.values(), default=0)

    def update(self, table: FairShareTable) -> bool:
        """Install a new fair-share table; True when any association's factor changed (the
        job manager then recomputes every pending job's priority)."""
        changed = (table.factors != self.table.factors or table.enabled != self.table.enabled
                   or table.default_banks != self.table.default_banks
                   or table.weights != self.table.weights
                   or table.queue_priority != self.table.queue_priority)
        self.table = table
        self._set_weights(_with_edits(self.base_weights, table))
        return changed

    def reprioritize_all(self) -> bool:
        """True: age and fair share drift with time, so priorities are recomputed
        periodically."""
        return True

    def factors(self, job: PriorityInput, facts: JobFacts | None = None) -> dict[str, float]:
        """Every factor of ``job`` (0..1), by name."""
        if facts is None:
            facts = self.facts(job.jobid) or JobFacts()
        w = self.weights
        age = max(self.clock() - job.t_submit, 0.0)
        size = 0.0
        if self.total_cores > 0:
            size = facts.ncores / self.total_cores
        if self.total_nodes > 0:
            size = max(size, facts.nnodes / self.total_nodes)
        size = min(size, 1.0)
        queue = 0.0
        if job.queue is not None and self._queue_top > 0:
            queue = w.queue_priority.get(job.queue, 0) / self._queue_top
        return {
            "fairshare": self.table.factor(job.userid, facts.bank),
            "age": min(age / w.max_age, 1.0) if w.max_age > 0 else 0.0,
            "job_size": 1.0 - size if w.favor_small else size,
            "queue": queue,
            "urgency": job.urgency / MAX_URGENCY,
        }

    def _compute(self, factors: dict[str, float]) -> tuple[dict[str, float], int]:
        weights = self.weights.as_dict()
        parts = {name: weights[name] * factors[name] for name in FACTORS}
        total = round(sum(parts.values()))
        return parts, min(max(total, 1), MAX_PRIORITY - 1)

    def priority(self, job: PriorityInput) -> int:
        """The priority of ``job`` (1..MAX_PRIORITY-1)."""
        return self._compute(self.factors(job))[1]

    def breakdown(self, job: PriorityInput, facts: JobFacts | None = None) -> Breakdown:
        """Each factor of ``job``, its weight and its part of the priority."""
        if facts is None:
            facts = self.facts(job.jobid) or JobFacts()
        factors = self.factors(job, facts)
        parts, computed = self._compute(factors)
        final = job_priority(_Fixed(computed), job)
        return Breakdown(job.jobid, factors, self.weights.as_dict(), parts, computed, final,
                         facts.bank)


@dataclass
class ReprioritizeTimer:
    """When the job manager gives the plugin a new fair-share table and recomputes every
    pending job: every ``interval`` (age drifts, banks change), and soon after usage
    changed (the accounting worker's usage marks moved) but never sooner than
    ``min_interval`` after the last time, so that a busy instance, whose usage moves
    with every block the fold writes, is not reprioritized at every step."""

    interval: float
    min_interval: float
    #: when it last reprioritized (the clock of the caller's choice)
    last: float = float("-inf")
    #: the usage marks (one per partition) its last fair-share table was built after
    marks: tuple[str | None, ...] | None = None

    def should_look(self, now: float) -> bool:
        """Whether reading the usage marks is worth it now: a change seen now may act."""
        return now - self.last >= min(self.min_interval, self.interval)

    def due(self, now: float, marks: Sequence[str | None] | None = None) -> bool:
        """Whether to reprioritize now, given the usage marks just read (None: not read)."""
        if now - self.last >= self.interval:
            return True
        return (marks is not None and tuple(marks) != self.marks
                and now - self.last >= self.min_interval)

    def done(self, now: float, marks: Sequence[str | None] | None) -> None:
        """It reprioritized at ``now`` with usage as of ``marks`` (read before the table)."""
        self.last = now
        self.marks = None if marks is None else tuple(marks)


class _Fixed:
    """A plugin answering one value, to apply hold/expedite to a computed priority."""

    def __init__(self, value: int) -> None:
        self.value = value

    def priority(self, job: PriorityInput) -> int:
        """The fixed value."""
        return self.value
