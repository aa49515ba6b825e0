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

Why one module: it is the I/O around the pure scheduler (:mod:`fluxes.domain.sched`):
lease and epochs, the hello/ready recovery, fenced R writes, resource events; each is a
few methods of the one worker whose state (epoch, pool, outstanding requests) they
share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from fluxes import messages as proto
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.wants import graph_request
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.policy import PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.standby import reconcile
from fluxes.errors import FluxesError
from fluxes.formats.fsd import parse_duration
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.messages.bounds import one_line
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
    resource_event,
)
from fluxes.store.standby import (
    SIGNALLED,
    AliveSignal,
    dead_holders,
    lease_holders,
    take_over,
)
from workers.base import Worker, not_the_input
from workers.sched_standby import WarmPool, adopt_stored

#: Stream entries per read; an entry carries up to a thousand messages.
READ_COUNT = 20
BLOCK_MS = 500
#: Re-plan (start estimates) at least this often while jobs are pending.
REPLAN_S = 5.0
#: Most seconds between full passes (which refresh every considered job's
#: annotations); the passes in between stop once nothing more can start.
FULL_PASS_S = 1.0
#: How often heartbeats, resource events and the published status are refreshed.
HOUSEKEEPING_S = 1.0
#: Responses per entry of a response stream at most.
MESSAGES_PER_ENTRY = 1000
#: Distinct decoded requests kept at most (a cache: clearing it costs only decoding).
REQUESTS_KEPT = 4096
#: How long a standby waits on the journals per step: it looks at the leader's
#: liveness this often.
STANDBY_POLL_MS = 50


class Session:
    """The RFC 27 session with one partition's job manager."""

    def __init__(self, partition: int, lease: Lease) -> None:
        self.partition = partition
        self.lease = lease
        self.epoch = 0
        self.pos = "0-0"
        self.ready = False


class SchedulerWorker(Worker):
    """Leader (or standby) scheduler for every partition."""

    kind = "scheduler"

    def __init__(self, instance: Instance, name: str | None = None,
                 lease_ttl_ms: int = LEASE_TTL_MS) -> None:
        super().__init__(instance, name)
        keys = self.keys
        self.store = EventStore(self.redis, keys)
        self.hashes = jobhash.JobHashes(self.redis, keys)
        self.sessions = [Session(p, Lease(self.redis, keys.sched_lease(p), keys.sched_fence(p),
                                          self.name, lease_ttl_ms))
                         for p in range(keys.partitions)]
        self.leader = False
        self.pool: SchedulerPool | None = None
        #: the pool is a graph (R carry their scheduling subgraph; any resources tree)
        self.graph = False
        self.sched: Scheduler | None = None
        self.sent: dict[int, dict[str, Any]] = {}
        self.mode: proto.Mode = "unlimited"
        self.limit = 0
        self._dirty = False
        self._planned = 0.0
        self._full_pass = 0.0
        self._owe_full = False
        self.allocations = 0
        self.recovered_in = 0.0
        self._recover_started = 0.0
        self._r_writes: dict[int, dict[int, bytes]] = {}
        # rank -> (reason, automatic, when)
        self.drained: dict[int, tuple[str, bool, float]] = {}
        #: ranks drained for a job whose allocation hello could not recover
        self._quarantined: dict[int, IDSet] = {}
        raw_uid = self.redis.hget(self.keys.instance, "owner_uid")
        self.owner_uid = int(raw_uid) if raw_uid else os.getuid()
        self._resource_pos = "0-0"
        self._housekept = 0.0
        self._lead_since = 0.0
        self.lost_after = LOST_AFTER_S
        # alloc latency: when each queued alloc request arrived, and the arrival
        # times of allocations made but not yet committed; kept only while the
        # metrics are served (~85 bytes a pending job otherwise spent for nobody)
        self._alloc_arrived: dict[int, float] = {}
        self._alloc_done: list[float] = []
        #: the request stream entry each queued alloc request came in (its dead letter
        #: names it should its allocation be refused)
        self._alloc_origin: dict[int, bytes] = {}
        #: decoded requests by wire form (jobs of one shape share one)
        self._requests: dict[str, Request] = {}
        #: requests parsed from stored jobspecs (jobs without a stored request)
        self._spec_requests: dict[bytes, Request] = {}
        #: accounting's running limits (docs/accounting.md), banks read at housekeeping
        self._accounts = AccountsFollower(self.redis, self.keys)
        self.gate = LimitGate()
        #: while standing by: the pool kept as the leader's (workers/sched_standby.py)
        self._warm: WarmPool | None = None
        #: (nnodes, ncores) of the jobs the pool held on taking over, for the hello recovery
        self._warm_sizes: dict[int, tuple[int, int]] = {}
        #: subscribed while this process lives (leading or not): fluxes/store/standby.py
        self._alive = AliveSignal(self.redis, self.keys.sched_alive(self.name))
        self._alive_checked = float("-inf")

    def status(self) -> dict[str, Any]:
        """Leadership and load for ``fluxes status``."""
        return {"leader": self.leader, "pending": len(self.sched.pending) if self.sched else 0,
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
            for session in self.sessions:
                if session.lease.token is None:
                    continue
                batch = self.store.batch(session.partition,
                                         fence=self.keys.sched_fence(session.partition))
                batch.xadd(self.keys.sched_resp(session.partition), proto.encode_entry(
                    [proto.SchedError(note="scheduler stopping")], session.epoch))
                try:
                    self.store.commit(batch, str(session.epoch))
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
        """Forget the pool and sessions; wait to lead again."""
        if self.leader:
            self.log.warning("stepping down", extra={"why": why})
        self.leader = False
        self.pool = None
        self.sched = None
        self._alloc_arrived.clear()
        self._alloc_done.clear()
        self._alloc_origin.clear()
        for s in self.sessions:
            s.lease.token = None
            s.ready = False
        self._warm_sizes = {}

    def _stand_by(self) -> None:
        """Not leading: keep the warm pool as the leader's, and lead when the leases are
        free or their holder died (docs/operations.md, "Hot standby scheduler")."""
        # alive before leading: a standby must never see a leader without its signal
        self._check_alive()
        if self._warm is None:
            self._warm = WarmPool(self.instance, self._stored_request)
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

    def _become_leader(self) -> bool:
        """Lead with the leases taken: the warm pool (else a new one), a hello per
        partition."""
        config = self.instance.config()
        mode = config.sched.get("mode", "unlimited")
        if mode not in proto.MODES:
            # a ready the job manager cannot read would stop scheduling for good
            self.log.error("unknown sched mode, using unlimited", extra={"mode": str(mode)})
            mode = "unlimited"
        self.mode = mode
        self.lost_after = parse_duration(config.sched.get("exec-timeout", LOST_AFTER_S))
        self.limit = int(config.sched.get("limit", 0))
        warm, self._warm = self._warm, None
        if warm is not None and warm.current():
            self.pool, self._warm_sizes = warm.pool, warm.sizes
        else:
            # chosen once: a graph pool when the resources come with a graph
            self.pool, self._warm_sizes = load_pool(self.instance), {}
        self.graph = isinstance(self.pool, GraphPool)
        self.gate = LimitGate(self._accounts.refresh())
        self.sched = Scheduler(self.pool, self._queue_policies(config), gate=self.gate)
        self.sent = {}
        self.drained = {}
        self._quarantined = {}
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

    def _queue_policies(self, config: Any) -> dict[str | None, QueuePolicy]:
        out: dict[str | None, QueuePolicy] = {}
        queues = config.queues
        for name in [None, *queues.queue_names]:
            try:
                policy = queues.effective_policy(name)
            except (KeyError, ValueError, FluxesError):
                continue
            sp = getattr(policy, "scheduler", None)
            if sp is None:
                continue
            defaults = QueuePolicy()

            def pick(attr: str, default: Any, sp: Any = sp) -> Any:
                value = getattr(sp, attr, None)
                return default if value is None else value  # 0 is a real setting

            out[name] = QueuePolicy(
                policy=pick("policy", defaults.policy),
                queue_depth=pick("queue_depth", defaults.queue_depth),
                reservation_depth=pick("reservation_depth", defaults.reservation_depth),
                placement=pick("placement", defaults.placement))
        return out

    def _hello(self, session: Session, bump: bool) -> None:
        """Start a new epoch with the partition's job manager."""
        keys = self.keys
        p = session.partition
        if bump and session.lease.bump() is None:
            self.step_down("lease lost")
            return
        session.epoch = int(session.lease.token or 0)
        session.ready = False
        last = self.redis.xrevrange(keys.sched_req(p), count=1)
        session.pos = last[0][0].decode() if last else "0-0"
        # fenced like every other message: a scheduler paused past its lease says nothing
        batch = self.store.batch(p, fence=keys.sched_fence(p))
        batch.xadd(keys.sched_resp(p), proto.encode_entry([proto.Hello()], session.epoch))
        try:
            self.store.commit(batch, str(session.epoch))
        except FencedError as exc:
            self.step_down(str(exc))

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """Lead (or wait to), read requests, schedule, answer."""
        if not self.leader:
            self._stand_by()
            return
        if not self.keepalive():
            return
        streams = {self.keys.sched_req(s.partition): s.pos for s in self.sessions}
        block = BLOCK_MS if not self._dirty else 1
        reply = read_streams(self.redis, streams, READ_COUNT, block)
        out: dict[int, list[proto.SchedResponse]] = {}
        freed_sent: list[float] = []
        for stream_b, entries in reply or []:
            stream = stream_b.decode()
            session = self._session_of(stream)
            msgs: list[_Input] = []
            frees = False
            for msg_id, fields in entries:
                # read by position, not through a group: moving on is the acknowledgement
                session.pos = msg_id.decode()
                try:
                    epoch, batch, sent = proto.decode_entry_sent(proto.SCHED_REQUESTS, fields)
                except proto.MessageError as exc:
                    self.dead_letter(stream, msg_id, fields, str(exc))
                    continue
                if any(isinstance(m, proto.Free) for m in batch):
                    frees = True
                    if sent:
                        freed_sent.append(sent)  # the hand-off ends with its answer's write
                msgs.extend(_Input(epoch, m, msg_id, fields) for m in batch)
            if frees and self.pool is not None:
                # a drain written before the job was released (an exec worker's
                # housekeeping holding its rank) must apply before the free does
                self._read_resource_events()
            if not self._handle(session, msgs, out.setdefault(session.partition, [])):
                return  # deposed while handling
        if time.monotonic() - self._housekept >= HOUSEKEEPING_S:
            self._housekeeping()
        now = time.time()
        sched = self.sched
        if sched is not None and sched.pending and (
                self._dirty or now - self._planned > REPLAN_S
                or (self._owe_full and now - self._full_pass >= FULL_PASS_S)):
            self._schedule(now, out)
        self._flush(out)
        if freed_sent:
            hops.record_since(hops.JM_TO_SCHED, freed_sent, time.time())

    # ------------------------------------------------------------ resources

    def _read_resource_events(self) -> None:
        """Apply new drain/undrain events to the pool (drained targets get no new work)."""
        pool = self.pool
        assert pool is not None
        start = "(" + self._resource_pos if self._resource_pos != "0-0" else "-"
        for sid, fields in self.redis.xrange(self.keys.resource_events, min=start):
            self._resource_pos = sid.decode()
            try:
                event = proto.decode_resource_event(fields)
                if isinstance(event, proto.Reload):
                    self._reload_resources()
                    continue
                ranks = IDSet(event.ranks) & pool.inventory.ranks
            except ValueError as exc:  # MessageError included
                self.dead_letter(self.keys.resource_events, sid, fields, str(exc))
                continue
            if not ranks:
                continue
            if isinstance(event, proto.Drain):
                pool.mark_down(ranks)
                for r in ranks:
                    self.drained[r] = (event.reason, event.auto, event.timestamp)
            else:
                pool.mark_up(ranks)
                for r in ranks:
                    self.drained.pop(r, None)
            self._dirty = True

    def _reload_resources(self) -> None:
        """The recorded resources were replaced (``fluxes resource reload``): the pool
        follows in place (fluxes/domain/sched/reload.py); ValueError when it cannot."""
        from fluxes.domain.sched.pool import ResourcePool
        from fluxes.domain.sched.reload import reload_pool

        pool = self.pool
        if not isinstance(pool, ResourcePool):
            raise ValueError("reload: a graph pool follows new resources only on restart")
        try:
            plan = reload_pool(pool, load_inventory(self.instance), time.time)
        except FluxesError as exc:
            raise ValueError(f"reload: {exc}") from None
        for rank in plan.removed | plan.changed:
            self.drained.pop(rank, None)
        self._dirty = True

    def _housekeeping(self) -> None:
        """Drain ranks whose exec worker went silent (and undrain them when it is back);
        publish the resource summary for ``fluxes resource list``."""
        self._housekept = time.monotonic()
        self._check_alive()
        pool = self.pool
        if pool is None:
            return
        accounts = self._accounts.refresh()
        if accounts != self.gate.accounts:
            self.gate.set_accounts(accounts)
            self._dirty = True  # a limit may have been raised
        self._read_resource_events()
        now = time.time()
        seen = exec_heartbeats(self.redis, self.keys)
        grace_over = time.monotonic() - self._lead_since > self.lost_after
        # Silence is judged on answered time: right after a Redis stall every
        # heartbeat is old, and nobody is lost (fluxes/domain/liveness.py).
        judging = reachability.may_judge(self.lost_after)
        lost = IDSet()
        back = IDSet()
        for rank in pool.inventory.ranks:
            beat = seen.get(rank)
            silent = (beat is None and grace_over) or (beat is not None
                                                        and now - beat > self.lost_after)
            drained = self.drained.get(rank)
            if silent and drained is None and judging:
                lost.add(rank)
            elif not silent and beat is not None and drained is not None and drained[1]:
                back.add(rank)
        pipe = self.redis.pipeline(transaction=False)
        if lost:
            self.log.warning("exec workers lost, draining", extra={"ranks": str(lost)})
            pipe.xadd(self.keys.resource_events, {"d": resource_event(
                "drain", str(lost), "exec worker not responding", auto=True)})
            for p in range(self.keys.partitions):
                pipe.xadd(self.keys.jm_ctl(p), proto.encode_entry([proto.LostRanks(
                    ranks=str(lost))]))
        if back:
            self.log.info("exec workers back, undraining", extra={"ranks": str(back)})
            pipe.xadd(self.keys.resource_events, {"d": resource_event("undrain", str(back),
                                                                      auto=True)})
        pipe.set(self.keys.sched_status, orjson.dumps(self._summary(now)))
        pipe.execute()
        if lost or back:
            self._read_resource_events()

    def _summary(self, now: float) -> dict[str, Any]:
        pool = self.pool
        assert pool is not None

        def part(rset: ResourceSet) -> dict[str, Any]:
            return {"nnodes": rset.nnodes, "ncores": rset.ncores, "ngpus": rset.ngpus,
                    "nodelist": str(rset.hostlist) if len(rset.ranks) else "",
                    "ranks": str(rset.ranks)}

        inventory = pool.inventory.rset()
        allocated = pool.allocated()
        # a drained node still running work is allocated (draining) until it is idle:
        # each node in one column, as flux lists them
        return {"time": now, "scheduler": self.name, "applied": self._resource_pos,
                "pending": len(self.sched.pending) if self.sched else 0,
                "free": part(pool.available(include_down=False)),
                "allocated": part(allocated),
                "down": part(inventory.copy_ranks(pool.down - allocated.ranks)),
                "drained": {str(r): {"reason": why, "auto": auto, "timestamp": when}
                            for r, (why, auto, when) in sorted(self.drained.items())}}

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
        for session in self.sessions:
            if self.keys.sched_req(session.partition) == stream:
                return session
        raise KeyError(stream)

    def _handle(self, session: Session, msgs: list[_Input],
                out: list[proto.SchedResponse]) -> bool:
        """Apply one partition's requests in order; new allocs are looked up in bulk.

        A request whose handling raises (anything but a lost connection) is
        dead-lettered, and the session starts a new epoch: the pool may hold
        half of the request's effects, and a new hello rebuilds it from the
        stored R of every job holding resources.

        Returns False when this scheduler lost its lease meanwhile.
        """
        sched = self.sched
        pool = self.pool
        assert sched is not None and pool is not None
        allocs: list[proto.Alloc] = []
        for item in msgs:
            if isinstance(item.msg, proto.Reset):
                self._reset(session)
                if self.pool is None:
                    return False
                allocs = []
                out.clear()
                continue
            if item.epoch != session.epoch:
                continue  # from an older session
            try:
                allocs = self._apply(session, item.msg, allocs, out, item.msg_id)
            except Exception as exc:
                if not_the_input(exc):
                    raise
                self.dead_letter(self.keys.sched_req(session.partition), item.msg_id,
                                 item.fields, f"{type(exc).__name__}: {exc}")
                self._reset(session)
                return self.pool is not None
        if allocs:
            self._add_allocs(allocs, out)
        return True

    def _apply(self, session: Session, msg: proto.SchedRequest, allocs: list[proto.Alloc],
               out: list[proto.SchedResponse], item_id: bytes = b"-") -> list[proto.Alloc]:
        """Apply one request of the session's epoch; the alloc requests still to queue."""
        sched, pool = self.sched, self.pool
        assert sched is not None and pool is not None
        match msg:
            case proto.HelloReply(alloc=held):
                if not session.ready:  # a repeated answer to this epoch's hello: done
                    self._recover(session, held, out)
            case proto.Alloc():
                allocs.append(msg)
                self._alloc_origin[msg.id] = item_id
            case proto.Cancel(id=jobid):
                before = len(allocs)
                allocs = [a for a in allocs if a.id != jobid]  # not yet queued
                self._alloc_arrived.pop(jobid, None)
                self._alloc_origin.pop(jobid, None)
                if sched.remove(jobid) or len(allocs) != before:
                    out.append(proto.AllocResponse(id=jobid, type=proto.ALLOC_CANCEL))
                    self.sent.pop(jobid, None)
                    self._dirty = True
            case proto.Prioritize(jobs=pairs):
                for jobid, priority in pairs:
                    sched.prioritize(jobid, priority)
                self._dirty = True
            case proto.Expiration(id=jobid, expiration=expiration):
                # a job freed meanwhile holds nothing to move
                if pool.set_expiration(jobid, expiration):
                    self._dirty = True
            case proto.Free(id=jobid):
                self.gate.end(jobid)
                try:
                    pool.free(jobid)
                except ValueError:
                    pass  # not held here (freed before a restart): still answer
                quarantined = self._quarantined.pop(jobid, None)
                if quarantined:
                    self.redis.xadd(self.keys.resource_events, {"d": resource_event(
                        "undrain", str(quarantined))})
                    self._read_resource_events()
                out.append(proto.FreeResponse(id=jobid))
                self._dirty = True
        return allocs

    def _reset(self, session: Session) -> None:
        """The partition's job manager restarted: forget its jobs, start a new epoch."""
        sched, pool = self.sched, self.pool
        assert sched is not None and pool is not None
        p = session.partition
        for jobid in [j for j in sched.pending if self.keys.partition_of(j) == p]:
            sched.remove(jobid)
            self._alloc_arrived.pop(jobid, None)
            self._alloc_origin.pop(jobid, None)
        for jobid in [j for j in pool.jobids() if self.keys.partition_of(j) == p]:
            pool.free(jobid)
            self.gate.end(jobid)
        self._recover_started = time.monotonic()  # recovery_s measures this new epoch
        self._hello(session, bump=True)

    def _recover(self, session: Session, alloc: list[proto.HeldJob],
                 out: list[proto.SchedResponse]) -> None:
        """Hello reply: put every held R back into the pool, then say ready.

        The pool may hold allocations already (a hot standby's, taken over):
        those the reply names stay, the others of this partition are freed.
        """
        pool = self.pool
        assert pool is not None
        held = {a.id: a.ranks for a in alloc}
        owners = {a.id: a for a in alloc}
        p = session.partition
        stale, ids = reconcile((j for j in pool.jobids() if self.keys.partition_of(j) == p),
                               held)
        for jobid in stale:
            pool.free(jobid)
            self._warm_sizes.pop(jobid, None)
        missing = set(ids)
        for jobid, owner in owners.items():
            if jobid in missing:
                continue
            size = self._warm_sizes.pop(jobid, None)
            if size is None:  # in the pool, but not through the warm pool: read again
                pool.free(jobid)
                ids.append(jobid)
            else:
                self._adopted(jobid, owner, *size)
        lost = self._adopt_rows(ids, owners)
        if lost:
            self._unrecoverable(session, lost, held)
        session.ready = True
        out.append(proto.Ready(mode=self.mode, limit=max(self.limit, 1)
                               if self.mode == "limited" else 0))
        self.recovered_in = time.monotonic() - self._recover_started
        metrics.RECOVERY.labels(worker=self.kind).observe(self.recovered_in)
        self.log.info("ready", extra={"partition": session.partition, "epoch": session.epoch,
                                      "recovered": len(owners), "read": len(ids),
                                      "recovery_s": round(self.recovered_in, 3)})

    def _adopted(self, jobid: int, owner: proto.HeldJob, nnodes: int, ncores: int) -> None:
        """A job's allocation is in the pool: its end and its owner's limits as the hello
        reply says."""
        if owner.expiration is not None:
            # moved by a resource-update: the stored R keeps its first end
            assert self.pool is not None
            self.pool.set_expiration(jobid, owner.expiration)
        self.gate.adopt(jobid, owner.userid, owner.bank, nnodes, ncores)

    def _adopt_rows(self, ids: list[int], owners: Mapping[int, proto.HeldJob]
                    ) -> list[tuple[int, str]]:
        """Read the stored R of ``ids`` into the pool; the jobs it failed for, and why."""
        pool = self.pool
        assert pool is not None
        lost: list[tuple[int, str]] = []
        rows = self.hashes.allocations(ids)
        # a stored request this scheduler cannot read: its jobspec is read instead
        unread = [jobid for jobid, (_r, wire, _s) in zip(ids, rows, strict=True)
                  if wire is not None and self._wire_request(wire) is None]
        specs = dict(zip(unread, self.hashes.effective_jobspecs(unread), strict=True))
        for jobid, (raw_r, wire, stored_spec) in zip(ids, rows, strict=True):
            if not raw_r:
                lost.append((jobid, "the job holds resources but has no R"))
                continue
            try:
                request = self._stored_request(wire, stored_spec or specs.get(jobid))
                rset = adopt_stored(pool, self.graph, jobid, raw_r, request)
                self._adopted(jobid, owners[jobid], rset.nnodes, rset.ncores)
            except Exception as exc:
                if not_the_input(exc):
                    raise
                # whatever broke, this job's allocation is lost, not the session
                lost.append((jobid, f"its allocation cannot be recovered: {exc}"))
        return lost

    def _stored_request(self, wire: str | None, raw_spec: bytes | None) -> Request | None:
        """A held job's request: the stored one, else its jobspec's (parsed once per
        distinct jobspec: jobs submitted together share one); None with neither."""
        request = self._wire_request(wire)
        if request is None and raw_spec:
            request = self._spec_requests.get(raw_spec)
            if request is None:
                if len(self._spec_requests) >= REQUESTS_KEPT:
                    self._spec_requests.clear()
                request = self._spec_requests[raw_spec] = _parse_request(
                    orjson.loads(raw_spec), self.graph)
        return request

    def _unrecoverable(self, session: Session, lost: list[tuple[int, str]],
                       held: Mapping[int, Any]) -> None:
        """Jobs whose allocation hello could not put back into the pool.

        As flux's schedulers do, such a job gets a fatal exception (through
        the job manager's raise request, as the instance owner). Its cores
        are not in the pool, so nothing stops them from being handed out
        while its tasks may still run: the ranks it holds are drained until
        its free arrives.
        """
        pool = self.pool
        assert pool is not None
        pipe = self.redis.pipeline(transaction=False)
        for jobid, why in lost:
            self.log.error("allocation not recovered", extra={"job": jobid, "error": why})
            pipe.xadd(self.keys.jm_ctl(session.partition), proto.encode_entry([
                proto.RaiseRequest(ids=[jobid], userid=self.owner_uid, type="scheduler",
                                   severity=0, note=f"scheduler restart: {why}")]))
            try:
                ranks = IDSet(str(held.get(jobid) or "")) & pool.inventory.ranks
            except ValueError:
                ranks = IDSet()
            reason = f"allocation of job {jobid} not recovered"
            # ranks drained for another reason stay as they are (and are not
            # undrained with this job); ours may be drained already by an
            # earlier scheduler that met the same job
            mine = IDSet(r for r in ranks
                         if r not in self.drained or self.drained[r][0] == reason)
            if mine:
                self._quarantined[jobid] = mine
                pipe.xadd(self.keys.resource_events, {"d": resource_event(
                    "drain", str(mine), reason)})
        pipe.execute()
        self._read_resource_events()

    def _wire_request(self, wire: str | None) -> Request | None:
        """The request an alloc message (or the job hash) carries, decoded once per
        distinct shape; None when there is none or it cannot be read (the job's
        jobspec is parsed instead)."""
        if wire is None:
            return None
        found = self._requests.get(wire)
        if found is None:
            try:
                found = Request.from_wire(wire)
            except ValueError as exc:
                self.log.warning("unreadable request, reading the jobspec",
                                 extra={"error": str(exc)})
                return None
            if len(self._requests) >= REQUESTS_KEPT:
                self._requests.clear()
            self._requests[wire] = found
        return found

    def _add_allocs(self, allocs: list[proto.Alloc], out: list[proto.SchedResponse]) -> None:
        """Queue new alloc requests; the jobspecs of those that carry no request (older
        jobs) are read in one round trip and parsed."""
        sched, pool = self.sched, self.pool
        assert sched is not None and pool is not None
        arrived = time.monotonic() if metrics.served_port() is not None else None
        requests = [self._wire_request(msg.request) for msg in allocs]
        missing = [msg.id for msg, request in zip(allocs, requests, strict=True)
                   if request is None]
        specs = dict(zip(missing, self.hashes.effective_jobspecs(missing), strict=True))
        held = set(pool.jobids())
        for n, (msg, carried) in enumerate(zip(allocs, requests, strict=True)):
            if n % 512 == 511:
                self.keepalive()
            jobid = msg.id
            if jobid in held:
                # a replayed request of a job holding resources: it has its answer
                self.log.warning("alloc request for a job holding resources ignored",
                                 extra={"job": jobid})
                self._alloc_origin.pop(jobid, None)
                continue
            try:
                request = carried
                if request is None:
                    raw = specs.get(jobid)
                    if not raw:
                        raise InfeasibleRequest("job has no jobspec")
                    request = _request_of(raw, self.graph)
                pool.check(request)
                pending = PendingJob(jobid, msg.priority, msg.t_submit, msg.userid, msg.queue,
                                     request, bank=msg.bank)
            except Exception as exc:
                if not_the_input(exc):
                    raise
                # whatever is wrong with it, this job is refused, not the session
                out.append(proto.AllocResponse(id=jobid, type=proto.ALLOC_DENY,
                                               note=one_line(str(exc) or type(exc).__name__)))
                continue
            sched.add(pending)
            if arrived is not None:
                self._alloc_arrived[jobid] = arrived
            self._dirty = True

    def _schedule(self, now: float, out: dict[int, list[proto.SchedResponse]]) -> None:
        sched = self.sched
        assert sched is not None
        pass_started = time.perf_counter()
        full = now - self._full_pass >= FULL_PASS_S
        if full:
            self._full_pass = now
        # a quick pass leaves some jobs' annotations stale: owe them a full one
        self._owe_full = not full
        result = sched.schedule(now, full=full)
        if metrics.served_port() is not None:
            metrics.SCHED_PASS.observe(time.perf_counter() - pass_started)
        self._dirty = False
        self._planned = now
        keys = self.keys
        pool = self.pool
        assert pool is not None
        for jobid, rset in result.allocated:
            part = keys.partition_of(jobid)
            shape = pool.shape_of(jobid)
            if shape is not None:
                # encodings computed once per allocation shape (domain/sched/shapes.py)
                data = shape.dumps(rset.starttime, rset.expiration)
                summary, ranks, nodelist = shape.summary(), shape.ranks(), shape.nodelist()
            else:
                data = rset.dumps()
                summary, ranks, nodelist = rset.summary(), str(rset.ranks), str(rset.hostlist)
            self._r_writes.setdefault(part, {})[jobid] = data.encode()
            ann: dict[str, Any] = {"sched": {"resource_summary": summary,
                                             "reason_pending": None, "t_estimate": None}}
            out.setdefault(part, []).append(proto.AllocResponse(
                id=jobid, type=proto.ALLOC_SUCCESS, annotations=ann, ranks=ranks,
                nodelist=nodelist, ncores=rset.ncores, ngpus=rset.ngpus))
            self.sent.pop(jobid, None)
            self.allocations += 1
            arrival = self._alloc_arrived.pop(jobid, None)
            if arrival is not None:
                self._alloc_done.append(arrival)
        for jobid, note in result.denied:
            out.setdefault(keys.partition_of(jobid), []).append(
                proto.AllocResponse(id=jobid, type=proto.ALLOC_DENY, note=note))
            self.sent.pop(jobid, None)
            self._alloc_arrived.pop(jobid, None)
        for jobid, sched_ann in result.annotations.items():
            if self.sent.get(jobid) == sched_ann:
                continue  # annotations are sent only when they change
            old = self.sent.get(jobid, {})
            delta = {k: v for k, v in sched_ann.items() if old.get(k) != v}
            delta.update({k: None for k in old if k not in sched_ann})
            self.sent[jobid] = sched_ann
            out.setdefault(keys.partition_of(jobid), []).append(
                proto.AllocResponse(id=jobid, type=proto.ALLOC_ANNOTATE,
                                    annotations={"sched": delta}))

    def _flush(self, out: dict[int, list[proto.SchedResponse]]) -> None:
        """Write R and responses per partition, atomically and fenced by the epoch (and
        each R on its job waiting for it)."""
        writes = self._r_writes
        keys = self.keys
        for session in self.sessions:
            p = session.partition
            msgs = out.get(p) or []
            rs = writes.get(p) or {}
            while msgs or rs:
                batch = self.store.batch(p, fence=keys.sched_fence(p))
                for jobid, data in rs.items():
                    # jobhash.set_r's write, fenced on the job (commit.lua, op R)
                    batch.set_if_waiting(keys.job(jobid), keys.eventlog(jobid), jobid,
                                         jobhash.R, data)
                for entry in proto.encode_chunks(msgs, session.epoch, MESSAGES_PER_ENTRY,
                                                 proto.SCHED_RESPONSES.max_bytes, time.time()):
                    batch.xadd(keys.sched_resp(p), entry)
                try:
                    self.store.commit(batch, str(session.epoch))
                except FencedError as exc:
                    self.step_down(str(exc))
                    return
                except NotWaitingError as exc:
                    msgs = self._take_back(p, exc.jobids, rs, msgs)
                    continue
                break
            for msg in msgs:
                if isinstance(msg, proto.AllocResponse) and msg.type != proto.ALLOC_ANNOTATE:
                    self._alloc_origin.pop(msg.id, None)  # answered
        self._r_writes = {}
        if self._alloc_done:
            if metrics.served_port() is not None:  # nobody scrapes them otherwise
                committed = time.monotonic()
                for arrival in self._alloc_done:
                    metrics.ALLOC_LATENCY.observe(committed - arrival)
            self._alloc_done = []


    def _take_back(self, partition: int, jobids: list[int], rs: dict[int, bytes],
                   msgs: list[proto.SchedResponse]) -> list[proto.SchedResponse]:
        """Allocations made for jobs that wait for none (their alloc request was
        replayed or forged): free them, drop their R and SUCCESS, dead-letter the
        request; the responses left to send."""
        pool = self.pool
        refused = set(jobids)
        for jobid in jobids:
            rs.pop(jobid, None)
            self.gate.end(jobid)
            if pool is not None:
                try:
                    pool.free(jobid)
                except ValueError:
                    pass  # not held here
            self.sent.pop(jobid, None)
            self.allocations -= 1
            origin = self._alloc_origin.pop(jobid, b"-")
            self.dead_letter(self.keys.sched_req(partition), origin, {"alloc": str(jobid)},
                             f"alloc: job {jobid} waits for no allocation (it runs, ended, "
                             "or does not exist): its R is not written")
        self._dirty = True
        return [m for m in msgs if not (isinstance(m, proto.AllocResponse) and m.id in refused
                                         and m.type == proto.ALLOC_SUCCESS)]


class _Input(NamedTuple):
    """A request read from a session's stream, with the entry it came in."""

    epoch: int
    msg: proto.SchedRequest
    msg_id: bytes
    fields: Mapping[bytes, bytes]


def _request_of(raw: bytes, graph: bool = False) -> Request:
    """The Request of a stored jobspec (JSON); InfeasibleRequest when unsupported."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InfeasibleRequest("stored jobspec is not JSON") from None
    return _parse_request(Jobspec.from_dict(doc), graph)


def _parse_request(jobspec: Jobspec | Mapping[str, Any], graph: bool) -> Request:
    """A jobspec's Request: on a graph any resources tree (racks, switches...), else the
    shapes today's pool reads."""
    return graph_request(jobspec) if graph else Request.from_jobspec(jobspec)


def main(instance: Instance) -> int:
    """Run a scheduler until SIGTERM."""
    return SchedulerWorker(instance).run()

