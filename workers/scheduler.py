"""The scheduler worker: RFC 27 over streams, with allocation recovery.

The scheduler is stateless between epochs. Taking the lease of a partition
bumps that partition's epoch (its fence counter); the scheduler then says
``hello`` on the partition's response stream, the job manager answers with
every job holding resources, the scheduler re-reads each job's stored R into
a fresh pool (:meth:`~fluxes.domain.sched.pool.ResourcePool.adopt`; on a
graph, :class:`~fluxes.domain.graph.pool.GraphPool` reads back the
``scheduling`` subgraph each R carries) and says ``ready``. From then on it
answers ``alloc`` (SUCCESS/ANNOTATE/DENY/CANCEL), ``free``, ``cancel`` and
``prioritize`` requests. R is written to the job
hash in the same atomic step that makes the SUCCESS response visible, fenced
by the epoch, so a deposed scheduler can neither write R nor answer; and
fenced on the job, so that an alloc request replayed or forged for a job that
waits for no allocation (running, finished, unknown) never writes its R: such
an allocation is taken back and its SUCCESS never sent. The ``hello`` that
opens each epoch is fenced the same way.

A scheduler that does not lead stands by hot (docs/operations.md, "Hot
standby scheduler"): it keeps a pool as the leader's from the journals
(:mod:`workers.sched_standby`) and takes the leases over the moment the
leader's liveness subscription drops (:mod:`fluxes.store.standby`), so its
hello recovery reads only the R it had not read yet.

The session itself (what each request does, the passes, annotation deltas,
the hello recovery, which allocation to take back, exec liveness) is the pure
:class:`~fluxes.domain.sched.session.SessionCore`, which ``fluxes simulate``
drives too; this worker holds the leases and read positions, hands the core
each partition's decoded requests and applies its effects through
:class:`~fluxes.store.sched_session.SessionStreams` and the store's resource
functions.

As ``fluxes start`` runs it (``pipelined``, one partition), a step's answer goes out
with the next read of the requests, in one write (one round trip per step, as the job
manager's commits do); the resource events are read in that same XREAD, so a drain
written before a free is applied before it without a read of its own.

Why one module: it is the I/O around the pure session core: leases, the standby, the
read of requests and resource events, housekeeping and the fenced answers are methods
of the one worker whose state (sessions, positions, the answer waiting) they share.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fluxes import messages as proto
from fluxes.config import stage_settings
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.session import (
    FULL_PASS_S,
    REPLAN_S,
    Effects,
    Item,
    SessionCore,
    queue_policies,
)
from fluxes.formats.fsd import parse_duration
from fluxes.proc import hops, metrics
from fluxes.store import jobhash, reachability
from fluxes.store.accounting import AccountsFollower
from fluxes.store.errors import StoreError
from fluxes.store.eventstore import EventStore, FencedError, NotWaitingError
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.lease import LEASE_TTL_MS, Lease
from fluxes.store.resources import (
    LOST_AFTER_S,
    exec_heartbeats,
    load_inventory,
    load_pool,
    resource_events_since,
)
from fluxes.store.sched_session import SessionStreams
from fluxes.store.standby import (
    SIGNALLED,
    AliveSignal,
    dead_holders,
    lease_holders,
    take_over,
)
from workers.base import Worker
from workers.sched_standby import WarmPool

__all__ = ["FULL_PASS_S", "REPLAN_S", "SchedulerWorker", "Session", "main", "queue_policies"]

#: Stream entries per read; an entry carries up to a thousand messages.
READ_COUNT = 20
BLOCK_MS = 500
#: How often heartbeats, resource events and the published status are refreshed.
HOUSEKEEPING_S = 1.0
#: How long a standby waits on the journals per step: it looks at the leader's
#: liveness this often.
STANDBY_POLL_MS = 50


@dataclass
class Unsent:
    """A step's answer to one partition, to go out with the next read."""

    partition: int
    rs: dict[int, bytes]
    msgs: list[proto.SchedResponse]
    arrivals: list[float]


class Session:
    """One partition's lease and read position (its epoch and state: the core's)."""

    def __init__(self, partition: int, lease: Lease) -> None:
        self.partition = partition
        self.lease = lease
        self.epoch = 0
        self.pos = "0-0"


class SchedulerWorker(Worker):
    """Leader (or standby) scheduler for every partition."""

    kind = "scheduler"

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS, pipelined: bool = False) -> None:
        super().__init__(instance, name)
        keys = self.keys
        self.store = EventStore(self.redis, keys)
        self.streams = SessionStreams(self.redis, keys, self.store)
        self.hashes = jobhash.JobHashes(self.redis, keys)
        self.sessions = [Session(p, Lease(self.redis, keys.sched_lease(p), keys.sched_fence(p),
                                          self.name, lease_ttl_ms))
                         for p in range(keys.partitions)]
        self.leader = False
        #: the RFC 27 session while leading (fluxes/domain/sched/session.py)
        self.core: SessionCore | None = None
        self._allocated_before = 0
        self.recovered_in = 0.0
        self._recover_started = 0.0
        try:
            self.owner_uid = instance.owner()[1]
        except KeyError:  # no owner recorded, and this uid has no passwd entry
            self.owner_uid = os.getuid()
        self._resource_pos = "0-0"
        self._housekept = 0.0
        self._lead_since = 0.0
        self.lost_after = LOST_AFTER_S
        #: accounting's running limits (docs/accounting.md), banks read at housekeeping
        self._accounts = AccountsFollower(self.redis, self.keys)
        #: while standing by: the pool kept as the leader's (workers/sched_standby.py)
        self._warm: WarmPool | None = None
        #: subscribed while this process lives (leading or not): fluxes/store/standby.py
        self._alive = AliveSignal(self.redis, self.keys.sched_alive(self.name))
        self._alive_checked = float("-inf")
        #: one slot holds every stream read (one partition): the resource events are read
        #: with the requests, in the same XREAD
        self._one_slot = all(keys.same_slot(keys.sched_req(p), keys.resource_events)
                             for p in range(keys.partitions))
        #: the streams read every step, named once: request stream -> its session
        self._resources = keys.resource_events
        self._by_stream = {keys.sched_req(s.partition): s for s in self.sessions}
        #: a step's answer goes out with the next read (one round trip per step): the
        #: answer waiting for it (None: none waits); only with one partition
        self.pipelined = pipelined and self._one_slot
        self._unsent: Unsent | None = None
        #: send times of the frees handled whose answer is not written yet: their
        #: hand-offs end when it is (fluxes/proc/hops.py)
        self._freed_sent: list[float] = []

    @property
    def pool(self) -> SchedulerPool | None:
        """The pool while leading."""
        return self.core.pool if self.core is not None else None

    @property
    def drained(self) -> dict[int, tuple[str, bool, float]]:
        """Drained ranks while leading: rank -> (reason, automatic, when)."""
        return self.core.drained if self.core is not None else {}

    @property
    def allocations(self) -> int:
        """Allocations made since this process started."""
        return self._allocated_before + (self.core.allocations if self.core else 0)

    def status(self) -> dict[str, Any]:
        """Leadership and load for ``fluxes status``."""
        core = self.core
        return {"leader": self.leader, "pending": len(core.sched.pending) if core else 0,
                "allocations": self.allocations, "recovery_s": round(self.recovered_in, 3),
                # a standby: allocations its warm pool holds already
                "warm": len(self._warm.sizes) if self._warm is not None else 0,
                # standbys trust this process' liveness signal (fluxes/store/standby.py)
                SIGNALLED: self._alive.subscribed,
                # what retention may trim of sched:req (fluxes/store/retention.py)
                "read_positions": {self.keys.sched_req(s.partition): s.pos
                                   for s in self.sessions} if self.leader else {}}

    def teardown(self) -> None:
        """Clean stop: tell each job manager (scheduling suspends at once rather than
        when the lease lapses) and hand the leases over, so a standby leads at once."""
        if not self.leader:
            return
        try:
            self._send_unsent()
            for session in self.sessions:
                if session.lease.token is None:
                    continue
                try:
                    self.streams.say(session.partition, session.epoch,
                                     [proto.SchedError(note="scheduler stopping")])
                except FencedError:
                    pass  # a newer scheduler already leads this partition
                session.lease.release()
        except StoreError:
            pass  # the leases lapse by themselves
        self._alive.drop()
        self.leader = False

    # ------------------------------------------------------------ leadership

    def reconnected(self) -> None:
        """After a Redis outage: lead again from scratch (a new epoch per partition)."""
        self.step_down("redis connection lost")
        self._warm = None  # what the journals said before may be gone with the server
        self._alive_checked = float("-inf")  # its subscription went with the connection

    def step_down(self, why: str) -> None:
        """Forget the session and its pool; wait to lead again."""
        if self.leader:
            self.log.warning("stepping down", extra={"why": why})
        self.leader = False
        self._unsent = None  # fenced: a newer scheduler answers these requests
        self._freed_sent = []
        if self.core is not None:
            self._allocated_before += self.core.allocations
        self.core = None
        for s in self.sessions:
            s.lease.token = None

    def _stand_by(self) -> None:
        """Not leading: keep the warm pool as the leader's, and lead when the leases are
        free or their holder died (docs/operations.md, "Hot standby scheduler")."""
        # alive before leading: a standby must never see a leader without its signal
        self._check_alive()
        if self._warm is None:
            self._warm = WarmPool(self.instance, self._stage_settings())
        holders = lease_holders(self.redis, self.keys)
        dead = dead_holders(self.redis, self.keys,
                            {h for h in holders if h is not None and h != self.name})
        if all(h is None or h == self.name or h in dead for h in holders) \
                and self._claim(holders, dead):
            if self._become_leader():  # its warm pool is the leader's now (or dropped)
                self.heartbeat(force=True)  # the record says so at once
            return
        self._warm.follow(STANDBY_POLL_MS)

    def _check_alive(self) -> None:
        """(Re)subscribe to this process's liveness channel when its subscription is gone
        (first step, a new connection after an outage); looked at once a second."""
        now = time.monotonic()
        if now - self._alive_checked < HOUSEKEEPING_S:
            return
        self._alive_checked = now
        if not self._alive.up():
            self._alive.raise_()
            if self._alive.subscribed:
                # standbys trust the signal once the worker record says it is there
                self.heartbeat(force=True)

    def _claim(self, holders: list[str | None], dead: set[str]) -> bool:
        """Take every partition's lease: free ones (or our own name's), and those of a
        dead holder; none of them when one is held by a live scheduler."""
        for session, holder in zip(self.sessions, holders, strict=True):
            lease = session.lease
            if holder is None or holder == self.name:
                token = lease.try_acquire()
            else:
                token = lease.token = take_over(self.redis, lease.lease_key, lease.fence_key,
                                                holder, self.name, lease.ttl_ms)
                if token is not None:
                    lease.last_token = token  # as Lease's own acquisitions keep it
            if token is None:
                for other in self.sessions:
                    if other.lease.token is not None:
                        other.lease.release()
                return False
        if dead:
            self.log.warning("taking over from a dead scheduler",
                             extra={"holders": sorted(dead)})
        return True

    def _stage_settings(self, config: Any = None) -> tuple[int, float]:
        """``[sched]`` staged starts (depth, horizon); off when the stored settings are bad
        (checked when stored: only a hand-edited hash gets there)."""
        try:
            return stage_settings((config or self.instance.config()).sched)
        except ValueError as exc:
            self.log.error("bad staged starts settings, staging off", extra={"error": str(exc)})
            return 0, 0.0

    def _become_leader(self) -> bool:
        """Lead with the leases taken: the warm pool (else a new one) in a new session
        core, a hello per partition."""
        config = self.instance.config()
        mode = config.sched.get("mode", "unlimited")
        if mode not in proto.MODES:
            # a ready the job manager cannot read would stop scheduling for good
            self.log.error("unknown sched mode, using unlimited", extra={"mode": str(mode)})
            mode = "unlimited"
        self.lost_after = parse_duration(config.sched.get("exec-timeout", LOST_AFTER_S))
        depth, horizon = self._stage_settings(config)
        warm, self._warm = self._warm, None
        if warm is not None and warm.current():
            pool, sizes = warm.pool, warm.sizes
        else:
            # chosen once: a graph pool when the resources come with a graph
            pool, sizes = load_pool(self.instance), {}
        self.core = core = SessionCore(
            pool, queue_policies(config), graph=isinstance(pool, GraphPool),
            gate=LimitGate(self._accounts.refresh()), stored=self.hashes,
            partition_of=self.keys.partition_of, mode=mode,
            limit=int(config.sched.get("limit", 0)), pulse=self.keepalive,
            latency=metrics.served_port() is not None, owner_uid=self.owner_uid,
            stage_depth=depth, stage_horizon=horizon)
        core.warm_sizes = sizes
        if sizes and warm is not None:
            core.requests = warm.requests  # what the standby decoded already
            # the jobs it freed early and staged behind them, under today's settings
            core.staging = warm.staging
            core.staging.depth, core.staging.horizon = depth, horizon
        self._resource_pos = "0-0"
        self._read_resource_events()
        self._lead_since = time.monotonic()
        self.leader = True
        self._recover_started = time.monotonic()
        for session in self.sessions:
            # a new epoch per partition: every lease acquisition bumps the fence
            self._hello(session, bump=False)
            if not self.leader:
                return False  # fenced already: another scheduler leads
        self.log.info("leading", extra={"partitions": len(self.sessions)})
        return True

    def _hello(self, session: Session, bump: bool) -> None:
        """Start a new epoch with the partition's job manager."""
        if bump and session.lease.bump() is None:
            self.step_down("lease lost")
            return
        session.epoch = int(session.lease.token or 0)
        session.pos = self.streams.last_request(session.partition)
        if self.core is not None:
            self.core.begin_epoch(session.partition, session.epoch)
        try:
            # fenced like every other message: a scheduler paused past its lease says nothing
            self.streams.say(session.partition, session.epoch, [proto.Hello()])
        except FencedError as exc:
            self.step_down(str(exc))

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """Lead (or wait to), read requests, schedule, answer."""
        core = self.core
        if not self.leader or core is None:
            self._stand_by()
            return
        if not self.keepalive():
            return
        reply = self._read(core)
        if self.core is not core:
            return  # deposed by the last answer
        fx = Effects()
        resources = self._resources
        events = [entries for stream_b, entries in reply if stream_b.decode() == resources]
        if events:
            # read with the requests: every drain written before them is among these
            self._apply_resource_events(events[0])
        for stream_b, entries in reply:
            stream = stream_b.decode()
            if stream == resources:
                continue
            session = self._session_of(stream)
            items = self._decode(session, entries, self._freed_sent)
            if any(isinstance(item.msg, proto.Free) for item in items) and (
                    not self._one_slot or (events and len(events[0]) >= READ_COUNT)):
                # a drain written before the job was released (an exec worker's
                # housekeeping holding its rank) must apply before the free does:
                # those the read did not bring (other slots, or more than it took)
                self._read_resource_events()
            core.handle(session.partition, items, fx)
            if not self._apply(fx):
                return  # deposed meanwhile
        if time.monotonic() - self._housekept >= HOUSEKEEPING_S:
            self._housekeeping()
        now = time.time()
        if core.due(now):
            pass_started = time.perf_counter()
            core.schedule(now, fx)
            if metrics.served_port() is not None:
                metrics.SCHED_PASS.observe(time.perf_counter() - pass_started)
        elif core.owed:
            core.annotate_owed(fx)
        self._flush(fx)
        if self._freed_sent and self._unsent is None:
            self._ended_hops(time.time())

    def _read(self, core: SessionCore) -> list[Any]:
        """The next requests (and, on one slot, resource events); the last step's answer,
        when it waits, goes out in the same write (one round trip)."""
        streams = {stream: s.pos for stream, s in self._by_stream.items()}
        if self._one_slot:
            streams[self._resources] = self._resource_pos
        # a pass owed is run soon, and owed annotations go out a batch a step; with no
        # job pending no pass is (a free leaves the core dirty until the next request
        # comes), and a short block would only poll Redis
        block = 1 if (core.dirty and core.sched.pending) or core.owed else BLOCK_MS
        timer = core.next_timer() if core.staging.depth else None
        if timer is not None:
            # a running job's end enters the staging horizon then: its pass is not late
            block = max(1, min(block, math.ceil((timer - time.time()) * 1000)))
        unsent, self._unsent = self._unsent, None
        if unsent is None:
            return read_streams(self.redis, streams, READ_COUNT, block) or []
        p = unsent.partition
        sent = time.time()
        try:
            got = self.streams.answer_then_read(p, self.sessions[p].epoch, unsent.rs,
                                                unsent.msgs, streams, READ_COUNT, block)
        except FencedError as exc:
            self.step_down(str(exc))
            return []
        except NotWaitingError as exc:
            # nothing written, and the requests read are read again (by position)
            msgs = self._take_back(core, p, exc.jobids, unsent.rs, unsent.msgs)
            self._answer(core, p, unsent.rs, msgs)
            self._answered(unsent.arrivals, time.time())
            return []
        core.committed(unsent.rs)
        self._answered(unsent.arrivals, sent)
        return got

    def _send_unsent(self) -> None:
        """Write the answer that waits for the next read, now (before any other write
        to the response streams, which keep their order)."""
        unsent, self._unsent = self._unsent, None
        core = self.core
        if unsent is None or core is None:
            return
        self._answer(core, unsent.partition, unsent.rs, unsent.msgs)
        self._answered(unsent.arrivals, time.time())

    def _answered(self, arrivals: list[float], sent: float) -> None:
        """An answer was written (``sent``: when): the hand-offs and latencies it ends."""
        if self._freed_sent:
            self._ended_hops(sent)
        if arrivals and metrics.served_port() is not None:  # nobody scrapes them otherwise
            committed = time.monotonic() - (time.time() - sent)
            for arrival in arrivals:
                metrics.ALLOC_LATENCY.observe(committed - arrival)

    def _ended_hops(self, now: float) -> None:
        hops.record_since(hops.JM_TO_SCHED, self._freed_sent, now)
        self._freed_sent = []

    def _decode(self, session: Session, entries: list[tuple[bytes, Mapping[bytes, bytes]]],
                freed_sent: list[float]) -> list[Item]:
        """The requests of a partition's new entries (read by position, not through a
        group: moving on is the acknowledgement); an entry that does not decode is
        dead-lettered."""
        stream = self.keys.sched_req(session.partition)
        items: list[Item] = []
        for msg_id, fields in entries:
            session.pos = msg_id.decode()
            try:
                epoch, batch, sent = proto.decode_entry_sent(proto.SCHED_REQUESTS, fields)
            except proto.MessageError as exc:
                self.dead_letter(stream, msg_id, fields, str(exc))
                continue
            if sent and any(isinstance(m, proto.Free) for m in batch):
                freed_sent.append(sent)  # the hand-off ends with its answer's write
            # the item keeps the entry's fields: should it break the session, its dead
            # letter shows them
            items.extend(Item(epoch, m, msg_id, fields) for m in batch)
        return items

    def _apply(self, fx: Effects) -> bool:
        """Apply what handling requests decided but the responses: log, dead letters,
        resource events and raise requests, new epochs; False when deposed."""
        if self.core is None:
            return False  # a lease lost during the batch: the next leader reads it again
        for level, message, extra in fx.log:
            getattr(self.log, level)(message, extra=extra)
        fx.log.clear()
        for partition, item, why in fx.refused:
            self.dead_letter(self.keys.sched_req(partition), item.origin, item.fields or {},
                             why)
        fx.refused.clear()
        for partition, recovered, read in fx.readied:
            self.recovered_in = time.monotonic() - self._recover_started
            metrics.RECOVERY.labels(worker=self.kind).observe(self.recovered_in)
            self.log.info("ready", extra={"partition": partition,
                                          "epoch": self.sessions[partition].epoch,
                                          "recovered": recovered, "read": read,
                                          "recovery_s": round(self.recovered_in, 3)})
        fx.readied.clear()
        if fx.resource_events or fx.raises:
            self.streams.report(fx.resource_events, fx.raises)
            fx.resource_events.clear()
            fx.raises.clear()
            self._read_resource_events()
        for partition in fx.hellos:
            self._recover_started = time.monotonic()  # recovery_s measures this new epoch
            self._hello(self.sessions[partition], bump=True)
            if not self.leader:
                return False
        fx.hellos.clear()
        return self.leader

    # ------------------------------------------------------------ resources

    def _read_resource_events(self) -> None:
        """Apply new drain/undrain events to the pool (drained targets get no new work)."""
        if self.core is None:
            return
        self._apply_resource_events(
            resource_events_since(self.redis, self.keys, self._resource_pos))

    def _apply_resource_events(self, entries: list[tuple[Any, Any]]) -> None:
        """Apply the resource events ``entries`` (read after the applied position)."""
        core = self.core
        if core is None:
            return
        for sid, fields in entries:
            self._resource_pos = sid.decode()
            try:
                event = proto.decode_resource_event(fields)
                if isinstance(event, proto.Reload):
                    self._reload_resources(core)
                    continue
                core.apply_resource_event(event)
            except ValueError as exc:  # MessageError included
                self.dead_letter(self.keys.resource_events, sid, fields, str(exc))

    def _reload_resources(self, core: SessionCore) -> None:
        """The recorded resources were replaced (``fluxes resource reload``): the pool
        follows in place (fluxes/domain/sched/reload.py); ValueError when it cannot."""
        from fluxes.domain.sched.pool import ResourcePool
        from fluxes.domain.sched.reload import reload_pool
        from fluxes.errors import FluxesError

        pool = core.pool
        if not isinstance(pool, ResourcePool):
            raise ValueError("reload: a graph pool follows new resources only on restart")
        try:
            plan = reload_pool(pool, load_inventory(self.instance), time.time)
        except FluxesError as exc:
            raise ValueError(f"reload: {exc}") from None
        for rank in plan.removed | plan.changed:
            core.drained.pop(rank, None)
        core.dirty = True

    def _housekeeping(self) -> None:
        """Drain ranks whose exec worker went silent (and undrain them when it is back);
        publish the resource summary for ``fluxes resource list``."""
        self._housekept = time.monotonic()
        self._check_alive()
        core = self.core
        if core is None:
            return
        accounts = self._accounts.refresh()
        if core.gate is not None and accounts != core.gate.accounts:
            core.gate.set_accounts(accounts)
            core.dirty = True  # a limit may have been raised
        self._read_resource_events()
        now = time.time()
        # Silence is judged on answered time: right after a Redis stall every
        # heartbeat is old, and nobody is lost (fluxes/domain/liveness.py).
        lost, back = core.liveness(exec_heartbeats(self.redis, self.keys), now,
                                   time.monotonic() - self._lead_since > self.lost_after,
                                   reachability.may_judge(self.lost_after), self.lost_after)
        if lost:
            self.log.warning("exec workers lost, draining", extra={"ranks": str(lost)})
        if back:
            self.log.info("exec workers back, undraining", extra={"ranks": str(back)})
        self.streams.report_liveness(str(lost) if lost else "", str(back) if back else "",
                                     core.summary(now, self.name, self._resource_pos))
        if lost or back:
            self._read_resource_events()

    def keepalive(self) -> bool:
        """Renew every partition lease when due (also inside long work); False if lost."""
        if not self.leader:
            return False
        for session in self.sessions:
            if not session.lease.renew_if_due():
                self.step_down("lease lost")
                return False
        return True

    def _session_of(self, stream: str) -> Session:
        return self._by_stream[stream]  # KeyError: not a request stream

    # ------------------------------------------------------------ answers

    def _flush(self, fx: Effects) -> None:
        """Write R and responses per partition, atomically and fenced by the epoch (and
        each R on its job waiting for it)."""
        core = self.core
        if core is None:
            return
        if self.pipelined:
            [session] = self.sessions
            p = session.partition
            msgs = fx.responses.get(p) or []
            rs = fx.r.get(p) or {}
            if msgs or rs:
                self._unsent = Unsent(p, rs, msgs, fx.arrivals)
            return
        for session in self.sessions:
            p = session.partition
            self._answer(core, p, fx.r.get(p) or {}, fx.responses.get(p) or [])
            if self.core is None:
                return
        self._answered(fx.arrivals, time.time())

    def _answer(self, core: SessionCore, p: int, rs: dict[int, bytes],
                msgs: list[proto.SchedResponse]) -> None:
        """Write one partition's answer (R and responses), taking back the allocations of
        jobs that wait for none."""
        while msgs or rs:
            try:
                self.streams.answer(p, self.sessions[p].epoch, rs, msgs)
            except FencedError as exc:
                self.step_down(str(exc))
                return
            except NotWaitingError as exc:
                msgs = self._take_back(core, p, exc.jobids, rs, msgs)
                continue
            break
        core.committed(rs)

    def _take_back(self, core: SessionCore, partition: int, jobids: list[int],
                   rs: dict[int, bytes], msgs: list[proto.SchedResponse]
                   ) -> list[proto.SchedResponse]:
        """Allocations made for jobs that wait for none (their alloc request was
        replayed or forged): freed by the core, their R and SUCCESS dropped, their request
        dead-lettered; the responses left to send."""
        refused = set(jobids)
        for jobid, origin in core.take_back(jobids):
            rs.pop(jobid, None)
            self.dead_letter(self.keys.sched_req(partition), origin, {"alloc": str(jobid)},
                             f"alloc: job {jobid} waits for no allocation (it runs, ended, "
                             "or does not exist): its R is not written")
        return [m for m in msgs if not (isinstance(m, proto.AllocResponse) and m.id in refused
                                         and m.type == proto.ALLOC_SUCCESS)]


def main(instance: Instance) -> int:
    """Run a scheduler until SIGTERM."""
    return SchedulerWorker(instance, pipelined=True).run()
