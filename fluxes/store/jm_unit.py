"""The job manager's unit of work: one step's effects written as fenced commits.

:class:`JobManagerStore` takes what :class:`~fluxes.domain.jm.core.JobManagerCore`
decided in one step (:class:`~fluxes.domain.jm.core.Effects`) and writes it: the
events (eventlogs and journal), the job hash facts, the messages to the
scheduler and the exec workers, the replies, the dead letters and the
acknowledgements of the inputs that caused them, all in one ``commit.lua`` call
fenced by the leader's token (the event-sourcing recorder's idea: the events and
the tracking of what was consumed go in one insert). It also holds the job
manager's other reads and writes: the checkpoint (and the journal position it
includes), the scheduler's lease, the queues' admin state, the saved exec
progress, the reply keys a control message names.

:meth:`JobManagerStore.commit_then_read` sends a step's commit and the next
blocking read of the inputs in one write: the loop pays one round trip per step
instead of two, and the messages the commit sends are out before the job
manager waits again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from fluxes import messages as proto
from fluxes.domain.jm.effects import Effects
from fluxes.domain.jm.queues import fold_queue_events
from fluxes.domain.job import events as ev
from fluxes.domain.job.record import JobRecord
from fluxes.formats.jobid import MAX_ID as MAX_JOBID
from fluxes.store import jobfacts, jobhash, reachability
from fluxes.store.deadletters import counts_key
from fluxes.store.direct import stream_entries
from fluxes.store.eventstore import (
    Batch,
    CommitResult,
    EventStore,
    RawEvent,
    commit_then,
)
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_JM, Keys
from fluxes.store.lease import LEASE_TTL_MS

#: Events per commit at most (a Lua call blocks Redis while it runs).
MAX_COMMIT_EVENTS = 4000
#: Ranks whose request stream the layout keeps (a bound on its memory).
MAX_RANKS_KEPT = 65_536
#: Messages per outbound stream entry (one XADD each).
MESSAGES_PER_ENTRY = 1000
#: Replies to clients expire if nobody reads them.
REPLY_TTL_MS = 60_000
#: Pending jobs whose stored requests are read per round trip when taking over.
READ_REQUESTS = 10_000
#: Longest reply key a control message may name (the prefix, a user name, a
#: request id of 64 characters).
MAX_REPLY_KEY = 512
#: Error replies of a write of ``later`` that mean the input's reply list was
#: replaced by another type since it was checked (logged, not raised).
WRONG_TYPE = "WRONGTYPE"


@dataclass
class Unit:
    """One step's effects laid out: the commits (one, or a huge step cut at job
    boundaries) and what cannot share their hash slot (other partitions' ranks and
    replies: written after the commits)."""

    batches: list[Batch]
    later: dict[str, list[Any]] = field(default_factory=dict)
    #: the dead letters must be written before the commits (not in their slot)
    dead_letters_apart: bool = False


@dataclass
class Read:
    """The answer of :meth:`JobManagerStore.commit_then_read`: the commit's result and
    the entries read (``error``: the read's own error reply, after a good commit)."""

    result: CommitResult
    entries: list[Any]
    error: redis.ResponseError | None = None


class JobManagerStore:
    """Reads and writes of one partition's job manager (see the module's docstring)."""

    def __init__(self, store: EventStore, partition: int) -> None:
        self.store = store
        self.redis = store.redis
        self.keys: Keys = store.keys
        self.partition = partition
        self.reply_prefix = self.keys.reply("", "")[:-1]
        self.hashes = jobhash.JobHashes(self.redis, self.keys)
        # the keys every step names, made once (a step is a few jobs: building them
        # again was a share of its cost)
        self._journal = self.keys.journal(partition)
        self._sched_req = self.keys.sched_req(partition)
        self._progress_key = self.keys.exec_progress(partition)
        #: rank -> its request stream and whether it shares the journal's slot
        self._ranks: dict[int, tuple[str, bool]] = {}
        #: input stream lists -> whether they all share the journal's slot
        self._inputs_in_slot: dict[tuple[str, ...], bool] = {}

    # ------------------------------------------------------------ the unit of work

    def layout(self, fx: Effects, epoch: int, salt: bytes,
               dead_letter_counts: Mapping[str, int]) -> Unit:
        """The commits for ``fx`` and the writes that cannot share their slot.

        A normal step fits one batch. A huge one (a restart with many pending
        jobs) is cut at job boundaries into batches of MAX_COMMIT_EVENTS
        events, because a Lua call blocks Redis while it runs; the messages,
        replies and acknowledgements go in the last batch, after all events.
        ``epoch``: the session's, for the scheduler's messages;
        ``dead_letter_counts``: the dead letters per refused stream.
        """
        keys = self.keys
        batches = self._event_batches(fx, salt)
        batch = batches[-1]
        for jobid, fields in fx.job_fields.items():
            jobhash.set_updated(batch, keys, jobid, fields)
        for jobid, (result, t_inactive) in fx.retired.items():
            jobhash.set_result(batch, keys, jobid, result, t_inactive)
        self._progress(batch, fx)
        sent = time.time()
        if fx.sched:
            for entry in proto.encode_chunks(fx.sched, epoch, MESSAGES_PER_ENTRY,
                                             proto.SCHED_REQUESTS.max_bytes, sent):
                batch.xadd(self._sched_req, entry)
        unit = Unit(batches)
        journal = self._journal
        for rank, msgs in fx.exec.items():
            key, same = self._rank_stream(rank)
            for held, entry in proto.chunk_messages(msgs, 0, MESSAGES_PER_ENTRY,
                                                    proto.EXEC_REQUESTS.max_bytes, sent):
                if same:
                    batch.xadd_with_facts(key, entry, jobhash.START_FIELDS,
                                          _carried(keys, journal, held))
                else:
                    unit.later.setdefault(key, []).append(entry)
        for key, payload in fx.replies:
            data = proto.encode_reply(payload)
            if keys.same_slot(key, journal):
                batch.push_reply(key, data, REPLY_TTL_MS)
            else:
                unit.later.setdefault(key, []).append(data)
        if fx.dead_letters:
            if keys.same_slot(keys.dead_letters, journal):
                # with the acknowledgements below: refused and acknowledged in one step
                for record in fx.dead_letters:
                    batch.xadd(keys.dead_letters, record)
                batch.hincrby(counts_key(keys), dead_letter_counts)
            else:
                unit.dead_letters_apart = True
        by_stream: dict[str, list[bytes]] = {}
        for stream, msg_id in fx.acks:
            by_stream.setdefault(stream, []).append(msg_id)
        for stream, ids in by_stream.items():
            batch.xack(stream, GROUP_JM, ids)
        return unit

    def _rank_stream(self, rank: int) -> tuple[str, bool]:
        """The request stream of ``rank`` and whether it shares the journal's slot."""
        found = self._ranks.get(rank)
        if found is None:
            key = self.keys.exec_rank(rank)
            found = (key, self.keys.same_slot(key, self._journal))
            if len(self._ranks) < MAX_RANKS_KEPT:
                self._ranks[rank] = found
        return found

    def _progress(self, batch: Batch, fx: Effects) -> None:
        """The exec progress of jobs to keep (or forget) across a restart."""
        if not fx.progress:
            return
        key = self._progress_key
        progress = {str(j): orjson.dumps(v) for j, v in fx.progress.items() if v is not None}
        if progress:
            batch.hset(key, progress)
        gone = [str(j) for j, v in fx.progress.items() if v is None]
        if gone:
            batch.hdel(key, gone)

    def _event_batches(self, fx: Effects, salt: bytes) -> list[Batch]:
        """The events of ``fx``, job by job, in batches of about MAX_COMMIT_EVENTS."""
        keys = self.keys
        p = self.partition
        batches = [self.store.batch(p)]
        batch = batches[0]
        for jobid, ops in fx.ops.items():
            if batch.events >= MAX_COMMIT_EVENTS:
                batch = self.store.batch(p)
                batches.append(batch)
            seq = fx.base_seq.get(jobid, 0)
            run: list[ev.Event] = []
            extras: list[Mapping[str, Any] | None] = []
            log = keys.eventlog(jobid)
            owner = fx.owners.get(jobid)
            for op in ops:
                if op[0] == "E":
                    run.append(op[1])
                    extras.append(op[2])
                    continue
                if run:
                    batch.append(log, jobid, seq, run, extras, owner=owner, salt=salt)
                    seq += len(run)
                    run, extras = [], []
                batch.journal_only(jobid, op[1])
            if run:
                batch.append(log, jobid, seq, run, extras, owner=owner, salt=salt)
        return batches

    def commit(self, batch: Batch, token: str) -> CommitResult:
        """Write one batch, fenced by ``token`` (FencedError, ConflictError, ... when
        refused: nothing written)."""
        return self.store.commit(batch, token)

    def can_read_with(self, unit: Unit, inputs: Sequence[str]) -> bool:
        """True when ``unit`` may go out with the next read of ``inputs``: one commit,
        nothing written apart, every input in the journal's slot."""
        if len(unit.batches) != 1 or unit.later or unit.dead_letters_apart:
            return False
        names = tuple(inputs)
        same = self._inputs_in_slot.get(names)
        if same is None:
            # the inputs are the same every step: their slots are compared once
            same = self._inputs_in_slot[names] = all(
                self.keys.same_slot(key, self._journal) for key in names)
        return same

    def commit_then_read(self, batch: Batch, token: str, streams: Mapping[str, str],
                         count: int, block: int | None, consumer: str) -> Read:
        """Commit ``batch`` and then read the inputs (XREADGROUP of ``streams``, blocking
        up to ``block`` ms), sent in one write: one round trip for both.

        A refused commit raises as :meth:`commit` does; the entries that read
        took stay pending, and are read again (by this leader after it rebuilt
        from storage, or by the next one). A read error comes back in
        :attr:`Read.error`, after the commit's result.
        """
        keys, args = batch.script_args(token)
        read: list[Any] = ["XREADGROUP", "GROUP", GROUP_JM, consumer, "COUNT", count]
        if block is not None:
            read += ["BLOCK", block]
        read += ["STREAMS", *streams.keys(), *streams.values()]
        result, got = commit_then(self.redis, self.store.commit_source, keys, args, read)
        if isinstance(got, redis.ResponseError):
            return Read(result, [], got)
        return Read(result, stream_entries(got))

    def read(self, streams: dict[str, str], count: int, block: int | None,
             consumer: str) -> list[Any]:
        """Read the inputs (no commit to send)."""
        return read_streams(self.redis, streams, count, block, GROUP_JM, consumer)

    def write_later(self, later: Mapping[str, list[Any]]) -> list[str]:
        """Write what could not share the commit's slot: replies (bytes) and messages.
        Returns the errors of replies not written (a reply list replaced by another
        type since it was checked); any other error is raised."""
        if not later:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for key, items in later.items():
            for item in items:
                if isinstance(item, bytes):
                    pipe.rpush(key, item)
                    pipe.pexpire(key, REPLY_TTL_MS)
                else:
                    pipe.xadd(key, item)
        skipped = []
        for result in pipe.execute(raise_on_error=False):
            if isinstance(result, redis.ResponseError):
                if not str(result).startswith(WRONG_TYPE):
                    raise result
                skipped.append(str(result))
        return skipped

    # ------------------------------------------------------------ checkpoints

    def checkpoint(self, records: Iterable[JobRecord], last_journal_id: str,
                   token: str) -> None:
        """Write the active ``records`` and the journal position they include (fenced:
        FencedError when deposed).

        The journal holds the submit events of jobs whose new-job message this
        leader has not processed yet; they are not in memory, so the position
        must sit before them, or a restore would skip their later events.
        Records already holding events after that position are fine: replay
        skips entries a record has (by eventlog position).
        """
        p = self.partition
        position = last_journal_id if last_journal_id != "0-0" \
            else self.store.journal_last_id(p)
        unread = self.oldest_unread_new()
        if unread is not None:
            bound = self.before_submits_of(unread)
            if _id_key(bound) < _id_key(position):
                position = bound
        blob = self.store.checkpoint_blob(records, position)
        batch = self.store.batch(p)
        batch.set(self.keys.checkpoint(p), blob)
        self.store.commit(batch, token)

    def before_submits_of(self, new_id: str) -> str:
        """A journal position just before the submit events of the jobs new-job entry
        ``new_id`` names.

        Those submits were written before the entry, in the same commit, but
        Redis' clock runs on inside a script: the entry's id may be a millisecond
        or more later than theirs, so it does not bound them. Their own journal
        ids (each job's eventlog index begins with its submit's) do; the entry's
        time minus one millisecond stands in only for an entry that does not
        decode or names no job with an eventlog.
        """
        fallback = before_ms_of(new_id)
        found = self.redis.xrange(self.keys.jm_new(self.partition), min=new_id, max=new_id)
        if not found:
            return fallback
        try:
            news = proto.decode_entry(proto.NEW_JOBS, found[0][1])[1]
        except proto.MessageError:
            return fallback
        firsts = [_id_key(index.split(maxsplit=1)[0].decode())
                  for index in jobfacts.indexes(self.redis, self.keys, [n.id for n in news])
                  if isinstance(index, bytes) and index.split()]
        if not firsts:
            return fallback
        ms, seq = min(firsts)
        return min(f"{ms}-{seq - 1}" if seq else before_ms_of(f"{ms}-0"), fallback,
                   key=_id_key)

    def oldest_unread_new(self) -> str | None:
        """Id of the first new-job entry this leader has not processed (None: none)."""
        key = self.keys.jm_new(self.partition)
        pending = self.redis.xpending(key, GROUP_JM)
        if pending and pending.get("pending"):
            return _text(pending.get("min"))
        for group in self.redis.xinfo_groups(key):
            if _text(group["name"]) == GROUP_JM:
                last = _text(group["last-delivered-id"])
                after = self.redis.xrange(key, min="(" + last, count=1)
                return _text(after[0][0]) if after else None
        return None

    # ------------------------------------------------------------ other reads

    def instance_owner(self) -> int | None:
        """The instance owner's uid as recorded (None: not recorded)."""
        raw = self.redis.hget(self.keys.instance, "owner_uid")
        return int(raw) if raw else None

    def saved_progress(self) -> dict[int, Any]:
        """The exec progress the last leader saved, per job."""
        return {int(k): orjson.loads(v) for k, v in
                self.redis.hgetall(self.keys.exec_progress(self.partition)).items()}

    def stopped_queues(self, instance: Instance) -> set[str]:
        """Queues whose admin state says stopped, folded from the queue event stream."""
        log = []
        for _sid, fields in self.redis.xrange(self.keys.queues):
            try:
                log.append(proto.load_queue_event(fields))
            except proto.MessageError:
                continue  # a malformed admin entry cannot stop a queue
        states = fold_queue_events(instance.config().queues, log)
        # the core names the anonymous queue "" (a job record's queue when none is set)
        return {q or "" for q, s in states.items() if not s.started}

    def check_replies(self, replies: list[str]) -> None:
        """MessageError unless every reply key is a client's reply list: under
        ``{ns}:reply:``, and a list or nothing yet (one round trip, only for control
        messages that want an answer)."""
        if not replies:
            return
        prefix = self.reply_prefix
        for key in replies:
            if not key.startswith(prefix) or len(key) > MAX_REPLY_KEY:
                raise proto.MessageError(f"jm:ctl: reply key {key[:80]!r} is not under "
                                         f"{prefix!r}")
        pipe = self.redis.pipeline(transaction=False)
        distinct = sorted(set(replies))
        for key in distinct:
            pipe.type(key)
        for key, kind in zip(distinct, pipe.execute(), strict=True):
            name = _text(kind)
            if name not in ("none", "list"):
                raise proto.MessageError(f"jm:ctl: reply key {key[:80]!r} holds a {name}, "
                                         "not a list")

    def scheduler_epoch(self) -> int:
        """The epoch of the scheduler holding the partition's lease now; -1 when none does."""
        p = self.partition
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self.keys.sched_lease(p))
        pipe.get(self.keys.sched_fence(p))
        held, fence = pipe.execute()
        if not held and not reachability.may_judge(LEASE_TTL_MS / 1000):
            # Redis stalled lately: the lease may have expired during the stall while
            # its scheduler lives; it renews it within a TTL of answered time.
            held = True
        try:
            return int(fence) if held and fence else -1
        except ValueError:
            return -1  # only a scheduler writes it: nobody leads with that

    def stored_requests(self, jobids: list[int], between: Callable[[], object]
                        ) -> dict[int, str | None]:
        """The stored scheduler requests of pending jobs (their alloc messages carry
        them), READ_REQUESTS jobs per round trip, calling ``between`` after each (the
        leader renews its lease)."""
        out: dict[int, str | None] = {}
        for i in range(0, len(jobids), READ_REQUESTS):
            chunk = jobids[i:i + READ_REQUESTS]
            for jobid, raw in zip(chunk, self.hashes.field(chunk, jobhash.REQUEST),
                                  strict=True):
                out[jobid] = raw.decode("utf-8", "replace") if raw else None
            between()
        return out

    def news_not_stored(self, known: Container[int], news: list[proto.New]
                        ) -> dict[int, str]:
        """The new-job messages of an entry that describe no job the ingest stored and this
        job manager has yet to take (job id -> why), read against the stored eventlogs.

        A job the ingest created has exactly its ``submit`` and ``validate``
        events, matching the message, until the job manager takes it; a
        message naming anything else (no job, a job of another partition, one
        that already went on, or other facts) would make the commit fail on
        its eventlog, and replaying it could only fail again: it is refused.
        Jobs ``known`` (from the replay) are left to the core, which passes over them.
        """
        out: dict[int, str] = {}
        unknown: list[proto.New] = []
        for new in news:
            if new.id in known or not 0 <= new.id <= MAX_JOBID:
                continue  # known, or out of range (which the core refuses)
            owner = self.keys.partition_of(new.id)
            if owner != self.partition:
                out[new.id] = f"job {new.id} belongs to partition {owner}"
            else:
                unknown.append(new)
        if unknown:
            heads = self.store.eventlog_heads([new.id for new in unknown])
            for new, head in zip(unknown, heads, strict=True):
                why = not_as_stored(new, head)
                if why is not None:
                    out[new.id] = f"job {new.id}: {why}"
        return out


def not_as_stored(new: proto.New, head: list[RawEvent] | str) -> str | None:
    """Why a new-job message does not describe the job whose first stored eventlog
    entries are ``head`` (or why those cannot be read), None when it does."""
    if isinstance(head, str):
        return head
    if not head:
        return "no such job (its eventlog is empty)"
    names = [entry.name.decode("utf-8", "replace")[:40] for entry in head]
    if names != ["submit", "validate"]:
        shown = " ".join(names) + (" ..." if len(names) > 2 else "")
        return f"not a job waiting to be taken (its eventlog begins {shown})"
    submit = head[0]
    try:
        stamp = float(submit.timestamp)
        context = orjson.loads(submit.context) if submit.context else {}
    except (ValueError, orjson.JSONDecodeError):
        return "its submit event does not decode"
    if not isinstance(context, dict) or stamp != new.t_submit or (
            context.get("userid"), context.get("urgency"), context.get("flags", 0)) != (
            new.userid, new.urgency, new.flags):
        return "the message does not match the job's submit event"
    return None


def before_ms_of(stream_id: str) -> str:
    """The last stream id of the millisecond before ``stream_id``'s ("0-0" for the
    first): a position in another stream (the journal) that holds nothing written in
    or after that millisecond."""
    ms, _seq = _id_key(stream_id)
    return f"{ms - 1}-{2**64 - 1}" if ms > 0 else "0-0"


def _id_key(sid: str) -> tuple[int, int]:
    ms, _, seq = sid.partition("-")
    return int(ms), int(seq or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: Starts of one exec request entry that carry their job's facts (the rest are read).
CARRIED_PER_ENTRY = 256


def _carried(keys: Keys, journal: str, msgs: Sequence[proto.Message]
             ) -> list[tuple[str, bytes]]:
    """(job hash key, entry field) of the starts among ``msgs`` whose facts the
    commit copies into their request entry, so that the exec worker starts them
    without reading their hashes (only hashes in the commit's slot)."""
    out: list[tuple[str, bytes]] = []
    for msg in msgs:
        if isinstance(msg, proto.Start) and len(out) < CARRIED_PER_ENTRY:
            key = keys.job(msg.id)
            if keys.same_slot(key, journal):
                out.append((key, proto.FACTS_FIELD % msg.id))
    return out
