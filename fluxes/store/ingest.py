"""The ingest's Redis: users' submit streams, the facts it follows, progress records,
and the commits of a block of requests (:class:`SubmitBlock`).

Every call the ingest worker makes to Redis is a method here that names what it
does; the block's writes go through :class:`~fluxes.store.eventstore.Batch` and
``commit.lua``, one commit per partition (a full batch on its own, as soon as it
fills, so that a block holds one batch per partition at most).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.accounting.limits import (
    ActiveIndex,
    Holdings,
    SubmitLedger,
    limits_active_jobs,
)
from fluxes.domain.ingest.checks import Charger, charge
from fluxes.domain.jm import request_progress
from fluxes.domain.jm.feasibility import Feasibility, load_feasibility
from fluxes.domain.jm.queues import QueueState, fold_queue_events
from fluxes.domain.jm.submission import PreparedJob
from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job
from fluxes.errors import FluxesError
from fluxes.store import acklog, jobhash
from fluxes.store.accounting import AccountsFollower, UsageStore
from fluxes.store.errors import Client, ResponseError
from fluxes.store.eventstore import Batch, CommitResult, EventStore
from fluxes.store.groups import ensure_group
from fluxes.store.instance import RESOURCES_DIGEST
from fluxes.store.keys import GROUP_INGEST, Keys
from fluxes.store.resources import recorded_resources

#: Events per Lua call at most (two per job): a long script blocks Redis.
MAX_BATCH_EVENTS = 4000
#: Events of a block's first commit in a partition at most; each later one may hold
#: four times as many, up to MAX_BATCH_EVENTS. The job manager starts on the first
#: jobs of a big array while the rest are created (a 1,000-job request in one
#: commit ran its first job ~0.1 s after it was sent), and a block of a few jobs is
#: one commit as before.
FIRST_BATCH_EVENTS = 64
#: Messages per jm:new / jm:ctl entry at most: the job manager takes a big submission
#: an entry at a time between its other inputs (~1.5 ms of its time per 64 new jobs).
MESSAGES_PER_ENTRY = 64
#: How long a request's progress record is kept: the window in which the same
#: request (user and ``req``) is never done twice, whether it was redelivered
#: (an ingest died before acknowledging it) or sent again by its client.
PROGRESS_TTL_MS = 24 * 3600 * 1000
#: How long an answer waits for its client.
REPLY_TTL_MS = 60_000


class IngestStore:
    """The ingest's reads and its writes outside a block's commits."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def facts(self) -> tuple[dict[str, int], bytes | None, bytes | None]:
        """The instance's users (name -> uid), configuration text and resources digest,
        in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.users)
        pipe.hget(self.keys.instance, "config")
        # a recorded graph can be megabytes: its digest says whether to read it again
        pipe.hget(self.keys.instance, RESOURCES_DIGEST)
        users_raw, config_text, digest = pipe.execute()
        return ({name.decode(): int(uid) for name, uid in users_raw.items()},
                config_text, digest)

    def open_submit_streams(self, users: Iterable[str]) -> None:
        """Make sure each user's submit stream has the ingest's consumer group."""
        for user in users:
            ensure_group(self.redis, self.keys.submit(user), GROUP_INGEST)

    def queue_events_since(self, position: str) -> list[tuple[bytes, Any]]:
        """The queue admin entries after ``position`` ("0-0": all of them)."""
        start = "(" + position if position != "0-0" else "-"
        return list(self.redis.xrange(self.keys.queues, min=start))

    def new_generator(self) -> int:
        """A fresh FLUID generator number (before the modulo of the id format)."""
        return int(self.redis.incr(self.keys.fluid_generators))

    def read_new(self, users: Iterable[str], consumer: str, count: int,
                 block_ms: int) -> list[Any]:
        """Requests never delivered, of every user's stream (waits up to ``block_ms``)."""
        streams = {self.keys.submit(user): ">" for user in users}
        return list(self.redis.xreadgroup(GROUP_INGEST, consumer, streams, count=count,
                                          block=block_ms) or [])

    def next_unacknowledged(self, users: Iterable[str], consumer: str) -> list[Any]:
        """The oldest request of one user's stream ``consumer`` read and never
        acknowledged, alone (its delivery count grows by one, and only its own).

        One pipelined XPENDING over every user's stream finds one that has any.
        """
        streams = [self.keys.submit(u) for u in users]
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xpending_range(stream, GROUP_INGEST, min="-", max="+", count=1,
                                consumername=consumer)
        for stream, rows in zip(streams, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(rows, ResponseError) or not rows:
                continue
            reply = self.redis.xreadgroup(GROUP_INGEST, consumer, {stream: "0"}, count=1)
            if any(entries for _s, entries in reply or []):
                return list(reply)
        return []

    def claim_idle(self, users: Iterable[str], consumer: str, idle_ms: int,
                   count: int) -> list[Any]:
        """Requests other consumers have held unacknowledged for ``idle_ms``, taken over."""
        out = []
        for user in users:
            stream = self.keys.submit(user)
            _next, entries, *_ = self.redis.xautoclaim(
                stream, GROUP_INGEST, consumer, min_idle_time=idle_ms, start_id="0-0",
                count=count)
            entries = [(sid, fields) for sid, fields in entries if fields]
            if entries:
                out.append((stream.encode(), entries))
        return out

    def answer(self, replies: Sequence[tuple[str, bytes]],
               acks: Mapping[str, Sequence[bytes]]) -> None:
        """Send answers (reply list, data) and acknowledge requests (stream -> ids) in one
        round trip: those that could not join a commit (another slot), or whose users
        are gone."""
        if not replies and not acks:
            return
        pipe = self.redis.pipeline(transaction=False)
        for key, data in replies:
            pipe.rpush(key, data)
            pipe.pexpire(key, REPLY_TTL_MS)
        for stream, ids in acks.items():
            pipe.xack(stream, GROUP_INGEST, *ids)
        pipe.execute()

    def stored_job(self, jobid: int) -> tuple[jobhash.JobHash | None, Job | None]:
        """A job's hash and its state replayed from its eventlog (None, None: unknown);
        ValueError when the eventlog cannot be replayed."""
        stored = jobhash.JobHashes(self.redis, self.keys).get(jobid)
        if stored is None:
            return None, None
        return stored, EventStore(self.redis, self.keys).replay_job(jobid)

    def existing_jobs(self, jobids: Sequence[int]) -> set[int]:
        """Which of ``jobids`` exist (one pipelined EXISTS per job hash)."""
        found = jobhash.JobHashes(self.redis, self.keys).exists(jobids) if jobids else []
        return {jobid for jobid, there in zip(jobids, found, strict=True) if there}

    def progress_records(self, names: Sequence[str]) -> list[list[bytes]]:
        """Every partition's progress records of each request named (one pipelined LRANGE
        per request and partition: each partition's commits record its jobs)."""
        if not names:
            return []
        parts = self.keys.partitions
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            for part in range(parts):
                pipe.lrange(self.keys.request_done(part, name), 0, -1)
        results = pipe.execute()
        return [[b for lst in results[k * parts:(k + 1) * parts] for b in lst]
                for k in range(len(names))]


class InstanceFollower:
    """What the ingest checks requests against, kept up to date: the users, the
    configuration, the queue states and the inventory (None when it cannot be
    loaded: the scheduler then judges alone)."""

    def __init__(self, store: IngestStore, owner: str, owner_uid: int,
                 log: logging.Logger) -> None:
        self.store = store
        self.owner, self.owner_uid = owner, owner_uid
        self.log = log
        self.users: dict[str, int] = {}
        self.config = InstanceConfig()
        self.queue_states: dict[str | None, QueueState] = {}
        self.feasibility: Feasibility | None = None
        self._queue_pos = "0-0"
        self._queue_log: list[Any] = []
        self._config_text: bytes | None = None
        #: the recorded resources and configuration the inventory was loaded from
        self._inventory_source: tuple[bytes | None, bytes | None] | None = None

    def refresh(self) -> set[str]:
        """Re-read users, configuration and resources; the users new since the last call."""
        users, config_text, digest = self.store.facts()
        users = {self.owner: self.owner_uid, **users}
        new_users = set(users) - set(self.users)
        self.users = users
        self.store.open_submit_streams(new_users)
        if config_text != self._config_text:
            self._config_text = config_text
            try:
                self.config = InstanceConfig.from_toml(config_text) if config_text \
                    else InstanceConfig()
            except FluxesError as exc:
                self.log.error("bad configuration kept the old one", extra={"error": str(exc)})
            self.queue_states = fold_queue_events(self.config.queues, self._queue_log)
        resources = None
        client, keys = self.store.redis, self.store.keys
        if digest is None:  # recorded before digests: compare the resources themselves
            resources = digest = recorded_resources(client, keys)
        if (digest, config_text) != self._inventory_source:
            if resources is None:
                resources = recorded_resources(client, keys)
            self._inventory_source = (digest, config_text)
            self._load_inventory(resources)
        return new_users

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
        """Apply the queue admin events written since the last call (one XRANGE, usually
        empty): called after requests are read and before they are handled, so every
        admin event written before a request is applied to it."""
        entries = self.store.queue_events_since(self._queue_pos)
        if not entries:
            return
        for sid, fields in entries:
            self._queue_pos = sid.decode()
            try:
                self._queue_log.append(proto.load_queue_event(fields))
            except proto.MessageError:
                continue  # a malformed admin entry changes no state
        self.queue_states = fold_queue_events(self.config.queues, self._queue_log)


def last_journal_ids(written: Iterable[tuple[int, CommitResult]]) -> dict[int, str]:
    """Each partition's last journal id among commits (partition, result)."""
    ends: dict[int, tuple[tuple[int, int], str]] = {}
    for part, result in written:
        if result.journal_id:
            at = _id_key(result.journal_id)
            if part not in ends or at > ends[part][0]:
                ends[part] = (at, result.journal_id)
    return {part: text for part, (_at, text) in ends.items()}


def record_answered(acks: acklog.AckLog, client: Client, keys: Keys, created: str,
                    answered: Sequence[tuple[int, str, str]],
                    written: Iterable[tuple[int, CommitResult]]) -> None:
    """Record in ``acks``, fdatasync'd, the job ids a block answers with (id, user,
    request), each with a journal id at or after its entries; OSError when it cannot."""
    ends = last_journal_ids(written)
    part_of = keys.partition_of
    missing = {part_of(j) for j, _u, _r in answered} - set(ends)
    if missing:  # jobs created by an earlier block: the journal's end is after them
        ends.update(acklog.journal_ends(client, keys, missing))
    acks.record(created, [acklog.Acked(j, part_of(j), ends[part_of(j)], user, req)
                          for j, user, req in answered])


class Charging:
    """The banks and associations (docs/accounting.md): once a bank exists, every job is
    charged to an association and max-active-jobs is enforced at submission, counting
    the fold's active jobs plus those created since (:attr:`ledger`)."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self.accounts = AccountsFollower(client, keys)
        self.usage = UsageStore(client, keys)
        self.ledger = SubmitLedger()
        #: which active counts the max-active-jobs checks need, for the current banks
        self._index: ActiveIndex | None = None

    def charger(self, users: set[str], now: float) -> Charger | None:
        """What charges the jobs ``users`` submit now (None: no banks): reads the new admin
        entries and, when limits need them, the active counts of their associations."""
        accounts = self.accounts.refresh()
        if not accounts.enabled:
            return None
        held = Holdings()
        if not limits_active_jobs(accounts):
            # nothing caps active jobs: no need to read every active job (nor to keep
            # the jobs created lately, which only such a count needs)
            self.ledger.clear()
        else:
            index = self._index
            if index is None or index.accounts is not accounts:
                index = self._index = ActiveIndex(accounts)
            counts, positions = self.usage.active_counts(index.wanted(users))
            held = self.ledger.holdings(accounts, counts, positions, now, index)

        def charger(job: PreparedJob, user: str, uid: int) -> PreparedJob:
            return charge(accounts, held, job, user, uid)

        return charger


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class SubmitBlock:
    """The writes of one block of requests: jobs, forwarded control messages, progress
    records, answers and acknowledgements, committed per partition."""

    def __init__(self, store: EventStore, token: str, digests: Mapping[str, str],
                 renew: Callable[[], None] | None = None) -> None:
        self.store = store
        #: renews the block's request claims before each commit that depends on them
        self.renew = renew
        self.keys = store.keys
        #: the request claims' token every record is fenced by
        self.token = token
        self.digests = digests
        self.batches: dict[int, Batch] = {}
        #: per partition, the events the open batch may hold before it is committed
        self.limits: dict[int, int] = {}
        self.new_msgs: dict[int, list[proto.New]] = {}
        self.forwards: dict[int, list[proto.Control]] = {}
        #: per partition, the jobs each request has in the open batch, by record name:
        #: (the request's stream, [(index in the request, job id)])
        self.progress: dict[int, dict[str, list[request_progress.Pair]]] = {}
        #: per partition, the control requests forwarded (record names)
        self.forwarded: dict[int, set[str]] = {}
        #: the commits so far, by partition (their events: the worker's metrics)
        self.written: list[tuple[int, CommitResult]] = []

    def add_job(self, jobid: int, job: PreparedJob, uid: int, now: float, name: str,
                index: int) -> None:
        """Add a new job (its hash, ``submit`` and ``validate`` events, the job manager's
        ``new`` message) to its partition's batch, recorded as job ``index`` of request
        ``name``; a full batch is committed first."""
        keys = self.keys
        part = keys.partition_of(jobid)
        batch = self.batches.get(part)
        limit = self.limits.get(part) or min(FIRST_BATCH_EVENTS, MAX_BATCH_EVENTS)
        if batch is None or batch.events >= limit:
            if batch is not None:
                self._commit_full(part, batch)
                self.limits[part] = min(4 * limit, MAX_BATCH_EVENTS)
            batch = self.batches[part] = self.store.batch(part)
        self.progress.setdefault(part, {}).setdefault(name, []).append((index, jobid))
        assert job.content is not None
        jobhash.create(batch, keys, jobid, owner=uid, urgency=job.urgency, content=job.content,
                       queue=job.queue, request=job.request)
        submit = ev.Submit(timestamp=now, urgency=job.urgency, userid=uid, flags=job.flags)
        batch.append(keys.eventlog(jobid), jobid, 0, [submit, ev.Validate(timestamp=now)],
                     [job.info, None], owner=uid)
        self.new_msgs.setdefault(part, []).append(proto.New(
            id=jobid, userid=uid, urgency=job.urgency, flags=job.flags, t_submit=now,
            info=job.info, request=job.request))

    def forward(self, name: str, forwards: Mapping[int, list[proto.Control]],
                parts: Iterable[int]) -> None:
        """Forward control messages (by partition) for request ``name``, recorded in the
        partitions ``parts`` so that it is not forwarded twice."""
        for part, msgs in forwards.items():
            self.forwards.setdefault(part, []).extend(msgs)
        for part in parts:
            self.forwarded.setdefault(part, set()).add(name)

    def _commit_full(self, part: int, batch: Batch) -> None:
        """Commit a full batch at once, in its own Lua call (scripts block Redis), with the
        records of the jobs it creates (issue 26: a 10,000-job block held five batches,
        ~8 KB of arguments per job)."""
        self._record(part, batch)
        _add_messages(batch, self.keys.jm_new(part), self.new_msgs.pop(part, []),
                      proto.NEW_JOBS)
        if self.renew is not None:
            self.renew()
        self.written += zip([part], self.store.commit_many([batch]), strict=True)

    def _record(self, part: int, batch: Batch) -> None:
        """Add to ``batch`` the progress records of its partition, kept PROGRESS_TTL_MS
        (even a request the batch acknowledges may be sent again by its client): the jobs
        each request has in it, and an empty record per control request forwarded."""
        keys = self.keys
        records = [(name, pairs) for name, pairs in self.progress.pop(part, {}).items()]
        records += [(name, []) for name in sorted(self.forwarded.pop(part, set()))]
        for name, pairs in records:
            batch.claimed(keys.request_claim(part, name), self.token)
            batch.push_reply(keys.request_done(part, name), request_progress.encode(
                pairs, self.digests.get(name)), PROGRESS_TTL_MS)

    def commit(self, held: Iterable[str], replies: list[tuple[str, bytes]],
               acks: dict[str, list[bytes]], direct: bool
               ) -> tuple[list[tuple[str, bytes]], dict[str, list[bytes]]]:
        """Commit the rest, one commit per partition; the claims on the ``held`` requests
        end with it. With ``direct``, the replies and acks that share the first
        partition's slot join its commit; the others are returned, to be sent after."""
        keys = self.keys
        batches = self.batches
        for part, msgs in self.new_msgs.items():
            _add_messages(batches[part], keys.jm_new(part), msgs, proto.NEW_JOBS)
        for part, ctl in self.forwards.items():
            if part not in batches:
                batches[part] = self.store.batch(part)
            _add_messages(batches[part], keys.jm_ctl(part), ctl, proto.CONTROL)
        if not batches:
            batches[0] = self.store.batch(0)
        anchor = keys.journal(min(batches))
        last = batches[min(batches)]
        for part in {*self.progress, *self.forwarded}:
            self._record(part, batches[part])
        for part, batch in batches.items():
            # the claims end with the last commits, the very ones whose records they fence
            for name in sorted(held):
                batch.claimed(keys.request_claim(part, name), self.token, drop=True)
        left_replies = []
        for key, data in replies:
            if direct and keys.same_slot(key, anchor):
                last.push_reply(key, data, REPLY_TTL_MS)
            else:
                left_replies.append((key, data))
        left_acks: dict[str, list[bytes]] = {}
        for stream, ids in acks.items():
            if direct and keys.same_slot(stream, anchor):
                last.xack(stream, GROUP_INGEST, ids)
            else:
                left_acks[stream] = ids
        committed = [(p, b) for p, b in batches.items() if b]
        results = self.store.commit_many([b for _p, b in committed])
        self.written += zip([p for p, _b in committed], results, strict=True)
        return left_replies, left_acks


def _add_messages(batch: Batch, stream: str, msgs: list[Any],
                  channel: proto.Channel[Any]) -> None:
    """XADD ``msgs`` to ``stream`` in entries its reader's bounds accept."""
    for entry in proto.encode_chunks(msgs, 0, MESSAGES_PER_ENTRY, channel.max_bytes):
        batch.xadd(stream, entry)
