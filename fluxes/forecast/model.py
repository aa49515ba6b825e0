"""What a forecast reads (a :class:`Snapshot` of the live state) and what it says."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.domain.sched.inventory import Inventory
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

__all__ = ["RUNTIME_SOURCES", "Forecast", "ForecastRun", "Running", "RuntimeSource",
           "Snapshot", "Waiting"]

#: How a job's run time is predicted: its time limit, or its user's history.
RuntimeSource = Literal["limit", "history"]
RUNTIME_SOURCES: Final = ("limit", "history")


@dataclass(frozen=True, slots=True)
class Running:
    """A job holding resources now."""

    id: int
    userid: int
    R: ResourceSet
    #: when its tasks started
    t_run: float
    #: its expiration (None: no time limit)
    expiration: float | None
    bank: str | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting for resources (SCHED), as the job manager would send it."""

    id: int
    userid: int
    urgency: int
    #: its priority now (the job manager's)
    priority: int
    t_submit: float
    #: the submit extras the job manager keeps (queue, duration, bank, ...)
    info: Mapping[str, Any]
    #: the scheduler request (``Request.to_wire``)
    request: str

    @property
    def limit(self) -> float:
        """Its time limit in seconds (inf: none)."""
        duration = self.info.get("duration")
        if isinstance(duration, int | float) and not isinstance(duration, bool) \
                and 0 < duration < math.inf:
            return float(duration)
        return math.inf


@dataclass(frozen=True)
class Snapshot:
    """The live state a forecast starts from (read-only)."""

    now: float
    config: InstanceConfig
    inventory: Inventory
    running: tuple[Running, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    #: ranks that get no new work
    drained: IDSet = field(default_factory=IDSet)
    #: the ``[resource]`` table (a graph pool when it describes one)
    table: Mapping[str, Any] | None = None
    #: banks and their running limits (None: no accounting)
    accounts: Accounts | None = None
    #: per user, their recent jobs' run times, newest last (the history predictor's input)
    history: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    #: jobs the forecast does not run (held, waiting on dependencies): why
    excluded: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Forecast:
    """One pending job's forecast."""

    id: int
    #: UNIX time it is expected to start (None: never, as far as the forecast sees)
    t_start: float | None
    #: its expected end (None: unknown or never)
    t_end: float | None = None
    ranks: str = ""
    nodelist: str = ""
    #: what the scheduler last said held it (a limit, a reservation, resources)
    reason: str = ""
    #: how its run time was predicted
    runtime: str = "limit"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"id": self.id, "t_forecast": self.t_start, "t_end": self.t_end,
                "ranks": self.ranks, "nodelist": self.nodelist, "reason": self.reason,
                "runtime": self.runtime}


@dataclass
class ForecastRun:
    """The forecasts of one snapshot, and the plan they come from."""

    now: float
    jobs: dict[int, Forecast]
    #: every job that held resources in the run: (ranks, start, end; None: never ends)
    spans: dict[int, tuple[IDSet, float, float | None]] = field(default_factory=dict)
    #: the run's cost (seconds of wall time) and scheduling passes
    elapsed: float = 0.0
    passes: int = 0
    #: False when the run stopped once the jobs asked about started (others left out)
    complete: bool = True

    def to_obj(self) -> dict[str, Any]:
        """JSON-ready form (the forecast cache)."""
        return {"now": self.now, "elapsed": self.elapsed, "passes": self.passes,
                "complete": self.complete,
                "jobs": [[f.id, f.t_start, f.t_end, f.ranks, f.nodelist, f.reason, f.runtime]
                         for f in self.jobs.values()],
                "spans": [[j, str(r), s, e] for j, (r, s, e) in self.spans.items()]}

    @classmethod
    def from_obj(cls, obj: Any) -> ForecastRun:
        """Decode :meth:`to_obj` output; ValueError when it is not one."""
        try:
            jobs = {int(j[0]): Forecast(int(j[0]), _time(j[1]), _time(j[2]), str(j[3]),
                                        str(j[4]), str(j[5]), str(j[6])) for j in obj["jobs"]}
            spans = {int(j): (IDSet(str(r)), float(s), _time(e)) for j, r, s, e in obj["spans"]}
            return cls(float(obj["now"]), jobs, spans, float(obj["elapsed"]),
                       int(obj["passes"]), bool(obj.get("complete", True)))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"bad forecast: {exc}") from None

    def behind(self, jobid: int) -> list[int]:
        """The jobs ``jobid`` waits behind: those holding some of the ranks it gets that end
        after now and before it starts, by end."""
        fc = self.jobs.get(jobid)
        if fc is None or fc.t_start is None or jobid not in self.spans:
            return []
        ranks, start, _end = self.spans[jobid]
        found = [(end, other) for other, (r, _s, end) in self.spans.items()
                 if other != jobid and end is not None and self.now < end <= start
                 and (r & ranks)]
        return [other for _end, other in sorted(found)]


def _time(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"not a time: {value!r:.40}")
