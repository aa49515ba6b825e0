"""The scheduler's RFC 27 session, pure: requests in, responses and effects out.

:class:`SessionCore` is to the scheduler what
:class:`~fluxes.domain.jm.core.JobManagerCore` is to the job manager. It
holds the pool, the :class:`~fluxes.domain.sched.policy.Scheduler` with its
pending jobs, the running-limits gate, the drained ranks and one record per
outstanding job (:class:`Queued`, the scheduler's own pending entry;
:class:`Allocated` and :class:`Quarantined` in :attr:`SessionCore.jobs`),
and it decides everything the session does: which alloc requests are
queued or denied, when a pass is due and what it answers (SUCCESS with the R
to write, DENY, ANNOTATE deltas), what a free, cancel, prioritize,
expiration or reset does, what the hello recovery puts back into the pool,
which ranks a silent exec worker costs. It does no I/O: stored jobs are
read through the :class:`StoredJobs` port it is given, and what must be
written comes back in :class:`Effects`.

Two drivers:

* ``workers/scheduler.py`` reads the request streams, hands each
  partition's decoded requests to :meth:`SessionCore.handle`, runs
  :meth:`SessionCore.schedule` when :meth:`SessionCore.due`, and applies the
  effects through store methods (fenced R writes and responses, resource
  events, raise requests); leases and epochs stay in the worker.
* ``fluxes/sim/drive.py`` carries the job manager core's messages to the
  same methods on a virtual clock, with no store (``NO_STORE``).

Driving it from a snapshot of live state (what a forecast does; see
``test_a_snapshot_of_live_state_runs_forward`` in
``tests/unit/test_sched_session.py``):

1. the pool: ``ResourcePool(inventory, clock=...)`` (or ``pool_of_table``
   for a graph), and ``SessionCore(pool, queue_policies(config),
   gate=LimitGate(accounts), mode=..., limit=..., annotate=False,
   write_r=False)`` (``stored`` stays ``NO_STORE``: every alloc carries its
   request);
2. the session: :meth:`SessionCore.begin_epoch` of partition 0 (with
   ``partition_of`` left as it is, every job is partition 0) and
   :meth:`SessionCore.handle` of a ``HelloReply(alloc=[])``: ready, with an
   empty pool (a hello reply frees what it does not name: hold jobs after it);
3. drained nodes: :meth:`SessionCore.apply_resource_event` with a
   ``proto.Drain(ranks=..., reason=...)`` per drained set;
4. running jobs: :meth:`SessionCore.hold` with each job's stored R, its
   request and a ``proto.HeldJob(id, userid, bank, expiration)`` (the
   expiration the job manager holds, when ``fluxes update`` moved it);
5. pending jobs: :meth:`SessionCore.handle` of their ``Alloc`` messages
   (priority, t_submit, userid, queue, request wire, bank);
6. run forward: :meth:`SessionCore.schedule` at ``now``, then at each
   running job's end (``handle`` a ``Free`` for it first) while jobs are
   pending; a SUCCESS response (and :attr:`PassResult.allocated`) says when
   a pending job starts, :attr:`PassResult.reserved` when it is planned to.

Why one module: it is the session's one state machine (the records of the
outstanding jobs are shared by the request handlers, the passes, the
recovery and the R-write fencing); the pieces that stand alone (policies,
pools, requests, the standby mirror, the staged starts' bookkeeping,
:mod:`~fluxes.domain.sched.staging`) are modules of their own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol

import orjson

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.graph.wants import graph_request
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.policy import PassResult, PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.staging import Staging
from fluxes.domain.sched.standby import adopt_followed, reconcile
from fluxes.errors import FluxesError
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.messages.bounds import one_line

__all__ = ["ANNOTATIONS_PER_STEP", "FULL_PASS_S", "NO_STORE", "REPLAN_S", "Allocated",
           "Effects", "Item", "Quarantined", "Queued", "SessionCore", "StoredJobs",
           "queue_policies"]

#: Re-plan (start estimates) at least this often while jobs are pending.
REPLAN_S: Final = 5.0
#: Most seconds between full passes (which refresh every considered job's
#: annotations); the passes in between stop once nothing more can start.
FULL_PASS_S: Final = 1.0
#: Distinct decoded requests kept at most (a cache: clearing it costs only decoding).
REQUESTS_KEPT: Final = 4096
#: Annotation deltas sent per pass (or step) at most. A full pass refreshes every job
#: it considers, a thousand at once after a big submission; sent in one answer they
#: would hold up the allocations beside them while the job manager commits them all
#: (and Redis runs that commit): the rest go out with the next steps
#: (:meth:`SessionCore.annotate_owed`).
ANNOTATIONS_PER_STEP: Final = 64
#: Alloc requests queued between two calls of the ``pulse`` (the worker renews its
#: leases there during a long batch).
PULSE_EVERY: Final = 512


# -- the port to stored jobs ---------------------------------------------------------------


class StoredJobs(Protocol):
    """What the session reads of stored jobs (the worker plugs in the job hashes)."""

    def allocations(self, ids: list[int]) -> list[tuple[bytes | None, str | None,
                                                        bytes | None]]:
        """Per job: (stored R, stored wire request, stored jobspec)."""

    def effective_jobspecs(self, ids: list[int]) -> list[bytes | None]:
        """Per job: its jobspec as JSON (None: none stored)."""


class _NoStore:
    """No stored jobs: every alloc carries its request, nothing is held at hello."""

    def allocations(self, ids: list[int]) -> list[tuple[bytes | None, str | None,
                                                        bytes | None]]:
        """Nothing stored."""
        return [(None, None, None) for _ in ids]

    def effective_jobspecs(self, ids: list[int]) -> list[bytes | None]:
        """Nothing stored."""
        return [None for _ in ids]


#: The port of a session with no store (the simulator's).
NO_STORE: Final[StoredJobs] = _NoStore()


# -- one record per outstanding job ------------------------------------------------------


@dataclass(slots=True)
class Queued(PendingJob):
    """An alloc request waiting in the scheduler's queues: the scheduler's pending entry
    (:attr:`Scheduler.pending`) is the session's record, so a queued job costs three
    fields more than the scheduler's own."""

    #: the request stream entry it came in (its dead letter names it)
    origin: bytes = b"-"
    #: when it arrived (monotonic), kept only while alloc latency is measured
    arrived: float | None = None
    #: the ``sched`` annotations last sent for it (deltas are sent)
    sent: dict[str, Any] | None = None


@dataclass(slots=True)
class Allocated:
    """Allocated by a pass; its R and SUCCESS are not committed yet."""

    origin: bytes
    arrived: float | None
    #: the R to write with the SUCCESS (None when the session writes no R)
    r: bytes | None


@dataclass(slots=True)
class Quarantined:
    """Held by a job whose allocation the hello recovery could not read back: its ranks
    are drained until its free arrives."""

    ranks: IDSet


#: What :attr:`SessionCore.jobs` holds (queued jobs are the scheduler's pending entries).
Record = Allocated | Quarantined


class Item(NamedTuple):
    """One decoded request of a partition's stream, with the entry it came in."""

    epoch: int
    msg: proto.SchedRequest
    #: the stream entry id (dead letters name it)
    origin: bytes = b"-"
    #: the entry's fields (a request that breaks the session is dead-lettered with them)
    fields: Mapping[bytes, bytes] | None = None


@dataclass
class Effects:
    """What one call produced, for the driver to apply (in this order: resource events
    and raise requests, then R and responses per partition, fenced)."""

    #: partition -> responses to send, in order
    responses: dict[int, list[proto.SchedResponse]] = field(default_factory=dict)
    #: partition -> jobid -> R to write with its SUCCESS (fenced on the job waiting)
    r: dict[int, dict[int, bytes]] = field(default_factory=dict)
    #: partitions whose job manager restarted (Reset) or whose request broke the
    #: session: start a new epoch (hello) there
    hellos: list[int] = field(default_factory=list)
    #: requests the session could not handle: dead-letter them (partition, item, why)
    refused: list[tuple[int, Item, str]] = field(default_factory=list)
    #: partitions whose hello recovery ended (ready sent): (partition, jobs held, R read)
    readied: list[tuple[int, int, int]] = field(default_factory=list)
    #: drain/undrain events to write: (kind, ranks, reason, auto)
    resource_events: list[tuple[str, str, str, bool]] = field(default_factory=list)
    #: partition -> raise requests for the job manager
    raises: dict[int, list[proto.RaiseRequest]] = field(default_factory=dict)
    #: what to log: (level, message, extra)
    log: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    #: jobs queued or re-prioritized (the simulator's observer wants them)
    queued: list[int] = field(default_factory=list)
    #: arrival times of the allocations this call made (alloc latency)
    arrivals: list[float] = field(default_factory=list)

    def out(self, partition: int) -> list[proto.SchedResponse]:
        """The responses of ``partition``, to append to."""
        found = self.responses.get(partition)
        if found is None:
            found = self.responses[partition] = []
        return found


# -- the requests of jobs ----------------------------------------------------------------


class Requests:
    """Requests decoded once per distinct wire form or stored jobspec."""

    def __init__(self, graph: bool) -> None:
        self.graph = graph
        self._wire: dict[str, Request] = {}
        self._spec: dict[bytes, Request] = {}

    def of_wire(self, wire: str | None, log: list[tuple[str, str, dict[str, Any]]]
                ) -> Request | None:
        """The request an alloc message (or the job hash) carries; None when there is
        none or it cannot be read (the job's jobspec is read instead, said in ``log``)."""
        if wire is None:
            return None
        found = self._wire.get(wire)
        if found is None:
            try:
                found = Request.from_wire(wire)
            except ValueError as exc:
                log.append(("warning", "unreadable request, reading the jobspec",
                            {"error": str(exc)}))
                return None
            if len(self._wire) >= REQUESTS_KEPT:
                self._wire.clear()
            self._wire[wire] = found
        return found

    def of_stored(self, wire: str | None, raw_spec: bytes | None,
                  log: list[tuple[str, str, dict[str, Any]]]) -> Request | None:
        """A held job's request: the stored one, else its jobspec's (parsed once per
        distinct jobspec); None with neither."""
        request = self.of_wire(wire, log)
        if request is None and raw_spec:
            request = self._spec.get(raw_spec)
            if request is None:
                if len(self._spec) >= REQUESTS_KEPT:
                    self._spec.clear()
                request = self._spec[raw_spec] = parse_request(orjson.loads(raw_spec),
                                                               self.graph)
        return request

    def of_jobspec(self, raw: bytes | None) -> Request:
        """The request of an alloc's stored jobspec; InfeasibleRequest without one."""
        if not raw:
            raise InfeasibleRequest("job has no jobspec")
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise InfeasibleRequest("stored jobspec is not JSON") from None
        return parse_request(Jobspec.from_dict(doc), self.graph)


def parse_request(jobspec: Jobspec | Mapping[str, Any], graph: bool) -> Request:
    """A jobspec's Request: on a graph any resources tree (racks, switches...), else the
    shapes the node pool reads."""
    return graph_request(jobspec) if graph else Request.from_jobspec(jobspec)


def queue_policies(config: InstanceConfig, override: Mapping[str, Any] | None = None
                   ) -> dict[str | None, QueuePolicy]:
    """Each queue's scheduler policy from the configuration, then ``override``
    (``policy``, ``queue_depth``, ``reservation_depth``, ``placement``: the
    simulator's command line) applied to every queue. ValueError for a bad value."""
    out: dict[str | None, QueuePolicy] = {}
    queues = config.queues
    defaults = QueuePolicy()
    for name in [None, *queues.queue_names]:
        try:
            policy = queues.effective_policy(name)
        except (KeyError, ValueError, FluxesError):
            continue
        sp = getattr(policy, "scheduler", None)
        if sp is None:
            continue
        values: dict[str, Any] = {}
        for attr in ("policy", "queue_depth", "reservation_depth", "placement"):
            value = getattr(sp, attr, None)
            values[attr] = getattr(defaults, attr) if value is None else value  # 0 is real
        values.update({k: v for k, v in (override or {}).items() if v is not None})
        out[name] = QueuePolicy(**values)
    return out


# -- the session ------------------------------------------------------------------------


class SessionCore:
    """The RFC 27 session over every partition (see the module docstring).

    ``partition_of`` maps a job to its partition; ``gate`` is the running
    limits' start gate (None: no limits); ``mode``/``limit`` go into ready;
    ``annotate`` False makes every pass a quick one with no annotations and no
    timer passes (the simulator's default: starts are the same); ``write_r``
    False leaves R unencoded (nobody stores it); ``answer`` False sends no SUCCESS for
    a pass's allocations (a driver that reads :attr:`PassResult.allocated` and nothing
    else, a forecast: it needs ``write_r`` and ``latency`` off); ``pulse`` is called during
    long batches (the worker renews its leases); ``clock`` (monotonic) times
    alloc latency, only when ``latency`` is on; ``owner_uid`` raises the
    exceptions of jobs whose allocation a recovery lost; ``stage_depth`` and
    ``stage_horizon`` (seconds) are the staged starts' (:mod:`~fluxes.domain.sched.staging`;
    depth 0, the default, frees nothing early: the simulator's exec is instant).
    """

    def __init__(self, pool: SchedulerPool, queues: Mapping[str | None, QueuePolicy], *,
                 graph: bool = False, gate: LimitGate | None = None,
                 stored: StoredJobs = NO_STORE,
                 partition_of: Callable[[int], int] = lambda jobid: 0,
                 mode: proto.Mode = "unlimited", limit: int = 0, annotate: bool = True,
                 write_r: bool = True, pulse: Callable[[], object] | None = None,
                 latency: bool = False, clock: Callable[[], float] = time.monotonic,
                 owner_uid: int = 0, answer: bool = True, stage_depth: int = 0,
                 stage_horizon: float = 0.0) -> None:
        if not answer and (write_r or latency):
            raise ValueError("SessionCore: answer=False needs write_r and latency off "
                             "(no SUCCESS carries the R, nor ends an alloc's latency)")
        self.pool = pool
        self.graph = graph
        self.gate = gate
        self.sched = Scheduler(pool, queues, gate=gate)
        self.stored = stored
        self.partition_of = partition_of
        self.mode: proto.Mode = mode
        self.limit = limit
        self.annotate = annotate
        self.write_r = write_r
        self.answer = answer
        self.pulse = pulse
        self.latency = latency
        self.clock = clock
        self.owner_uid = owner_uid
        self.requests = Requests(graph)
        #: the jobs freed early and those staged behind them
        self.staging = Staging(stage_depth, stage_horizon)
        #: the record of each job allocated but not committed, or quarantined (a queued
        #: job's record is its entry in ``sched.pending``: one record per outstanding job)
        self.jobs: dict[int, Record] = {}
        #: partition -> its epoch (absent: no session there, its messages are ignored)
        self.epochs: dict[int, int] = {}
        #: partitions whose hello was answered (ready sent)
        self.ready: set[int] = set()
        #: rank -> (reason, automatic, when) of every drained rank
        self.drained: dict[int, tuple[str, bool, float]] = {}
        #: (nnodes, ncores) of the jobs a standby's warm pool held on taking over
        self.warm_sizes: dict[int, tuple[int, int]] = {}
        #: allocations made (less those taken back)
        self.allocations = 0
        #: a pass is owed: something changed that can change its outcome
        self.dirty = False
        self.planned = -math.inf
        self.full_pass = -math.inf
        self.owe_full = False
        #: annotations a pass computed and did not send yet (the newest per job)
        self.owed: dict[int, dict[str, Any]] = {}

    # -- epochs --------------------------------------------------------------------------

    def begin_epoch(self, partition: int, epoch: int) -> None:
        """A hello with ``epoch`` was sent on ``partition``: its messages count from now."""
        self.epochs[partition] = epoch
        self.ready.discard(partition)

    def ready_message(self) -> proto.Ready:
        """The ready that ends a hello recovery."""
        return proto.Ready(mode=self.mode, limit=max(self.limit, 1)
                           if self.mode == "limited" else 0)

    # -- requests ------------------------------------------------------------------------

    def handle(self, partition: int, items: Sequence[Item], fx: Effects) -> None:
        """Apply one partition's requests in order; new allocs are queued together.

        A request whose handling raises is refused (``fx.refused``) and the
        partition starts a new epoch (``fx.hellos``): the pool may hold half of
        its effects, and the hello recovery rebuilds it from the stored R of
        every job holding resources. A Reset (the job manager restarted) does
        the same without refusing anything; requests after either are ignored
        until :meth:`begin_epoch`.
        """
        allocs: list[tuple[proto.Alloc, bytes]] = []
        for item in items:
            msg = item.msg
            if isinstance(msg, proto.Reset):
                self.reset(partition, fx)
                allocs = []
                continue
            if item.epoch != self.epochs.get(partition):
                continue  # from an older session (or the partition awaits its hello)
            try:
                allocs = self._apply(partition, item, allocs, fx)
            except Exception as exc:  # pure code: whatever broke, it was this request
                fx.refused.append((partition, item, f"{type(exc).__name__}: {exc}"))
                # what was answered before it in this batch is still sent
                self.reset(partition, fx, drop_responses=False)
                return
        if allocs:
            self._add_allocs(allocs, fx)

    def _apply(self, partition: int, item: Item, allocs: list[tuple[proto.Alloc, bytes]],
               fx: Effects) -> list[tuple[proto.Alloc, bytes]]:
        """Apply one request of the partition's epoch; the alloc requests still to queue."""
        sched, pool = self.sched, self.pool
        match item.msg:
            case proto.HelloReply(alloc=held):
                if partition not in self.ready:  # a repeated answer to this epoch's hello
                    self._recover(partition, held, fx)
            case proto.Alloc() as msg:
                allocs.append((msg, item.origin))
            case proto.Cancel(id=jobid):
                before = len(allocs)
                allocs = [a for a in allocs if a[0].id != jobid]  # not yet queued
                if sched.remove(jobid) or len(allocs) != before:
                    fx.out(partition).append(proto.AllocResponse(id=jobid,
                                                                 type=proto.ALLOC_CANCEL))
                    self.dirty = True
            case proto.Prioritize(jobs=pairs):
                for jobid, priority in pairs:
                    sched.prioritize(jobid, priority)
                    if jobid in sched.pending:
                        fx.queued.append(jobid)
                self.dirty = True
            case proto.Expiration(id=jobid, expiration=expiration):
                # a job freed meanwhile holds nothing to move
                if pool.set_expiration(jobid, expiration):
                    self.staging.moved(jobid, expiration)
                    self.dirty = True
            case proto.Free(id=jobid):
                self._free(jobid, fx)
                fx.out(partition).append(proto.FreeResponse(id=jobid))
                self.dirty = True
        return allocs

    def _free(self, jobid: int, fx: Effects) -> None:
        """A job's resources are released: the pool, the limits, a quarantine."""
        if self.gate is not None:
            self.gate.end(jobid)
        staging = self.staging
        if staging.known and staging.freed(jobid):
            pass  # freed early: the pool gave its resources out already
        else:
            try:
                self.pool.free(jobid)
            except ValueError:
                pass  # not held here (freed before a restart): still answered
        record = self.jobs.get(jobid)
        if isinstance(record, Quarantined):
            del self.jobs[jobid]
            fx.resource_events.append(("undrain", str(record.ranks), "", False))

    def _add_allocs(self, allocs: list[tuple[proto.Alloc, bytes]], fx: Effects) -> None:
        """Queue new alloc requests; the jobspecs of those that carry no request are read
        through the store port in one call."""
        sched, pool = self.sched, self.pool
        arrived = self.clock() if self.latency else None
        requests = [self.requests.of_wire(msg.request, fx.log) for msg, _o in allocs]
        missing = [msg.id for (msg, _o), request in zip(allocs, requests, strict=True)
                   if request is None]
        specs = dict(zip(missing, self.stored.effective_jobspecs(missing), strict=True)) \
            if missing else {}
        held = set(pool.jobids())
        held.update(self.staging.early)  # running still, though the pool let them go
        for n, ((msg, origin), carried) in enumerate(zip(allocs, requests, strict=True)):
            if n % PULSE_EVERY == PULSE_EVERY - 1 and self.pulse is not None:
                self.pulse()
            jobid = msg.id
            if jobid in held:
                # a replayed request of a job holding resources: it has its answer
                fx.log.append(("warning", "alloc request for a job holding resources "
                               "ignored", {"job": jobid}))
                continue
            try:
                request = carried if carried is not None \
                    else self.requests.of_jobspec(specs.get(jobid))
                pool.check(request)
                queued = Queued(jobid, msg.priority, msg.t_submit, msg.userid, msg.queue,
                                request, bank=msg.bank, origin=origin, arrived=arrived)
            except Exception as exc:  # whatever is wrong with it, this job is refused
                fx.out(self.partition_of(jobid)).append(proto.AllocResponse(
                    id=jobid, type=proto.ALLOC_DENY,
                    note=one_line(str(exc) or type(exc).__name__)))
                continue
            before = sched.pending.get(jobid)
            if isinstance(before, Queued):
                queued.sent = before.sent  # replayed while queued: what was sent holds
            sched.add(queued)
            fx.queued.append(jobid)
            self.dirty = True

    # -- reset and recovery ------------------------------------------------------------

    def reset(self, partition: int, fx: Effects, drop_responses: bool = True) -> None:
        """The partition's job manager restarted (or its session broke): forget its jobs
        and ask for a new epoch (``fx.hellos``); what was to be sent there is dropped
        unless ``drop_responses`` is False."""
        sched, pool, part = self.sched, self.pool, self.partition_of
        for jobid in [j for j in sched.pending if part(j) == partition]:
            sched.remove(jobid)
        for jobid in [j for j in pool.jobids() if part(j) == partition]:
            pool.free(jobid)
            if self.gate is not None:
                self.gate.end(jobid)
        for jobid in self.staging.forget(lambda j: part(j) != partition):
            if self.gate is not None:
                self.gate.end(jobid)  # freed early: not in the pool, still counted
        self.epochs.pop(partition, None)
        self.ready.discard(partition)
        if drop_responses:
            fx.responses.pop(partition, None)
        if partition not in fx.hellos:
            fx.hellos.append(partition)

    def _recover(self, partition: int, alloc: list[proto.HeldJob], fx: Effects) -> None:
        """Hello reply: put every held R back into the pool, then say ready.

        The pool may hold allocations already (a hot standby's, taken over):
        those the reply names stay, the others of this partition are freed.
        """
        pool, early = self.pool, self.staging.early
        held = {a.id: a.ranks for a in alloc}
        owners = {a.id: a for a in alloc}
        ours = [j for j in [*pool.jobids(), *early] if self.partition_of(j) == partition]
        stale, ids = reconcile(ours, held)
        for jobid in stale:
            if not self.staging.freed(jobid):
                pool.free(jobid)
            self.warm_sizes.pop(jobid, None)
        missing = set(ids)
        for jobid, owner in owners.items():
            if jobid in missing:
                continue  # to read
            size = self.warm_sizes.pop(jobid, None)
            if jobid in early:
                # freed early here already (its limits counted), or by a standby's warm
                # pool (which counted none: they count now)
                if size is not None:
                    self._adopted(jobid, owner, *size)
                continue
            if size is None:  # in the pool, but not through the warm pool: read again
                pool.free(jobid)
                ids.append(jobid)
            else:
                self._adopted(jobid, owner, *size)
        lost = self._adopt_rows(ids, owners, fx) if ids else []
        if lost:
            self._unrecoverable(partition, lost, held, fx)
        self.ready.add(partition)
        fx.out(partition).append(self.ready_message())
        fx.readied.append((partition, len(owners), len(ids)))

    def hold(self, jobid: int, raw_r: bytes, request: Request | None = None,
             owner: proto.HeldJob | None = None) -> ResourceSet:
        """Put a running job's allocation (its stored R) into the pool, as the hello
        recovery does for each job the reply names: ``owner`` (the reply's entry) moves
        its end (``expiration``) and counts it against its owner's limits. For a
        snapshot of live state. ValueError when R does not fit the pool; its R.

        A job whose R overlaps one the pool holds already (a job and the jobs staged
        behind it, each with its own R) is adopted all the same: the one in the pool
        is taken as freed early, as if this one were staged behind it
        (:func:`~fluxes.domain.sched.standby.adopt_followed`)."""
        expiration = None if owner is None else owner.expiration
        rset = adopt_followed(self.pool, self.graph, self.staging, jobid, raw_r, request,
                              expiration)
        self._adopted(jobid, owner or proto.HeldJob(id=jobid), rset.nnodes, rset.ncores)
        return rset

    def _adopted(self, jobid: int, owner: proto.HeldJob, nnodes: int, ncores: int) -> None:
        """A job's allocation is in the pool: its end and its owner's limits as the hello
        reply says."""
        if owner.expiration is not None:
            # moved by a resource-update: the stored R keeps its first end
            self.pool.set_expiration(jobid, owner.expiration)
        if self.gate is not None:
            self.gate.adopt(jobid, owner.userid, owner.bank, nnodes, ncores)

    def _adopt_rows(self, ids: list[int], owners: Mapping[int, proto.HeldJob],
                    fx: Effects) -> list[tuple[int, str]]:
        """Read the stored R of ``ids`` into the pool; the jobs it failed for, and why."""
        lost: list[tuple[int, str]] = []
        rows = self.stored.allocations(ids)
        # a stored request this scheduler cannot read: its jobspec is read instead
        unread = [jobid for jobid, (_r, wire, _s) in zip(ids, rows, strict=True)
                  if wire is not None and self.requests.of_wire(wire, fx.log) is None]
        specs = dict(zip(unread, self.stored.effective_jobspecs(unread), strict=True)) \
            if unread else {}
        for jobid, (raw_r, wire, stored_spec) in zip(ids, rows, strict=True):
            if not raw_r:
                lost.append((jobid, "the job holds resources but has no R"))
                continue
            try:
                request = self.requests.of_stored(wire, stored_spec or specs.get(jobid),
                                                  fx.log)
                self.hold(jobid, raw_r, request, owners[jobid])
            except Exception as exc:  # whatever broke, this job's allocation is lost
                lost.append((jobid, f"its allocation cannot be recovered: {exc}"))
        return lost

    def _unrecoverable(self, partition: int, lost: list[tuple[int, str]],
                       held: Mapping[int, str | None], fx: Effects) -> None:
        """Jobs whose allocation hello could not put back into the pool.

        As flux's schedulers do, such a job gets a fatal exception (through
        the job manager's raise request, as the instance owner). Its cores
        are not in the pool, so nothing stops them from being handed out while
        its tasks may still run: the ranks it
        holds are drained (quarantined) until its free arrives.
        """
        for jobid, why in lost:
            fx.log.append(("error", "allocation not recovered", {"job": jobid, "error": why}))
            fx.raises.setdefault(partition, []).append(proto.RaiseRequest(
                ids=[jobid], userid=self.owner_uid, type="scheduler", severity=0,
                note=f"scheduler restart: {why}"))
            try:
                ranks = IDSet(str(held.get(jobid) or "")) & self.pool.inventory.ranks
            except ValueError:
                ranks = IDSet()
            reason = f"allocation of job {jobid} not recovered"
            # ranks drained for another reason stay as they are (and are not
            # undrained with this job); ours may be drained already by an
            # earlier scheduler that met the same job
            mine = IDSet(r for r in ranks
                         if r not in self.drained or self.drained[r][0] == reason)
            if mine:
                self.jobs[jobid] = Quarantined(mine)
                fx.resource_events.append(("drain", str(mine), reason, False))

    # -- passes --------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether a pass is owed at ``now`` (jobs pending, and news or a timer)."""
        return bool(self.sched.pending) and (self.dirty or self._timer_due(now)
                                             or self._stage_due(now))

    def _stage_due(self, now: float) -> bool:
        """Whether a running job's bound entered the horizon (it may be freed early)."""
        if not self.staging.depth:
            return False
        due = self.staging.next_due()
        return due is not None and due <= now

    def _timer_due(self, now: float) -> bool:
        if not self.annotate:
            return False
        return now - self.planned >= REPLAN_S or (
            self.owe_full and now - self.full_pass >= FULL_PASS_S)

    def next_timer(self) -> float | None:
        """When a timer pass is next owed (None: none while nothing changes)."""
        if not self.sched.pending:
            return None
        staged = self.staging.next_due() if self.staging.depth else None
        if not self.annotate:
            return staged
        due = self.planned + REPLAN_S
        if self.owe_full:
            due = min(due, self.full_pass + FULL_PASS_S)
        return due if staged is None else min(due, staged)

    def schedule(self, now: float, fx: Effects) -> PassResult:
        """One pass at ``now``: SUCCESS (with R), DENY and annotation deltas into ``fx``."""
        full = False
        if self.annotate:
            full = now - self.full_pass >= FULL_PASS_S
            if full:
                self.full_pass = now
            # a quick pass leaves some jobs' annotations stale: owe them a full one
            self.owe_full = not full
        staging = self.staging
        if staging.depth and self.sched.pending:
            pool = self.pool
            for jobid in staging.due(now):
                try:
                    # a staged job's parts are known: its R is not built again
                    rset = None if staging.has_parts(jobid) else pool.allocation_of(jobid)
                    pool.free(jobid)
                except ValueError:  # not the pool's any more: nothing to follow
                    staging.freed(jobid)
                else:
                    staging.free_early(jobid, rset)
        result = self.sched.schedule(now, full=full)
        self.dirty = False
        self.planned = now
        if result.allocated:
            answered = {job.id: job for job in result.answered}
            follow = bool(staging.depth or staging.early)
            for jobid, rset in result.allocated:
                job = answered.get(jobid)
                staged = self._stage(job, jobid, rset, now) if follow else None
                self._allocated(job, jobid, rset, fx, staged)
        part = self.partition_of
        for jobid, note in result.denied:
            fx.out(part(jobid)).append(proto.AllocResponse(id=jobid, type=proto.ALLOC_DENY,
                                                           note=note))
        if self.annotate:
            self.owed.update(result.annotations)
            self.annotate_owed(fx)
        return result

    def annotate_owed(self, fx: Effects) -> None:
        """Send at most ANNOTATIONS_PER_STEP of the annotations owed (those of jobs no
        longer pending are dropped). The newest first: the jobs a full pass considered
        last are the furthest from starting, while the first ones may well be allocated
        (their allocation clears what would have been sent) before their turn."""
        owed = self.owed
        budget = ANNOTATIONS_PER_STEP
        while owed and budget:
            jobid, sched_ann = owed.popitem()
            if self._annotate(jobid, sched_ann, fx):
                budget -= 1

    def _stage(self, job: PendingJob | None, jobid: int, rset: ResourceSet, now: float
               ) -> dict[str, Any] | None:
        """Follow a new allocation's end; when it is staged behind jobs freed early, its
        time limit counts from when they end (its R's expiration and the pool's end move)
        and its ``staged`` annotation (None: not staged)."""
        limit = None if rset.expiration is None or rset.starttime is None \
            else rset.expiration - rset.starttime
        known = self.staging.placed(jobid, rset, job.request.run if job is not None else 0.0,
                                    now, rset.expiration)
        if known is None or not known.behind:
            return None
        if limit is not None and known.start > now:
            rset.expiration = known.start + limit
            self.pool.set_expiration(jobid, rset.expiration)
            self.staging.moved(jobid, rset.expiration)
        return {"after": sorted(known.behind), "t_start": known.start}

    def _allocated(self, job: PendingJob | None, jobid: int, rset: ResourceSet,
                   fx: Effects, staged: dict[str, Any] | None = None) -> None:
        """A pass allocated ``rset`` to ``jobid`` (queued as ``job``): its SUCCESS, and
        its R to write (``staged``: its annotation when it is staged behind jobs freed
        early)."""
        self.allocations += 1
        if not self.answer:
            return  # nobody reads the SUCCESS (a forecast): its R summary is not built
        part = self.partition_of(jobid)
        shape = self.pool.shape_of(jobid)
        data: bytes | None = None
        if shape is not None:
            # encodings computed once per allocation shape (domain/sched/shapes.py)
            if self.write_r:
                data = shape.dumps(rset.starttime, rset.expiration).encode()
            summary, ranks, nodelist = shape.summary(), shape.ranks(), shape.nodelist()
        else:
            if self.write_r:
                data = rset.dumps().encode()
            summary, ranks, nodelist = rset.summary(), str(rset.ranks), str(rset.hostlist)
        if data is not None:
            rs = fx.r.get(part)
            if rs is None:
                rs = fx.r[part] = {}
            rs[jobid] = data
        ann: dict[str, Any] = {"sched": {"resource_summary": summary,
                                         "reason_pending": None, "t_estimate": None}}
        if staged is not None:
            ann["sched"]["staged"] = staged
        # machines without host names have an empty nodelist: it is left out (every
        # reader takes an absent one as empty)
        fx.out(part).append(proto.AllocResponse(
            id=jobid, type=proto.ALLOC_SUCCESS, annotations=ann, ranks=ranks,
            nodelist=nodelist or None, ncores=rset.ncores, ngpus=rset.ngpus))
        origin, arrived = (job.origin, job.arrived) if isinstance(job, Queued) \
            else (b"-", None)
        if data is not None:
            self.jobs[jobid] = Allocated(origin, arrived, data)
        if arrived is not None:
            fx.arrivals.append(arrived)

    def _annotate(self, jobid: int, sched_ann: dict[str, Any], fx: Effects) -> bool:
        """Send a pending job's annotations when they changed: the delta only (True: sent)."""
        record = self.sched.pending.get(jobid)
        if not isinstance(record, Queued):
            # no longer pending, or not the session's (a test's scheduler fed directly)
            return False
        old = record.sent
        if old == sched_ann:
            return False
        old = old or {}
        delta = {k: v for k, v in sched_ann.items() if old.get(k) != v}
        delta.update({k: None for k in old if k not in sched_ann})
        record.sent = sched_ann
        fx.out(self.partition_of(jobid)).append(proto.AllocResponse(
            id=jobid, type=proto.ALLOC_ANNOTATE, annotations={"sched": delta}))
        return True

    # -- R writes ------------------------------------------------------------------------

    def committed(self, jobids: Iterable[int]) -> None:
        """The R and SUCCESS of ``jobids`` are written: they are the pool's now."""
        jobs = self.jobs
        for jobid in jobids:
            if isinstance(jobs.get(jobid), Allocated):
                del jobs[jobid]

    def take_back(self, jobids: Iterable[int]) -> list[tuple[int, bytes]]:
        """Allocations made for jobs that wait for none (their alloc request was replayed
        or forged): free them; (job, its request's stream entry) to dead-letter."""
        out: list[tuple[int, bytes]] = []
        for jobid in jobids:
            if self.gate is not None:
                self.gate.end(jobid)
            try:
                if not self.staging.freed(jobid):
                    self.pool.free(jobid)
            except ValueError:
                pass  # not held here
            self.allocations -= 1
            record = self.jobs.pop(jobid, None)
            out.append((jobid, record.origin if isinstance(record, Allocated) else b"-"))
        self.dirty = True
        return out

    # -- resources -----------------------------------------------------------------------

    def apply_resource_event(self, event: proto.ResourceChange) -> None:
        """A drain or undrain: drained ranks get no new work (ValueError: bad ranks)."""
        ranks = IDSet(event.ranks) & self.pool.inventory.ranks
        if not ranks:
            return
        if isinstance(event, proto.Drain):
            self.pool.mark_down(ranks)
            for r in ranks:
                self.drained[r] = (event.reason, event.auto, event.timestamp)
        else:
            self.pool.mark_up(ranks)
            for r in ranks:
                self.drained.pop(r, None)
        self.dirty = True

    def liveness(self, beats: Mapping[int, float], now: float, grace_over: bool,
                 judging: bool, lost_after: float) -> tuple[IDSet, IDSet]:
        """(ranks whose exec worker went silent: drain them, ranks drained for that
        whose worker is back: undrain them) from the last heartbeat of each rank.

        ``grace_over``: a rank never heard from counts as silent; ``judging``:
        silence may be judged now (not right after a Redis stall).
        """
        lost = IDSet()
        back = IDSet()
        for rank in self.pool.inventory.ranks:
            beat = beats.get(rank)
            silent = (beat is None and grace_over) or (beat is not None
                                                        and now - beat > lost_after)
            drained = self.drained.get(rank)
            if silent and drained is None and judging:
                lost.add(rank)
            elif not silent and beat is not None and drained is not None and drained[1]:
                back.add(rank)
        return lost, back

    def summary(self, now: float, scheduler: str, applied: str) -> dict[str, Any]:
        """The published resource summary (``fluxes resource list``)."""
        pool = self.pool

        def part(rset: ResourceSet) -> dict[str, Any]:
            return {"nnodes": rset.nnodes, "ncores": rset.ncores, "ngpus": rset.ngpus,
                    "nodelist": str(rset.hostlist) if len(rset.ranks) else "",
                    "ranks": str(rset.ranks)}

        inventory = pool.inventory.rset()
        allocated = pool.allocated()
        # a drained node still running work is allocated (draining) until it is idle:
        # each node in one column, as flux lists them
        return {"time": now, "scheduler": scheduler, "applied": applied,
                "pending": len(self.sched.pending),
                "free": part(pool.available(include_down=False)),
                "allocated": part(allocated),
                "down": part(inventory.copy_ranks(pool.down - allocated.ranks)),
                "drained": {str(r): {"reason": why, "auto": auto, "timestamp": when}
                            for r, (why, auto, when) in sorted(self.drained.items())}}
