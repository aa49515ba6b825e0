"""The ingest worker: the gateway for every user request.

Each user writes requests to their own stream ``{ns}:submit:<user>`` (Redis
ACLs enforce that in multi-user mode), so who asked is known from the stream,
never from what the client claims. Requests (field ``d``, JSON):

* ``{"t": "submit", "req": ID, "jobs": [{"jobspec": {...} | "yaml": "...", "urgency": N,
  "flags": N}, ...]}``: checked (:mod:`fluxes.domain.jm.submission`), given FLUIDs, stored
  (job hash, ``submit`` + ``validate`` events, a ``new`` message for the job
  manager) in one atomic commit per partition; the reply lists an id or one
  error line per job, and nothing is stored for a rejected job. With ``"cc": IDSET``
  the request is an array: one job, copied once per id (``submit --cc``,
  :mod:`fluxes.domain.jm.arrays`), the copies made one at a time as they are
  checked. A request of more than ``[ingest] max-jobs-per-request`` jobs is refused
  whole; the requests of a read are handled in blocks of at most ``BLOCK_JOBS`` jobs. A job no
  configured node could ever run is rejected with the scheduler's note
  (:mod:`fluxes.domain.jm.feasibility`, against the inventory the scheduler loads), and
  so is one whose ``after*`` dependency names a job that does not exist (one
  pipelined EXISTS per distinct target and block of requests);
* ``{"t": "cancel" | "urgency" | "raise", "req": ID, ...}``: forwarded to the
  job manager of each partition involved, with the authenticated userid; the
  job manager answers the client directly.

Replies go to the list ``{ns}:reply:<user>:<req>``, which the client BLPOPs,
after the ids they carry are recorded, fdatasync'd, in the worker's local
acknowledgement log (one sync per block), which is compared with Redis when
the worker (re)connects: every acknowledged job a Redis crash lost is then
reported by id (:mod:`fluxes.store.acklog`).

A request is acknowledged only with (or after) the last commit of its
effects; a request the worker read but never acknowledged (it died) is
delivered again. Every commit that creates some of a request's jobs (or
forwards a control request) records them under ``{p}:req:<user>:<req>``
(:mod:`fluxes.domain.jm.request_progress`), in the same atomic step, kept for
24 hours: a request delivered again, or sent again by a client that retries
after a timeout (same user, same ``req``), creates only the jobs not yet
recorded and is answered with every id; a control request is not forwarded
twice. Ingest is idempotent on (user, request id) for that long, even with
the same request in two ingest workers' hands at once: a worker claims a
request before it reads its records, and each commit recording it checks the
claim (:mod:`fluxes.store.request_claims`); the other worker puts its copy
aside and answers it from the records once the claim is dropped.

Queue admin events (``{ns}:queues``) are read before each block of requests
is handled, so a submission never meets queue states older than an
enable/disable written before it.

Why one module: it is the door for user requests; decoding, the idempotence records, the
checks and the per-partition commits are methods of the one worker sharing a block's
state, while the checks themselves are pure modules (:mod:`fluxes.domain.jm.submission`,
:mod:`~fluxes.domain.jm.feasibility`, :mod:`~fluxes.domain.jm.request_progress`).
"""

from __future__ import annotations

import dataclasses
import functools
import grp
import hashlib
import os
import pwd
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.domain.accounting.limits import (
    ActiveIndex,
    HeldJob,
    Holdings,
    SubmitLedger,
    check_submit,
    journal_id,
    limits_active_jobs,
)
from fluxes.domain.jm import arrays, request_progress, update
from fluxes.domain.jm.content import job_content
from fluxes.domain.jm.feasibility import Feasibility, load_feasibility, unknown_target
from fluxes.domain.jm.queues import QueueState, fold_queue_events
from fluxes.domain.jm.submission import PreparedJob, prepare_job
from fluxes.domain.job import events as ev
from fluxes.domain.job.states import JobState
from fluxes.errors import FluxesError
from fluxes.formats.jobid import MAX_GENERATOR_ID, FluidGenerator
from fluxes.formats.jobid import MAX_ID as MAX_JOBID
from fluxes.formats.jobid import encode as encode_id
from fluxes.messages.bounds import one_line
from fluxes.proc import metrics
from fluxes.proc.gcpolicy import release_free_memory
from fluxes.store import acklog, jobhash
from fluxes.store.accounting import AccountsFollower, UsageStore
from fluxes.store.errors import ResponseError
from fluxes.store.eventstore import Batch, ClaimedError, CommitResult, EventStore
from fluxes.store.groups import ensure_group
from fluxes.store.instance import RESOURCES_DIGEST, Instance, instance_created
from fluxes.store.keys import GROUP_INGEST, Keys
from fluxes.store.request_claims import RequestClaims
from fluxes.store.resources import recorded_resources
from workers.base import Worker, not_the_input, overdelivered_reason

READ_COUNT = 500
#: Bytes of requests one read should bring at most: after a read of big requests the
#: next reads take fewer (down to one), so what a read holds stays near this.
READ_BYTES = 32 << 20
#: Requests of the first read (then doubled while they are small, up to READ_COUNT).
READ_FIRST = 16
#: Jobs handled (checked, held, committed) in one block at most: a read of many big
#: requests is handled in several blocks, so the ingest's memory stays bounded
#: (issue 26). A request with more jobs (up to [ingest] max-jobs-per-request) is
#: a block of its own.
BLOCK_JOBS = 10_000
BLOCK_MS = 1000
REPLY_TTL_MS = 60_000
#: Events per Lua call at most (two per job): a long script blocks Redis.
MAX_BATCH_EVENTS = 4000
#: Messages per jm:new / jm:ctl entry at most.
MESSAGES_PER_ENTRY = 2000
_ENCODER = msgspec.json.Encoder()
#: Requests another ingest worker left unacknowledged this long are taken over.
CLAIM_IDLE_MS = 10_000
CLAIM_EVERY_S = 5.0
#: How often the user list, configuration and resources are re-read (queue states:
#: every block).
REFRESH_S = 1.0
#: How long a request's progress record is kept: the window in which the same
#: request (user and ``req``) is never done twice, whether it was redelivered
#: (an ingest died before acknowledging it) or sent again by its client.
PROGRESS_TTL_MS = 24 * 3600 * 1000
#: How long a worker's claim on a request lasts (fluxes.store.request_claims): as long as
#: another ingest waits before taking over the requests a worker left unacknowledged.
REQUEST_CLAIM_TTL_MS = CLAIM_IDLE_MS
#: Jobs after which the handled requests' memory is given back to the OS (a trim costs
#: milliseconds: not after every small request).
TRIM_AFTER_JOBS = 1000
#: How soon a request another ingest worker holds is tried again.
DEFER_S = 0.05


@functools.lru_cache(maxsize=4096)
def user_groups(user: str, uid: int) -> tuple[str, ...]:
    """The UNIX groups of ``user`` on this machine (for RFC 33 allow-group), by name.

    A user unknown here (an ACL-only user) has none: allow-group then
    cannot admit them, only allow-user can.
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return ()
    if entry.pw_uid != uid:
        return ()  # a different account with the same name: trust nothing
    names = []
    for gid in os.getgrouplist(user, entry.pw_gid):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return tuple(names)


class IngestWorker(Worker):
    """Validates submissions and forwards user requests."""

    kind = "ingest"

    def __init__(self, instance: Instance, name: str | None = None) -> None:
        super().__init__(instance, name)
        self.store = EventStore(self.redis, self.keys)
        self.owner, self.owner_uid = instance.owner()
        self.users: dict[str, int] = {}
        self.config = InstanceConfig()
        self.queue_states: dict[str | None, QueueState] = {}
        self._queue_pos = "0-0"
        self._queue_log: list[Any] = []
        self._refreshed = 0.0
        self._config_text: bytes | None = None
        #: the recorded resources and configuration the inventory was loaded from
        self._inventory_source: tuple[bytes | None, bytes | None] | None = None
        #: None when the inventory cannot be loaded: the scheduler then judges alone
        self.feasibility: Feasibility | None = None
        self.fluids: FluidGenerator | None = None
        #: the commits of the block's full batches so far, by partition
        self._written: list[tuple[int, CommitResult]] = []
        #: per partition, the jobs each request has in the open batch, by record
        #: key: (the request's stream, [(index in the request, job id)])
        self._progress: dict[int, dict[str, tuple[str, list[request_progress.Pair]]]] = {}
        #: per partition, the control requests forwarded in the open batch (record keys)
        self._forwarded: dict[int, set[str]] = {}
        #: the digest of each request of the block, by record key
        self._digests: dict[str, str] = {}
        #: this process's claims on requests: a worker restarted under the same name takes
        #: its predecessor's over at once, and the new token fences the old one out
        self._claims = RequestClaims(self.redis, self.keys,
                                     f"{self.name}#{os.urandom(6).hex()}",
                                     REQUEST_CLAIM_TTL_MS)
        #: the requests of the block this worker claimed (record keys)
        self._held: set[str] = set()
        #: blocks of requests another ingest worker held, tried again from _retry_at on
        self._deferred: list[list[_Pending]] = []
        self._retry_at = 0.0
        self.submitted = 0
        #: requests per read (next_read_count): from READ_FIRST, so that even the first
        #: read of a burst of big requests holds at most READ_FIRST of them
        self._read_count = READ_FIRST
        self._pending = True
        self._claim_at = 0.0
        #: banks and associations (docs/accounting.md): once a bank exists, every job is
        #: charged to an association and max-active-jobs is enforced here
        self._accounts = AccountsFollower(self.redis, self.keys)
        self._ledger = SubmitLedger()
        #: which active counts the max-active-jobs checks need, for the current banks
        self._active_index: ActiveIndex | None = None
        #: the accounts and active holdings of the block being handled (None: no banks)
        self._charging: tuple[Accounts, Holdings] | None = None
        #: the job ids the block answers with, recorded before the answers go out
        self._answered: list[tuple[int, str, str]] = []
        self._acks: acklog.AckLog | None = None
        self._instance_created = ""

    def setup(self) -> None:
        """Get a FLUID generator id and read users, configuration and queue states."""
        self._pending = True
        self._deferred = []  # still pending in Redis: re-read with the others
        gen = int(self.redis.incr(self.keys.fluid_generators)) % (MAX_GENERATOR_ID + 1)
        self.fluids = FluidGenerator(gen)
        self.refresh(force=True)
        self.sync_queues()
        if self._acks is None:
            from fluxes.store.retention import worker_state_dir

            self._acks = acklog.AckLog(worker_state_dir(self.redis, self.keys), self.keys,
                                       self.name)
        # compared with Redis before the next request: Redis may have restarted
        self._acks.unchecked = True
        self._instance_created = instance_created(self.redis, self.keys)

    def status(self) -> dict[str, Any]:
        """Jobs accepted so far."""
        return {"submitted": self.submitted}

    def consumed(self) -> list[tuple[str, str]]:
        """Every user's submit stream, read through the ``ingest`` group."""
        return [(self.keys.submit(user), GROUP_INGEST) for user in self.users]

    # ------------------------------------------------------------ refresh

    def refresh(self, force: bool = False) -> None:
        """Re-read users, configuration and resources (cheap, once a second)."""
        now = time.monotonic()
        if not force and now - self._refreshed < REFRESH_S:
            return
        self._refreshed = now
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.users)
        pipe.hget(self.keys.instance, "config")
        # a recorded graph can be megabytes: its digest says whether to read it again
        pipe.hget(self.keys.instance, RESOURCES_DIGEST)
        changed = False
        users_raw, config_text, digest = pipe.execute()
        users = {self.owner: self.owner_uid}
        for name, uid in users_raw.items():
            users[name.decode()] = int(uid)
        new_users = set(users) - set(self.users)
        self.users = users
        for user in new_users:
            ensure_group(self.redis, self.keys.submit(user), GROUP_INGEST)
        if config_text != self._config_text:
            changed = True
            self._config_text = config_text
            try:
                self.config = InstanceConfig.from_toml(config_text) if config_text \
                    else InstanceConfig()
            except FluxesError as exc:
                self.log.error("bad configuration kept the old one", extra={"error": str(exc)})
        if changed:
            self.queue_states = fold_queue_events(self.config.queues, self._queue_log)
        resources = None
        if digest is None:  # recorded before digests: compare the resources themselves
            resources = digest = recorded_resources(self.redis, self.keys)
        if (digest, config_text) != self._inventory_source:
            if resources is None:
                resources = recorded_resources(self.redis, self.keys)
            self._inventory_source = (digest, config_text)
            self._load_inventory(resources)

    def _load_inventory(self, resources: bytes | None) -> None:
        """Build the feasibility check from the inventory the scheduler loads.

        Resources that cannot be read here (a ``resource.path`` file missing on
        this host, none configured) turn the check off rather than refuse
        every job: the scheduler still denies what it cannot run.
        """
        try:
            self.feasibility = load_feasibility(resources, self.config)
        except (ValueError, FluxesError) as exc:
            self.feasibility = None
            self.log.warning("jobs are not checked against the resources at submission",
                             extra={"error": str(exc)})

    def sync_queues(self) -> None:
        """Apply the queue admin events written since the last call (one XRANGE, usually empty).

        Called after requests are read and before they are handled: every
        admin event written before a request is then applied to it.
        """
        start = "(" + self._queue_pos if self._queue_pos != "0-0" else "-"
        entries = self.redis.xrange(self.keys.queues, min=start)
        if not entries:
            return
        for sid, fields in entries:
            self._queue_pos = sid.decode()
            try:
                self._queue_log.append(proto.load_queue_event(fields))
            except proto.MessageError:
                continue  # a malformed admin entry changes no state
        self.queue_states = fold_queue_events(self.config.queues, self._queue_log)

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """Read a block of requests from every user stream and handle them.

        After a (re)start the worker first re-reads requests delivered to it
        but never acknowledged (a previous incarnation under the same name
        died before committing them); now and then it also claims requests
        another ingest worker read and left idle (that worker died).
        """
        self.refresh()
        if self._acks is not None and self._acks.unchecked:
            self._check_acks()
        if self._deferred and time.monotonic() >= self._retry_at:
            deferred, self._deferred = self._deferred, []
            self.sync_queues()
            for block in deferred:
                self._handle_decoded(block, redelivered=False)
            return
        if self._pending:
            reply = self._next_pending()
            if reply:
                self.handle(reply, redelivered=True)
                return
            self._pending = False
        if time.monotonic() >= self._claim_at:
            self._claim_at = time.monotonic() + CLAIM_EVERY_S
            claimed = self._claim_idle()
            if claimed:
                self.handle(claimed, redelivered=True)
                return
        streams = {self.keys.submit(user): ">" for user in self.users}
        # requests put aside are tried again soon: the read must not wait longer
        wait_ms = max(1, min(BLOCK_MS, int(DEFER_S * 1000))) if self._deferred else BLOCK_MS
        reply = self.redis.xreadgroup(GROUP_INGEST, self.name, streams,
                                      count=self._read_count, block=wait_ms)
        if not reply:
            return
        self._read_count = next_read_count(self._read_count, _reply_bytes(reply))
        self.handle(reply)

    def _next_pending(self) -> list[Any]:
        """The oldest request of one user's stream this worker read and never
        acknowledged, alone (read again, its delivery count grows by one, and only
        its own: should it kill the worker again, no other request pays for it).

        One pipelined XPENDING over every user's stream finds one that has any.
        """
        streams = [self.keys.submit(u) for u in self.users]
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xpending_range(stream, GROUP_INGEST, min="-", max="+", count=1,
                                consumername=self.name)
        for stream, rows in zip(streams, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(rows, ResponseError) or not rows:
                continue
            reply = self.redis.xreadgroup(GROUP_INGEST, self.name, {stream: "0"}, count=1)
            if any(entries for _s, entries in reply or []):
                return list(reply)
        return []

    def _claim_idle(self) -> list[Any]:
        """Requests other consumers have held unacknowledged for CLAIM_IDLE_MS."""
        out = []
        for user in self.users:
            stream = self.keys.submit(user)
            _next, entries, *_ = self.redis.xautoclaim(
                stream, GROUP_INGEST, self.name, min_idle_time=CLAIM_IDLE_MS,
                start_id="0-0", count=READ_COUNT)
            entries = [(sid, fields) for sid, fields in entries if fields]
            if entries:
                out.append((stream.encode(), entries))
        return out

    def handle(self, reply: list[Any], redelivered: bool = False) -> None:
        """Process requests of several users in one pass, one commit per partition (the door).

        Each entry is decoded in one bounded step; one that fails is
        dead-lettered and acknowledged in one MULTI/EXEC, with an error reply
        when its ``req`` can be read. Should handling the block raise
        (anything but a lost connection), nothing of it was committed (the
        commit is the last thing it does): the requests are handled again one
        by one, and the one that raises is refused the same way.

        ``redelivered`` requests were read before (by a worker that died
        before acknowledging them): their progress records are read first, so
        jobs already created are answered, not created again.
        """
        self.sync_queues()
        requests: list[_Pending] = []
        orphans: dict[str, list[bytes]] = {}
        for stream_b, entries in reply:
            stream = stream_b.decode()
            user = stream.rsplit(":", 1)[1]
            uid = self.users.get(user)
            refused: list[tuple[bytes, Mapping[bytes, bytes], str]] = []
            answers: list[tuple[str, bytes, int]] = []
            # read before: those delivered too often are refused before they are handled
            over = self.overdelivered(stream, GROUP_INGEST, self.name, entries) \
                if redelivered and uid is not None else {}
            for msg_id, fields in entries:
                if uid is None:
                    # a user removed meanwhile: nothing to answer to
                    orphans.setdefault(stream, []).append(msg_id)
                    continue
                try:
                    if msg_id in over:
                        raise proto.MessageError(overdelivered_reason(over[msg_id]))
                    request = proto.decode_request(fields, self.max_request_bytes)
                except proto.MessageError as exc:
                    refused.append((msg_id, fields, str(exc)))
                    req = proto.request_id(fields, self.max_request_bytes)
                    if req is not None:
                        answers.append((self.keys.reply(user, req[:64]), proto.encode_reply(
                            proto.Reply(errors=[str(exc)])), REPLY_TTL_MS))
                    continue
                requests.append(_Pending(stream, msg_id, fields, user, uid, request))
            self.refuse(stream, GROUP_INGEST, refused, answers)
        self._ack_orphans(orphans)
        if requests:
            self._handle_decoded(requests, redelivered)

    def _handle_decoded(self, requests: list[_Pending], redelivered: bool) -> None:
        """Handle decoded requests in blocks of at most BLOCK_JOBS jobs (a request with
        more is a block of its own): what a block holds is bounded, however many
        requests one read brought (see :meth:`_handle_bounded`)."""
        block: list[_Pending] = []
        jobs = 0
        for pending in requests:
            size = _job_count(pending.request)
            if block and jobs + size > BLOCK_JOBS:
                self._handle_bounded(block, redelivered)
                block, jobs = [], 0
            block.append(pending)
            jobs += size
        if block:
            self._handle_bounded(block, redelivered)
        if sum(_job_count(p.request) for p in requests) >= TRIM_AFTER_JOBS:
            # what the blocks held goes back to the OS, not only to the C heap
            release_free_memory()

    def _handle_bounded(self, requests: list[_Pending], redelivered: bool) -> None:
        """Handle decoded requests as one block; should that raise, one by one, refusing
        the one that raises. A commit refused because another ingest took some of the
        requests over puts them aside, one per block, to be tried again."""
        try:
            self._handle_block(requests, redelivered)
        except ClaimedError:
            self._defer(requests)
        except Exception as exc:
            if not_the_input(exc):
                raise
            if len(requests) == 1:
                self._refuse_raised(requests[0], exc)
                return
            self.log.warning("a block of requests failed: handling them one by one",
                             extra={"error": f"{type(exc).__name__}: {exc}"})
            for pending in requests:
                try:
                    # jobs a partial commit created are recorded: not created twice
                    self._handle_block([pending], redelivered=True)
                except ClaimedError:
                    self._defer([pending])
                except Exception as err:
                    if not_the_input(err):
                        raise
                    self._refuse_raised(pending, err)

    def _defer(self, requests: list[_Pending]) -> None:
        """Put requests aside (unacknowledged, unanswered) to be tried again in DEFER_S:
        another ingest holds them (or took them over), and they are answered once its
        records say what it did. Each goes in a block of its own, so that no block
        outlives the claims it takes again and again."""
        aside = {(p.stream, p.msg_id) for block in self._deferred for p in block}
        self._deferred += [[p] for p in requests if (p.stream, p.msg_id) not in aside]
        self._retry_at = time.monotonic() + DEFER_S

    def _ack_orphans(self, orphans: dict[str, list[bytes]]) -> None:
        """Acknowledge the requests of users removed meanwhile (stream -> ids)."""
        if orphans:
            pipe = self.redis.pipeline(transaction=False)
            for stream, ids in orphans.items():
                pipe.xack(stream, GROUP_INGEST, *ids)
            pipe.execute()

    def _refuse_raised(self, pending: _Pending, exc: Exception) -> None:
        """Dead-letter and acknowledge a request whose handling raised, and answer it."""
        reason = f"{type(exc).__name__}: {exc}"
        # what it committed is recorded: another worker may take it at once
        self._claims.drop([_record_name(pending.user, pending.request)])
        answer = proto.encode_reply(proto.Reply(errors=[
            f"request refused: {one_line(reason)}"]))
        self.refuse(pending.stream, GROUP_INGEST, [(pending.msg_id, pending.fields, reason)],
                    [(self.keys.reply(pending.user, pending.request.req[:64]), answer,
                      REPLY_TTL_MS)])

    @property
    def max_request_bytes(self) -> int:
        """Largest request read: room for a few jobs of the largest jobspec allowed."""
        return max(proto.MAX_REQUEST_BYTES, 4 * self.config.ingest.max_jobspec_bytes)

    def _handle_block(self, requests: list[_Pending], redelivered: bool) -> None:
        """Check, create and forward the decoded ``requests``; commit, acknowledge, answer.

        Requests seen before (their records say so: redelivered, or sent again
        by their client) create only the jobs not yet created, and control
        requests are not forwarded again; a request that comes twice in one
        block is handled once and both copies are answered alike.
        """
        keys = self.keys
        self._written = []
        self._progress = {}
        self._forwarded = {}
        self._answered = []
        requests = self._claim(requests)
        if not requests:
            return
        batches: dict[int, Batch] = {}
        later_acks: dict[str, list[bytes]] = {}
        new_msgs: dict[int, list[proto.New]] = {}
        replies: list[tuple[str, bytes]] = []
        forwards: dict[int, list[proto.Control]] = {}
        for pending in requests:
            later_acks.setdefault(pending.stream, []).append(pending.msg_id)
        first: dict[str, int] = {}
        copies: dict[int, int] = {}  # a later copy of a request -> the first in this block
        self._digests = {}
        for n, pending in enumerate(requests):
            name = _record_name(pending.user, pending.request)
            copies[n] = first.setdefault(name, n)
            if copies[n] == n:
                self._digests[name] = request_digest(pending.request)
        firsts = [n for n in copies if copies[n] == n]
        seen, reused = self._seen_before(requests, firsts)
        # every job of the block is checked first, so that the dependency
        # targets of all of them are looked up in one round trip
        checked: dict[int, _Checked] = {}
        self._charging = None
        submitters = {requests[n].user for n in firsts
                      if isinstance(requests[n].request, proto.SubmitJobs)}
        if submitters:
            self._load_charging(submitters)
        for n in firsts:
            submit = requests[n].request
            if isinstance(submit, proto.SubmitJobs) and n not in reused:
                checked[n] = self._check_jobs(submit, requests[n].user, requests[n].uid,
                                              seen[n])
        existing = self._existing_targets(checked.values())
        answers: dict[int, bytes] = {}
        for n, pending in enumerate(requests):
            request = pending.request
            reply_key = keys.reply(pending.user, request.req[:64])
            if copies[n] != n and request_digest(request) != self._digests[
                    _record_name(pending.user, request)]:
                answer = proto.encode_reply(proto.Reply(errors=[_reused(request)]))
            elif copies[n] != n:
                answer = answers[copies[n]]
            elif n in reused:
                answer = proto.encode_reply(proto.Reply(errors=[reused[n]]))
            elif isinstance(request, proto.SubmitJobs):
                answer = proto.encode_reply(self._create(
                    request, pending.user, pending.uid, checked[n], existing, batches,
                    new_msgs))
            elif seen[n] is not None:
                answer = proto.encode_reply(proto.Reply(errors=[
                    f"request {request.req[:64]!r} was handled already: not done twice"]))
            else:
                answer = self._forward_answer(pending, reply_key, forwards)
            answers[n] = answer
            if answer:
                replies.append((reply_key, answer))
        self._commit(batches, new_msgs, replies, forwards, later_acks)

    def _claim(self, requests: list[_Pending]) -> list[_Pending]:
        """Claim the requests (fluxes.store.request_claims) before their records are read:
        those another ingest worker holds are put aside, the others returned."""
        names = list(dict.fromkeys(_record_name(p.user, p.request) for p in requests))
        self._held = self._claims.take(names)
        if len(self._held) == len(names):
            return requests
        held = self._held
        self._defer([p for p in requests if _record_name(p.user, p.request) not in held])
        return [p for p in requests if _record_name(p.user, p.request) in held]

    def _forward_answer(self, pending: _Pending, reply_key: str,
                        forwards: dict[int, list[proto.Control]]) -> bytes:
        """Forward a control request to the job managers; the ingest's own answer (an
        error, a dry run's result), or nothing when the job manager will answer."""
        request = pending.request
        error = self._forward(request, pending.uid, reply_key, forwards)
        if isinstance(error, proto.Reply):
            return proto.encode_reply(error)
        if error:
            return proto.encode_reply(proto.Reply(errors=[error]))
        for part in _control_parts(self.keys, request):
            self._forwarded.setdefault(part, set()).add(_record_name(pending.user, request))
        return b""

    def _seen_before(self, requests: list[_Pending], firsts: list[int]
                     ) -> tuple[dict[int, dict[int, int] | None], dict[int, str]]:
        """For the requests numbered ``firsts``: what was done for each before (index ->
        jobs created, or None), and why some cannot be done (index -> reason)."""
        seen: dict[int, dict[int, int] | None] = {}  # what was done for it before
        reused: dict[int, str] = {}  # why it cannot be done
        for n, got in zip(firsts, self._recorded([requests[n] for n in firsts]), strict=True):
            if isinstance(got, str):
                reused[n] = got
                seen[n] = None
            else:
                seen[n] = got
        return seen, reused

    def _recorded(self, requests: list[_Pending]) -> list[dict[int, int] | str | None]:
        """What the records of each request say: None when it was never seen, the jobs
        already created (index -> id) when it was, or why it cannot be done (its
        request id was used for another request).

        One pipelined LRANGE per request and partition (each partition's
        commits record that partition's jobs).
        """
        keys = self.keys
        if not requests:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for pending in requests:
            name = _record_name(pending.user, pending.request)
            for part in range(keys.partitions):
                pipe.lrange(keys.request_done(part, name), 0, -1)
        results = pipe.execute()
        out: list[dict[int, int] | str | None] = []
        for k, pending in enumerate(requests):
            blobs = [b for lst in results[k * keys.partitions:(k + 1) * keys.partitions]
                     for b in lst]
            request = pending.request
            if not blobs:
                out.append(None)
                continue
            njobs = _job_count(request) if isinstance(request, proto.SubmitJobs) else 0
            try:
                out.append(request_progress.merge(blobs, njobs, request_digest(request)))
            except request_progress.ReusedRequestId:
                # a client that reused a request id for another request: doing it
                # could create jobs twice or answer with another request's ids
                self.log.warning("request id reused", extra={"user": pending.user,
                                                             "req": request.req[:64]})
                out.append(_reused(request))
            except ValueError as exc:
                # only the ingest writes these: say so loudly, and do the request
                # again rather than never answer it
                self.log.error("unreadable progress record", extra={"error": str(exc)})
                out.append(None)
        return out

    def _submit(self, request: proto.SubmitJobs, user: str, uid: int,
                batches: dict[int, Batch], new_msgs: dict[int, list[proto.New]],
                done: Mapping[int, int] | None = None) -> proto.Reply:
        """Check and create one request's jobs; jobs in ``done`` (index -> id) exist already."""
        checked = self._check_jobs(request, user, uid, done)
        return self._create(request, user, uid, checked, self._existing_targets([checked]),
                            batches, new_msgs)

    def _check_jobs(self, request: proto.SubmitJobs, user: str, uid: int,
                    done: Mapping[int, int] | None = None) -> _Checked:
        """Check a request's jobs (no Redis); jobs in ``done`` (index -> id) exist already."""
        done = done or {}
        limits = self.config.ingest
        try:
            ids = arrays.array_ids(request)
        except ValueError as exc:
            return _Checked(proto.Reply(errors=[one_line(str(exc))]))
        count = len(request.jobs) if ids is None else len(ids)
        if not count:
            return _Checked(proto.Reply(errors=["submit request has no jobs"]))
        if count > limits.max_jobs_per_request and not done:
            # before an array is expanded: its copies are never made
            return _Checked(proto.Reply(errors=[f"request has {count} jobs, the limit is "
                                                f"{limits.max_jobs_per_request}"]))
        # an array's copies are made one at a time, as they are checked
        jobs = request.jobs if ids is None else arrays.copies(request.jobs[0], ids,
                                                             request.cc_var)
        out = _Checked()
        cache: dict[bytes, PreparedJob | str] = {}
        for index, item in enumerate(jobs):
            created = done.get(index)
            if created is not None:
                out.results.append({"id": created})
                continue
            # identical jobspecs in one request (bulk submission) are checked once
            cache_key = _ENCODER.encode(item)
            found = cache.get(cache_key)
            if found is None:
                try:
                    found = prepare_job(_item_dict(item), uid, user, self.config,
                                        self.queue_states,
                                        groups=user_groups(user, uid),
                                        is_owner=uid == self.owner_uid,
                                        feasibility=self.feasibility)
                except (ValueError, FluxesError) as exc:
                    found = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                cache[cache_key] = found
            if not isinstance(found, str) and self._charging is not None:
                try:
                    found = self._charge(found, user, uid)
                except (ValueError, FluxesError) as exc:
                    found = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(found, str):
                out.results.append({"error": found})
            else:
                out.prepared.append((index, found))
                out.results.append({})
        return out

    def _load_charging(self, users: set[str]) -> None:
        """Read the banks (new admin entries only) and, once a bank exists, the active
        jobs of the associations and banks whose max-active-jobs limits ``users``
        submit under (the fold's counts plus the jobs created since)."""
        accounts = self._accounts.refresh()
        if not accounts.enabled:
            return
        if not limits_active_jobs(accounts):
            # nothing caps active jobs: no need to read every active job (nor to keep
            # the jobs created lately, which only such a count needs)
            self._ledger.clear()
            self._charging = (accounts, Holdings())
            return
        index = self._active_index
        if index is None or index.accounts is not accounts:
            index = self._active_index = ActiveIndex(accounts)
        counts, positions = UsageStore(self.redis, self.keys).active_counts(
            index.wanted(users))
        self._charging = (accounts, self._ledger.holdings(accounts, counts, positions,
                                                          time.time(), index))

    def _charge(self, job: PreparedJob, user: str, uid: int) -> PreparedJob:
        """The association ``job`` is charged to, in its submit extras (``bank``); a
        PolicyError when the user may not submit it (no association, not in the bank,
        max-active-jobs reached). The job counts as active from here on."""
        assert self._charging is not None
        accounts, held = self._charging
        info = job.info
        want = info.get("bank")
        pending = HeldJob(uid, want if isinstance(want, str) else None, False,
                          _int(info.get("nnodes")), _int(info.get("ncores")))
        project = info.get("project")
        assoc = check_submit(accounts, held, user, pending, job.queue,
                             project if isinstance(project, str) else None)
        if assoc is None:
            return job
        held.add(accounts, pending._replace(bank=assoc.bank))
        return dataclasses.replace(job, info={
            **info, "bank": assoc.bank,
            "project": project if isinstance(project, str) else assoc.default_project})

    def _existing_targets(self, checked: Iterable[_Checked]) -> set[int]:
        """Which of the jobs named by the checked jobs' dependencies exist.

        One pipelined EXISTS per distinct target, each on the target's job
        hash (in its own partition), in one round trip (one per slot on a
        cluster); none at all when no job names another.
        """
        targets = sorted({dep.target for c in checked for _i, job in c.prepared
                          for dep in job.targets if dep.target is not None})
        if not targets:
            return set()
        found = jobhash.JobHashes(self.redis, self.keys).exists(targets)
        return {target for target, there in zip(targets, found, strict=True) if there}

    def _create(self, request: proto.SubmitJobs, user: str, uid: int, checked: _Checked,
                existing: set[int], batches: dict[int, Batch],
                new_msgs: dict[int, list[proto.New]]) -> proto.Reply:
        """Give the checked jobs ids and add them to the batches; the request's answer.

        A job whose dependency names a job not in ``existing`` is refused
        here, and nothing is stored for it.
        """
        if checked.answer is not None:
            return checked.answer
        results = checked.results
        prepared: list[PreparedJob] = []
        for index, job in checked.prepared:
            missing = unknown_target(job.targets, existing) if job.targets else None
            if missing is not None:
                results[index] = {"error": missing}
            else:
                prepared.append(job)
        assert self.fluids is not None
        ids = iter(self.fluids.next_n(len(prepared)))
        now = time.time()
        keys = self.keys
        pending = iter(prepared)
        stream, name = keys.submit(user), _record_name(user, request)
        for index, result in enumerate(results):
            if result:
                continue  # refused, or created before
            job = next(pending)
            jobid = next(ids)
            result["id"] = jobid
            part = keys.partition_of(jobid)
            if self._charging is not None:
                bank = job.info.get("bank")
                self._ledger.created(jobid, part, (uid, bank if isinstance(bank, str) else ""),
                                     now)
            batch = batches.get(part)
            if batch is None or batch.events >= MAX_BATCH_EVENTS:
                if batch is not None:
                    self._commit_full(part, batch, new_msgs.pop(part, []))
                batch = batches[part] = self.store.batch(part)
            progress = self._progress.setdefault(part, {})
            entry = progress.get(name)
            if entry is None:
                entry = progress[name] = (stream, [])
            entry[1].append((index, jobid))
            content = job.content or job_content(job.jobspec, job.jobspec_full)
            jobhash.create(batch, keys, jobid, owner=uid, urgency=job.urgency,
                           content=content, queue=job.queue, request=job.request)
            submit = ev.Submit(timestamp=now, urgency=job.urgency, userid=uid, flags=job.flags)
            batch.append(keys.eventlog(jobid), jobid, 0, [submit, ev.Validate(timestamp=now)],
                         [job.info, None], owner=uid)
            new_msgs.setdefault(part, []).append(proto.New(
                id=jobid, userid=uid, urgency=job.urgency, flags=job.flags, t_submit=now,
                info=job.info, request=job.request))
        self.submitted += len(prepared)
        self._answered += [(r["id"], user, request.req[:64]) for r in results if "id" in r]
        return proto.Reply(jobs=[proto.JobResult(**r) for r in results])

    def _commit_full(self, part: int, batch: Batch, msgs: list[proto.New]) -> None:
        """Commit a full batch at once, in its own Lua call (scripts block Redis), with the
        records of the jobs it creates: a block holds one batch per partition at most
        (issue 26: a 10,000-job block held five, ~8 KB of arguments per job)."""
        self._record_progress(part, batch)
        _add_messages(batch, self.keys.jm_new(part), msgs, proto.NEW_JOBS)
        [result] = self.store.commit_many([batch])
        metrics.EVENTS_INGEST.inc(result.events)
        self._written.append((part, result))

    def _record_progress(self, part: int, batch: Batch) -> None:
        """Add to ``batch`` the records of the jobs it creates, per request, kept
        PROGRESS_TTL_MS: even a request the batch acknowledges may be sent again by
        its client."""
        keys = self.keys
        for name, (_stream, pairs) in self._progress.pop(part, {}).items():
            batch.claimed(keys.request_claim(part, name), self._claims.token)
            batch.push_reply(keys.request_done(part, name), request_progress.encode(
                pairs, self._digests.get(name)), PROGRESS_TTL_MS)

    def _record_forwarded(self, part: int, batch: Batch) -> None:
        """Add to ``batch`` (the one forwarding them) the records of the control requests
        it forwards: an empty record says the request was done."""
        keys = self.keys
        for name in sorted(self._forwarded.pop(part, set())):
            batch.claimed(keys.request_claim(part, name), self._claims.token)
            batch.push_reply(keys.request_done(part, name), request_progress.encode(
                [], self._digests.get(name)), PROGRESS_TTL_MS)

    def _forward(self, request: proto.Request, uid: int, reply_key: str,
                 forwards: dict[int, list[proto.Control]]) -> str | proto.Reply | None:
        """Route a control request to the job manager(s); an error line if it cannot be,
        or the ingest's own answer when no job manager needs to see it."""
        keys = self.keys
        match request:
            case proto.SetUrgency(id=jobid, urgency=urgency):
                forwards.setdefault(keys.partition_of(jobid), []).append(proto.UrgencyRequest(
                    id=jobid, urgency=urgency, userid=uid, reply=reply_key))
                return None
            case proto.RaiseOnJobs(type=etype) if not etype:
                return "raise request needs a type"
            case proto.KillAll():
                return self._forward_killall(request, uid, reply_key, forwards)
            case proto.UpdateJob():
                return self._forward_update(request, uid, reply_key, forwards)
            case proto.CancelJobs(ids=ids) | proto.RaiseOnJobs(ids=ids) | proto.SignalJobs(ids=ids):
                pass
            case _:
                return "submit requests are not forwarded"
        by_part: dict[int, list[int]] = {}
        for jobid in ids:
            by_part.setdefault(keys.partition_of(jobid), []).append(jobid)
        for part, part_ids in by_part.items():
            msg: proto.Control
            if isinstance(request, proto.CancelJobs):
                msg = proto.CancelRequest(ids=part_ids, userid=uid, note=request.note,
                                          reply=reply_key)
            elif isinstance(request, proto.SignalJobs):
                msg = proto.SignalRequest(ids=part_ids, userid=uid, signal=request.signal,
                                          reply=reply_key)
            else:
                assert isinstance(request, proto.RaiseOnJobs)
                msg = proto.RaiseRequest(ids=part_ids, userid=uid, type=request.type,
                                         severity=request.severity, note=request.note,
                                         reply=reply_key)
            forwards.setdefault(part, []).append(msg)
        return None

    def _forward_killall(self, request: proto.KillAll, uid: int, reply_key: str,
                         forwards: dict[int, list[proto.Control]]) -> str | None:
        """Send a ``job killall`` to every partition's job manager (each answers for
        its jobs); only the instance owner may name another user or all of them."""
        target = -1 if request.all_users else uid if request.user is None else request.user
        if uid not in (target, self.owner_uid):
            return "permission denied: only the instance owner may signal other users' jobs"
        for part in range(self.keys.partitions):
            forwards.setdefault(part, []).append(proto.KillAllRequest(
                userid=uid, target=target, signal=request.signal, dry_run=request.dry_run,
                reply=reply_key))
        return None

    def _forward_update(self, request: proto.UpdateJob, uid: int, reply_key: str,
                        forwards: dict[int, list[proto.Control]]) -> str | proto.Reply | None:
        """Check a ``fluxes update`` against the job as stored, as at submission, and
        send it to the job's job manager; an error line when it cannot be done, the
        answer itself for a dry run."""
        jobid = request.id
        shown = encode_id(jobid, "f58") if 0 <= jobid <= MAX_JOBID else str(jobid)
        stored = jobhash.JobHashes(self.redis, self.keys).get(jobid)
        try:
            job = self.store.replay_job(jobid) if stored is not None else None
        except ValueError as exc:  # an eventlog replay refuses: not this request's fault
            return f"{shown}: its eventlog cannot be read: {str(exc)[:200]}"
        if stored is None or job is None or not job.state & JobState.ACTIVE \
                or stored.owner is None:
            return f"{shown}: job is inactive or unknown"
        is_owner = uid == self.owner_uid
        if uid != stored.owner and not is_owner:
            return f"{shown}: permission denied"
        if not is_owner and update.IMMUTABLE_FLAG in job.set_flags:
            return f"{shown}: job is immutable due to previous instance owner update"
        running = not job.state & JobState.PENDING
        if running and not is_owner:
            return f"{shown}: only the instance owner may update a running job"
        if running and job.state is not JobState.RUN:
            return f"{shown}: job is finishing: it can no longer be updated"
        owner_name = next((n for n, u in self.users.items() if u == stored.owner), None)
        try:
            submitted = orjson.loads(stored.jobspec or b"{}")
            effective = orjson.loads(stored.effective_jobspec or b"{}")
            plan = update.plan_update(
                submitted, effective, job.jobspec_updates, request.updates, running=running,
                config=self.config, userid=stored.owner, username=owner_name,
                groups=user_groups(owner_name, stored.owner) if owner_name else (),
                queue_states=self.queue_states, check_limits=not is_owner or uid == stored.owner,
                feasibility=self.feasibility)
        except (ValueError, FluxesError) as exc:
            return f"{shown}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        if request.dry_run:
            return proto.Reply(ok=[jobid], updates=plan.updates)
        forwards.setdefault(self.keys.partition_of(jobid), []).append(proto.UpdateRequest(
            id=jobid, userid=uid, updates=plan.updates, base=dict(job.jobspec_updates),
            base_expiration=job.expiration, request=plan.request,
            immutable=is_owner and uid != stored.owner, reply=reply_key))
        return None

    def _commit(self, batches: dict[int, Batch], new_msgs: dict[int, list[proto.New]],
                replies: list[tuple[str, bytes]], forwards: dict[int, list[proto.Control]],
                acks: dict[str, list[bytes]]) -> None:
        """One commit per partition; replies and acks join it when they share its slot."""
        keys = self.keys
        # the full batches went out first (_commit_full): the replies come after
        written, self._written = self._written, []
        for part, msgs in new_msgs.items():
            _add_messages(batches[part], keys.jm_new(part), msgs, proto.NEW_JOBS)
        for part, ctl in forwards.items():
            if part not in batches:
                batches[part] = self.store.batch(part)
            _add_messages(batches[part], keys.jm_ctl(part), ctl, proto.CONTROL)
        if not batches:
            batches[0] = self.store.batch(0)
        anchor = keys.journal(min(batches))
        last = batches[min(batches)]
        for part in list(self._progress):
            self._record_progress(part, batches[part])
        for part in list(self._forwarded):
            self._record_forwarded(part, batches[part])
        token = self._claims.token
        for part, batch in batches.items():
            # the claims end with the last commits, the very ones whose records they fence
            for name in sorted(self._held):
                batch.claimed(keys.request_claim(part, name), token, drop=True)
        leftover_replies = []
        for key, data in replies:
            if keys.same_slot(key, anchor) and self._acks is None:
                last.push_reply(key, data, REPLY_TTL_MS)
            else:
                leftover_replies.append((key, data))
        leftover_acks: dict[str, list[bytes]] = {}
        for stream, ids in acks.items():
            # with an acknowledgement log, requests are acknowledged with their answers,
            # after the log: a worker dying before that leaves them to be answered again
            if keys.same_slot(stream, anchor) and self._acks is None:
                last.xack(stream, GROUP_INGEST, ids)
            else:
                leftover_acks[stream] = ids
        committed = [(p, b) for p, b in batches.items() if b]
        results = self.store.commit_many([b for _p, b in committed])
        metrics.EVENTS_INGEST.inc(sum(r.events for r in results))
        self._claims.drop(self._held, set(range(keys.partitions)) - set(batches))
        self._held = set()
        written += zip([p for p, _b in committed], results, strict=True)
        self._committed(written)
        self._record_acks(written)
        self._send_leftovers(leftover_replies, leftover_acks)

    def _committed(self, written: list[tuple[int, CommitResult]]) -> None:
        """Tell the ledger where the jobs it waits to see folded were journaled: once every
        batch of the block is written, each partition's last journal id (a job of an
        earlier batch is at or before it too)."""
        if not self._ledger:
            return
        last: dict[int, tuple[tuple[int, int], str]] = {}
        for part, result in written:
            if result.journal_id:
                at = journal_id(result.journal_id)
                if part not in last or at > last[part][0]:
                    last[part] = (at, result.journal_id)
        for part, (_at, text) in last.items():
            self._ledger.committed(part, text)

    def _check_acks(self) -> None:
        """Compare the acknowledgement log with Redis (it may have lost jobs; they are
        reported) before the first request after a (re)connection."""
        assert self._acks is not None
        try:
            self._acks.check(self.redis, self.log)
        except OSError as exc:
            self._acks.unchecked = False
            self.log.error("the acknowledgement log cannot be read: jobs a Redis crash "
                           "lost may go unreported", extra={"error": str(exc)})

    def _record_acks(self, written: list[tuple[int, CommitResult]]) -> None:
        """Record, fdatasync'd, the job ids the block answers with, before it answers."""
        if self._acks is None or not self._answered:
            return
        ends: dict[int, str] = {}
        for part, result in written:
            if result.journal_id and (part not in ends or acklog.id_key(result.journal_id)
                                      > acklog.id_key(ends[part])):
                ends[part] = result.journal_id
        missing = {self.keys.partition_of(j) for j, _u, _r in self._answered} - set(ends)
        if missing:  # jobs created by an earlier block: the journal's end is after them
            ends.update(acklog.journal_ends(self.redis, self.keys, missing))
        acked = [acklog.Acked(j, self.keys.partition_of(j),
                              ends[self.keys.partition_of(j)], user, req)
                 for j, user, req in self._answered]
        self._answered = []
        try:
            self._acks.record(self._instance_created, acked)
        except OSError as exc:
            # answering anyway: a job is worth more than the report of its loss
            self.log.error("the acknowledgement log cannot be written: jobs a Redis crash "
                           "loses may go unreported", extra={"error": str(exc)})

    def _send_leftovers(self, replies: list[tuple[str, bytes]],
                        acks: dict[str, list[bytes]]) -> None:
        """Send the replies and acks that could not join a commit (another slot)."""
        if replies or acks:
            pipe = self.redis.pipeline(transaction=False)
            for key, data in replies:
                pipe.rpush(key, data)
                pipe.pexpire(key, REPLY_TTL_MS)
            for stream, ids in acks.items():
                pipe.xack(stream, GROUP_INGEST, *ids)
            pipe.execute()


@dataclass(slots=True)
class _Pending:
    """A decoded request and where it came from."""

    stream: str
    msg_id: bytes
    fields: Mapping[bytes, bytes]
    user: str
    uid: int
    request: proto.Request


@dataclass(slots=True)
class _Checked:
    """A submit request after its jobs were checked: a request-wide refusal
    (``answer``), or per job a placeholder or its answer (``results``) and the
    jobs that passed, by index (``prepared``)."""

    answer: proto.Reply | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    prepared: list[tuple[int, PreparedJob]] = field(default_factory=list)


def _record_name(user: str, request: proto.UserRequest) -> str:
    """The name of a request's progress records: request ids are only unique per user."""
    return f"{user}:{request.req[:64]}"


def request_digest(request: proto.Request) -> str:
    """A digest of a request as decoded (the same request, sent again, has the same one),
    which its progress records keep: a request id used again for another request is
    refused rather than answered with the first one's jobs."""
    return hashlib.blake2b(_ENCODER.encode(request), digest_size=12).hexdigest()


def _reused(request: proto.Request) -> str:
    """The answer to a request whose id was used for another request."""
    return (f"request id {request.req[:64]!r} was used for another request within 24 "
            "hours: send it with a new one")


def _control_parts(keys: Keys, request: proto.Request) -> set[int]:
    """The partitions a control request goes to (each gets its record): those of the
    job ids it names, or all of them (``job killall``)."""
    if isinstance(request, proto.KillAll):
        return set(range(keys.partitions))
    if isinstance(request, proto.SetUrgency):
        ids = [request.id]
    elif isinstance(request, proto.CancelJobs | proto.RaiseOnJobs | proto.SignalJobs):
        ids = list(request.ids)
    elif isinstance(request, proto.UpdateJob):
        ids = [request.id]
    else:
        ids = []
    return {keys.partition_of(j) for j in ids}


def next_read_count(count: int, got_bytes: int) -> int:
    """Requests to read next, after a read of ``count`` that brought ``got_bytes``:
    scaled down to bring about READ_BYTES when it brought more, doubled (up to
    READ_COUNT) while twice as many would still fit."""
    if got_bytes > READ_BYTES:
        return max(1, count * READ_BYTES // got_bytes)
    if got_bytes * 2 <= READ_BYTES:
        return min(READ_COUNT, count * 2)
    return count


def _reply_bytes(reply: list[Any]) -> int:
    """Bytes of the request fields an XREADGROUP brought."""
    return sum(len(value) for _stream, entries in reply for _sid, fields in entries
               if fields for value in fields.values())


def _job_count(request: proto.Request) -> int:
    """How many jobs a request stands for (a control request: 1)."""
    return arrays.job_count(request) if isinstance(request, proto.SubmitJobs) else 1


def _int(value: Any) -> int:
    """A count from submit extras (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _item_dict(item: proto.SubmitItem) -> dict[str, Any]:
    """A submit item as :func:`~fluxes.domain.jm.submission.prepare_job` reads it."""
    out: dict[str, Any] = {"flags": item.flags}
    if item.yaml is not None:
        out["yaml"] = item.yaml
    if item.jobspec is not None:
        out["jobspec"] = item.jobspec
    if item.urgency is not None:
        out["urgency"] = item.urgency
    return out


def _add_messages(batch: Batch, stream: str, msgs: list[Any],
                  channel: proto.Channel[Any]) -> None:
    """XADD ``msgs`` to ``stream`` in entries its reader's bounds accept."""
    for entry in proto.encode_chunks(msgs, 0, MESSAGES_PER_ENTRY, channel.max_bytes):
        batch.xadd(stream, entry)


def main(instance: Instance) -> int:
    """Run an ingest worker until SIGTERM."""
    return IngestWorker(instance).run()

