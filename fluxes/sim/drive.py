"""The one place the simulator touches the code it simulates: ingest, job manager, scheduler.

Everything else in :mod:`fluxes.sim` talks to this module only, so a change of
a signature in :class:`~fluxes.domain.jm.core.JobManagerCore`,
:class:`~fluxes.domain.sched.session.SessionCore`, the pool or the ingest's
:func:`~fluxes.domain.jm.submission.prepare_job` breaks here, and
``tests/unit/test_sim_drive.py`` says so at once.

What it drives, and how it mirrors the workers:

* :class:`Ingest`: each job goes through the ingest's own checks
  (``prepare_job``: jobspec, queue admission with its limits and defaults,
  feasibility against the inventory), cached per job shape; a refusal is the
  ingest's message.
* :class:`Driver` holds one :class:`JobManagerCore` (the job manager worker's
  pure core) and one :class:`SessionCore` on the pool the scheduler worker's
  wiring picks (``pool_of_table``: a graph pool when the machine's
  ``[resource]`` table describes a graph, else a :class:`ResourcePool`), and
  with accounting (:mod:`fluxes.sim.accounting`) the worker's ``LimitGate`` and
  the job manager's periodic reprioritizing, and carries their RFC 27 messages
  both ways with no latency, as typed message objects. The scheduler side is the
  scheduler worker's own session core
  (:class:`~fluxes.domain.sched.session.SessionCore`, with no store): alloc
  requests are checked (``pool.check``) and queued, frees, cancels, expirations
  and resets handled as the worker handles them, and a pass runs after every
  batch of messages that can change its outcome. The exec side is the
  simulator's model (:class:`ExecModel`): tasks start the moment the job
  manager asks and report at once.
* Time is a :class:`VirtualClock` both cores read. The job manager's timers
  (time limits, begin-time dependencies) fire through ``on_timers`` at their
  due times. The scheduler worker's timers are modelled with ``annotations``
  on: a full pass at most every ``FULL_PASS_S`` and a replan ``REPLAN_S`` after
  the last pass while jobs are pending (the session core's timers). With
  ``annotations`` off, every pass is a quick pass and timer passes are left
  out: they only refresh annotations (a quick pass starts exactly what a full
  one would, and a pass with no input since the previous one starts nothing),
  which the tests check by comparing both modes.

Why one module: it is the simulator's single point of contact with the code it
simulates (every call into the ingest, the job manager core, the scheduler and
its pool is here, and one test checks their signatures); split, a change in
those cores could break a piece the test does not look at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.table import pool_of_table
from fluxes.domain.jm.core import Effects, JobManagerCore
from fluxes.domain.jm.depend import TargetStatus
from fluxes.domain.jm.feasibility import Feasibility
from fluxes.domain.jm.priority import PriorityPlugin
from fluxes.domain.jm.submission import prepare_job
from fluxes.domain.job import events as ev
from fluxes.domain.job.states import JobResult, JobState
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.policy import PassResult, QueuePolicy
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.session import (
    FULL_PASS_S,
    NO_STORE,
    REPLAN_S,
    Item,
    SessionCore,
    queue_policies,
)
from fluxes.domain.sched.session import Effects as SessionEffects
from fluxes.errors import FluxesError
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.sim.accounting import SimAccounting
from fluxes.sim.workload import SimJob

__all__ = ["EPOCH", "FULL_PASS_S", "PARTITION", "REPLAN_S", "Driver", "ExecModel", "Granted",
           "Ingest", "Observer", "Prepared", "VirtualClock", "queue_policies", "scheduler_core"]

#: The RFC 27 session's epoch: one scheduler, never restarted.
EPOCH: Final = 1
#: The one partition of a simulated instance.
PARTITION: Final = 0
#: The instance owner's uid (the simulator submits and cancels as the job's user).
OWNER_UID: Final = 0
#: Wait status of tasks killed by the job manager's SIGTERM (15).
KILLED_STATUS: Final = 15
#: Message round trips at one instant before the simulator gives up (a bug, not a load).
_SETTLE_LIMIT: Final = 1_000_000


class VirtualClock:
    """The simulation's time: a callable the cores read, set by the engine."""

    __slots__ = ("now",)

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The virtual time."""
        return self.now


# -- the ingest -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prepared:
    """A job the ingest accepted: its queue, submit extras and scheduler request."""

    queue: str | None
    info: dict[str, Any]
    request: str | None


class Ingest:
    """The ingest's checks (``prepare_job``) for simulated jobs, cached per shape."""

    def __init__(self, config: InstanceConfig, inventory: Inventory,
                 graph: ResourceGraph | None = None) -> None:
        self.config = config
        # with a graph, jobs are checked against it, as the ingest's load_feasibility does
        self.feasibility = Feasibility(inventory, graph)
        self._cache: dict[tuple[Any, ...], Prepared | str] = {}
        queues = config.queues
        # access rules make the verdict depend on the user: only then is the user
        # part of the cache key
        self._per_user = any(queues.effective_policy(q).restricts_access
                             for q in queues.queue_names)

    def prepare(self, job: SimJob) -> Prepared | str:
        """The accepted job, or the ingest's one-line refusal."""
        key: tuple[Any, ...] = (job.size, job.whole_nodes, job.requested, job.queue,
                                job.request, job.userid if self._per_user else None)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._prepare(job)
        return found

    def _prepare(self, job: SimJob) -> Prepared | str:
        try:
            spec = _jobspec(job)
            done = prepare_job({"jobspec": spec.to_dict(), "urgency": job.urgency},
                               job.userid, job.user, self.config, is_owner=True,
                               feasibility=self.feasibility)
        except (ValueError, FluxesError) as exc:  # JobspecError, PolicyError, Infeasible...
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Prepared(done.queue, done.info, done.request)


def _jobspec(job: SimJob) -> Jobspec:
    """The jobspec a user would submit for ``job``."""
    duration = job.requested if math.isfinite(job.requested) else 0.0
    command = ["swf"]
    request = job.request
    if request is not None:
        nnodes = request.min_nodes
        gpus = request.min_gpus_per_slot
        constraint = request.constraint.to_dict() if request.constraint is not None else None
        if nnodes:
            return Jobspec.from_command(
                command, nnodes=nnodes, ntasks=nnodes * request.min_slots,
                cores_per_task=max(request.min_cores_per_slot, 1),
                gpus_per_task=gpus or None, exclusive=request.exclusive,
                duration=duration, queue=job.queue, constraints=constraint)
        return Jobspec.from_command(
            command, ntasks=request.min_slots, cores_per_task=max(request.min_cores_per_slot, 1),
            gpus_per_task=gpus or None, duration=duration, queue=job.queue,
            constraints=constraint)
    if job.whole_nodes:
        return Jobspec.from_command(command, nnodes=job.size, ntasks=job.size, exclusive=True,
                                    duration=duration, queue=job.queue)
    return Jobspec.from_command(command, ntasks=job.size, duration=duration, queue=job.queue)


# -- what the engine plugs in ---------------------------------------------------------


@dataclass(slots=True)
class Granted:
    """An allocation the scheduler made: when, and the cores per rank as bit masks."""

    jobid: int
    t: float
    masks: dict[int, int]
    ncores: int


class ExecModel:
    """The execution side: told when a job's tasks start and when they are killed."""

    def start(self, jobid: int, ranks: Sequence[int], now: float) -> None:
        """The job manager started the job's tasks on ``ranks``."""
        raise NotImplementedError

    def kill(self, jobid: int, now: float) -> bool:
        """The job manager killed the job; True if its tasks were running (they report
        ``KILLED_STATUS`` and release at once)."""
        raise NotImplementedError


class Observer:
    """What the engine learns from the run (every method may be left as is)."""

    #: True to receive every journal event (``journal``)
    wants_journal = False

    def journal(self, jobid: int, seq: int | None, event: ev.Event,
                extra: Mapping[str, Any] | None) -> None:
        """An event the job manager (or the ingest) committed; seq None: journal only."""

    def granted(self, grant: Granted) -> None:
        """The scheduler allocated resources."""

    def retired(self, jobid: int, result: str, when: float) -> None:
        """The job became inactive with ``result`` (COMPLETED, FAILED, ...)."""

    def queued(self, jobid: int, key: tuple[int, float, int], queue: str | None) -> None:
        """The scheduler queued an alloc request (or changed its priority): its order key."""

    def passed(self, now: float, result: PassResult) -> None:
        """A scheduling pass ran."""


# -- the scheduler side -----------------------------------------------------------------


def scheduler_core(inventory: Inventory, queues: Mapping[str | None, QueuePolicy],
                   clock: VirtualClock, *, mode: proto.Mode = "unlimited", limit: int = 0,
                   annotations: bool = False, table: Mapping[str, Any] | None = None,
                   gate: LimitGate | None = None, answer: bool = True) -> SessionCore:
    """The scheduler worker's session core with no store, wired as the worker wires it,
    its session open (:data:`EPOCH` begun on :data:`PARTITION`): the simulator's
    scheduler side, and the forecast's (:mod:`fluxes.forecast.engine`). ``answer``
    False: no SUCCESS responses (the forecast reads the passes' allocations)."""
    # the worker's wiring (load_pool): a graph pool when the [resource] table
    # describes a graph, else today's pool; a machine given by counts has no table
    pool: SchedulerPool = pool_of_table(table, clock) if table is not None \
        else ResourcePool(inventory, clock=clock)
    core = SessionCore(pool, queues, graph=isinstance(pool, GraphPool), gate=gate,
                       stored=NO_STORE, mode=mode, limit=limit, annotate=annotations,
                       write_r=False, clock=clock, owner_uid=OWNER_UID, answer=answer)
    core.begin_epoch(PARTITION, EPOCH)
    return core


class _SchedSide:
    """The scheduler worker's session core (:class:`SessionCore`) with no store: what
    the worker does with each request and pass, without Redis."""

    def __init__(self, inventory: Inventory, queues: Mapping[str | None, QueuePolicy],
                 clock: VirtualClock, mode: proto.Mode, limit: int, annotations: bool,
                 observer: Observer, table: Mapping[str, Any] | None = None,
                 accounting: SimAccounting | None = None) -> None:
        self.core = scheduler_core(inventory, queues, clock, mode=mode, limit=limit,
                                   annotations=annotations, table=table,
                                   gate=accounting.gate if accounting is not None else None)
        self.observer = observer
        self.passes = 0

    def handle(self, msgs: Sequence[proto.SchedRequest]) -> list[proto.SchedResponse]:
        """Apply requests in order (``SessionCore.handle``)."""
        fx = SessionEffects()
        self.core.handle(PARTITION, [Item(EPOCH, msg) for msg in msgs], fx)
        if fx.hellos or fx.refused:
            raise RuntimeError(f"the scheduler's session broke: {fx.refused}")
        self._queued(fx.queued)
        return fx.responses.get(PARTITION, [])

    def _queued(self, jobids: list[int]) -> None:
        pending = self.core.sched.pending
        observer = self.observer
        for jobid in jobids:
            job = pending.get(jobid)
            if job is not None:
                observer.queued(jobid, (-job.priority, job.t_submit, jobid), job.queue)

    def run_pass(self, now: float) -> list[proto.SchedResponse]:
        """One pass (``SessionCore.schedule``): its responses."""
        fx = SessionEffects()
        result = self.core.schedule(now, fx)
        self.passes += 1
        observer = self.observer
        for jobid, rset in result.allocated:
            observer.granted(_grant(jobid, now, rset))
        observer.passed(now, result)
        return fx.responses.get(PARTITION, [])


def _grant(jobid: int, now: float, rset: ResourceSet) -> Granted:
    """The cores of an allocation as one bit mask per rank."""
    masks: dict[int, int] = {}
    total = 0
    for rank in rset.ranks:
        mask = 0
        for lo, hi in rset.cores(rank).ranges():
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
            total += hi - lo + 1
        masks[rank] = mask
    return Granted(jobid, now, masks, total)


# -- the driver -------------------------------------------------------------------------


class Driver:
    """A job manager core and a scheduler wired together on a virtual clock."""

    def __init__(self, inventory: Inventory, queues: Mapping[str | None, QueuePolicy], *,
                 clock: VirtualClock, exec_model: ExecModel, observer: Observer,
                 priority: PriorityPlugin | None = None, mode: proto.Mode = "unlimited",
                 limit: int = 0, annotations: bool = False,
                 track_dependencies: bool = False, table: Mapping[str, Any] | None = None,
                 accounting: SimAccounting | None = None) -> None:
        self.clock = clock
        self.exec = exec_model
        self.observer = observer
        self.annotations = annotations
        self.accounting = accounting
        if accounting is not None and accounting.priority is not None:
            priority = accounting.priority
        self.core = JobManagerCore(owner_uid=OWNER_UID, priority=priority, clock=clock,
                                   lookup=self._lookup)
        if accounting is not None:
            jobs = self.core.jobs
            accounting.use_records(lambda jobid: (act.rec.info if (act := jobs.get(jobid))
                                                  is not None else None))
        self.sched = _SchedSide(inventory, queues, clock, mode, limit, annotations, observer,
                                table, accounting)
        self._to_sched: list[proto.SchedRequest] = []
        self._reports: list[proto.ExecReport] = []
        self._ranks: dict[int, list[int]] = {}
        self._track = track_dependencies
        self._facts: dict[int, list[bool]] = {}  # allocated, started, fatal
        self._final: dict[int, TargetStatus] = {}
        self._userid: dict[int, int] = {}
        # the RFC 27 handshake: hello, the job manager's answer, ready
        fx = Effects()
        self.core.on_sched(fx, EPOCH, proto.Hello())
        self._drain(fx)
        self._flow()

    # -- inputs -----------------------------------------------------------------------

    def submit(self, job: SimJob, prepared: Prepared) -> None:
        """The ingest stored ``job``: its submit and validate events, then the job
        manager's ``new`` message."""
        info = prepared.info
        if job.name is not None or job.dependencies:
            info = dict(info)
            if job.name is not None:
                info["name"] = job.name
            if job.dependencies:
                info["dependencies"] = job.dependencies
        now = self.clock.now
        if self.observer.wants_journal or self.accounting is not None:
            submit = ev.Submit(timestamp=now, urgency=job.urgency, userid=job.userid, flags=0)
            if self.accounting is not None:
                self.accounting.fold(job.id, submit, info)
            if self.observer.wants_journal:
                self.observer.journal(job.id, 0, submit, info)
                self.observer.journal(job.id, 1, ev.Validate(timestamp=now), None)
        if self._track:
            self._userid[job.id] = job.userid
        fx = Effects()
        self.core.on_new(fx, proto.New(id=job.id, userid=job.userid, urgency=job.urgency,
                                       flags=0, t_submit=now, info=info,
                                       request=prepared.request))
        self._drain(fx)

    def cancel(self, jobid: int, userid: int, note: str = "canceled by its user") -> None:
        """The job's user cancels it (``fluxes cancel``)."""
        fx = Effects()
        self.core.on_ctl(fx, proto.CancelRequest(ids=[jobid], userid=userid, note=note))
        self._drain(fx)

    def finished(self, jobid: int, status: int) -> None:
        """The job's tasks exited with wait ``status`` on every rank and released them."""
        ranks = self._ranks.pop(jobid, None)
        if ranks is None:
            return
        self._reports.extend(proto.ExecReport(id=jobid, rank=r, status=status, released=True)
                             for r in ranks)

    # -- live state -----------------------------------------------------------------------

    def allocation(self, jobid: int) -> ResourceSet:
        """What a running job holds (ValueError when it holds nothing)."""
        # both pools (ResourcePool, the graph pool) answer it; the protocol leaves it out
        held: ResourceSet = getattr(self.sched.core.pool, "allocation_of")(jobid)  # noqa: B009
        return held

    # -- time -------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        """When the cores next have something to do by themselves, or None."""
        due = self.core.next_timer()
        acct = self.accounting
        if acct is not None and acct.plugin is not None and self.core.jobs:
            # the job manager's reprioritizing, while it holds jobs (between them the
            # next instant catches up: nothing changes in an empty job manager)
            due = acct.next_tick if due is None else min(due, acct.next_tick)
        timer = self.sched.core.next_timer()
        if timer is not None:
            due = timer if due is None else min(due, timer)
        return due

    def settle(self, now: float) -> None:
        """Carry every message at ``now`` until nothing moves; scheduling passes run
        whenever the scheduler has taken a batch that can change their outcome."""
        self.clock.now = now
        core = self.sched.core
        tick = self.accounting.due(now) if self.accounting is not None else None
        if tick is not None and tick < now:
            self._reprioritize(tick)  # a tick passed while the job manager held no job
            tick = None
        for _ in range(_SETTLE_LIMIT):
            # inputs first, then the job manager's timers, as its worker's step does: a
            # job whose tasks end exactly at its time limit completes
            self._flow()
            fx = Effects()
            self.core.on_timers(fx, now)
            self._drain(fx)
            if tick is not None:
                self._reprioritize(tick)  # after its timers, as in the worker's step
                tick = None
            if self._to_sched or self._reports:
                continue
            if core.due(now):
                self._respond(self.sched.run_pass(now))
                continue
            return
        raise RuntimeError(f"the simulation does not settle at t={now}")

    def _reprioritize(self, when: float) -> None:
        """The job manager's periodic step: a fair-share table as of ``when``, then every
        pending job's priority recomputed (``JobManagerCore.reprioritize``)."""
        assert self.accounting is not None
        self.accounting.refresh(when)
        fx = Effects()
        self.core.reprioritize(fx)
        self._drain(fx)

    # -- plumbing -----------------------------------------------------------------------

    def _flow(self) -> None:
        """Deliver queued messages (to the scheduler, from exec) until there are none."""
        while self._to_sched or self._reports:
            if self._to_sched:
                msgs, self._to_sched = self._to_sched, []
                self._respond(self.sched.handle(msgs))
            if self._reports:
                reports, self._reports = self._reports, []
                fx = Effects()
                for report in reports:
                    self.core.on_exec(fx, report)
                self._drain(fx)

    def _respond(self, responses: list[proto.SchedResponse]) -> None:
        if not responses:
            return
        fx = Effects()
        for msg in responses:
            self.core.on_sched(fx, EPOCH, msg)
        self._drain(fx)

    def _drain(self, fx: Effects) -> None:
        """Take what one core step produced: events, messages to send, retired jobs."""
        observer = self.observer
        acct = self.accounting
        if fx.ops and (observer.wants_journal or self._track or acct is not None):
            for jobid, ops in fx.ops.items():
                seq = fx.base_seq.get(jobid, 0)
                for op in ops:
                    if op[0] == "E":
                        if observer.wants_journal:
                            observer.journal(jobid, seq, op[1], op[2])
                        if self._track:
                            self._note(jobid, op[1])
                        if acct is not None:
                            acct.fold(jobid, op[1], op[2])
                        seq += 1
                    elif observer.wants_journal:
                        observer.journal(jobid, None, op[1], None)
        if fx.sched:
            self._to_sched.extend(fx.sched)
        if fx.exec:
            self._exec(fx.exec)
        for jobid, (result, when) in fx.retired.items():
            if self._track:
                self._retire(jobid, result)
            if acct is not None:
                acct.retired(jobid)
            observer.retired(jobid, result, when)

    def _exec(self, requests: Mapping[int, list[proto.ExecRequest]]) -> None:
        """Start and kill requests, per rank: the exec model answers at once."""
        started: dict[int, list[int]] = {}
        killed: set[int] = set()
        for rank, msgs in requests.items():
            for msg in msgs:
                if isinstance(msg, proto.Start):
                    started.setdefault(msg.id, []).append(rank)
                elif isinstance(msg, proto.Kill):
                    killed.add(msg.id)
        now = self.clock.now
        for jobid, ranks in started.items():
            ranks.sort()
            self._ranks[jobid] = ranks
            self.exec.start(jobid, ranks, now)
            self._reports.extend(proto.ExecReport(id=jobid, rank=r, started=True)
                                 for r in ranks)
        for jobid in killed:
            if jobid in self._ranks and self.exec.kill(jobid, now):
                self.finished(jobid, KILLED_STATUS)

    # -- dependencies: what the job manager asks about inactive targets -------------------

    def _note(self, jobid: int, event: ev.Event) -> None:
        facts = self._facts.setdefault(jobid, [False, False, False])
        if isinstance(event, ev.Alloc):
            facts[0] = True
        elif isinstance(event, ev.Start):
            facts[1] = True
        elif isinstance(event, ev.JobException) and event.severity == 0:
            facts[2] = True

    def _retire(self, jobid: int, result: str) -> None:
        allocated, started, fatal = self._facts.pop(jobid, [False, False, False])
        try:
            res: JobResult | None = JobResult[result] if result else None
        except KeyError:
            res = None
        self._final[jobid] = TargetStatus(state=JobState.INACTIVE, result=res,
                                          allocated=allocated, started=started,
                                          exception=fatal, userid=self._userid.pop(jobid, None))

    def _lookup(self, jobid: int) -> TargetStatus | None:
        return self._final.get(jobid)

    # -- state for the engine's checks --------------------------------------------------

    @property
    def active_jobs(self) -> list[int]:
        """Jobs the job manager still holds (none once every job ended)."""
        return list(self.core.jobs)

    @property
    def pending_requests(self) -> list[int]:
        """Alloc requests the scheduler still holds."""
        return list(self.sched.core.sched.pending)

    @property
    def passes(self) -> int:
        """Scheduling passes run so far."""
        return self.sched.passes


#: What a Driver needs to build a job manager's priority plugin for a run.
PriorityFactory = Callable[[VirtualClock], PriorityPlugin | None]
