"""The job-manager worker: leader election, replay, and the input/commit loop.

One leader per partition holds a lease; standbys wait for it. On taking the
lease the worker rebuilds the partition from checkpoint + journal, posts
``flux-restart`` for jobs in SCHED, asks the scheduler for a new epoch, and
then loops:

1. read a block of inputs (pending ones first after a restart) from the
   new-job, scheduler-response, exec-event and control streams (about once a
   second it also checks that the scheduler of the RFC 27 session still holds
   its lease, suspends scheduling when it does not, and asks a scheduler that
   holds the lease for a new session when scheduling stays suspended);
2. hand each message to :class:`~fluxes.domain.jm.core.JobManagerCore`;
3. commit the resulting events, outbound messages and input
   acknowledgements in one Lua call, fenced by the leader's token.

A commit refused as stale (``FencedError``) means another leader took over:
this process drops its state and goes back to standby. A commit refused for
any other reason (an eventlog conflict, a key of another type) means memory
and storage disagree: the worker rebuilds from storage and then takes its
pending inputs one per commit, so that an input whose effects cannot be
written is found alone and refused (dead-lettered and acknowledged), never
replayed in a loop.

Why one module: it is the I/O around the pure core (:mod:`fluxes.domain.jm.core`):
lease, restore, the input doors and the fenced commit, methods of the one worker whose
state (token, core, careful mode) they share; the decisions themselves are in the core.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import msgspec

from fluxes import messages as proto
from fluxes.domain.accounting.priority import (
    JobFacts,
    facts_from_info,
)
from fluxes.domain.jm.core import JobManagerCore
from fluxes.domain.jm.depend import TargetStatus
from fluxes.domain.jm.effects import Ack, Effects
from fluxes.domain.jm.priority import DefaultPriority
from fluxes.proc import metrics
from fluxes.store.errors import StoreError
from fluxes.store.eventstore import (
    EventStore,
    FencedError,
)
from fluxes.store.groups import ensure_group
from fluxes.store.instance import Instance
from fluxes.store.jm_priority import NEW_SETTINGS, PriorityFeed
from fluxes.store.jm_unit import MAX_COMMIT_EVENTS, JobManagerStore
from fluxes.store.keys import GROUP_JM
from fluxes.store.lease import LEASE_TTL_MS, Lease
from fluxes.store.private import ensure_salt
from workers.base import (
    not_the_input,
    overdelivered_reason,
)
from workers.jm_commit import Committing

MAX_BLOCK_MS = 1000
#: Events between checkpoints.
CHECKPOINT_EVERY = 200_000
#: How often the leader re-reads its pending entries: inputs a deposed leader
#: read but could not commit stay pending under the shared consumer name.
PENDING_RESCAN_S = 2.0
#: Seconds a step spends at most on new-job and control entries read before (at least
#: one entry): a big submission is taken a slice a step, after the scheduler's and the
#: exec workers' entries of each, whose jobs would otherwise wait for all of it
#: (1,000 new jobs cost ~25 ms of this process).
INGEST_SLICE_S = 0.002
#: How often the leader checks that its session's scheduler still holds the
#: scheduler lease (one round trip). A dead scheduler is noticed this long
#: after its lease expires.
SCHED_CHECK_S = 1.0
#: Rebuilds from storage within REBUILD_WINDOW_S after which the next one waits a
#: little (a storage problem no input causes must not spin the CPU and the logs).
REBUILDS_BEFORE_PAUSE = 3
REBUILD_WINDOW_S = 10.0
REBUILD_PAUSE_S = 1.0


class JobManagerWorker(Committing):
    """Leader (or standby) job manager of one partition."""

    kind = "job-manager"

    def __init__(self, instance: Instance, partition: int = 0, name: str | None = None,
                 owner_uid: int | None = None, lease_ttl_ms: int = LEASE_TTL_MS,
                 checkpoint_every: int = CHECKPOINT_EVERY, pipelined: bool = False) -> None:
        super().__init__(instance, name)
        self.partition = partition
        keys = self.keys
        self.store = EventStore(self.redis, keys)
        self.writes = JobManagerStore(self.store, partition)
        self.lease = Lease(self.redis, keys.jm_lease(partition), keys.jm_fence(partition),
                           self.name, lease_ttl_ms)
        self.owner_uid = owner_uid if owner_uid is not None else self._instance_owner()
        self.inputs = [keys.jm_new(partition), keys.sched_resp(partition),
                       keys.exec_events(partition), keys.jm_ctl(partition)]
        #: the input streams by name, as dispatch tells entries apart (once per entry)
        self._jm_new, self._sched_resp, self._exec_events = self.inputs[:3]
        #: a read's stream names (bytes) -> the input's name, so that a step decodes none
        self._names = {name.encode(): name for name in self.inputs}
        #: the read's stream arguments: after a restart or rescan, and in normal steps
        self._from_start = dict.fromkeys(self.inputs, "0")
        self._new_only = dict.fromkeys(self.inputs, ">")
        #: the inputs the ingest writes (new jobs, then controls naming them: one order)
        self._ingest = (keys.jm_new(partition), keys.jm_ctl(partition))
        self._others_only = {s: ">" for s in self.inputs if s not in self._ingest}
        #: ingest entries read and not handled yet, in the order read (taken
        #: INGEST_SLICE_S a step; the ingest streams are not read again until they are)
        self._held: deque[tuple[str, bytes, Mapping[bytes, bytes]]] = deque()
        self.core: JobManagerCore | None = None
        self.token: str | None = None
        self._pending = True
        self.checkpoint_every = checkpoint_every
        self._since_checkpoint = 0
        self._last_journal_id = "0-0"
        self.events_written = 0
        self.restored_in = 0.0
        self._rescan_at = 0.0
        self._sched_check_at = 0.0
        #: after a refused commit: pending inputs are taken one per commit
        self._careful = False
        #: the one input of the step being committed in careful mode
        self._alone: tuple[str, bytes, Mapping[bytes, bytes]] | None = None
        self._rebuilds: list[float] = []
        #: a step's effects are sent with the next read of the inputs (one round trip
        #: per step): the effects of the last step until then (None: none wait)
        self.pipelined = pipelined
        self._unsent: Effects | None = None
        #: send times of the exec reports and allocations handled since the last
        #: commit: their hand-offs end when it is written (fluxes/proc/hops.py)
        self._sent_exec: list[float] = []
        self._sent_alloc: list[float] = []
        #: the priority plugin and when every pending job is due a new priority
        self.priority = PriorityFeed(instance, self._facts)
        #: the key masking dependency descriptions in public events (read in setup)
        self.salt = b""

    def _instance_owner(self) -> int:
        owner = self.writes.instance_owner()
        return owner if owner is not None else os.getuid()

    # ------------------------------------------------------------ leadership

    def setup(self) -> None:
        """Create the input consumer groups (leadership comes in ``step``)."""
        for stream in self.inputs:
            ensure_group(self.redis, stream, GROUP_JM)
        self.salt = ensure_salt(self.redis, self.keys)

    def reconnected(self) -> None:
        """After a Redis outage: give up what is in memory and lead again from storage."""
        self.core = None
        self.token = None
        self.lease.token = None
        self._unsent = None
        self._held.clear()
        super().reconnected()

    def status(self) -> dict[str, Any]:
        """Leadership and progress for ``fluxes status``."""
        core = self.core
        out: dict[str, Any] = {
            "partition": self.partition, "leader": self.token is not None,
            "active_jobs": len(core.jobs) if core else 0,
            "events": self.events_written, "restore_s": round(self.restored_in, 3)}
        if core is not None and core.session.suspended is not None:
            out["sched_suspended"] = core.session.suspended
        return out

    def consumed(self) -> list[tuple[str, str]]:
        """The partition's input streams, read through the ``jm`` group."""
        return [(stream, GROUP_JM) for stream in self.inputs]

    def become_leader(self) -> None:
        """Replay the partition and take over its jobs."""
        started = time.monotonic()
        result, _used = self.store.restore(self.partition)
        core = JobManagerCore(owner_uid=self.owner_uid, lookup=self._lookup,
                              stopped_queues=self.writes.stopped_queues(self.instance),
                              priority=self.priority.plugin())
        saved = self.writes.saved_progress()
        requests = self.writes.stored_requests(core.pending_ids(result.records.values()),
                                               self.keepalive)
        core.load(result.records.values(), saved, requests)
        self.keepalive()
        self.core = core
        self._last_journal_id = result.last_id
        self._pending = True
        self._held.clear()  # unacknowledged: read again with the pending inputs
        # inputs left pending (by a leader that died or was deposed, or by this
        # one's refused step) are taken one per commit: an input that kills the
        # process or fails its commit again is then the only one read again
        self._careful = True
        fx = Effects()
        core.restart(fx)
        self.commit(fx)
        self.restored_in = time.monotonic() - started
        metrics.RECOVERY.labels(worker=self.kind).observe(self.restored_in)
        self.log.info("leading", extra={"partition": self.partition, "token": self.token,
                                        "active_jobs": len(core.jobs),
                                        "replayed_events": result.events,
                                        "restore_s": round(self.restored_in, 3)})

    def _facts(self, jobid: int) -> JobFacts | None:
        """A job's bank and size for the multi-factor plugin, from its submit extras."""
        act = self.core.jobs.get(jobid) if self.core is not None else None
        return facts_from_info(act.rec.info) if act is not None else None

    def reprioritize(self, core: JobManagerCore, fx: Effects) -> None:
        """Recompute every pending job's priority when the feed says it is due (the
        interval, a change of usage, new ``[accounting]`` settings: a new plugin)."""
        due = self.priority.due()
        if self.priority.refused is not None:
            self.log.warning("configuration not applied",
                             extra={"error": self.priority.refused})
            self.priority.refused = None
        if due is None:
            return
        why, plugin = due
        if why == NEW_SETTINGS:
            core.priority = plugin or DefaultPriority()
        changed = core.reprioritize(fx)
        if changed:
            self.log.debug("reprioritized", extra={"partition": self.partition,
                                                   "changed": changed, "why": why})

    def _renewed_token(self) -> str | None:
        """The fencing token after renewing the lease if due (None once deposed)."""
        self.keepalive()
        return self.token

    def keepalive(self) -> None:
        """Renew the lease when due (also called inside long steps); step down if lost."""
        if self.token is not None and not self.lease.renew_if_due():
            self.step_down("lease lost")

    def step_down(self, why: str) -> None:
        """Forget everything held in memory; another process leads now."""
        self.log.warning("stepping down", extra={"partition": self.partition, "why": why})
        self.core = None
        self.token = None
        self.lease.token = None
        self._unsent = None
        self._held.clear()

    def _lookup(self, jobid: int) -> TargetStatus | None:
        """Dependency targets the core no longer holds: replay their own eventlog."""
        if self.keys.partition_of(jobid) != self.partition and not self.store.job_exists(jobid):
            return None
        try:
            job = self.store.replay_job(jobid)
        except ValueError:
            return None
        return TargetStatus.from_job(job) if job.seq else None

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """Lead (or wait to), read a block of inputs, commit their effects."""
        if self.token is None:
            self._try_to_lead()
            return
        if self._renewed_token() is None:
            return
        core = self.core
        if core is None:
            self.rebuild()  # memory was given up after a refused commit
            return
        if self._careful and self.careful_step(core):
            return
        if time.monotonic() >= self._rescan_at and not self._held:
            # (held entries are pending too: a rescan would read them a second time)
            self._pending = True
            self._rescan_at = time.monotonic() + PENDING_RESCAN_S
        self.check_scheduler(core)
        if self._pending:
            streams = self._from_start
            block = None
        elif self._held:
            streams = self._others_only  # the held entries are this step's work
            block = None
        else:
            streams = self._new_only
            block = self._block_ms(core)
        reply = self._read(streams, block)
        if self.core is not core:
            return  # the last step's commit was refused, or this leader deposed
        fx = self._take(core, reply)
        if fx is None:
            return
        core.on_timers(fx)
        self.reprioritize(core, fx)
        if self.pipelined and self.core is core:
            self._unsent = fx  # sent with the next read
        else:
            self.commit(fx)

    def _take(self, core: JobManagerCore, reply: list[Any]) -> Effects | None:
        """Hand the entries read to the core; their effects (None: rebuilt from storage or
        deposed on the way, the effects are gone)."""
        fx: Effects | None = Effects()
        got = 0
        names = self._names
        held = self._held
        for stream_b, entries in reply or []:
            stream = names.get(stream_b) or stream_b.decode()
            got += len(entries)
            if stream in self._ingest and not self._pending:
                held.extend((stream, msg_id, fields) for msg_id, fields in entries)
                continue
            # pending entries read again: those read too often are refused unread
            over = self.overdelivered(stream, GROUP_JM, "jm", entries) if self._pending else {}
            for msg_id, fields in entries:
                fx = self._take_one(core, fx, stream, msg_id, fields, over)
                if fx is None:
                    return None
        if held:
            fx = self._take_held(core, fx)
        if self._pending and got == 0:
            self._pending = False
        return fx

    def _take_held(self, core: JobManagerCore, fx: Effects | None) -> Effects | None:
        """Handle held ingest entries in order for up to INGEST_SLICE_S (one at least)."""
        held = self._held
        deadline = time.monotonic() + INGEST_SLICE_S
        while held and fx is not None:
            stream, msg_id, fields = held.popleft()
            fx = self._take_one(core, fx, stream, msg_id, fields, {})
            if time.monotonic() >= deadline:
                break
        return fx

    def _take_one(self, core: JobManagerCore, fx: Effects | None, stream: str, msg_id: bytes,
                  fields: Mapping[bytes, bytes], over: Mapping[bytes, int]) -> Effects | None:
        """Hand one entry to the core; the effects to go on with (None: rebuilt from
        storage or deposed on the way, the step's effects are gone)."""
        assert fx is not None
        if msg_id in over:
            fx.dead_letters.append(self.dead_letter_record(
                stream, msg_id, fields, overdelivered_reason(over[msg_id])))
            fx.acks.append((stream, msg_id))
            return fx
        if not self.dispatch(fx, core, stream, msg_id, fields):
            return None  # rebuilt from storage: this step's effects are gone
        if self._renewed_token() is None:
            return None  # deposed: another leader has these inputs now
        if fx.nevents >= MAX_COMMIT_EVENTS:
            # Cut between inputs: each input's effects stay in one commit,
            # and no Lua call runs long enough to block Redis.
            self.commit(fx)
            fx = Effects()
            if self.core is None:
                return None  # deposed by that commit
        return fx

    def _try_to_lead(self) -> None:
        """Take the lease and restore the state from storage, or wait a little."""
        token = self.lease.try_acquire()
        if token is None:
            time.sleep(min(0.5, self.lease.ttl_ms / 3000))
            return
        self.token = token
        try:
            self.become_leader()
        except FencedError:
            self.step_down("fenced while restoring")

    def careful_step(self, core: JobManagerCore) -> bool:
        """After a refused commit, or when taking over pending inputs: the oldest pending
        input alone, in its own commit, so that an input whose effects cannot be
        written (or that kills the process) fails alone and is refused, and only its
        delivery count grows. False (back to normal steps) once nothing is pending."""
        for stream in self.inputs:
            reply = self.writes.read({stream: "0"}, 1, None, "jm")
            for _stream_b, entries in reply or []:
                for msg_id, fields in entries[:1]:
                    fx = Effects()
                    over = self.overdelivered(stream, GROUP_JM, "jm", [(msg_id, fields)])
                    if msg_id in over:
                        fx.dead_letters.append(self.dead_letter_record(
                            stream, msg_id, fields, overdelivered_reason(over[msg_id])))
                        fx.acks.append((stream, msg_id))
                    elif not self.dispatch(fx, core, stream, msg_id, fields):
                        return True
                    self._alone = (stream, msg_id, fields)
                    try:
                        self.commit(fx)
                    finally:
                        self._alone = None
                    return True
        self._careful = False
        self._pending = True
        return False

    def rebuild(self) -> None:
        """Lead again from storage (memory was given up); paced when it keeps happening."""
        now = time.monotonic()
        self._rebuilds = [t for t in self._rebuilds if now - t < REBUILD_WINDOW_S] + [now]
        if len(self._rebuilds) > REBUILDS_BEFORE_PAUSE:
            self.log.warning("rebuilding again, pausing first",
                             extra={"partition": self.partition,
                                    "rebuilds": len(self._rebuilds), "pause_s": REBUILD_PAUSE_S})
            time.sleep(REBUILD_PAUSE_S)
            if self._renewed_token() is None:
                return
        try:
            self.become_leader()
        except FencedError:
            self.step_down("fenced while restoring")

    def check_scheduler(self, core: JobManagerCore) -> None:
        """Suspend scheduling if the session's scheduler lost its lease, and ask for a new
        session when it stays suspended while a scheduler holds the lease (at most once
        a second).

        The lease key expires when the scheduler stops renewing it (dead,
        hung, cut off); the fence counter is the epoch of whoever holds it.
        """
        now = time.monotonic()
        if now < self._sched_check_at:
            return
        self._sched_check_at = now + SCHED_CHECK_S
        session = core.session
        if session.epoch is None:
            return  # no session to watch: the next hello starts one
        p = self.partition
        lease_epoch = self.scheduler_epoch()
        if session.suspended is None:
            why = core.check_scheduler(None if lease_epoch < 0 else lease_epoch)
            if why:
                self.log.warning("scheduling suspended", extra={"partition": p, "why": why})
            return
        fx = Effects()
        if core.heal(fx, None if lease_epoch < 0 else lease_epoch):
            self.log.warning("scheduling still suspended: asking the scheduler for a new "
                             "session", extra={"partition": p, "why": session.suspended})
            self.commit(fx)

    def scheduler_epoch(self) -> int:
        """The epoch of the scheduler holding the partition's lease now; -1 when none does."""
        return self.writes.scheduler_epoch()

    def _block_ms(self, core: JobManagerCore) -> int:
        due = core.next_timer()
        if due is None:
            return MAX_BLOCK_MS
        return max(1, min(MAX_BLOCK_MS, int((due - time.time()) * 1000) + 1))

    def dispatch(self, fx: Effects, core: JobManagerCore, stream: str, msg_id: bytes,
                 fields: Mapping[bytes, bytes]) -> bool:
        """Decode one input entry and feed its messages to the core (the door).

        An entry that fails to decode, or that the core refuses with
        MessageError (which changes nothing), is dead-lettered in ``fx``, so
        its record and its acknowledgement are written in the step's commit.
        Any other exception may have left the core half-changed: this returns
        False, and the caller dead-letters the entry on its own and rebuilds
        the core from storage.
        """
        ack: Ack = (stream, msg_id)
        try:
            if stream == self._sched_resp:
                self._on_sched_entry(fx, core, fields)
            elif stream == self._exec_events:
                _epoch, reports, sent = proto.decode_entry_sent(proto.EXEC_EVENTS, fields)
                if sent:
                    self._sent_exec.append(sent)
                for report in reports:
                    core.on_exec(fx, report)
            elif stream == self._jm_new:
                news = proto.decode_entry(proto.NEW_JOBS, fields)[1]
                refused = self.writes.news_not_stored(core.jobs, news)
                for new in news:
                    if new.id not in refused:
                        core.on_new(fx, new)
                if refused:
                    why = "; ".join(list(refused.values())[:5])
                    fx.dead_letters.append(self.dead_letter_record(
                        stream, msg_id, fields,
                        f"new: {len(refused)} of {len(news)} job(s) refused (the others were "
                        f"taken): {why}"))
            else:
                ctls = proto.decode_entry(proto.CONTROL, fields)[1]
                self.writes.check_replies([c.reply for c in ctls if c.reply is not None])
                for ctl in ctls:
                    if isinstance(ctl, proto.QueuesChanged):
                        core.on_ctl(fx, msgspec.structs.replace(
                            ctl, stopped=sorted(self.writes.stopped_queues(self.instance))))
                    else:
                        core.on_ctl(fx, ctl)
        except proto.MessageError as exc:
            fx.dead_letters.append(self.dead_letter_record(stream, msg_id, fields, str(exc)))
        except Exception as exc:
            if not_the_input(exc):
                raise
            self.poisoned(stream, msg_id, fields, exc)
            return False
        fx.acks.append(ack)
        return True

    def _on_sched_entry(self, fx: Effects, core: JobManagerCore,
                        fields: Mapping[bytes, bytes]) -> None:
        """Feed the scheduler's responses of one entry to the core."""
        epoch, responses, sent = proto.decode_entry_sent(proto.SCHED_RESPONSES, fields)
        granted = hello = False
        for r in responses:  # one pass (not one per question: this is every allocation's)
            if isinstance(r, proto.AllocResponse):
                granted = granted or r.type == proto.ALLOC_SUCCESS
            elif isinstance(r, proto.Hello):
                hello = True
        if sent and granted:
            self._sent_alloc.append(sent)
        # a hello opens a session only from the scheduler that leads now
        current = self.scheduler_epoch() if hello else None
        for response in responses:
            suspended = core.session.suspended
            core.on_sched(fx, epoch, response, current)
            if core.session.suspended is not None and suspended is None:
                self.log.warning("scheduling suspended", extra={
                    "partition": self.partition, "why": core.session.suspended})

    def poisoned(self, stream: str, msg_id: bytes, fields: Mapping[bytes, bytes],
                 exc: Exception) -> None:
        """An input whose handling (or commit) failed: dead-letter and acknowledge it in
        one fenced step; the next step rebuilds from storage (memory may hold half
        of its effects).

        The effects of the other inputs of the step are dropped with the
        memory: those inputs were not acknowledged, so they are read again.
        """
        self.log.error("input refused, rebuilding", extra={
            "stream": stream, "id": msg_id.decode(), "error": f"{type(exc).__name__}: {exc}"})
        fx = Effects()
        fx.dead_letters.append(self.dead_letter_record(
            stream, msg_id, fields, f"{type(exc).__name__}: {exc}"))
        fx.acks.append((stream, msg_id))
        self.core = None  # nothing of the broken step may be committed
        self._unsent = None  # nor of the last one: its inputs are read again
        self.commit(fx)

    def teardown(self) -> None:
        """Clean stop: checkpoint, then hand the lease over at once."""
        try:
            if self.token is not None:
                self.checkpoint()
            self.lease.release()
        except StoreError:
            pass


def main(instance: Instance, partition: int = 0) -> int:
    """Run a job manager for ``partition`` until SIGTERM."""
    return JobManagerWorker(instance, partition, pipelined=True).run()
