"""The scheduler's resource pool: the RFC 16 methods over an inventory, in time.

:class:`ResourcePool` records which cores, gpus and memory each job holds,
now (*allocations*) or over a planned future window (*reservations*), and
answers the scheduler's questions:

* :meth:`~ResourcePool.alloc` places a :class:`~fluxes.domain.sched.request.Request`
  with a placement policy, now or in a window ``[start, start + duration)``,
  and returns the RFC 20 R; it raises :class:`InsufficientResources` (not
  now: wait) or :class:`InfeasibleRequest` (never: deny), each with a note;
* :meth:`~ResourcePool.free`, :meth:`~ResourcePool.allocated`,
  :meth:`~ResourcePool.available`, :meth:`~ResourcePool.find`,
  :meth:`~ResourcePool.allocation_of`;
* :meth:`~ResourcePool.earliest_start` for backfilling;
* :meth:`~ResourcePool.mark_down` / :meth:`~ResourcePool.mark_up` (drain);
* :meth:`~ResourcePool.remove_ranks` (the instance shrinks);
* :meth:`~ResourcePool.save` / :meth:`ResourcePool.load`.

RFC 16 rules hold at all times: no core or gpu is held by two records whose
time windows overlap, memory held on a node never exceeds its size, a job
holding a node exclusively holds all of it, and allocated plus available
plus the idle resources of drained ranks is the inventory (available, as in
flux, never counts drained ranks).  See ``docs/scheduler-pool.md``.

Why one module: :class:`ResourcePool`'s methods keep the RFC 16 invariants over one
shared state (free state, job table, reservations); placement (placement.py), the free
state (state.py), request shapes (shapes.py), the job records (records.py) and the nodes'
ends in time (timeline.py) are apart already.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping
from heapq import merge
from typing import Any, Final

from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources, SchedError
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.placement import (
    MODE_EXCLUSIVE,
    MODE_NODES,
    POLICIES,
    Overlay,
    Part,
    Placer,
    Plan,
)
from fluxes.domain.sched.records import JobRecord, check_jobid, check_text, check_time
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.shapes import Shape, ShapeCache
from fluxes.domain.sched.state import Capacity, FreeState
from fluxes.domain.sched.timeline import NodeEnds, released_room
from fluxes.formats import constraints as _constraints
from fluxes.formats.constraints import Constraint
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet, properties_on

__all__ = [
    "POLICIES",
    "InfeasibleRequest",
    "InsufficientResources",
    "ResourcePool",
    "SchedError",
]

_INF: Final = math.inf
_EMPTY = IDSet()
# Plans are cheap to rebuild; the cap only stops a stream of distinct
# requests from growing the cache without bound.
_PLAN_CACHE_SIZE: Final = 4096
#: Windows whose overlay is kept at most (a pass asks for a few).
_WINDOWS_KEPT: Final = 256


class ResourcePool:
    """Allocations and reservations of one inventory (see the module docstring).

    Build it from an :class:`~fluxes.domain.sched.inventory.Inventory` or an RFC 20
    R (a ResourceSet, dict or JSON text).  *clock* gives "now" when a method
    is not told (``time.time`` by default).  Job ids are non-negative ints.
    """

    def __init__(self, resources: Inventory | ResourceSet | Mapping[str, Any] | str,
                 clock: Callable[[], float] = time.time) -> None:
        """Start with everything free and up."""
        inv = resources if isinstance(resources, Inventory) else Inventory.from_rset(resources)
        self._inv = inv
        self._clock = clock
        self._cap = {t.rank: Capacity(t.cores, t.gpus, t.memory or 0, t.socket_sets())
                     for t in inv}
        self._all = inv.ranks
        self._hosts: dict[int, str] | None = None
        if len(inv) and next(iter(inv)).hostname is not None:
            self._hosts = {t.rank: t.hostname for t in inv if t.hostname is not None}
        self._props = inv.property_ranks()
        #: R templates of the small allocations met so far (fluxes/domain/sched/shapes.py)
        self._shapes = ShapeCache(self._template)
        self._matches: dict[Constraint, IDSet] = {}
        self._placer = Placer(self._cap, self._all)
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._state = FreeState(self._cap)
        self._jobs: dict[int, JobRecord] = {}
        self._reserved: dict[int, JobRecord] = {}
        self._ends: list[tuple[float, int]] = []
        jobs = self._jobs
        # per rank, its owners and when it becomes idle if every allocation ends on time
        self._nodes = NodeEnds(lambda jobid: jobs[jobid].end)
        self._overlays: dict[tuple[int, ...], Overlay] = {}
        #: (begin, end, skip) -> the overlay of that window (see _overlay)
        self._windows: dict[tuple[float, float, int | None], Overlay | None] = {}
        # (live serial, live version, releases replayed, state): the last
        # future state built, see _state_at.
        self._future: tuple[int, int, int, FreeState] | None = None
        # (live serial, live version, time, idle ranks): the last _idle_at answer (a
        # reservation asks again for the time the walk just found)
        self._idle_seen: tuple[int, int, float, IDSet] | None = None
        # (live serial, live version, overlay, idle ranks outside it): see _hopeless
        self._unreserved: tuple[int, int, Overlay, int] | None = None
        # Ranks taken out by remove_ranks: frees and drains naming them are
        # ignored, as flux's pool does after a shrink.
        self._removed = IDSet()

    # -- inventory and plans -------------------------------------------------------

    @property
    def inventory(self) -> Inventory:
        """The inventory this pool allocates from."""
        return self._inv

    def _match(self, constraint: Constraint) -> IDSet:
        """Ranks matching *constraint* (cached: the inventory never changes)."""
        found = self._matches.get(constraint)
        if found is None:
            found = constraint.match_ranks(self._inv.rset())
            self._matches[constraint] = found
        return found

    def _plan(self, request: Request) -> Plan:
        """The cached plan of *request* (by its placement key)."""
        if not isinstance(request, Request):
            raise ValueError(f"expected a Request, got {type(request).__name__}")
        key = request.placement_key
        plan = self._plans.get(key)
        if plan is None:
            cset = self._all if request.constraint is None else self._match(request.constraint)
            plan = self._placer.plan(request, cset)
            if len(self._plans) >= _PLAN_CACHE_SIZE:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def check(self, request: Request) -> None:
        """Raise InfeasibleRequest if *request* could never run here (drained nodes count)."""
        plan = self._plan(request)
        if plan.note is not None:
            raise InfeasibleRequest(plan.note)

    # -- allocation ------------------------------------------------------------------

    def alloc(self, request: Request, jobid: int, policy: str = "first-fit", *,
              start: float | None = None, duration: float | None = None,
              now: float | None = None) -> ResourceSet:
        """Allocate *request* to *jobid* now, or reserve it from *start*; return its R.

        *duration* (default: the request's, 0 meaning unlimited) sets the end
        of the window and the R's expiration.  Without *start* the
        allocation starts *now* (default: the clock) and must not run into
        any reservation of another job; a reservation of this same job is
        replaced.  With *start* a reservation is made: a plan that holds
        nothing now but keeps the window free from other records.

        Raises InfeasibleRequest (never possible), InsufficientResources (not
        possible now / in that window) or ValueError (bad arguments, or
        *jobid* already holds an allocation).
        """
        jobid, plan = self._checked(request, jobid, policy)
        length = self._duration(request, duration)
        if start is None:
            begin = self._now(now)
            end = begin + length
            # most tries of a backfilling pass on a full machine are refused by counts
            if self._too_few(plan):
                raise InsufficientResources(self._short(plan, self._state))
            overlay = self._overlay(begin, end, jobid)
            if self._reserved_away(plan, overlay):
                raise InsufficientResources(self._short(plan, self._state))
            parts = self._placer.place(self._state, plan, policy, overlay)
            if parts is None:
                raise InsufficientResources(self._short(plan, self._state))
            if self._reserved.pop(jobid, None) is not None:
                self._reservations_changed()
            job = self._record(jobid, begin, end, plan, parts)
            self._commit(job)
            shape = job.shape = self._shapes.get(parts)
            if shape is not None:
                return shape.rset(begin, None if end == _INF else end)
            return self._make_rset(parts, begin, end)
        job = self._reserve(plan, jobid, policy, start, length)
        return self._make_rset(job.parts, job.start, job.end)

    def reserve(self, request: Request, jobid: int, policy: str, start: float) -> None:
        """Reserve *request*'s window from *start* for *jobid*: :meth:`alloc` with
        *start*, without building the R (a pass's planner does not read it)."""
        jobid, plan = self._checked(request, jobid, policy)
        self._reserve(plan, jobid, policy, start, self._duration(request, None))

    def _checked(self, request: Request, jobid: int, policy: str) -> tuple[int, Plan]:
        """:meth:`alloc`'s checks of its arguments; the job id and the request's plan."""
        jobid = check_jobid(jobid, "alloc")
        if policy not in POLICIES:
            raise ValueError(f"alloc: unknown policy {policy!r} (expected one of "
                             f"{', '.join(POLICIES)})")
        if jobid in self._jobs:
            raise ValueError(f"alloc: job {jobid} already has an allocation")
        plan = self._plan(request)
        if plan.note is not None:
            raise InfeasibleRequest(plan.note)
        return jobid, plan

    def _reserve(self, plan: Plan, jobid: int, policy: str, start: float,
                 length: float) -> JobRecord:
        """The reservation of :meth:`alloc` with *start*: its record (R not built)."""
        begin = check_time(start, "alloc: start")
        end = begin + length
        state = self._state_at(begin, plan.mode == MODE_EXCLUSIVE)
        parts = self._placer.place(state, plan, policy, self._overlay(begin, end, jobid))
        if parts is None:
            raise InsufficientResources(f"{self._short(plan, state)} (window starting at "
                                        f"{begin:g})")
        job = self._record(jobid, begin, end, plan, parts)
        self._reserved.pop(jobid, None)
        self._reserved[jobid] = job
        self._reservations_changed()
        return job

    def adopt(self, jobid: int, R: ResourceSet | Mapping[str, Any] | str,  # noqa: N803
              *, memory: Mapping[int, int] | None = None, exclusive: bool = False,
              now: float | None = None) -> None:
        """Mark an allocation made earlier (R as stored) as held by *jobid*.

        This is the RFC 27 hello recovery step: a restarted scheduler
        re-reads the R of every job holding resources. The end time comes
        from R's expiration (none: unlimited). *memory* gives bytes held per
        rank (R does not record memory); *exclusive* marks whole nodes.
        Raises ValueError when any of it is unknown or already held, so a
        core is never handed to two jobs.
        """
        jobid = check_jobid(jobid, "adopt")
        if jobid in self._jobs:
            raise ValueError(f"adopt: job {jobid} already has an allocation")
        rset = R if isinstance(R, ResourceSet) else ResourceSet(R)
        state = self._state
        parts: dict[int, Part] = {}
        for r in rset.ranks:
            cap = self._cap.get(r)
            if cap is None:
                raise ValueError(f"adopt: job {jobid}: rank {r} is not in the inventory")
            cores, gpus = rset.cores(r), rset.gpus(r)
            if exclusive:
                cores, gpus = cap.cores, cap.gpus
            mem = cap.memory if exclusive else int((memory or {}).get(r, 0))
            if not cores.issubset(state.fc[r]) or not gpus.issubset(state.fg[r]) \
                    or mem > state.fm[r]:
                raise ValueError(f"adopt: job {jobid}: rank {r} resources are already held")
            parts[r] = (cores, gpus, mem)
        start = rset.starttime if rset.starttime is not None else self._now(now)
        end = rset.expiration if rset.expiration else _INF
        self._commit(JobRecord(jobid, start, end, exclusive, parts, None))

    def _rset_of(self, job: JobRecord) -> ResourceSet:
        """The R of *job*'s parts, built now if it was not yet."""
        if job.R is None:
            job.R = self._make_rset(job.parts, job.start, job.end)
        return job.R

    def _now(self, now: float | None) -> float:
        """*now*, or the clock's time."""
        return self._clock() if now is None else check_time(now, "now")

    @staticmethod
    def _duration(request: Request, duration: float | None) -> float:
        """The window length: *duration*, else the request's; 0 means unlimited."""
        value = request.duration if duration is None else duration
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                value >= 0 and not math.isnan(value)):
            raise ValueError(f"duration: expected seconds >= 0, got {value!r}")
        return float(value) if value else _INF

    def _too_few(self, plan: Plan) -> bool:
        """Whether *plan* cannot fit now by the free counts (what placement finds first,
        whatever the reservations): cores and gpus, or idle nodes for whole nodes."""
        st = self._state
        if plan.mode == MODE_EXCLUSIVE:
            return len(st.idle) < plan.nmin
        return plan.total_c > st.tfc or plan.total_g > st.tfg

    def _reserved_away(self, plan: Plan, overlay: Overlay | None) -> bool:
        """Whether too few idle nodes for *plan*'s whole nodes are outside *overlay*'s
        reservations (placement would find none)."""
        if plan.mode != MODE_EXCLUSIVE or overlay is None or not overlay.parts \
                or not plan.static_all:
            return False
        st = self._state
        # the same count for every whole-node try until the state or the overlay changes
        seen = self._unreserved
        if seen is None or seen[:3] != (st.serial, st.version, overlay):
            seen = self._unreserved = (st.serial, st.version, overlay,
                                       len(st.idle - overlay.ranks))
        return seen[3] < plan.nmin

    def _short(self, plan: Plan, state: FreeState) -> str:
        """Why *plan* does not fit *state* now, in one line (cheap)."""
        if plan.mode == MODE_EXCLUSIVE:
            idle = len(state.idle) if plan.static_all else len(state.idle & plan.static)
            return (f"job requests {plan.nmin} whole node{'s' if plan.nmin != 1 else ''}, "
                    f"{idle} suitable node{' is' if idle == 1 else 's are'} idle")
        if plan.total_c > state.tfc:
            return f"job requests {plan.total_c} cores, {state.tfc} are free"
        if plan.total_g > state.tfg:
            return f"job requests {plan.total_g} gpus, {state.tfg} are free"
        return f"no room for {plan.request} now"

    def _record(self, jobid: int, start: float, end: float, plan: Plan,
                parts: dict[int, Part]) -> JobRecord:
        """A job record; its R is built when asked for (the caller gets its own)."""
        return JobRecord(jobid, start, end, plan.mode == MODE_EXCLUSIVE, parts, None)

    def _make_rset(self, parts: Mapping[int, Part], start: float, end: float) -> ResourceSet:
        """R of *parts*: cores and gpus per rank, hostnames, properties, times (a copy of
        the shape's template for a small allocation)."""
        expiration = None if end == _INF else end
        shape = self._shapes.get(parts)
        if shape is not None:
            return shape.rset(start, expiration)
        rset = self._template({r: (p[0], p[1]) for r, p in parts.items()})
        rset.starttime = start
        rset.expiration = expiration
        return rset

    def _template(self, nodes: Mapping[int, tuple[IDSet, IDSet]]) -> ResourceSet:
        """R of *nodes* (rank -> (cores, gpus)) with hostnames and properties, no times."""
        props = properties_on(self._props, IDSet(nodes)) if self._props else {}
        hosts = self._hosts
        # the parts are the placer's, of this inventory: checked already
        return ResourceSet.of_parts(
            nodes, hostnames=None if hosts is None else {r: hosts[r] for r in nodes},
            properties=props)

    def shape_of(self, jobid: int) -> Shape | None:
        """The shape of *jobid*'s allocation, whose encodings are computed once for all
        allocations of that shape; None for a large one or an unknown job."""
        job = self._jobs.get(jobid)
        if job is None:
            return None
        return job.shape if job.shape is not None else self._shapes.get(job.parts)

    def _commit(self, job: JobRecord) -> None:
        """Take *job*'s parts from the live state and index it."""
        take = self._state.take
        hold = self._nodes.hold
        jobid = job.jobid
        end = job.end
        for r, (cores, gpus, mem) in job.parts.items():
            take(r, cores, gpus, mem)
            hold(r, jobid, end)
        self._jobs[jobid] = job
        if job.end != _INF:
            insort(self._ends, (job.end, jobid))

    def _release(self, job: JobRecord) -> None:
        """Give *job*'s parts back to the live state and forget it."""
        give = self._state.give
        for r, (cores, gpus, mem) in job.parts.items():
            give(r, cores, gpus, mem)
            self._drop_owner(r, job)
        del self._jobs[job.jobid]
        if job.end != _INF:
            i = bisect_left(self._ends, (job.end, job.jobid))
            del self._ends[i]

    def _drop_owner(self, r: int, job: JobRecord) -> None:
        """*job* no longer holds anything on rank *r*: update the owner indexes."""
        self._nodes.drop(r, job.jobid, job.end)

    # -- reservations -----------------------------------------------------------------

    def _reservations_changed(self) -> None:
        """Forget cached overlays."""
        self._overlays.clear()
        self._windows.clear()

    def _overlay(self, begin: float, end: float, skip: int | None) -> Overlay | None:
        """Reservations (other than *skip*'s) overlapping ``[begin, end)``, merged per rank."""
        if not self._reserved:
            return None
        # a pass asks for the same few windows (its time, each request's length) over
        # and over: answered from a memo until the reservations change
        window = (begin, end, skip if skip in self._reserved else None)
        if window in self._windows:
            return self._windows[window]
        ids = tuple(j for j, res in self._reserved.items()
                    if j != skip and res.start < end and begin < res.end)
        if len(self._windows) >= _WINDOWS_KEPT:
            self._windows.clear()
        if not ids:
            self._windows[window] = None
            return None
        overlay = self._overlays.get(ids)
        if overlay is None:
            parts: dict[int, tuple[IDSet, IDSet, int, bool]] = {}
            for j in ids:
                res = self._reserved[j]
                for r, (cores, gpus, mem) in res.parts.items():
                    old = parts.get(r)
                    if old is None:
                        parts[r] = (cores, gpus, mem, res.exclusive)
                    else:
                        parts[r] = (old[0] | cores, old[1] | gpus, old[2] + mem,
                                    old[3] or res.exclusive)
            overlay = Overlay(parts)
            self._overlays[ids] = overlay
        self._windows[window] = overlay
        return overlay

    def _idle_at(self, when: float) -> IDSet:
        """Up ranks that will be idle at *when* if every allocation ends on time."""
        live = self._state
        seen = self._idle_seen
        if seen is not None and seen[:3] == (live.serial, live.version, when):
            return seen[3]
        extra = self._nodes.idle_by(when, live.down)
        idle = live.idle | IDSet(extra) if extra else live.idle
        self._idle_seen = (live.serial, live.version, when, idle)
        return idle

    def _state_at(self, when: float, whole_nodes: bool = False) -> FreeState:
        """What will be free at *when* if every allocation ends at its end time.

        The live state itself when no allocation ends by then (callers only
        read it); otherwise a clone with those releases replayed, or, for
        *whole_nodes* placement, a view with the idle set of that time.
        """
        due = bisect_right(self._ends, (when, _INF))
        if due == 0:
            return self._state
        if whole_nodes:
            return self._state.with_idle(self._idle_at(when))
        live = self._state
        cached = self._future
        # earliest_start() usually computed exactly this state just before
        # the scheduler reserves at the time it returned.
        if cached is not None and cached[:3] == (live.serial, live.version, due):
            return cached[3]
        state = self._future_state(when, due)
        self._future = (live.serial, live.version, due, state)
        return state

    def cancel_reservation(self, jobid: int) -> None:
        """Drop the reservation of *jobid* (ValueError if it has none)."""
        if self._reserved.pop(jobid, None) is None:
            raise ValueError(f"cancel_reservation: job {jobid} has no reservation")
        self._reservations_changed()

    def clear_reservations(self) -> None:
        """Drop every reservation (schedulers re-plan on each pass)."""
        if self._reserved:
            self._reserved.clear()
            self._reservations_changed()

    def reservations(self) -> dict[int, tuple[float, float]]:
        """Job id -> (start, end) of each reservation (end is inf when unlimited)."""
        return {j: (res.start, res.end) for j, res in self._reserved.items()}

    def earliest_start(self, request: Request, now: float | None = None,
                       duration: float | None = None, jobid: int | None = None
                       ) -> float | None:
        """The earliest time >= *now* at which *request* could start; None if infeasible.

        Allocations are assumed to end at their end times (those already
        past it are assumed to end now) and reservations, except *jobid*'s
        own, are respected for the whole window (*duration*, else the
        request's; 0 means unlimited).  ``math.inf`` means no time is known:
        the request needs nodes that are drained, or held by allocations or
        reservations without an end.  A reservation at the returned time
        succeeds (same policy-independent test); so does an allocation now
        when *now* is returned, unless that counted on an overdue job ending.
        """
        plan = self._plan(request)
        if plan.note is not None:
            return None
        begin = self._now(now)
        length = self._duration(request, duration)
        place = self._placer.place
        if place(self._state, plan, "first-fit", self._overlay(begin, begin + length,
                                                               jobid)) is not None:
            return begin
        if plan.mode == MODE_EXCLUSIVE:
            return self._walk_nodes(plan, begin, length, jobid)
        return self._walk(plan, begin, length, jobid)

    def _walk_nodes(self, plan: Plan, begin: float, length: float, skip: int | None) -> float:
        """earliest_start for whole nodes: a node is idle once its last allocation ends.

        The nodes' ends are read in order (:class:`NodeEnds`) only until the request
        fits: the cost grows with how many nodes must end first, not with the machine.
        """
        live = self._state
        static = None if plan.static_all else plan.static
        nodes = self._nodes.times(begin, live.down, static)
        idle = len(live.idle) if static is None else len(live.idle & static)
        res_ends = iter(sorted(res.end for j, res in self._reserved.items()
                               if begin < res.end < _INF and j != skip))
        node = next(nodes, None)
        res_end = next(res_ends, None)
        ready = 0
        while True:
            # the next time a node becomes idle or a reservation ends, and every node
            # idle by then
            if node is not None and (res_end is None or node[0] <= res_end):
                when = node[0]
            elif res_end is not None:
                when = res_end
            else:
                return _INF
            while node is not None and node[0] <= when:
                ready += 1
                node = next(nodes, None)
            while res_end is not None and res_end <= when:
                res_end = next(res_ends, None)
            if idle + ready < plan.nmin:
                continue
            state = live.with_idle(self._idle_at(when))
            if self._placer.place(state, plan, "first-fit",
                                  self._overlay(when, when + length, skip)) is not None:
                return when

    def _walk(self, plan: Plan, begin: float, length: float, skip: int | None) -> float:
        """earliest_start after "not now": try each time something ends, in order.

        Releases are first tallied as counts (free cores and gpus in all,
        and, per rank, free cores: how many nodes could hold the per-node
        need, or how many slots the cores allow), which rules most times
        out; the state itself is brought up to date only when the counts
        say the request might fit.  The counts ignore memory, gpus per node,
        sockets and reservations, so they are upper bounds.
        """
        live = self._state
        ends = self._ends
        res_ends = sorted(res.end for j, res in self._reserved.items()
                          if begin < res.end < _INF and j != skip)
        times = merge((e if e > begin else begin for e, _ in ends), res_ends)
        jobs = self._jobs
        # Released cores of drained ranks are counted in the totals too:
        # they only need to be upper bounds.
        tfc, tfg = live.tfc, live.tfg
        k = plan.need_c
        per_node = plan.mode == MODE_NODES
        static = None if plan.static_all else plan.static
        down = live.down
        if k == 1 and not per_node and static is None:
            k = 0  # slots of one core: the core total already says it all
        nfc = live.nfc.copy() if k else live.nfc
        room = 0  # nodes with >= k free cores (per_node), or slots of k cores
        target = plan.nmin if per_node else plan.smin
        if k:
            for n, bucket in live.buckets.items():
                ranks = len(bucket) if static is None else len(bucket & static)
                room += ranks * (int(n >= k) if per_node else n // k)
        state: FreeState | None = None
        applied = done = 0
        last = -_INF
        for when in times:
            if when == last:
                continue
            last = when
            while done < len(ends) and ends[done][0] <= when:
                job = jobs[ends[done][1]]
                tfc += job.ncores
                tfg += job.ngpus
                if k:
                    room += released_room(job.parts, nfc, k, per_node, down, static)
                done += 1
            if plan.total_c > tfc or plan.total_g > tfg or (k and room < target):
                continue
            if applied < done:
                if state is None:
                    state = self._future_state(when, done)
                else:
                    state.give_many(self._gather(ends[applied:done]))
                applied = done
            current = live if state is None else state
            if self._placer.place(current, plan, "first-fit",
                                  self._overlay(when, when + length, skip)) is not None:
                if state is not None:
                    self._future = (live.serial, live.version, done, state)
                return when
        return _INF

    def _future_state(self, when: float, due: int) -> FreeState:
        """The free state at *when*, the first *due* entries of the end index released.

        Built from whichever is smaller: the releases (replayed on a clone
        of the live state) or the allocations still running then (taken
        from an empty machine).
        """
        live = self._state
        if due <= (len(self._jobs) - due):
            state = live.clone()
            state.give_many(self._gather(self._ends[:due]))
            return state
        state = FreeState(self._cap)
        for r in live.down:
            state.set_down(r)
        held: dict[int, list[Part]] = {}
        for job in self._jobs.values():
            if job.end > when:
                for r, part in job.parts.items():
                    parts = held.get(r)
                    if parts is None:
                        held[r] = [part]
                    else:
                        parts.append(part)
        state.take_many(held)
        return state

    def _gather(self, ends: list[tuple[float, int]]) -> dict[int, list[Part]]:
        """The parts of the jobs in *ends*, grouped by rank (for FreeState.give_many)."""
        released: dict[int, list[Part]] = {}
        jobs = self._jobs
        for _, jobid in ends:
            for r, part in jobs[jobid].parts.items():
                held = released.get(r)
                if held is None:
                    released[r] = [part]
                else:
                    held.append(part)
        return released

    # -- release ------------------------------------------------------------------------

    def free(self, what: int | ResourceSet) -> None:
        """Release a job's allocation (or drop its reservation), or the resources of an R.

        Freeing an R releases exactly those cores and gpus from whichever
        allocations hold them (a partial release); a job left with nothing
        is forgotten, and memory on a rank returns when the job keeps
        nothing there.  ValueError if the job or resources are not allocated.
        """
        if isinstance(what, ResourceSet):
            self._free_rset(what)
            return
        jobid = check_jobid(what, "free")
        job = self._jobs.get(jobid)
        if job is not None:
            self._release(job)
        elif jobid in self._reserved:
            self.cancel_reservation(jobid)
        else:
            raise ValueError(f"free: job {jobid} has no allocation")

    def _free_rset(self, R: ResourceSet) -> None:  # noqa: N803
        """Partial release: see :meth:`free`."""
        changes: list[tuple[JobRecord, int, IDSet, IDSet]] = []
        for r in R.ranks:
            if r in self._removed:
                continue  # gone with remove_ranks: nothing to give back
            want_c = R.cores(r)
            want_g = R.gpus(r)
            for jobid in sorted(self._nodes.owners.get(r, ())):
                cores, gpus, _ = self._jobs[jobid].parts[r]
                got_c = cores & want_c
                got_g = gpus & want_g
                if got_c or got_g:
                    changes.append((self._jobs[jobid], r, got_c, got_g))
                    want_c -= got_c
                    want_g -= got_g
            if want_c or want_g:
                what = ", ".join(f"{kind} {ids}" for kind, ids in
                                 (("cores", want_c), ("gpus", want_g)) if ids)
                raise ValueError(f"free: rank {r} {what} are not allocated")
        touched: dict[int, JobRecord] = {}
        for job, r, got_c, got_g in changes:
            cores, gpus, mem = job.parts[r]
            left_c = cores - got_c
            left_g = gpus - got_g
            back = 0
            if left_c or left_g:
                job.parts[r] = (left_c, left_g, mem)
            else:
                back = mem
                del job.parts[r]
                self._drop_owner(r, job)
            self._state.give(r, got_c, got_g, back)
            touched[job.jobid] = job
        for job in touched.values():
            job.count()
            job.shape = None  # of the parts before the release
            if job.parts:
                job.R = self._make_rset(job.parts, job.start, job.end)
            else:
                self._release(job)  # nothing left to give back: just forget it

    def set_expiration(self, jobid: int, expiration: float | None) -> bool:
        """Move the end of *jobid*'s allocation to *expiration* (None: unlimited), as a
        ``resource-update`` of a running job does (RFC 27 ``sched.expiration``): plans
        made from now on see its resources free only then. False when the job holds
        no allocation here (freed meanwhile); ValueError for a bad time."""
        jobid = check_jobid(jobid, "set_expiration")
        end = _INF if expiration is None else check_time(expiration, "set_expiration")
        job = self._jobs.get(jobid)
        if job is None:
            return False
        if job.end == end:
            return True
        if job.end != _INF:
            del self._ends[bisect_left(self._ends, (job.end, jobid))]
        job.end = end
        if end != _INF:
            insort(self._ends, (end, jobid))
        # the last end of its ranks may have been its old end: recomputed when needed
        self._nodes.moved(job.parts)
        job.R = None  # rebuilt with the new expiration when asked for
        self._future = None  # the cached future state replayed releases by the old ends
        self._idle_seen = None
        return True

    # -- queries ---------------------------------------------------------------------------

    def allocation_of(self, jobid: int) -> ResourceSet:
        """The R of *jobid*'s allocation (or reservation); ValueError if it has neither."""
        job = self._jobs.get(jobid) or self._reserved.get(jobid)
        if job is None:
            raise ValueError(f"allocation_of: job {jobid} has no allocation")
        return self._rset_of(job).copy()

    def jobids(self) -> list[int]:
        """Ids of the jobs holding allocations now, in allocation order."""
        return list(self._jobs)

    def holders(self, R: ResourceSet) -> set[int]:  # noqa: N803
        """The jobs whose allocation holds any core or gpu of *R* (ranks not here: none)."""
        out: set[int] = set()
        for r, cores, gpus in R.per_rank():
            for jobid in self._nodes.owners.get(r, ()):
                held_c, held_g, _mem = self._jobs[jobid].parts[r]
                if (cores & held_c) or (gpus & held_g):
                    out.add(jobid)
        return out

    def _rset_from(self, held: Callable[[int], tuple[IDSet, IDSet]]) -> ResourceSet:
        """R of the (cores, gpus) that *held* gives per rank (ranks with none left out)."""
        parts: dict[int, Part] = {}
        for r in self._cap:
            cores, gpus = held(r)
            if cores or gpus:
                parts[r] = (cores, gpus, 0)
        ranks = IDSet(parts)
        hosts = self._hosts
        props = properties_on(self._props, ranks)
        return ResourceSet.from_ranks(
            {r: (p[0], p[1]) for r, p in parts.items()},
            hostnames=None if hosts is None else {r: hosts[r] for r in parts},
            properties=props)

    def allocated(self) -> ResourceSet:
        """Everything held by allocations now (reservations are plans, not included)."""
        cap, st = self._cap, self._state
        return self._rset_from(lambda r: (cap[r].cores - st.fc[r], cap[r].gpus - st.fg[r]))

    def available(self, include_down: bool = False) -> ResourceSet:
        """What new work may use now: the free resources of the ranks that are up.

        As in flux, drained (down) ranks are never available: a pool whose
        every rank is down has nothing available.  ``include_down=True``
        adds the free resources of drained ranks, so that
        ``allocated() | available(include_down=True)`` is the inventory.
        """
        st = self._state
        down = st.down if not include_down else ()
        return self._rset_from(lambda r: (_EMPTY, _EMPTY) if r in down else (st.fc[r], st.fg[r]))

    def find(self, what: Request | Constraint | Mapping[str, Any]) -> ResourceSet:
        """The inventory ranks matching a constraint, or able to hold a request's per-node
        need on an otherwise empty node, whatever is allocated (whole ranks).
        """
        if isinstance(what, Request):
            ranks = self._plan(what).static
        else:
            constraint = what if isinstance(what, Constraint) else _constraints.parse(what)
            ranks = self._match(constraint)
        return self._inv.rset().copy_ranks(ranks)

    def has_free(self) -> bool:
        """True when an up rank has a free core or GPU; when False, no request can start."""
        st = self._state
        return st.tfc > 0 or st.tfg > 0

    def free_totals(self) -> tuple[int, int]:
        """Free cores and GPUs of the up ranks now (a request needing more cannot start)."""
        st = self._state
        return st.tfc, st.tfg

    def counts(self) -> dict[str, int]:
        """Totals for monitoring: nodes, down, idle, cores, free_cores, gpus, free_gpus.

        Free counts cover the ranks that are up.
        """
        st = self._state
        return {
            "nodes": len(self._cap),
            "down": len(st.down),
            "idle": len(st.idle),
            "cores": sum(c.ncores for c in self._cap.values()),
            "free_cores": st.tfc,
            "gpus": sum(c.ngpus for c in self._cap.values()),
            "free_gpus": st.tfg,
        }

    # -- drain ------------------------------------------------------------------------------

    def _ranks_arg(self, ranks: IDSet | str | Iterable[int], where: str) -> IDSet:
        """*ranks* as an IDSet of inventory ranks; ValueError names unknown ones."""
        try:
            ids = ranks if isinstance(ranks, IDSet) else IDSet(ranks)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        unknown = ids - self._all
        if unknown:
            raise ValueError(f"{where}: unknown rank(s) {unknown}")
        return ids

    def _known_ranks(self, ranks: IDSet | str | Iterable[int], where: str) -> IDSet:
        """*ranks* less those removed earlier; ValueError names ranks never known."""
        try:
            ids = ranks if isinstance(ranks, IDSet) else IDSet(ranks)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return self._ranks_arg(ids - self._removed if self._removed else ids, where)

    def mark_down(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Drain *ranks*: no new work goes there; work running there stays.

        Ranks taken out by :meth:`remove_ranks` are ignored.
        """
        for r in self._known_ranks(ranks, "mark_down"):
            self._state.set_down(r)

    def mark_up(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Undrain *ranks* (ranks taken out by :meth:`remove_ranks` are ignored)."""
        for r in self._known_ranks(ranks, "mark_up"):
            self._state.set_up(r)

    def remove_ranks(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Take *ranks* out of the pool entirely: the instance shrinks (flux's
        ``remove_ranks``).

        The targets leave the inventory, so no new work, drain, plan or
        constraint sees them again.  Allocations holding resources there are
        not refused (flux's pool does not refuse either): they keep what they
        hold on the other ranks, lose the removed ranks' parts (those
        resources no longer exist), and ``free(jobid)`` still works, even
        for a job left with nothing.  ``free(R)`` and drains that name
        removed ranks ignore them.  Reservations that planned on a removed
        rank are dropped (the scheduler plans again).  Removing a rank twice
        does nothing; a rank the pool never had raises ValueError.
        """
        gone = self._known_ranks(ranks, "remove_ranks")
        if not gone:
            return
        fresh = ResourcePool(self._inv.without(gone), clock=self._clock)
        fresh.mark_down(IDSet(self._state.down) - gone)
        for job in self._jobs.values():
            parts = {r: p for r, p in job.parts.items() if r not in gone}
            kept = job.R if len(parts) == len(job.parts) else None
            fresh._commit(JobRecord(job.jobid, job.start, job.end, job.exclusive, parts, kept))
        for jobid, job in self._reserved.items():
            if not any(r in gone for r in job.parts):
                fresh._reserved[jobid] = job
        fresh._removed = self._removed | gone
        # Rebuilding is simpler and safer than editing every index in place
        # (free state, owners, plans, overlays); a shrink is rare.
        vars(self).update(vars(fresh))

    @property
    def down(self) -> IDSet:
        """The drained ranks."""
        return IDSet(self._state.down)

    # -- persistence ---------------------------------------------------------------------------

    def _job_dict(self, job: JobRecord) -> dict[str, Any]:
        """A job record as JSON-ready data."""
        memory = {str(r): p[2] for r, p in job.parts.items() if p[2]}
        return {"jobid": job.jobid, "start": job.start,
                "end": None if job.end == _INF else job.end,
                "exclusive": job.exclusive, "R": self._rset_of(job).encode(), "memory": memory}

    def save(self) -> dict[str, Any]:
        """The whole pool as JSON-ready data; :meth:`load` restores it exactly."""
        data: dict[str, Any] = {
            "version": 1,
            "inventory": self._inv.to_dict(),
            "down": IDSet(self._state.down).encode(),
            "allocations": [self._job_dict(job) for job in self._jobs.values()],
            "reservations": [self._job_dict(job) for job in self._reserved.values()],
        }
        if self._removed:
            data["removed"] = self._removed.encode()
        return data

    @classmethod
    def load(cls, obj: Mapping[str, Any], clock: Callable[[], float] = time.time
             ) -> ResourcePool:
        """Rebuild a pool from :meth:`save` output; ValueError if it is malformed.

        Allocations that would hold a resource twice are refused.
        """
        if not isinstance(obj, Mapping) or obj.get("version") != 1:
            raise ValueError("pool: expected an object with version 1")
        pool = cls(Inventory.from_dict(obj.get("inventory", {})), clock=clock)
        removed = check_text(obj.get("removed", ""), "pool.removed")
        try:
            pool._removed = IDSet(removed)
        except ValueError as exc:
            raise ValueError(f"pool.removed: {exc}") from None
        pool.mark_down(check_text(obj.get("down", ""), "pool.down"))
        for key in ("allocations", "reservations"):
            items = obj.get(key, [])
            if not isinstance(items, list):
                raise ValueError(f"pool.{key}: expected a list")
            for i, item in enumerate(items):
                job = pool._load_job(item, f"pool.{key}[{i}]")
                if key == "allocations":
                    if job.jobid in pool._jobs:
                        raise ValueError(f"pool.{key}[{i}]: job {job.jobid} appears twice")
                    pool._check_free(job, f"pool.{key}[{i}]")
                    pool._commit(job)
                else:
                    if job.jobid in pool._reserved:
                        raise ValueError(f"pool.{key}[{i}]: job {job.jobid} appears twice")
                    pool._reserved[job.jobid] = job
        return pool

    def _load_job(self, item: object, where: str) -> JobRecord:
        """One saved job record."""
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: expected an object")
        jobid = check_jobid(item.get("jobid"), where)
        start = check_time(item.get("start"), f"{where}.start")
        end_value = item.get("end")
        end = _INF if end_value is None else check_time(end_value, f"{where}.end")
        exclusive = item.get("exclusive", False)
        if not isinstance(exclusive, bool):
            raise ValueError(f"{where}.exclusive: expected a bool")
        try:
            R = ResourceSet(item.get("R"))  # noqa: N806
        except ValueError as exc:
            raise ValueError(f"{where}.R: {exc}") from None
        memory = item.get("memory", {})
        if not isinstance(memory, Mapping):
            raise ValueError(f"{where}.memory: expected an object")
        parts: dict[int, Part] = {}
        for r in R.ranks:
            cap = self._cap.get(r)
            cores, gpus = R.cores(r), R.gpus(r)
            if cap is None or not cores.issubset(cap.cores) or not gpus.issubset(cap.gpus):
                raise ValueError(f"{where}.R: rank {r} holds resources the inventory lacks")
            mem = memory.get(str(r), 0)
            if isinstance(mem, bool) or not isinstance(mem, int) or not 0 <= mem <= cap.memory:
                raise ValueError(f"{where}.memory: bad amount for rank {r}")
            if exclusive and cores == cap.cores and gpus == cap.gpus:
                cores, gpus = cap.cores, cap.gpus  # share, as a fresh allocation would
            parts[r] = (cores, gpus, mem)
        return JobRecord(jobid, start, end, exclusive, parts, R)

    def _check_free(self, job: JobRecord, where: str) -> None:
        """ValueError unless every part of *job* is free in the live state."""
        st = self._state
        for r, (cores, gpus, mem) in job.parts.items():
            if not cores.issubset(st.fc[r]) or not gpus.issubset(st.fg[r]) or mem > st.fm[r]:
                raise ValueError(f"{where}: job {job.jobid} overlaps another allocation on "
                                 f"rank {r}")

