"""The ingest worker: the gateway for every user request.

Each user writes requests to their own stream ``{ns}:submit:<user>`` (Redis
ACLs enforce that in multi-user mode), so who asked is known from the stream,
never from what the client claims. Requests (field ``d``, JSON):

* ``{"t": "submit", "req": ID, "jobs": [{"jobspec": {...} | "yaml": "...", "urgency": N,
  "flags": N}, ...]}``: checked (:mod:`fluxes.domain.ingest.checks`), given FLUIDs, stored
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
  job manager of each partition involved, with the authenticated userid
  (:mod:`fluxes.domain.ingest.routing`); the job manager answers the client directly.

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
enable/disable written before it. Every Redis call is a method of
:mod:`fluxes.store.ingest`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.ingest import checks, routing
from fluxes.domain.ingest import requests as rq
from fluxes.domain.ingest.checks import Checked
from fluxes.domain.jm import request_progress
from fluxes.domain.jm.feasibility import Feasibility
from fluxes.domain.jm.queues import QueueState
from fluxes.formats.jobid import MAX_GENERATOR_ID, FluidGenerator
from fluxes.formats.jobid import MAX_ID as MAX_JOBID
from fluxes.formats.jobid import encode as encode_id
from fluxes.messages.bounds import one_line
from fluxes.proc import metrics
from fluxes.proc.gcpolicy import release_free_memory
from fluxes.proc.unix_groups import user_groups
from fluxes.store import acklog
from fluxes.store.eventstore import ClaimedError, CommitResult, EventStore
from fluxes.store.ingest import (
    REPLY_TTL_MS,
    Charging,
    IngestStore,
    InstanceFollower,
    SubmitBlock,
    last_journal_ids,
    record_answered,
)
from fluxes.store.instance import Instance, instance_created
from fluxes.store.keys import GROUP_INGEST
from fluxes.store.request_claims import RequestClaims
from workers.base import Worker, not_the_input, overdelivered_reason

BLOCK_MS = 1000
#: Requests another ingest worker left unacknowledged this long are taken over.
CLAIM_IDLE_MS = 10_000
CLAIM_EVERY_S = 5.0
#: How often the user list, configuration and resources are re-read (queue states:
#: every block).
REFRESH_S = 1.0
#: How long a worker's claim on a request lasts (fluxes.store.request_claims): as long as
#: another ingest waits before taking over the requests a worker left unacknowledged.
REQUEST_CLAIM_TTL_MS = CLAIM_IDLE_MS
#: Jobs after which the handled requests' memory is given back to the OS (a trim costs
#: milliseconds: not after every small request).
TRIM_AFTER_JOBS = 1000
#: How soon a request another ingest worker holds is tried again.
DEFER_S = 0.05


class IngestWorker(Worker):
    """Validates submissions and forwards user requests."""

    kind = "ingest"

    def __init__(self, instance: Instance, name: str | None = None) -> None:
        super().__init__(instance, name)
        self.store = EventStore(self.redis, self.keys)
        self.requests = IngestStore(self.redis, self.keys)
        self.owner, self.owner_uid = instance.owner()
        #: users, configuration, queue states and inventory, re-read every REFRESH_S
        self.facts = InstanceFollower(self.requests, self.owner, self.owner_uid, self.log)
        self._refreshed = 0.0
        self.fluids: FluidGenerator | None = None
        #: this process's claims on requests: a worker restarted under the same name takes
        #: its predecessor's over at once, and the new token fences the old one out
        self._claims = RequestClaims(self.redis, self.keys,
                                     f"{self.name}#{os.urandom(6).hex()}",
                                     REQUEST_CLAIM_TTL_MS)
        #: the requests of the block this worker claimed (record names)
        self._held: set[str] = set()
        #: blocks of requests another ingest worker held, tried again from _retry_at on
        self._deferred: list[list[rq.Pending]] = []
        self._retry_at = 0.0
        self.submitted = 0
        #: requests per read: from READ_FIRST (even a first read of big requests is small)
        self._read_count = rq.READ_FIRST
        self._pending = True
        self._claim_at = 0.0
        self.charging = Charging(self.redis, self.keys)  # once a bank exists
        self._ledger = self.charging.ledger
        #: the charger of the block being handled (None: no banks)
        self._charger: checks.Charger | None = None
        #: the job ids the block answers with, recorded before the answers go out
        self._answered: list[tuple[int, str, str]] = []
        self._acks: acklog.AckLog | None = None
        self._instance_created = ""

    def setup(self) -> None:
        """Get a FLUID generator id and read users, configuration and queue states."""
        self._pending = True
        self._deferred = []  # still pending in Redis: re-read with the others
        self.fluids = FluidGenerator(self.requests.new_generator() % (MAX_GENERATOR_ID + 1))
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
        if force or now - self._refreshed >= REFRESH_S:
            self._refreshed = now
            self.facts.refresh()

    def sync_queues(self) -> None:
        """Apply the queue admin events written since the last call (before each block)."""
        self.facts.sync_queues()

    @property
    def users(self) -> dict[str, int]:
        """The instance's users (name -> uid)."""
        return self.facts.users

    @property
    def config(self) -> InstanceConfig:
        """The instance's configuration."""
        return self.facts.config

    @property
    def queue_states(self) -> dict[str | None, QueueState]:
        """The queues' states, admin events applied."""
        return self.facts.queue_states

    @property
    def feasibility(self) -> Feasibility | None:
        """The inventory's check (None: the scheduler judges alone)."""
        return self.facts.feasibility

    @feasibility.setter
    def feasibility(self, value: Feasibility | None) -> None:
        self.facts.feasibility = value

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
            reply = self.requests.next_unacknowledged(self.users, self.name)
            if reply:
                self.handle(reply, redelivered=True)
                return
            self._pending = False
        if time.monotonic() >= self._claim_at:
            self._claim_at = time.monotonic() + CLAIM_EVERY_S
            claimed = self.requests.claim_idle(self.users, self.name, CLAIM_IDLE_MS,
                                               rq.READ_COUNT)
            if claimed:
                self.handle(claimed, redelivered=True)
                return
        # requests put aside are tried again soon: the read must not wait longer
        wait_ms = max(1, min(BLOCK_MS, int(DEFER_S * 1000))) if self._deferred else BLOCK_MS
        reply = self.requests.read_new(self.users, self.name, self._read_count, wait_ms)
        if not reply:
            return
        self._read_count = rq.next_read_count(self._read_count, rq.reply_bytes(reply))
        self.handle(reply)

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
        requests: list[rq.Pending] = []
        orphans: dict[str, list[bytes]] = {}
        for stream_b, entries in reply:
            stream = stream_b.decode()
            user = stream.rsplit(":", 1)[1]
            uid = self.users.get(user)
            if uid is None:  # a user removed meanwhile: nothing to answer to
                orphans.setdefault(stream, []).extend(msg_id for msg_id, _f in entries)
                continue
            requests += self._decode(stream, user, uid, entries, redelivered)
        self.requests.answer([], orphans)
        if requests:
            self._handle_decoded(requests, redelivered)

    def _decode(self, stream: str, user: str, uid: int, entries: list[Any],
                redelivered: bool) -> list[rq.Pending]:
        """The requests of one user's entries that decode; the others are refused."""
        out = []
        refused: list[tuple[bytes, Mapping[bytes, bytes], str]] = []
        answers: list[tuple[str, bytes, int]] = []
        # read before: those delivered too often are refused before they are handled
        over = self.overdelivered(stream, GROUP_INGEST, self.name, entries) \
            if redelivered else {}
        for msg_id, fields in entries:
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
            out.append(rq.Pending(stream, msg_id, fields, user, uid, request))
        self.refuse(stream, GROUP_INGEST, refused, answers)
        return out

    def _handle_decoded(self, requests: list[rq.Pending], redelivered: bool) -> None:
        """Handle decoded requests in blocks of at most BLOCK_JOBS jobs (a request with
        more is a block of its own): what a block holds is bounded, however many
        requests one read brought (see :meth:`_handle_bounded`)."""
        for block in rq.blocks(requests, rq.BLOCK_JOBS):
            self._handle_bounded(block, redelivered)
        if sum(rq.job_count(p.request) for p in requests) >= TRIM_AFTER_JOBS:
            # what the blocks held goes back to the OS, not only to the C heap
            release_free_memory()

    def _handle_bounded(self, requests: list[rq.Pending], redelivered: bool) -> None:
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

    def _defer(self, requests: list[rq.Pending]) -> None:
        """Put requests aside (unacknowledged, unanswered) to be tried again in DEFER_S:
        another ingest holds them (or took them over), and they are answered once its
        records say what it did. Each goes in a block of its own, so that no block
        outlives the claims it takes again and again."""
        aside = {(p.stream, p.msg_id) for block in self._deferred for p in block}
        self._deferred += [[p] for p in requests if (p.stream, p.msg_id) not in aside]
        self._retry_at = time.monotonic() + DEFER_S

    def _refuse_raised(self, pending: rq.Pending, exc: Exception) -> None:
        """Dead-letter and acknowledge a request whose handling raised, and answer it."""
        reason = f"{type(exc).__name__}: {exc}"
        # what it committed is recorded: another worker may take it at once
        self._claims.drop([rq.record_name(pending.user, pending.request)])
        answer = proto.encode_reply(proto.Reply(errors=[
            f"request refused: {one_line(reason)}"]))
        self.refuse(pending.stream, GROUP_INGEST, [(pending.msg_id, pending.fields, reason)],
                    [(self.keys.reply(pending.user, pending.request.req[:64]), answer,
                      REPLY_TTL_MS)])

    @property
    def max_request_bytes(self) -> int:
        """Largest request read: room for a few jobs of the largest jobspec allowed."""
        return max(proto.MAX_REQUEST_BYTES, 4 * self.config.ingest.max_jobspec_bytes)

    # ------------------------------------------------------------ a block

    def _handle_block(self, requests: list[rq.Pending], redelivered: bool) -> None:
        """Check, create and forward the decoded ``requests``; commit, acknowledge, answer.

        Requests seen before (their records say so: redelivered, or sent again
        by their client) create only the jobs not yet created, and control
        requests are not forwarded again; a request that comes twice in one
        block is handled once and both copies are answered alike.
        """
        self._answered = []
        requests = self._claim(requests)
        if not requests:
            return
        acks: dict[str, list[bytes]] = {}
        for pending in requests:
            acks.setdefault(pending.stream, []).append(pending.msg_id)
        copies, digests = rq.first_copies(requests)
        block = SubmitBlock(self.store, self._claims.token, digests,
                            lambda: self._claims.renew(self._held))
        firsts = [n for n in copies if copies[n] == n]
        seen, why = self._seen_before(requests, firsts)
        # every job of the block is checked first, so that the dependency
        # targets of all of them are looked up in one round trip
        self._charger = None
        submitters = {requests[n].user for n in firsts
                      if isinstance(requests[n].request, proto.SubmitJobs)}
        if submitters:
            self._charger = self.charging.charger(submitters, time.time())
        checked = {n: self._check(requests[n], seen[n]) for n in firsts
                   if isinstance(requests[n].request, proto.SubmitJobs) and n not in why}
        existing = self.requests.existing_jobs(checks.dependency_targets(checked.values()))
        if checked:  # the checks of a big block may take most of a claim's life
            self._claims.renew(self._held)
        answers: dict[int, bytes] = {}
        replies: list[tuple[str, bytes]] = []
        for n, pending in enumerate(requests):
            request = pending.request
            name = rq.record_name(pending.user, request)
            if copies[n] != n:
                same = rq.request_digest(request) == digests[name]
                answer = answers[copies[n]] if same else _error(rq.reused(request))
            elif n in why:
                answer = _error(why[n])
            elif isinstance(request, proto.SubmitJobs):
                answer = proto.encode_reply(self._create(request, pending, checked[n],
                                                         existing, block))
            elif seen[n] is not None:
                answer = _error(f"request {request.req[:64]!r} was handled already: "
                                "not done twice")
            else:
                answer = self._forward_answer(pending, block)
            answers[n] = answer
            if answer:
                replies.append((self.keys.reply(pending.user, request.req[:64]), answer))
        self._commit(block, replies, acks)

    def _claim(self, requests: list[rq.Pending]) -> list[rq.Pending]:
        """Claim the requests (fluxes.store.request_claims) before their records are read:
        those another ingest worker holds are put aside, the others returned."""
        names = list(dict.fromkeys(rq.record_name(p.user, p.request) for p in requests))
        held = self._held = self._claims.take(names)
        if len(held) == len(names):
            return requests
        self._defer([p for p in requests if rq.record_name(p.user, p.request) not in held])
        return [p for p in requests if rq.record_name(p.user, p.request) in held]

    def _forward_answer(self, pending: rq.Pending, block: SubmitBlock) -> bytes:
        """Forward a control request to the job managers; the ingest's own answer (an
        error, a dry run's result), or nothing when the job manager will answer."""
        request, uid = pending.request, pending.uid
        reply_key = self.keys.reply(pending.user, request.req[:64])
        forwards: routing.Forwards = {}
        got: str | proto.Reply | None
        if isinstance(request, proto.UpdateJob):
            update = self._check_update(request, uid, reply_key)
            got = None if isinstance(update, proto.UpdateRequest) else update
            if isinstance(update, proto.UpdateRequest):
                forwards[self.keys.partition_of(request.id)] = [update]
        else:
            got = routing.route(request, uid, reply_key, self.keys.partitions,
                                self.owner_uid, forwards)
        if isinstance(got, proto.Reply):
            return proto.encode_reply(got)
        if got:
            return _error(got)
        ids = rq.control_ids(request)
        parts = range(self.keys.partitions) if ids is None \
            else {self.keys.partition_of(j) for j in ids}
        block.forward(rq.record_name(pending.user, request), forwards, parts)
        return b""

    def _seen_before(self, requests: list[rq.Pending], firsts: list[int]
                     ) -> tuple[dict[int, dict[int, int] | None], dict[int, str]]:
        """For the requests numbered ``firsts``: what was done for each before (index ->
        jobs created, or None), and why some cannot be done (index -> reason)."""
        seen: dict[int, dict[int, int] | None] = {}
        why: dict[int, str] = {}
        for n, got in zip(firsts, self._recorded([requests[n] for n in firsts]), strict=True):
            seen[n] = None if isinstance(got, str) else got
            if isinstance(got, str):
                why[n] = got
        return seen, why

    def _recorded(self, requests: list[rq.Pending]) -> list[dict[int, int] | str | None]:
        """What the records of each request say: None when it was never seen, the jobs
        already created (index -> id) when it was, or why it cannot be done (its
        request id was used for another request)."""
        records = self.requests.progress_records(
            [rq.record_name(p.user, p.request) for p in requests])
        out: list[dict[int, int] | str | None] = []
        for pending, blobs in zip(requests, records, strict=True):
            request = pending.request
            if not blobs:
                out.append(None)
                continue
            njobs = rq.job_count(request) if isinstance(request, proto.SubmitJobs) else 0
            try:
                out.append(request_progress.merge(blobs, njobs,
                                                  rq.request_digest(request)))
            except request_progress.ReusedRequestId:
                # a client that reused a request id for another request: doing it
                # could create jobs twice or answer with another request's ids
                self.log.warning("request id reused", extra={"user": pending.user,
                                                             "req": request.req[:64]})
                out.append(rq.reused(request))
            except ValueError as exc:
                # only the ingest writes these: say so loudly, and do the request
                # again rather than never answer it
                self.log.error("unreadable progress record", extra={"error": str(exc)})
                out.append(None)
        return out

    def _check(self, pending: rq.Pending, done: Mapping[int, int] | None) -> Checked:
        """Check a submit request's jobs (no Redis); jobs in ``done`` exist already."""
        assert isinstance(pending.request, proto.SubmitJobs)
        rules = checks.SubmitRules(self.config, self.queue_states, self.feasibility,
                                   self.owner_uid)
        return checks.check_jobs(pending.request, pending.user, pending.uid, rules,
                                 user_groups(pending.user, pending.uid), done, self._charger)

    def _create(self, request: proto.SubmitJobs, pending: rq.Pending, checked: Checked,
                existing: set[int], block: SubmitBlock) -> proto.Reply:
        """Give the checked jobs ids and add them to the block; the request's answer.
        A job whose dependency names a job not in ``existing`` is refused, and nothing
        is stored for it."""
        if checked.answer is not None:
            return checked.answer
        prepared = checks.to_create(checked, existing)
        assert self.fluids is not None
        now = time.time()
        name = rq.record_name(pending.user, request)
        uid = pending.uid
        for (index, job), jobid in zip(prepared, self.fluids.next_n(len(prepared)),
                                       strict=True):
            checked.results[index]["id"] = jobid
            if self._charger is not None:
                bank = job.info.get("bank")
                self._ledger.created(jobid, self.keys.partition_of(jobid),
                                     (uid, bank if isinstance(bank, str) else ""), now)
            block.add_job(jobid, job, uid, now, name, index)
        self.submitted += len(prepared)
        results = checked.results
        self._answered += [(r["id"], pending.user, request.req[:64]) for r in results
                           if "id" in r]
        return proto.Reply(jobs=[proto.JobResult(**r) for r in results])

    def _check_update(self, request: proto.UpdateJob, uid: int,
                      reply_key: str) -> str | proto.Reply | proto.UpdateRequest:
        """Check a ``fluxes update`` against the job as stored, as at submission."""
        jobid = request.id
        shown = encode_id(jobid, "f58") if 0 <= jobid <= MAX_JOBID else str(jobid)
        try:
            stored, job = self.requests.stored_job(jobid)
        except ValueError as exc:  # an eventlog replay refuses: not this request's fault
            return f"{shown}: its eventlog cannot be read: {str(exc)[:200]}"
        owner = stored.owner if stored is not None else None
        name = next((n for n, u in self.users.items() if u == owner), None)
        ctx = routing.UpdateContext(self.config, self.queue_states, self.feasibility,
                                    self.owner_uid)
        specs = (stored.jobspec or b"", stored.effective_jobspec or b"") if stored \
            else (b"", b"")
        return routing.check_update(
            request, uid, reply_key, shown, job, owner, *specs, name,
            user_groups(name, owner) if name and owner is not None else (), ctx)

    def _commit(self, block: SubmitBlock, replies: list[tuple[str, bytes]],
                acks: dict[str, list[bytes]]) -> None:
        """Commit the block; record the ids it answers with, then answer and acknowledge
        what could not join a commit. With an acknowledgement log, requests are
        acknowledged with their answers, after the log: a worker dying before that
        leaves them to be answered again."""
        replies, acks = block.commit(self._held, replies, acks, direct=self._acks is None)
        metrics.EVENTS_INGEST.inc(sum(r.events for _p, r in block.written))
        self._claims.drop(self._held, set(range(self.keys.partitions)) - set(block.batches))
        self._held = set()
        self._committed(block.written)
        self._record_acks(block.written)
        self.requests.answer(replies, acks)

    def _committed(self, written: list[tuple[int, CommitResult]]) -> None:
        """Tell the ledger where the jobs it waits to see folded were journaled: once every
        batch of the block is written, each partition's last journal id."""
        if self._ledger:
            for part, text in last_journal_ids(written).items():
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
        answered, self._answered = self._answered, []
        try:
            record_answered(self._acks, self.redis, self.keys, self._instance_created,
                            answered, written)
        except OSError as exc:
            # answering anyway: a job is worth more than the report of its loss
            self.log.error("the acknowledgement log cannot be written: jobs a Redis crash "
                           "loses may go unreported", extra={"error": str(exc)})


def _error(line: str) -> bytes:
    """An answer refusing a request with one line."""
    return proto.encode_reply(proto.Reply(errors=[line]))


def main(instance: Instance) -> int:
    """Run an ingest worker until SIGTERM."""
    return IngestWorker(instance).run()
