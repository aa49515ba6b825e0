"""A resource pool on a resource graph, with the interface of today's ``ResourcePool``.

:class:`GraphPool` answers what the scheduler's policies
(:class:`~fluxes.domain.sched.policy.Scheduler`) and the scheduler worker ask
:class:`~fluxes.domain.sched.pool.ResourcePool`: ``check``, ``alloc`` (now or
a reserved window), ``free``, ``adopt`` (hello recovery), ``earliest_start``,
``reservations`` / ``clear_reservations`` / ``cancel_reservation``,
``mark_down`` / ``mark_up`` / ``down``, ``allocated`` / ``available``,
``has_free``, ``counts``, ``jobids``, ``allocation_of``, ``inventory`` and
``save`` / ``load``, with the same exceptions (``InfeasibleRequest``: never,
``InsufficientResources``: not now, ValueError: bad arguments).

Requests are today's :class:`~fluxes.domain.sched.request.Request` (read as
today's pool reads them) or a :class:`~fluxes.domain.graph.wants.GraphRequest`
carrying any resources tree.  Placement policies: today's names
(``first-fit`` and ``lonode`` = ``low``, ``hinode`` = ``high``, ``best-fit``,
``worst-fit``) and the graph's (``low``, ``high``, ``first``, ``best``,
``worst``).  The R returned carries the ``scheduling`` subgraph (RFC 20)
unless the pool is built with ``scheduling=False``; :meth:`GraphPool.adopt`
reads it back.  See ``docs/resource-graph.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fluxes.domain.graph.jgf import read_jgf, write_jgf
from fluxes.domain.graph.match import Need, make_hold
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.output import rset_of
from fluxes.domain.graph.recovery import (
    check_free,
    inventory_of,
    picks_of_graph,
    picks_of_rset,
    r_document,
    r_times,
)
from fluxes.domain.graph.state import Hold
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import GraphRequest, wants_of_request
from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.records import check_jobid, check_time
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.shapes import Shape
from fluxes.formats import constraints as _constraints
from fluxes.formats.constraints import Constraint
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

__all__ = ["PLACEMENTS", "GraphPool", "SchedulerPool"]

#: Placement policy names accepted -> the matcher's policy.
PLACEMENTS: Final = {"first-fit": "low", "lonode": "low", "hinode": "high",
                     "best-fit": "best", "worst-fit": "worst", "low": "low", "high": "high",
                     "first": "first", "best": "best", "worst": "worst"}

_INF: Final = math.inf
_PLANS_MAX: Final = 4096


@dataclass(slots=True)
class _Plan:
    """A request shape compiled for this pool."""

    needs: tuple[Need, ...]
    allowed: frozenset[int] | None
    note: str | None
    totals: dict[str, int]


class GraphPool:
    """Allocations and reservations on a :class:`ResourceGraph` (see the module docstring)."""

    def __init__(self, graph: ResourceGraph, clock: Callable[[], float] = time.time, *,
                 scheduling: bool = True) -> None:
        """Start with everything free and up; *clock* gives "now" when a call does not."""
        self.graph = graph
        self.scheduling = scheduling
        self._clock = clock
        self._trav = Traverser(graph)
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._rsets: dict[int, ResourceSet] = {}
        self._inv = inventory_of(graph)
        g = graph
        self._leaves = [(v, g.rank_of(v), g.types[v] == "core", g.ids[v]) for v in range(len(g))
                        if g.types[v] in ("core", "gpu") and g.rank_of(v) >= 0]

    # -- requests ------------------------------------------------------------------------

    @property
    def inventory(self) -> Inventory:
        """The hosts as execution targets (those holding a core or gpu)."""
        return self._inv

    def _plan(self, request: Request) -> _Plan:
        """The compiled, cached form of *request*'s shape."""
        if not isinstance(request, Request):
            raise ValueError(f"expected a Request, got {type(request).__name__}")
        key = request.placement_key
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLANS_MAX:
                self._plans.clear()
            plan = self._plans[key] = self._make_plan(request)
        return plan

    def _make_plan(self, request: Request) -> _Plan:
        """Compile *request* and decide once whether it could ever fit."""
        wants = request.wants if isinstance(request, GraphRequest) else wants_of_request(request)
        trav = self._trav
        needs = trav.compile(wants)
        allowed = None
        note = None
        if request.constraint is not None:
            ranks = request.constraint.match_ranks(self._inv.rset())
            allowed = frozenset(ranks)
            if not allowed:
                note = f"no node matches {request.constraint}"
        missing = trav.missing(needs)
        if missing:
            note = f"job requests {', '.join(missing)}, which the graph has none of"
        if note is None and not trav.satisfiable(needs, allowed):
            note = f"job requests {request}, which this graph cannot hold even when empty"
        return _Plan(needs, allowed, note, trav._totals(needs))

    def check(self, request: Request) -> None:
        """Raise InfeasibleRequest if *request* could never run here (drained nodes count)."""
        note = self._plan(request).note
        if note is not None:
            raise InfeasibleRequest(note)

    @staticmethod
    def _policy(policy: str) -> str:
        """The matcher's policy for a placement name."""
        found = PLACEMENTS.get(policy)
        if found is None:
            raise ValueError(f"alloc: unknown policy {policy!r} (expected one of "
                             f"{', '.join(PLACEMENTS)})")
        return found

    def _now(self, now: float | None) -> float:
        """*now*, or the clock's time."""
        return self._clock() if now is None else check_time(now, "now")

    @staticmethod
    def _length(request: Request, duration: float | None) -> float:
        """The window length: *duration*, else the request's; 0 means unlimited."""
        value = request.duration if duration is None else duration
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                value >= 0 and not math.isnan(value)):
            raise ValueError(f"duration: expected seconds >= 0, got {value!r}")
        return float(value) if value else _INF

    def _short(self, request: Request, plan: _Plan) -> str:
        """Why *request* does not fit now, in one line (cheap)."""
        free = self._trav.state.free
        for t, k in plan.totals.items():
            col = free.get(t)
            have = col[0] if col is not None else 0
            if have < k:
                return f"job requests {k} {t}{'s' if k != 1 else ''}, {have} are free"
        return f"no room for {request} now"

    # -- allocation --------------------------------------------------------------------

    def alloc(self, request: Request, jobid: int, policy: str = "first-fit", *,
              start: float | None = None, duration: float | None = None,
              now: float | None = None) -> ResourceSet:
        """Allocate *request* to *jobid* now, or reserve it from *start*; return its R.

        As :meth:`ResourcePool.alloc <fluxes.domain.sched.pool.ResourcePool.alloc>`:
        an allocation now must not run into another job's reservation and
        replaces this job's own; with *start* a reservation is made.
        """
        jobid = check_jobid(jobid, "alloc")
        pol = self._policy(policy)
        trav = self._trav
        if jobid in trav.allocs:
            raise ValueError(f"alloc: job {jobid} already has an allocation")
        plan = self._plan(request)
        if plan.note is not None:
            raise InfeasibleRequest(plan.note)
        length = self._length(request, duration)
        if start is None:
            begin = self._now(now)
            hold = trav.allocate(plan.needs, jobid, begin, length, pol, plan.allowed)
            if hold is None:
                raise InsufficientResources(self._short(request, plan))
        else:
            begin = check_time(start, "alloc: start")
            hold = trav.reserve_at(plan.needs, jobid, begin, length, pol, plan.allowed)
            if hold is None:
                raise InsufficientResources(f"no room for {request} in the window starting "
                                            f"at {begin:g}")
        rset = rset_of(self.graph, hold, self.scheduling)
        self._rsets[jobid] = rset
        return rset.copy()

    def earliest_start(self, request: Request, now: float | None = None,
                       duration: float | None = None, jobid: int | None = None
                       ) -> float | None:
        """The earliest time >= *now* at which *request* could start; None if infeasible.

        ``math.inf`` when no time is known (drained resources, or resources
        held without an end), as for today's pool.
        """
        plan = self._plan(request)
        if plan.note is not None:
            return None
        begin = self._now(now)
        found = self._trav.earliest(plan.needs, jobid, begin, self._length(request, duration),
                                    "low", plan.allowed)
        return _INF if found is None else found[0]

    def free(self, what: int | ResourceSet) -> None:
        """Release a job's allocation (or drop its reservation).

        ValueError if the job holds nothing; releasing part of an allocation
        (an R) is not supported on a graph.
        """
        if isinstance(what, ResourceSet):
            raise ValueError("free: the graph pool releases whole jobs, not an R")
        jobid = check_jobid(what, "free")
        if self._trav.cancel(jobid) is None:
            raise ValueError(f"free: job {jobid} has no allocation")
        self._rsets.pop(jobid, None)

    def adopt(self, jobid: int, R: ResourceSet | Mapping[str, Any] | str | bytes,  # noqa: N803
              *, memory: Mapping[int, int] | None = None, exclusive: bool = False,
              now: float | None = None) -> None:
        """Mark an allocation made earlier (R as stored) as held by *jobid* (hello recovery).

        With a ``scheduling`` subgraph in R, exactly those vertices and
        amounts are taken back; without, the cores and gpus of ``R_lite``
        (whole hosts when *exclusive*, plus *memory* bytes per rank).
        ValueError if anything is unknown or already held.
        """
        jobid = check_jobid(jobid, "adopt")
        trav = self._trav
        if jobid in trav.allocs:
            raise ValueError(f"adopt: job {jobid} already has an allocation")
        try:
            doc = r_document(R)
        except ValueError as exc:
            raise ValueError(f"adopt: job {jobid}: {exc}") from None
        where = f"adopt: job {jobid}"
        if isinstance(doc.get("scheduling"), Mapping):
            # the subgraph says it all: only the times are read from execution
            begin, expiration = r_times(doc, where)
            picks = picks_of_graph(self.graph, doc["scheduling"], where)
        else:
            try:
                rset = R if isinstance(R, ResourceSet) else ResourceSet(doc)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            begin, expiration = rset.starttime, rset.expiration
            picks = picks_of_rset(self.graph, trav.state, rset, memory, exclusive, where)
        start = begin if begin is not None else self._now(now)
        end = float(expiration) if expiration else _INF
        hold = make_hold(self.graph, picks, jobid, float(start), end, False)
        check_free(self.graph, trav.state, hold, where)
        trav.drop_reservation(jobid)
        trav.commit(hold)
        self._rsets.pop(jobid, None)

    def set_expiration(self, jobid: int, expiration: float | None) -> bool:
        """Move the end of *jobid*'s allocation to *expiration* (None: unlimited), as a
        running job's ``resource-update`` does; False when it holds no allocation here."""
        jobid = check_jobid(jobid, "set_expiration")
        end = _INF if expiration is None else check_time(expiration, "set_expiration")
        if not self._trav.set_end(jobid, end):
            return False
        self._rsets.pop(jobid, None)  # its R carries the old expiration
        return True

    # -- reservations ----------------------------------------------------------------------

    def reserve(self, request: Request, jobid: int, policy: str, start: float) -> None:
        """Reserve from *start*: :meth:`alloc` with *start*, its R not wanted."""
        self.alloc(request, jobid, policy, start=start)

    def reservations(self) -> dict[int, tuple[float, float]]:
        """Job id -> (start, end) of each reservation (end is inf when unlimited)."""
        return {j: (h.start, h.end) for j, h in self._trav.resvs.items()}

    def cancel_reservation(self, jobid: int) -> None:
        """Drop the reservation of *jobid* (ValueError if it has none)."""
        if not self._trav.drop_reservation(jobid):
            raise ValueError(f"cancel_reservation: job {jobid} has no reservation")
        if jobid not in self._trav.allocs:
            self._rsets.pop(jobid, None)

    def clear_reservations(self) -> None:
        """Drop every reservation (schedulers re-plan on each pass)."""
        trav = self._trav
        for jobid in trav.resvs:
            if jobid not in trav.allocs:
                self._rsets.pop(jobid, None)
        trav.clear_reservations()

    # -- queries ---------------------------------------------------------------------------

    def allocation_of(self, jobid: int) -> ResourceSet:
        """The R of *jobid*'s allocation (or reservation); ValueError if it has neither."""
        rset = self._rsets.get(jobid)
        if rset is None:
            hold = self._trav.allocs.get(jobid) or self._trav.resvs.get(jobid)
            if hold is None:
                raise ValueError(f"allocation_of: job {jobid} has no allocation")
            rset = self._rsets[jobid] = rset_of(self.graph, hold, self.scheduling)
        return rset.copy()

    def jobids(self) -> list[int]:
        """Ids of the jobs holding allocations now, in allocation order."""
        return list(self._trav.allocs)

    def holders(self, R: ResourceSet) -> set[int]:  # noqa: N803
        """The jobs whose allocation holds any core or gpu of *R* (a walk over every
        allocation: asked only when a recovery meets overlapping R)."""
        out: set[int] = set()
        for jobid in self._trav.allocs:
            theirs = self.allocation_of(jobid)
            for r, cores, gpus in R.per_rank():
                if r in theirs.ranks and ((cores & theirs.cores(r))
                                          or (gpus & theirs.gpus(r))):
                    out.add(jobid)
                    break
        return out

    def shape_of(self, jobid: int) -> Shape | None:
        """Always None: each R carries its own ``scheduling`` subgraph, so no two
        allocations share an encoding (the worker encodes each R)."""
        return None

    def hold_of(self, jobid: int) -> Hold:
        """What *jobid* holds (allocation or reservation); ValueError if nothing."""
        hold = self._trav.allocs.get(jobid) or self._trav.resvs.get(jobid)
        if hold is None:
            raise ValueError(f"hold_of: job {jobid} holds nothing")
        return hold

    def _rset_where(self, keep: Callable[[int], bool]) -> ResourceSet:
        """R of the cores and gpus for which *keep(vertex)* holds."""
        per: dict[int, tuple[list[int], list[int]]] = {}
        for v, rank, is_core, vid in self._leaves:
            if keep(v):
                pair = per.get(rank)
                if pair is None:
                    pair = per[rank] = ([], [])
                (pair[0] if is_core else pair[1]).append(vid)
        ranks = {r: (IDSet(c), IDSet(gp)) for r, (c, gp) in per.items()}
        inv = self._inv
        hosts = {r: inv[r].hostname or "" for r in ranks if r in inv}
        props = {name: ids & IDSet(ranks) for name, ids in inv.property_ranks().items()}
        props = {k: v for k, v in props.items() if v}
        try:
            return ResourceSet.from_ranks(ranks, hostnames=hosts if len(hosts) == len(ranks)
                                          and hosts else None, properties=props)
        except ValueError:
            return ResourceSet.from_ranks(ranks)

    def allocated(self) -> ResourceSet:
        """The cores and gpus allocations hold now."""
        used = self._trav.state.used
        return self._rset_where(lambda v: used[v] > 0)

    def available(self, include_down: bool = False) -> ResourceSet:
        """Free cores and gpus of the hosts that are up (``include_down``: drained ones too)."""
        st = self._trav.state
        used, down = st.used, st.down
        if include_down:
            return self._rset_where(lambda v: used[v] == 0)
        return self._rset_where(lambda v: used[v] == 0 and not down[v])

    def has_free(self) -> bool:
        """True when an up host has a free core or gpu; when False, no request can start."""
        free = self._trav.state.free
        return any(free[t][0] > 0 for t in ("core", "gpu") if t in free)

    def free_totals(self) -> tuple[int, int]:
        """Free cores and gpus of the up hosts now (a request needing more cannot start)."""
        free = self._trav.state.free
        return (free["core"][0] if "core" in free else 0,
                free["gpu"][0] if "gpu" in free else 0)

    def counts(self) -> dict[str, int]:
        """Totals for monitoring: nodes, down, idle, cores, free_cores, gpus, free_gpus."""
        g = self.graph
        st = self._trav.state
        hosts = [h for h in g.hosts if g.ranks[h] in self._inv]
        free, cap = st.free, g.cap
        return {
            "nodes": len(hosts),
            "down": sum(1 for h in hosts if st.down[h]),
            "idle": sum(1 for h in hosts if not st.down[h] and not st.holds[h]),
            "cores": cap["core"][0] if "core" in cap else 0,
            "free_cores": free["core"][0] if "core" in free else 0,
            "gpus": cap["gpu"][0] if "gpu" in cap else 0,
            "free_gpus": free["gpu"][0] if "gpu" in free else 0,
        }

    def find(self, what: Constraint | Mapping[str, Any]) -> ResourceSet:
        """The inventory ranks matching an RFC 31 constraint (whole ranks)."""
        constraint = what if isinstance(what, Constraint) else _constraints.parse(what)
        return self._inv.rset().copy_ranks(constraint.match_ranks(self._inv.rset()))

    # -- drain ------------------------------------------------------------------------------

    def _hosts_of(self, ranks: IDSet | str | Iterable[int], where: str) -> list[int]:
        """Host vertices of *ranks*; ValueError names unknown ranks."""
        try:
            ids = ranks if isinstance(ranks, IDSet) else IDSet(ranks)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        rank_host = self.graph.rank_host
        unknown = IDSet(r for r in ids if r not in rank_host)
        if unknown:
            raise ValueError(f"{where}: unknown rank(s) {unknown}")
        return [rank_host[r] for r in ids]

    def mark_down(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Drain *ranks*: no new work goes there; work running there stays."""
        for h in self._hosts_of(ranks, "mark_down"):
            self._trav.state.set_down(h, True)

    def mark_up(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Undrain *ranks*."""
        for h in self._hosts_of(ranks, "mark_up"):
            self._trav.state.set_down(h, False)

    @property
    def down(self) -> IDSet:
        """The drained ranks."""
        g = self.graph
        st = self._trav.state
        return IDSet(g.ranks[h] for h in g.hosts if st.down[h])

    # -- persistence -------------------------------------------------------------------------

    def save(self) -> dict[str, Any]:
        """The whole pool as JSON-ready data; :meth:`load` restores it."""
        trav = self._trav
        return {
            "version": 1,
            "graph": write_jgf(self.graph),
            "down": self.down.encode(),
            "allocations": [self._saved(h) for h in trav.allocs.values()],
            "reservations": [self._saved(h) for h in trav.resvs.values()],
        }

    def _saved(self, hold: Hold) -> dict[str, Any]:
        """A hold as saved: its job id and R with the scheduling subgraph."""
        rset = rset_of(self.graph, hold, True)
        return {"jobid": hold.jobid, "start": hold.start,
                "end": None if hold.end == _INF else hold.end, "R": rset.encode()}

    @classmethod
    def load(cls, obj: Mapping[str, Any], clock: Callable[[], float] = time.time,
             scheduling: bool = True) -> GraphPool:
        """Rebuild a pool from :meth:`save` output; ValueError if it is malformed."""
        if not isinstance(obj, Mapping) or obj.get("version") != 1:
            raise ValueError("pool: expected an object with version 1")
        pool = cls(read_jgf(obj.get("graph")), clock, scheduling=scheduling)
        down = obj.get("down", "")
        if not isinstance(down, str):
            raise ValueError("pool.down: expected a string")
        pool.mark_down(down)
        for key in ("allocations", "reservations"):
            items = obj.get(key, [])
            if not isinstance(items, list):
                raise ValueError(f"pool.{key}: expected a list")
            for i, item in enumerate(items):
                where = f"pool.{key}[{i}]"
                if not isinstance(item, Mapping):
                    raise ValueError(f"{where}: expected an object")
                jobid = check_jobid(item.get("jobid"), where)
                start = check_time(item.get("start"), f"{where}.start")
                end_value = item.get("end")
                end = _INF if end_value is None else check_time(end_value, f"{where}.end")
                doc = item.get("R")
                if not isinstance(doc, Mapping) or not isinstance(doc.get("scheduling"),
                                                                  Mapping):
                    raise ValueError(f"{where}.R: expected an R with a scheduling key")
                picks = picks_of_graph(pool.graph, doc["scheduling"], where)
                hold = make_hold(pool.graph, picks, jobid, start, end, key == "reservations")
                if key == "allocations":
                    if jobid in pool._trav.allocs:
                        raise ValueError(f"{where}: job {jobid} appears twice")
                    check_free(pool.graph, pool._trav.state, hold, where)
                pool._trav.commit(hold)
        return pool


def _conforms(graph: GraphPool, today: ResourcePool) -> tuple[SchedulerPool, SchedulerPool]:
    """Never called: mypy checks here that both pools have the scheduler's interface."""
    return graph, today
