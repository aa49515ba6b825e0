"""Scheduling policies: which pending jobs get resources now (pure, no I/O).

The scheduler worker keeps one :class:`Scheduler`: pending alloc requests go
in with :meth:`Scheduler.add`, and each :meth:`Scheduler.schedule` pass
returns the allocations made, the requests denied (infeasible) and the
``sched`` annotations to publish.  Policies are chosen per queue (RFC 33
``policy.scheduler``):

* ``fcfs``: strict order; the first job that cannot start blocks the rest
  of its queue;
* ``easy``: EASY backfill: the first blocked job gets a reservation at its
  earliest start, later jobs start now only if they do not run into it;
* ``conservative``: the first ``reservation_depth`` blocked jobs each get a
  reservation, in order; later jobs start now only if they run into none.

Every pass considers at most ``queue_depth`` jobs per queue, in priority
order (priority descending, then submit time, then id); the queues' jobs
are taken together in that same order, so the highest-priority head goes
first whatever its queue.  See ``docs/scheduling-policies.md``.

Why one module: the pending set's bookkeeping (heaps, interned requests, the
order-key indexes) and the pass that reads it change together, and the pass's
two halves (job by job, then request by request) must make the same calls.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.ordered import SortedKeys
from fluxes.domain.sched.placement import POLICIES as PLACEMENTS
from fluxes.domain.sched.planner import (
    BEHIND_RESERVED,
    BEYOND_DEPTH,
    NO_ESTIMATE,
    WAITING,
    PassPlanner,
    format_time,
    insufficient,
)
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.formats.rset import ResourceSet

__all__ = [
    "POLICIES",
    "UNKNOWN_TRIES",
    "PassResult",
    "PendingJob",
    "QueuePolicy",
    "Scheduler",
    "StartGate",
]

POLICIES: Final = ("fcfs", "easy", "conservative")

#: Blocked jobs whose start cannot be known do not use up the reservation
#: depth (a job pinned to a drained node must not cost everyone else their
#: reservation), but each costs a planner walk: at most this many are tried
#: per queue and pass.
UNKNOWN_TRIES: Final = 8

# Stale heap entries (cancelled, started or re-prioritized jobs) are
# dropped once they outnumber the live ones by this much.
_COMPACT_SLACK: Final = 1024

#: A quick pass reads the rest of its queues' depth request by request (see
#: ``Scheduler._backfill``) while they hold at most this many distinct requests.
INDEXED_REQUESTS: Final = 256


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How one queue is scheduled (RFC 33 ``policy.scheduler``).

    ``policy`` is one of :data:`POLICIES`; ``queue_depth`` (>= 1) is how
    many of the queue's pending jobs a pass considers; ``reservation_depth``
    (>= 0) how many blocked jobs a ``conservative`` queue reserves for
    (``easy`` reserves for at most one, ``fcfs`` for none); ``placement``
    is a pool placement policy.  Bad values raise ValueError.
    """

    policy: str = "fcfs"
    queue_depth: int = 1000
    reservation_depth: int = 16
    placement: str = "first-fit"

    def __post_init__(self) -> None:
        """Check every field."""
        if self.policy not in POLICIES:
            raise ValueError(f"QueuePolicy.policy: unknown policy {self.policy!r} "
                             f"(expected one of {', '.join(POLICIES)})")
        for name, lowest in (("queue_depth", 1), ("reservation_depth", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ValueError(f"QueuePolicy.{name}: expected an integer >= {lowest}, "
                                 f"got {value!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"QueuePolicy.placement: unknown placement {self.placement!r} "
                             f"(expected one of {', '.join(PLACEMENTS)})")

    @property
    def reservations(self) -> int:
        """How many blocked jobs get a reservation per pass under this policy."""
        if self.policy == "fcfs":
            return 0
        if self.policy == "easy":
            return min(self.reservation_depth, 1)
        return self.reservation_depth


@dataclass(slots=True)
class PendingJob:
    """An alloc request the scheduler has not answered yet."""

    id: int
    priority: int
    t_submit: float
    userid: int
    queue: str | None
    request: Request
    #: the bank it is charged to (None: the user's default), for a :class:`StartGate`
    bank: str | None = None


class StartGate(Protocol):
    """Says whether a job may start now beyond fitting the resources (accounting's
    running limits, :mod:`fluxes.domain.accounting.limits`). A job it holds back waits
    with its reason as ``reason_pending`` and blocks nobody: the pass goes on with the
    next job, and held-back jobs do not use up the queue depth."""

    def refusal(self, job: PendingJob) -> str | None:
        """Why ``job`` may not start now (None: it may)."""
        ...

    def started(self, job: PendingJob, rset: ResourceSet) -> None:
        """``job`` was given ``rset`` in this pass (count it before the next refusal)."""
        ...


@dataclass
class PassResult:
    """What one scheduling pass decided."""

    allocated: list[tuple[int, ResourceSet]] = field(default_factory=list)
    denied: list[tuple[int, str]] = field(default_factory=list)
    #: per still-pending job, its ``sched`` annotations (t_estimate, reason_pending, queue)
    annotations: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: job -> start of the reservation made for it in this pass
    reserved: dict[int, float] = field(default_factory=dict)
    #: jobs considered (at most queue_depth per queue)
    considered: int = 0
    #: the jobs this pass answered (allocated or denied), as they were queued
    answered: list[PendingJob] = field(default_factory=list)
    #: a quick pass's requests whose later jobs it did not look at, as none of them
    #: could start: what it would have told them (``reason_pending``)
    held: dict[Request, str] = field(default_factory=dict)


def _key(job: PendingJob) -> tuple[int, float, int]:
    """The order of a queue: priority descending, then submit time, then id."""
    return (-job.priority, job.t_submit, job.id)


class _Order:
    """One queue's pending jobs as a heap of ``(-priority, t_submit, id)`` entries.

    Entries are never updated in place: a priority change pushes a new one,
    and entries that no longer match their job (gone, re-prioritized, moved
    to another queue) are skipped and dropped when met, so changes cost
    O(log n) and a pass touches only the jobs it considers.
    """

    __slots__ = ("count", "heap", "name")

    def __init__(self, name: str | None) -> None:
        """An empty queue."""
        self.name = name
        self.heap: list[tuple[int, float, int]] = []
        self.count = 0

    def push(self, job: PendingJob) -> None:
        """Add an entry for *job* at its current priority."""
        heapq.heappush(self.heap, _key(job))

    def _live(self, entry: tuple[int, float, int], pending: Mapping[int, PendingJob]) -> bool:
        """True if *entry* is the current entry of a pending job of this queue."""
        job = pending.get(entry[2])
        return (job is not None and job.queue == self.name and job.priority == -entry[0]
                and job.t_submit == entry[1])

    def take(self, n: int, pending: Mapping[int, PendingJob]) -> list[PendingJob]:
        """Pop the first *n* live jobs, in order (give back the rest with :meth:`put_back`)."""
        out: list[PendingJob] = []
        for _ in self.popping(n, pending, out):
            pass
        return out

    def popping(self, n: int, pending: Mapping[int, PendingJob],
                out: list[PendingJob], state: _QueuePass | None = None
                ) -> Iterator[PendingJob]:
        """Pop up to *n* live jobs lazily, in order, each also appended to *out*
        (jobs a start gate held back, counted in ``state.gated``, come on top).

        Lazy so that a pass that stops early pops (and later puts back) only
        the jobs it looked at, not the whole queue depth.
        """
        heap = self.heap
        seen: set[int] = set()
        pop = heapq.heappop
        while heap and len(out) - (state.gated if state is not None else 0) < n:
            entry = pop(heap)
            jobid = entry[2]
            if jobid in seen or not self._live(entry, pending):
                continue  # stale, or a duplicate left by a re-add at the same priority
            seen.add(jobid)
            job = pending[jobid]
            out.append(job)
            yield job

    def put_back(self, jobs: Iterable[PendingJob]) -> None:
        """Push entries for *jobs* again (those still pending after a pass)."""
        push = heapq.heappush
        heap = self.heap
        for job in jobs:
            push(heap, _key(job))

    def compact(self, pending: Mapping[int, PendingJob]) -> None:
        """Drop stale entries when they pile up (amortized: O(1) per change)."""
        if len(self.heap) <= 2 * self.count + _COMPACT_SLACK:
            return
        live: dict[int, tuple[int, float, int]] = {}
        for entry in self.heap:
            if self._live(entry, pending):
                live[entry[2]] = entry
        self.heap = list(live.values())
        heapq.heapify(self.heap)


def _need(request: Request) -> tuple[int, int]:
    """The least cores and gpus *request* can start with (a lower bound)."""
    return request.min_cores, request.min_gpus


def _too_big(request: Request, free: tuple[int, int]) -> bool:
    """Whether *request* needs more cores or gpus than are ``free`` (it cannot start)."""
    return request.min_cores > free[0] or request.min_gpus > free[1]


def _least(needs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The needs no other need is below on both counts (cores, then gpus)."""
    least: list[tuple[int, int]] = []
    for cores, gpus in sorted(needs):
        if not any(g <= gpus for _c, g in least):
            least.append((cores, gpus))
    return least


def _held(note: str, planner: PassPlanner) -> str:
    """``reason_pending`` of a job that cannot start now, once its queue made every
    reservation it will (*note*: the pool's)."""
    reason = insufficient(note)
    if planner.reserved:
        return f"{reason}; {BEHIND_RESERVED}"
    return reason


class _Interned:
    """A shared Request and how many pending jobs use it."""

    __slots__ = ("refs", "request")

    def __init__(self, request: Request) -> None:
        """First use of *request*."""
        self.request = request
        self.refs = 0


@dataclass(slots=True)
class _QueuePass:
    """One queue's progress during a pass."""

    policy: QueuePolicy
    blocked: bool = False
    reserved: int = 0
    unknown: int = 0
    #: jobs a start gate held back (they do not use up the queue depth)
    gated: int = 0

    @property
    def backfilling(self) -> bool:
        """The queue backfills and has made every reservation it will this pass: the
        jobs after can only start now, or wait without a reservation (never fcfs,
        whose first job that cannot start blocks the queue)."""
        return self.policy.policy != "fcfs" and (
            self.reserved >= self.policy.reservations or self.unknown >= UNKNOWN_TRIES)


class Scheduler:
    """Pending jobs per queue, scheduled on one shared pool.

    *queues* maps queue names (None: jobs without a queue) to their
    policy; other queues use *default*.  ``pending`` maps job ids to the
    :class:`PendingJob` of every request not yet answered.  Requests equal
    to one already held are replaced by it (interned), so a million jobs
    of a few shapes hold a few Request objects.
    """

    def __init__(self, pool: SchedulerPool,
                 queues: Mapping[str | None, QueuePolicy] | None = None,
                 default: QueuePolicy | None = None, gate: StartGate | None = None) -> None:
        """Schedule on *pool* with per-queue policies (and a start gate)."""
        self.pool = pool
        self.gate = gate
        self.default = default or QueuePolicy()
        self.queues: dict[str | None, QueuePolicy] = dict(queues or {})
        self.pending: dict[int, PendingJob] = {}
        self._orders: dict[str | None, _Order] = {}
        self._requests: dict[Request, _Interned] = {}
        #: (least cores, least gpus) -> how many held requests need that much
        self._needs: dict[tuple[int, int], int] = {}
        #: ``_least(self._needs)`` while its keys stay the same (None: to compute)
        self._least_needs: list[tuple[int, int]] | None = None
        # Jobs the last pass considered (and annotated) that are still
        # pending: if the next pass does not consider them, they are told so.
        self._annotated: set[int] = set()
        #: per queue, its pending jobs' order keys (a pass's depth ends at the k-th)
        self._ranks: dict[str | None, SortedKeys] = {}
        #: per queue and held request, the order keys of its pending jobs
        self._shapes: dict[str | None, dict[Request, SortedKeys]] = {}
        #: whether the two indexes above are kept: they serve only a quick pass's
        #: request-by-request backfill (``_backfill``), which a start gate rules out (its
        #: refusals go job by job), and keeping them costs every add and answer
        self._indexes = gate is None

    def policy_of(self, queue: str | None) -> QueuePolicy:
        """The policy of ``queue`` (the default for unknown queues)."""
        return self.queues.get(queue, self.default)

    # -- the pending set -----------------------------------------------------------

    def add(self, job: PendingJob) -> None:
        """A new alloc request (replaces a pending one of the same id).

        ValueError if the job's request is not a Request or its submit
        time is not a finite number.
        """
        if not isinstance(job.request, Request):
            raise ValueError(f"job {job.id}: expected a Request, got "
                             f"{type(job.request).__name__}")
        if isinstance(job.t_submit, bool) or not isinstance(job.t_submit, (int, float)) \
                or not math.isfinite(job.t_submit):
            raise ValueError(f"job {job.id}: t_submit must be a finite number, "
                             f"got {job.t_submit!r}")
        if isinstance(job.priority, bool) or not isinstance(job.priority, int):
            raise ValueError(f"job {job.id}: priority must be an integer, got {job.priority!r}")
        if job.id in self.pending:
            self.remove(job.id)
        interned = self._requests.get(job.request)
        if interned is None:
            interned = self._requests[job.request] = _Interned(job.request)
            need = _need(job.request)
            count = self._needs.get(need, 0)
            if not count:
                self._least_needs = None
            self._needs[need] = count + 1
        interned.refs += 1
        job.request = interned.request
        self.pending[job.id] = job
        key = self._index(job)
        order = self._orders.get(job.queue)
        if order is None:
            order = self._orders[job.queue] = _Order(job.queue)
        order.count += 1
        heapq.heappush(order.heap, key)  # the indexes' key tuple: one per job

    def _forget(self, job: PendingJob) -> None:
        """Drop *job* from the pending set and its bookkeeping (heap entries go stale)."""
        self._unindex(job)
        del self.pending[job.id]
        self._annotated.discard(job.id)
        interned = self._requests[job.request]
        interned.refs -= 1
        if not interned.refs:
            del self._requests[job.request]
            need = _need(job.request)
            left = self._needs[need] - 1
            if left:
                self._needs[need] = left
            else:
                del self._needs[need]
                self._least_needs = None
        order = self._orders[job.queue]
        order.count -= 1
        if not order.count:
            del self._orders[job.queue]  # its stale entries go with it

    def _index(self, job: PendingJob) -> tuple[int, float, int]:
        """Enter a pending job's order key in its queue's indexes; the key."""
        key = _key(job)
        if not self._indexes:
            return key
        ranks = self._ranks.get(job.queue)
        if ranks is None:
            ranks = self._ranks[job.queue] = SortedKeys()
        ranks.add(key)
        shapes = self._shapes.get(job.queue)
        if shapes is None:
            shapes = self._shapes[job.queue] = {}
        keys = shapes.get(job.request)
        if keys is None:
            keys = shapes[job.request] = SortedKeys()
        keys.add(key)
        return key

    def _unindex(self, job: PendingJob) -> None:
        """Take a pending job's order key (at its current priority) out of the indexes."""
        if not self._indexes:
            return
        key = _key(job)
        ranks = self._ranks[job.queue]
        ranks.remove(key)
        if not ranks:
            del self._ranks[job.queue]
        shapes = self._shapes[job.queue]
        keys = shapes[job.request]
        keys.remove(key)
        if not keys:
            del shapes[job.request]
            if not shapes:
                del self._shapes[job.queue]

    def remove(self, jobid: int) -> bool:
        """Drop a pending request (cancel); True if it was pending."""
        job = self.pending.get(jobid)
        if job is None:
            return False
        self._forget(job)
        order = self._orders.get(job.queue)
        if order is not None:
            order.compact(self.pending)
        return True

    def prioritize(self, jobid: int, priority: int) -> None:
        """Change a pending job's priority (unknown jobs are ignored)."""
        job = self.pending.get(jobid)
        if job is None or job.priority == priority:
            return
        self._unindex(job)
        job.priority = priority
        self._index(job)
        order = self._orders[job.queue]
        order.push(job)
        order.compact(self.pending)

    def ordered(self, queue: str | None) -> list[PendingJob]:
        """The pending jobs of *queue* in the order a pass considers them (for tools/tests)."""
        return sorted((j for j in self.pending.values() if j.queue == queue), key=_key)

    def requests_held(self) -> int:
        """How many distinct Request objects the pending jobs share."""
        return len(self._requests)

    # -- a pass ----------------------------------------------------------------------

    def schedule(self, now: float, full: bool = True) -> PassResult:
        """One pass at time *now* (see the module docstring and the policies' guide).

        Reservations of the previous pass are dropped and rebuilt.  Returns
        the jobs started (with R), those denied (never possible, with the
        pool's note) and the annotations of the jobs considered that stay
        pending.

        A pass that is not *full* stops as soon as no job it has not looked at
        can start: the pool has no free core or GPU left, or every queue is
        blocked (fcfs).  It starts the same jobs as a full pass but refreshes
        the annotations of only the jobs it looked at; the caller runs full
        passes now and then to keep the others' estimates current.  With
        thousands of jobs pending on a full machine this turns the pass after
        each free from O(queue depth) into O(jobs started).
        """
        result = PassResult()
        planner = PassPlanner(self.pool, now)
        taken, runs, states = self._runs()
        gate = self.gate
        done: list[PendingJob] = []
        annotations = result.annotations
        can_start_any = self._could_start(full)
        free_totals = self.pool.free_totals
        indexed = not full and gate is None and self._indexes
        #: per queue, the order key of the last job of this loop
        last: dict[str | None, tuple[int, float, int]] = {}
        try:
            # The queues' runs merge into one priority order: the highest-priority
            # head goes first, whatever its queue (ids make the order total).
            # (one queue, the usual case: its run as it is, without merge's wrapping
            # of every job it yields)
            for job in (runs[0] if len(runs) == 1 else heapq.merge(*runs, key=_key)):
                if not full and (not can_start_any()
                                 or all(st.blocked for st in states.values())):
                    break
                if indexed and self._indexable(states):
                    self._backfill(states, last, planner, result, done, can_start_any)
                    break
                last[job.queue] = _key(job)
                result.considered += 1
                state = states[job.queue]
                if state.blocked:
                    annotations[job.id] = self._note(job, WAITING)
                    continue
                held_back = gate.refusal(job) if gate is not None else None
                if held_back is not None:
                    state.gated += 1
                    annotations[job.id] = self._note(job, held_back)
                    continue
                if not full and state.backfilling and _too_big(job.request, free_totals()):
                    # Only a start could change what it is told now, and it cannot
                    # start: left as it was, not looked at (see the docstring).
                    continue
                try:
                    outcome = planner.start(job.request, job.id, state.policy.placement)
                except (InfeasibleRequest, ValueError) as exc:
                    # ValueError: the pool refused the job itself (e.g. it already
                    # holds an allocation); answering beats failing every pass.
                    result.denied.append((job.id, str(exc)))
                    done.append(job)
                    continue
                if isinstance(outcome, ResourceSet):
                    result.allocated.append((job.id, outcome))
                    done.append(job)
                    if gate is not None:
                        gate.started(job, outcome)
                    continue
                annotations[job.id] = self._blocked(job, outcome, state, planner)
        finally:
            # Even if the pool fails mid-pass, the jobs taken from the heaps
            # must go back, or they would never be considered again.
            for job in done:
                self._forget(job)
            result.answered = done
            for order, jobs in taken:
                if order.count:
                    order.put_back(j for j in jobs if j.id in self.pending)
                    order.compact(self.pending)
        result.reserved = planner.reserved
        # Jobs considered by the previous pass but not by this one: replace
        # what they were told (a start estimate that nobody maintains now)
        # with why they were not looked at.  Told once: the worker keeps it.
        if not full:
            self._annotated.update(annotations)
            return result
        dropped = self._annotated.difference(annotations)
        self._annotated = set(annotations)
        for jobid in dropped:
            annotations[jobid] = self._note(self.pending[jobid], BEYOND_DEPTH)
        return result

    def _runs(self) -> tuple[list[tuple[_Order, list[PendingJob]]],
                             list[Iterator[PendingJob]], dict[str | None, _QueuePass]]:
        """Each queue's jobs as a pass takes them: the lists they are taken into (to put
        back), the lazy runs, and the queues' progress."""
        taken: list[tuple[_Order, list[PendingJob]]] = []
        runs: list[Iterator[PendingJob]] = []
        states: dict[str | None, _QueuePass] = {}
        for name, order in self._orders.items():
            policy = self.policy_of(name)
            jobs: list[PendingJob] = []
            state = states[name] = _QueuePass(policy)
            runs.append(order.popping(policy.queue_depth, self.pending, jobs, state))
            taken.append((order, jobs))
        return taken, runs, states

    def _indexable(self, states: Mapping[str | None, _QueuePass]) -> bool:
        """Whether the rest of a quick pass may go request by request (``_backfill``):
        every queue backfills or is blocked, and they hold few distinct requests."""
        shapes = 0
        for name, state in states.items():
            if state.blocked:
                continue
            if not state.backfilling:
                return False
            shapes += len(self._shapes.get(name, ()))
        return shapes <= INDEXED_REQUESTS

    def _backfill(self, states: Mapping[str | None, _QueuePass],
                  last: Mapping[str | None, tuple[int, float, int]], planner: PassPlanner,
                  result: PassResult, done: list[PendingJob],
                  can_start_any: Callable[[], bool]) -> None:
        """The rest of a quick pass with no start gate, once every queue backfills or is
        blocked: it starts what the job-by-job loop would, looking only at the jobs that
        may start.

        What is left of each backfilling queue's depth lies after the last job the loop
        looked at (``last``) and up to the depth-th of its jobs in order.  There the
        loop would skip a job too big for what is free, and answer one whose request
        (placement needs, and a window at least as long) failed already in this pass
        from the planner's failures: neither changes anything, and both stay so until
        the pass ends (resources are only taken during a pass).  So each request's jobs
        are read in order only until the first of them cannot start, and the requests'
        runs merge into the loop's order: the jobs that are tried, and the pool, see the
        same calls in the same order.  The jobs not tried are not annotated (a quick
        pass refreshes only what it looked at).

        Only a start changes the pool here, so what is free, and whether anything can
        still start, are asked again only after one; every queue here backfills and
        makes no more reservations, so a job that cannot start is told what
        :meth:`_blocked` tells it (``_held``), worded once per note.
        """
        runs = self._backfill_runs(states, last, planner, result)
        heapq.heapify(runs)
        free_totals = self.pool.free_totals
        free = free_totals()
        can = can_start_any()
        pending, annotations, held = self.pending, result.annotations, result.held
        reasons: dict[str, str] = {}
        while runs and can:
            key, n, keys, high = runs[0]
            job = pending[key[2]]
            request = job.request
            result.considered += 1
            if _too_big(request, free):
                heapq.heappop(runs)
                continue
            try:
                outcome = planner.start(request, job.id, states[job.queue].policy.placement)
            except (InfeasibleRequest, ValueError) as exc:
                result.denied.append((job.id, str(exc)))
                done.append(job)
                outcome = None
            if isinstance(outcome, str):
                reason = reasons.get(outcome)
                if reason is None:
                    reason = reasons[outcome] = _held(outcome, planner)
                annotations[job.id] = self._note(job, reason)
                held[request] = reason
                heapq.heappop(runs)  # its request's later jobs fail too
                continue
            if outcome is not None:
                result.allocated.append((job.id, outcome))
                done.append(job)
                free = free_totals()
                can = can_start_any()
            following = keys.first_between(key, high)
            if following is None:
                heapq.heappop(runs)
            else:
                heapq.heapreplace(runs, (following, n, keys, high))

    def _backfill_runs(self, states: Mapping[str | None, _QueuePass],
                       last: Mapping[str | None, tuple[int, float, int]],
                       planner: PassPlanner, result: PassResult
                       ) -> list[tuple[tuple[int, float, int], int, SortedKeys,
                                       tuple[int, float, int]]]:
        """The requests ``_backfill`` reads, each as (the order key of its first job
        left in the depth, a tie-break, its keys, the depth's last key); a request
        whose start failed already in this pass is only said ``held``."""
        free = self.pool.free_totals()
        failure, held = planner.failure, result.held
        runs: list[tuple[tuple[int, float, int], int, SortedKeys,
                         tuple[int, float, int]]] = []
        for name, state in states.items():
            ranks = self._ranks.get(name)
            if state.blocked or not ranks:
                continue
            high = ranks.kth(min(state.policy.queue_depth, len(ranks)) - 1)
            low = last.get(name)
            if low is not None and low >= high:
                continue  # its depth is used up
            placement = state.policy.placement
            for request, keys in self._shapes[name].items():
                if _too_big(request, free):
                    continue
                first = keys.first_between(low, high)
                if first is None:
                    continue
                note = failure(request, placement)
                if note is not None:
                    held[request] = _held(note, planner)
                else:
                    runs.append((first, len(runs), keys, high))
        return runs

    def _could_start(self, full: bool) -> Callable[[], bool]:
        """A cheap test, for a pass that is not *full*, that some pending job might still
        start: the free cores and gpus cover the least need of some held request.

        Free resources only shrink during a pass and the least needs are those of
        its start, so once it says no, nothing the pass has not looked at can start.
        A backfilling policy on a deep backlog would otherwise try every job up to
        the queue depth after each free, most of them far too big for what is free.
        """
        if full:
            return lambda: True
        pool = self.pool
        needs = self._least_needs
        if needs is None:
            needs = self._least_needs = _least(self._needs)

        def check() -> bool:
            cores, gpus = pool.free_totals()
            return any(c <= cores and g <= gpus for c, g in needs)
        return check

    def _blocked(self, job: PendingJob, note: str, state: _QueuePass,
                 planner: PassPlanner) -> dict[str, Any]:
        """Apply the queue's policy to a job that cannot start now; its annotations."""
        policy = state.policy
        reason = insufficient(note)
        if policy.policy == "fcfs":
            state.blocked = True
            when = planner.estimate(job.request, job.id)
            if when is None:
                return self._note(job, f"{reason}; {NO_ESTIMATE}")
            return self._note(job, reason, when)
        if not state.backfilling:
            when = planner.reserve(job.request, job.id, policy.placement)
            if when is None:
                state.unknown += 1
                return self._note(job, f"{reason}; {NO_ESTIMATE}")
            state.reserved += 1
            return self._note(job, f"{reason}; reserved from {format_time(when)}", when)
        return self._note(job, _held(note, planner))

    @staticmethod
    def _note(job: PendingJob, reason: str, when: float | None = None) -> dict[str, Any]:
        """The ``sched`` annotations of a pending job."""
        ann: dict[str, Any] = {"reason_pending": reason}
        if when is not None:
            ann["t_estimate"] = when
        if job.queue is not None:
            ann["queue"] = job.queue
        return ann
