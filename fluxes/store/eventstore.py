"""The event store: atomic appends to job eventlogs and the journal, reads, replay, checkpoints.

Every write goes through :class:`Batch` and one call of ``commit.lua``: the
writer's fencing token is checked, each job's eventlog must be at the length
the writer expects, and then the events, the journal entries, outbound
messages and the acknowledgements of the inputs that caused them are written
together. A stale writer or a conflicting one writes nothing.

Why one module: the write side (:class:`Batch`) and the read side (:class:`EventStore`:
reads, replay, checkpoints) share the journal entry layout and commit.lua's argument
format, which must change together.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson
import redis

from fluxes.domain.job import events as ev
from fluxes.domain.job import privacy
from fluxes.domain.job.codec import CODEC_VERSION
from fluxes.domain.job.fastfold import fold_common
from fluxes.domain.job.model import Job, TransitionError, apply
from fluxes.domain.job.record import JobRecord, apply_record, packed_extra, unpacked_extra
from fluxes.domain.job.states import JobState
from fluxes.errors import FluxesError
from fluxes.store import jobfacts, reachability, scripts
from fluxes.store.direct import Direct
from fluxes.store.entries import decode_entry as decode_entry  # noqa: PLC0414 -- re-exported
from fluxes.store.jobfacts import (
    entry_reads,
    eventlog_entries,
    exists_reads,
    index_reads,
)
from fluxes.store.keys import Keys
from fluxes.store.scripts import lua_source

#: Entries fetched per XRANGE/XREAD round trip when scanning streams.
READ_BLOCK = 10_000

#: Time travel (``replay(until_time=...)``) reads the journal on for this many
#: seconds of Redis' clock (stream ids) past the first entry stamped later than
#: the moment asked for. It must cover how far the writers' clocks may differ
#: plus how long after stamping an event a writer may commit it.
UNTIL_MARGIN_S = 60.0


class FencedError(FluxesError):
    """The writer's fencing token is stale: another leader took over. Nothing was written."""


class ConflictError(FluxesError):
    """Some eventlogs were not at the length the writer expected. Nothing was written."""

    def __init__(self, conflicts: dict[int, int]) -> None:
        self.conflicts = conflicts
        shown = ", ".join(f"{j} has {n} events" for j, n in list(conflicts.items())[:5])
        super().__init__(f"eventlog conflict: {shown}")


class KeyTypeError(FluxesError):
    """A key the batch writes holds another type (a foreign write?). Nothing was written."""


class BadBatchError(FluxesError, ValueError):
    """``commit.lua`` refused a malformed op (a bug in the writer). Nothing was written."""


class NotWaitingError(FluxesError):
    """R writes for jobs that wait for no allocation (finished, running, unknown: a
    replayed or forged alloc request). Nothing was written."""

    def __init__(self, jobids: list[int]) -> None:
        self.jobids = jobids
        shown = ", ".join(str(j) for j in jobids[:5])
        more = f" and {len(jobids) - 5} more" if len(jobids) > 5 else ""
        super().__init__(f"commit refused, nothing written: job(s) {shown}{more} "
                         "wait for no allocation")


class ClaimedError(FluxesError):
    """The batch depends on request claims the writer no longer holds (they lapsed;
    another writer may have taken the requests over: fluxes.store.request_claims).
    Nothing was written."""

    def __init__(self, claims: list[str]) -> None:
        self.claims = claims
        super().__init__(f"commit refused, nothing written: {len(claims)} request claim(s) "
                         f"no longer held, e.g. {claims[0] if claims else '?'}")


#: Most fields of one outbound message (``Batch.xadd``): one XADD from Lua
#: cannot take more values than commit.lua unpacks per call.
MAX_MESSAGE_FIELDS = 500


def encode_context(ctx: Mapping[str, Any]) -> bytes:
    """Context as compact JSON, or empty bytes for an empty context."""
    return orjson.dumps(ctx) if ctx else b""


class Batch:
    """Effects of one processing step in one partition, to be committed atomically."""

    __slots__ = ("_args", "_blobs", "_index", "_keys", "events", "names", "partition")

    def __init__(self, keys: Keys, partition: int, fence: str | None = None) -> None:
        self.partition = partition
        self.names = keys
        self._keys: list[str] = [fence or keys.jm_fence(partition), keys.journal(partition)]
        self._index: dict[str, int] = {}
        self._args: list[Any] = []
        #: references added to blobs, by key index: [count, data]
        self._blobs: dict[int, list[Any]] = {}
        self.events = 0

    def _key(self, key: str) -> int:
        index = self._index.get(key)
        if index is None:
            self._keys.append(key)
            index = self._index[key] = len(self._keys)
        return index

    def __bool__(self) -> bool:
        return bool(self._args or self._blobs)

    def append(self, eventlog_key: str, jobid: int, expected: int,
               events: Sequence[ev.Event],
               extras: Sequence[Mapping[str, Any] | None] | None = None,
               owner: int | None = None, salt: bytes = b"") -> None:
        """Append ``events`` to a job's eventlog (which must hold ``expected`` events).

        With the job's ``owner``, the text private to the owner (exception notes,
        dependency descriptions, the summary's cwd and dependencies) goes to the
        owner's private hash instead, in this batch, and the public events hold
        stand-ins (:mod:`fluxes.domain.job.privacy`; ``salt`` keys the masks).
        """
        args = self._args
        args += ("E", self._key(eventlog_key), self._key(self.names.job(jobid)), jobid,
                 expected, len(events))
        private: dict[str, bytes] = {}
        for i, event in enumerate(events):
            extra = extras[i] if extras is not None else None
            context = event.context()
            if owner is not None:
                public, secret = privacy.split(event.event_name, context, salt) \
                    if context else (None, {})
                if public is not None:
                    context = public
                    private[str(expected + i)] = orjson.dumps(secret)
                if extra:
                    summary, hidden = privacy.split_summary(extra)
                    if summary is not None:
                        extra = summary
                        if hidden:
                            private[privacy.SUMMARY_FIELD] = orjson.dumps(hidden)
            args += (event.event_name, repr(event.timestamp), encode_context(context),
                     packed_extra(extra) if extra else b"")
        self.events += len(events)
        if private:
            assert owner is not None
            self.hset(self.names.private(self.partition, owner, jobid), private)

    def journal_only(self, jobid: int, event: ev.Event) -> None:
        """Add a journal entry that is not part of the job's eventlog (annotations)."""
        self._args += ("J", jobid, event.event_name, repr(event.timestamp),
                       encode_context(event.context()))

    def hset(self, key: str, mapping: Mapping[str, str | bytes | int | float]) -> None:
        """Set hash fields."""
        if not mapping:
            return
        self._args += ("H", self._key(key), len(mapping))
        for field, value in mapping.items():
            self._args += (field, value)

    def hdel(self, key: str, fields: Sequence[str]) -> None:
        """Delete hash fields."""
        if fields:
            self._args += ("D", self._key(key), len(fields), *fields)

    def xadd(self, key: str, fields: Mapping[str, str | bytes | int | float]
             | Mapping[bytes, bytes]) -> None:
        """Add a message to a stream (1 to ``MAX_MESSAGE_FIELDS`` fields; ValueError otherwise)."""
        if not fields or len(fields) > MAX_MESSAGE_FIELDS:
            raise ValueError(f"a message needs 1 to {MAX_MESSAGE_FIELDS} fields, "
                             f"got {len(fields)}")
        self._args += ("X", self._key(key), len(fields))
        for field, value in fields.items():
            self._args += (field, value)

    def xadd_with_facts(self, key: str, fields: Mapping[bytes, bytes],
                        names: Sequence[str], jobs: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`xadd`, and for each (job hash key, field) of ``jobs`` the ``names``d
        fields of that hash as the script finds them, packed into ``field`` (commit.lua's
        Y op; :func:`fluxes.store.jobhash.unpack_facts` reads them back)."""
        if not jobs:
            self.xadd(key, fields)
            return
        if not fields or not names or len(fields) + len(jobs) > MAX_MESSAGE_FIELDS:
            raise ValueError(f"a message needs 1 to {MAX_MESSAGE_FIELDS} fields, "
                             f"got {len(fields)} + {len(jobs)}")
        args: list[Any] = ["Y", self._key(key), len(fields)]
        for field, value in fields.items():
            args += (field, value)
        args += (len(jobs), len(names), *names)
        for job_key, field in jobs:
            args += (self._key(job_key), field)
        self._args += args

    def xack(self, key: str, group: str, ids: Sequence[bytes | str]) -> None:
        """Acknowledge consumed input messages of ``group`` on stream ``key``."""
        if ids:
            self._args += ("A", self._key(key), group, len(ids), *ids)

    def set_if_waiting(self, job_key: str, eventlog_key: str, jobid: int, field: str,
                       value: bytes | str) -> None:
        """HSET ``field`` of a job hash, fenced on the job: only while the job waits for
        an allocation (its eventlog shows none yet), else the commit fails with
        :class:`NotWaitingError` naming the job (the scheduler's R, with SUCCESS)."""
        self._args += ("R", self._key(job_key), self._key(eventlog_key), jobid, field, value)

    def hincrby(self, key: str, increments: Mapping[str, int]) -> None:
        """HINCRBY each field of a hash (counters)."""
        if not increments:
            return
        self._args += ("I", self._key(key), len(increments))
        for field, by in increments.items():
            self._args += (field, by)

    def set(self, key: str, value: bytes | str, ttl_ms: int = 0) -> None:
        """Set a string key (with a TTL in milliseconds when > 0)."""
        self._args += ("S", self._key(key), ttl_ms, value)

    def push_reply(self, key: str, value: bytes | str, ttl_ms: int) -> None:
        """Append a reply to a list a client waits on with BLPOP, expiring after ``ttl_ms``."""
        self._args += ("L", self._key(key), ttl_ms, value)

    def blob_ref(self, key: str, data: bytes) -> None:
        """Add a reference to the content-addressed blob ``key`` holding ``data`` (created
        when missing); a batch sends one op per blob, however many jobs name it."""
        index = self._key(key)
        found = self._blobs.get(index)
        if found is None:
            self._blobs[index] = [1, data]
        else:
            found[0] += 1

    def blob_release(self, job_key: str, field: str, blob_key: str, digest: str) -> None:
        """Release the reference a job hash holds in ``field`` to ``blob_key`` (only while
        the field still names ``digest``: releasing twice releases once)."""
        self._args += ("U", self._key(job_key), field, self._key(blob_key), digest)

    def claimed(self, key: str, token: str, drop: bool = False) -> None:
        """Make the batch depend on the request claim ``key``: refused with
        :class:`ClaimedError` unless the claim holds ``token``; ``drop`` deletes it
        with the batch's writes."""
        self._args += ("C", self._key(key), token, "1" if drop else "0")

    def script_args(self, token: str) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV for ``commit.lua``."""
        blobs = [x for index, (n, data) in self._blobs.items() for x in ("B", index, n, data)]
        return self._keys, [token, *self._args, *blobs]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit wrote: the number of events and the last journal id."""

    events: int
    journal_id: str


class JournalEntry(NamedTuple):
    """One journal entry: stream id, job, eventlog position, the event and its extras."""

    id: str
    jobid: int
    seq: int | None
    name: bytes
    timestamp: bytes
    context: bytes | None
    extra: bytes | None

    def event(self) -> ev.Event:
        """The decoded event (raises EventError if the entry is malformed)."""
        return decode_entry(self.name, self.timestamp, self.context)

    def extra_dict(self) -> dict[str, Any]:
        """The journal-only extras (e.g. a job summary on submit), or {}."""
        if not self.extra:
            return {}
        return unpacked_extra(orjson.loads(self.extra)) or {}


def journal_entry(stream_id: bytes, fields: Mapping[bytes, bytes] | list[bytes]
                  ) -> JournalEntry:
    """Decode a journal entry's fields (a dict, or the flat list of a raw reply).

    Raises ValueError (EventError) when a field is missing or not a number.
    """
    try:  # zero-cost until something raises: this is the replay hot path
        if isinstance(fields, list):
            # commit.lua always writes j, s, n, t first: read them by position
            if len(fields) >= 8 and fields[0] == b"j" and fields[2] == b"s" \
                    and fields[4] == b"n" and fields[6] == b"t":
                ctx = extra = None
                for i in range(8, len(fields) - 1, 2):
                    if fields[i] == b"c":
                        ctx = fields[i + 1]
                    elif fields[i] == b"x":
                        extra = fields[i + 1]
                return JournalEntry(stream_id.decode(), int(fields[1]), int(fields[3]),
                                    fields[5], fields[7], ctx, extra)
            fields = dict(zip(fields[::2], fields[1::2], strict=False))
        seq = fields.get(b"s")
        return JournalEntry(
            stream_id.decode(), int(fields[b"j"]), int(seq) if seq is not None else None,
            fields[b"n"], fields[b"t"], fields.get(b"c"), fields.get(b"x"),
        )
    except KeyError as exc:
        raise ev.EventError(f"journal entry {stream_id!r:.40}: missing field {exc}") from None
    except ValueError as exc:
        raise ev.EventError(f"journal entry {stream_id!r:.40}: {str(exc)[:80]}") from None


@dataclass
class ReplayResult:
    """Job records rebuilt from the journal, the position reached and any broken jobs."""

    records: dict[int, JobRecord]
    last_id: str
    events: int
    broken: dict[int, str]
    #: jobs whose ``purge`` entry was folded (they are in no other field)
    purged: set[int] = dataclasses.field(default_factory=set)
    #: history before this time (UNIX seconds) is gone: trimmed from the journal and
    #: not in the archive read (None: the replay saw all of it)
    purged_before: float | None = None

    @property
    def jobs(self) -> dict[int, Job]:
        """Just the job states, by id."""
        return {jobid: rec.job for jobid, rec in self.records.items()}


@dataclass(frozen=True)
class Checkpoint:
    """A job manager snapshot: active job records and the journal id they include."""

    journal_id: str
    records: dict[int, JobRecord]
    extra: dict[str, Any]


class EventStore:
    """Reads and atomic writes of job events for one fluxes instance."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self._commit = lua_source("commit")
        #: the text of commit.lua (for callers that send its call with other commands)
        self.commit_source = self._commit
        # A second client on the same connections whose XRANGE replies stay raw
        # (flat field lists): redis-py's pairs-to-dict conversion cost more than
        # everything else on the replay path.
        pool = getattr(client, "connection_pool", None)
        self._raw_lists = pool is not None
        if pool is not None:
            self._raw = redis.Redis(connection_pool=pool)
            self._raw.set_response_callback("XRANGE", _raw_reply)
        else:
            # a cluster client has no single pool: take its parsed replies
            self._raw = client

    def batch(self, partition: int = 0, fence: str | None = None) -> Batch:
        """A new empty batch for ``partition`` (fenced by the job manager's key by default)."""
        return Batch(self.keys, partition, fence)

    # ------------------------------------------------------------ writes

    def direct(self, anchor: str) -> Direct:
        """Hot-path calls for the slot of ``anchor`` (the client's shared Direct in this
        thread)."""
        return Direct.of(self.redis, anchor)

    def commit(self, batch: Batch, token: str = "") -> CommitResult:
        """Write ``batch`` atomically; raise FencedError / ConflictError and write nothing."""
        keys, args = batch.script_args(token)
        try:
            # keys[1] is the partition journal: every key of a batch is in its slot
            result = self.direct(keys[1]).fcall(self._commit, keys, args)
        except redis.ResponseError as exc:
            raise commit_error(exc) from None
        return commit_result(result)

    def commit_many(self, batches: Sequence[Batch], token: str = "") -> list[CommitResult]:
        """Commit several batches in one round trip (each one atomic on its own)."""
        anchors = {batch.script_args(token)[0][1] for batch in batches}
        if len(batches) == 1 or len(anchors) != 1:
            # batches of several partitions (maybe on several cluster nodes): one call each
            return [self.commit(batch, token) for batch in batches]
        direct = self.direct(anchors.pop())
        commands = []
        for batch in batches:
            keys, args = batch.script_args(token)
            commands.append(scripts.fcall_command(self._commit, keys, args))
        results = direct.execute(commands)
        if any(scripts.is_missing(r) for r in results):
            scripts.load_via(direct.call, self._commit)
            results = direct.execute(commands)
        out = []
        for result in results:
            if isinstance(result, redis.ResponseError):
                raise commit_error(result)
            out.append(commit_result(result))
        return out

    # ------------------------------------------------------------ reads

    def eventlog_entries(self, jobid: int) -> list[tuple[str, ev.Event]]:
        """The job's eventlog as (stream id, event) pairs; [] for an unknown job. The ids
        are the events' journal ids (fluxes.store.jobfacts: a job's eventlog is an index
        of journal entries), or those of an eventlog of the previous layout."""
        [entries] = eventlog_entries(self.redis, self.keys, [jobid])
        return [(sid.decode(), decode_entry(f[b"n"], f[b"t"], f.get(b"c")))
                for sid, f in entries or []]

    def eventlog(self, jobid: int) -> list[ev.Event]:
        """The job's events in order; [] for an unknown job."""
        return [event for _, event in self.eventlog_entries(jobid)]

    def eventlog_heads(self, jobids: Sequence[int], count: int = 3
                       ) -> list[list[RawEvent] | str]:
        """The first ``count`` entries of each job's eventlog as stored (name, timestamp,
        context; one round trip for jobs of one partition, one per partition
        otherwise), or why they cannot be read: what the job manager compares a
        new-job message with (raw: decoding them would cost more than the read)."""
        by_slot: dict[str, list[int]] = {}
        for n, jobid in enumerate(jobids):
            key = self.keys.eventlog(jobid)
            by_slot.setdefault(key[:key.index("}") + 1], []).append(n)
        out: list[list[RawEvent] | str] = [""] * len(jobids)
        for positions in by_slot.values():
            keys = [self.keys.eventlog(jobids[n]) for n in positions]
            direct = self.direct(keys[0])
            indexes = jobfacts.indexes_in(direct.execute(
                [read for n in positions for read in index_reads(self.keys, jobids[n])]))
            # then the journal entries the indexes name (an eventlog of the previous
            # layout, a stream, is read itself)
            commands: list[tuple[Any, ...]] = []
            plan: list[tuple[int, int]] = []
            for n, index in zip(positions, indexes, strict=True):
                if isinstance(index, redis.ResponseError) and \
                        not str(index).startswith("WRONGTYPE"):
                    out[n] = one_line_error(index)
                    plan.append((0, -2))
                    continue
                reads, whole = entry_reads(self.keys, jobids[n], index, count)
                plan.append((len(commands), -1 if whole else len(reads)))
                commands += reads
            replies = jobfacts.entries_read(direct.execute, commands) if commands else []
            for n, (first, many) in zip(positions, plan, strict=True):
                if many == -2:
                    continue
                if many == -1:
                    out[n] = _heads(replies[first])
                    continue
                found = replies[first:first + many]
                bad = next((r for r in found if isinstance(r, redis.ResponseError)), None)
                out[n] = _heads(bad if bad is not None else [e for r in found for e in r])
        return out

    def job_exists(self, jobid: int) -> bool:
        """True when the job has an eventlog."""
        return jobfacts.has_eventlog(self.redis, self.keys, jobid)

    def replay_job(self, jobid: int) -> Job:
        """Rebuild one job from its own eventlog."""
        job = Job(jobid)
        for event in self.eventlog(jobid):
            job = apply(event, job)
        return job

    def iter_journal(self, partition: int, after: str = "0-0", until: str = "+",
                     block: int = READ_BLOCK) -> Iterator[list[JournalEntry]]:
        """Journal entries strictly after ``after`` up to ``until``, in blocks."""
        for entries in self._iter_raw(partition, after, until, block):
            yield [journal_entry(sid, fields) for sid, fields in entries]

    def _iter_raw(self, partition: int, after: str = "0-0", until: str = "+",
                  block: int = READ_BLOCK, archive: Archive | None = None
                  ) -> Iterator[list[tuple[bytes, list[bytes]]]]:
        """Raw journal entries (id, flat field list) strictly after ``after``: with
        ``archive``, first the archived ones, then the journal after them."""
        if archive is not None:
            for entries in archive.read(after, None if until == "+" else until, block):
                yield entries
                after = entries[-1][0].decode()
        key = self.keys.journal(partition)
        start = "(" + after if after not in ("0-0", "-") else "-"
        while True:
            entries = self._raw.xrange(key, min=start, max=until, count=block)
            if not entries:
                return
            if not self._raw_lists:
                entries = [(sid, [x for kv in fields.items() for x in kv])
                           for sid, fields in entries]
            yield entries
            start = "(" + entries[-1][0].decode()
            if len(entries) < block:
                return

    def journal_last_id(self, partition: int) -> str:
        """The id of the newest journal entry ("0-0" when empty)."""
        last = self.redis.xrevrange(self.keys.journal(partition), count=1)
        return last[0][0].decode() if last else "0-0"

    def history(self, partition: int, after: str = "0-0", until: str = "+",
                archive: Archive | None = None
                ) -> tuple[Iterator[list[JournalEntry]], float | None]:
        """Journal entries after ``after`` in blocks, reading ``archive`` first for what
        was trimmed (``fluxes eventlog journal``), and the time before which history
        is gone for this reader (None: none is): see :meth:`purged_before`."""
        gap = self.purged_before(partition, archive) if after in ("0-0", "-") else None
        blocks = self._iter_raw(partition, after, until, archive=archive)
        return ([journal_entry(sid, f) for sid, f in entries] for entries in blocks), gap

    def purged_before(self, partition: int, archive: Archive | None) -> float | None:
        """The time before which the partition's history is gone for a reader of the
        journal and ``archive``: trimmed from the journal and not archived, or
        archived where ``archive`` does not reach (another host's directory); None
        when nothing is missing."""
        from fluxes.store.retention import read_trim_state

        trim = read_trim_state(self.redis, self.keys, partition)
        if not trim.was_trimmed:
            return None
        if archive is None or not archive.holds(trim.trimmed):
            return trim.trimmed_t if trim.trimmed_t is not None else 0.0
        if trim.lost_until != "0-0":
            return trim.lost_t if trim.lost_t is not None else 0.0
        return None

    def replay(self, partition: int, start: Checkpoint | None = None, until: str = "+",  # noqa: C901 -- the per-entry hot loop, kept inline for speed
               until_time: float | None = None, drop_inactive: bool = False,
               until_margin: float = UNTIL_MARGIN_S,
               archive: Archive | None = None) -> ReplayResult:
        """Fold the journal (after ``start``, if given) into job records.

        ``until_time`` gives every job as it was at that UNIX time (time
        travel): each job's entries are folded up to, not including, its first
        one stamped later than ``until_time``. Writers on several hosts need
        not stamp in journal order, so reading does not stop at the first
        later stamp but goes on for ``until_margin`` seconds (by stream id,
        Redis' clock) past that entry. ``drop_inactive`` forgets jobs once
        they are INACTIVE (what a job manager needs). A job whose events do
        not apply is reported in ``broken`` with the reason, and its later
        events are skipped.

        A ``purge`` entry drops its job (listed in ``purged``; with
        ``until_time``, only a purge stamped by then). Once the journal was
        trimmed, the entries of a job whose beginning went with the trim are
        passed over (only purged jobs' entries are trimmed, fluxes.store.retention);
        ``archive`` is read first for what was trimmed, and ``purged_before``
        says from when history is whole.
        """
        from fluxes.store.retention import read_trim_state

        records: dict[int, JobRecord] = dict(start.records) if start else {}
        broken: dict[int, str] = {}
        last = start.journal_id if start else "0-0"
        count = 0
        trimmed = read_trim_state(self.redis, self.keys, partition).was_trimmed
        purged: set[int] = set()
        orphans: set[bytes] = set()  # jobs whose beginning was trimmed
        gap = None
        if start is None and trimmed:
            gap = self.purged_before(partition, archive)
        else:
            archive = None  # after a checkpoint: the journal holds everything needed
        # jobs that reached an entry stamped after until_time: their later
        # entries are skipped too, since a job's state is a fold of a prefix
        frozen: set[bytes] = set()
        stop_ms: int | None = None  # read no entry Redis stamped after this
        # With drop_inactive, jobs first seen in this replay are buffered raw
        # and folded only if they are still active at the end: on a busy
        # instance most jobs finish, and their events never need decoding.
        buffered: dict[bytes, list[tuple[bytes, list[bytes]]]] = {}
        # Without either, jobs first seen here are buffered too, and folded
        # whole when they end: most have the common history, which
        # fold_common folds in one step (docs/eventlog.md, "Figures").
        whole_jobs = until_time is None and not drop_inactive
        fold = self._fold
        for block in self._iter_raw(partition, after=last, until=until, archive=archive):
            for raw in block:
                fields = raw[1]
                if until_time is not None and stop_ms is not None \
                        and _id_ms(raw[0]) > stop_ms:
                    self._fold_buffered(buffered, records, broken)
                    return ReplayResult(records, last, count, broken, purged, gap)
                name = fields[5] if len(fields) > 5 and fields[4] == b"n" \
                    else _entry_name(fields)
                if name == _PURGE or trimmed:
                    jobkey = fields[1] if fields[0] == b"j" else _field_bytes(fields, b"j")
                    if name == _PURGE:
                        if until_time is None or _job_and_stamp(raw)[1] <= until_time:
                            self._drop(jobkey, records, broken, buffered, purged)
                        continue
                    if jobkey in orphans:
                        continue
                    if name != b"submit" and jobkey not in buffered and not (
                            jobkey.isdigit() and (int(jobkey) in records
                                                  or int(jobkey) in broken)):
                        orphans.add(jobkey)
                        continue
                if until_time is not None:
                    jobkey, stamp = _job_and_stamp(raw)
                    if jobkey in frozen:
                        continue
                    if stamp > until_time:
                        frozen.add(jobkey)
                        if stop_ms is None:
                            stop_ms = _id_ms(raw[0]) + math.ceil(until_margin * 1000)
                        continue
                count += 1
                if whole_jobs:
                    # jobs first seen here are buffered until their end and folded
                    # whole (in one step when their history is the common one)
                    jobkey = fields[1] if fields[0] == b"j" else _field_bytes(fields, b"j")
                    pending = buffered.get(jobkey)
                    if pending is not None:
                        pending.append(raw)
                        if name in _TERMINAL:
                            del buffered[jobkey]
                            self._fold_whole(int(jobkey), pending, records, broken)
                        continue
                    if name == b"submit" and jobkey.isdigit() and int(jobkey) not in records \
                            and int(jobkey) not in broken:
                        buffered[jobkey] = [raw]
                        continue
                if drop_inactive:
                    jobkey = fields[1] if fields[0] == b"j" else _field_bytes(fields, b"j")
                    if int(jobkey) not in records:
                        if name == b"submit":
                            buffered[jobkey] = [raw]
                        else:
                            pending = buffered.get(jobkey)
                            if pending is not None:
                                if name in _TERMINAL:
                                    del buffered[jobkey]
                                else:
                                    pending.append(raw)
                        continue
                entry = journal_entry(raw[0], fields)
                jobid = entry.jobid
                if jobid in broken:
                    continue
                fold(records, broken, entry)
                if drop_inactive and jobid in records and records[jobid].job.state is _INACTIVE:
                    del records[jobid]
            if block:
                last = block[-1][0].decode()
        self._fold_buffered(buffered, records, broken)
        return ReplayResult(records, last, count, broken, purged, gap)

    @staticmethod
    def _drop(jobkey: bytes, records: dict[int, JobRecord], broken: dict[int, str],
              buffered: dict[bytes, list[tuple[bytes, list[bytes]]]],
              purged: set[int]) -> None:
        """Forget a purged job, whatever replay held of it."""
        buffered.pop(jobkey, None)
        if jobkey.isdigit():
            jobid = int(jobkey)
            records.pop(jobid, None)
            broken.pop(jobid, None)
            purged.add(jobid)

    @staticmethod
    def _fold(records: dict[int, JobRecord], broken: dict[int, str],
              entry: JournalEntry) -> None:
        jobid = entry.jobid
        record = records.get(jobid)
        if record is not None and entry.seq is not None and entry.seq < record.job.seq:
            # Already in the record: a checkpoint may claim a position earlier
            # than some of the events it includes (see the job manager's
            # checkpoint), so replay skips what it has, by eventlog position.
            return
        try:
            records[jobid] = apply_record(record, jobid, entry.event(),
                                          entry.extra_dict() if entry.extra else None)
        except (ev.EventError, TransitionError, ValueError) as exc:
            broken[jobid] = str(exc)
            records.pop(jobid, None)

    def _fold_whole(self, jobid: int, raws: list[tuple[bytes, list[bytes]]],
                    records: dict[int, JobRecord], broken: dict[int, str]) -> None:
        """Fold a whole job (from its submit to its end): in one step when its
        history is the common one, else entry by entry."""
        record = fold_common(jobid, [fields for _sid, fields in raws])
        if record is not None:
            records[jobid] = record
            return
        for sid, fields in raws:
            entry = journal_entry(sid, fields)
            if entry.jobid in broken:
                break
            self._fold(records, broken, entry)

    def _fold_buffered(self, buffered: dict[bytes, list[tuple[bytes, list[bytes]]]],
                       records: dict[int, JobRecord], broken: dict[int, str]) -> None:
        for raws in buffered.values():
            for sid, fields in raws:
                entry = journal_entry(sid, fields)
                if entry.jobid in broken:
                    break
                self._fold(records, broken, entry)
        buffered.clear()

    # ------------------------------------------------------------ checkpoints

    def checkpoint_blob(self, records: Iterable[JobRecord], journal_id: str,
                        extra: Mapping[str, Any] | None = None) -> bytes:
        """Serialize a checkpoint (zlib-compressed JSON; zlib's checksum catches corruption)."""
        doc = {"v": CODEC_VERSION, "journal": journal_id,
               "jobs": [r.to_obj() for r in records], "extra": dict(extra or {})}
        return zlib.compress(orjson.dumps(doc), 1)

    def load_checkpoint(self, partition: int) -> Checkpoint | None:
        """The partition's checkpoint, or None when it is missing, corrupt or outdated."""
        blob = self.redis.get(self.keys.checkpoint(partition))
        if not blob:
            return None
        try:
            doc = orjson.loads(zlib.decompress(blob))
            if doc.get("v") != CODEC_VERSION:
                return None
            records = {}
            for obj in doc["jobs"]:
                record = JobRecord.from_obj(obj)
                records[record.id] = record
            return Checkpoint(str(doc["journal"]), records, dict(doc.get("extra") or {}))
        except (zlib.error, orjson.JSONDecodeError, ValueError, KeyError, TypeError,
                AttributeError):
            return None

    def restore(self, partition: int, drop_inactive: bool = True) -> tuple[ReplayResult, bool]:
        """Checkpoint plus the journal after it; a bad checkpoint means a full replay.

        Returns the replay and whether a checkpoint was used. A job of the
        checkpoint that was purged after it, its end and its ``purge`` entry trimmed
        since (a checkpoint may be older than the journal's trim point), is
        dropped: its eventlog is gone.
        """
        from fluxes.store.private import reveal_records

        checkpoint = self.load_checkpoint(partition)
        result = self.replay(partition, start=checkpoint, drop_inactive=drop_inactive)
        # the public events hold stand-ins for dependency text the job manager needs
        reveal_records(self.redis, self.keys, result.records)
        if checkpoint is not None and result.records:
            from fluxes.store.direct import execute_grouped
            from fluxes.store.retention import read_trim_state

            if read_trim_state(self.redis, self.keys, partition).was_trimmed:
                ids = sorted(result.records)
                found = execute_grouped(self.redis, [(self.keys.eventlog(j), read)
                                                     for j in ids
                                                     for read in exists_reads(self.keys, j)])
                for k, jobid in enumerate(ids):
                    if not jobfacts.exists_of(*found[2 * k:2 * k + 2]):
                        del result.records[jobid]
                        result.purged.add(jobid)
        return result, checkpoint is not None

    # ------------------------------------------------------------ export

    def export_rfc18(self, jobid: int) -> list[dict[str, Any]]:
        """The job's eventlog as RFC 18 objects (timestamp, name, context)."""
        return [event.to_rfc18() for event in self.eventlog(jobid)]


_INACTIVE = JobState.INACTIVE
#: The journal-only entry of a purged job (fluxes.domain.retention.PURGE_EVENT).
_PURGE = b"purge"


class Archive(Protocol):
    """What replay reads trimmed journal entries from (fluxes.store.archive)."""

    def read(self, after: str = "0-0", until: str | None = None,
             block: int = READ_BLOCK) -> Iterator[list[tuple[bytes, list[bytes]]]]:
        """Archived raw entries after ``after`` (up to ``until``), in order, in blocks."""
        ...

    def holds(self, stream_id: str) -> bool:
        """True when the archive holds every archived entry up to ``stream_id``."""
        ...
#: Events after which a job is INACTIVE.
_TERMINAL = frozenset({b"clean", b"invalidate"})


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


class RawEvent(NamedTuple):
    """An eventlog entry's fields as stored: name, timestamp, context (None: empty)."""

    name: bytes
    timestamp: bytes
    context: bytes | None


def _heads(reply: Any) -> list[RawEvent] | str:
    """The entries of a raw XRANGE reply, or why they cannot be read."""
    if isinstance(reply, redis.ResponseError):
        return one_line_error(reply)
    events: list[RawEvent] = []
    try:
        for _sid, fields in reply:
            if isinstance(fields, list) and len(fields) in (4, 6) and fields[0] == b"n" \
                    and fields[2] == b"t" and (len(fields) == 4 or fields[4] == b"c"):
                # as commit.lua writes them: n, t, then c when there is a context
                events.append(RawEvent(fields[1], fields[3],
                                       fields[5] if len(fields) == 6 else None))
                continue
            pairs = fields if isinstance(fields, dict) else \
                dict(zip(fields[::2], fields[1::2], strict=False))
            events.append(RawEvent(pairs[b"n"], pairs[b"t"], pairs.get(b"c")))
    except (KeyError, TypeError, ValueError) as exc:
        return f"its eventlog does not decode: {one_line_error(exc)}"
    return events


def one_line_error(exc: BaseException) -> str:
    """An exception as one short line."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _entry_name(fields: list[bytes]) -> bytes:
    """The event name of a journal entry (eventlog entries have ``s`` before ``n``)."""
    if len(fields) > 5 and fields[4] == b"n":
        return fields[5]
    if len(fields) > 3 and fields[2] == b"n":
        return fields[3]
    try:
        return _field_bytes(fields, b"n")
    except KeyError:
        return b""


def _field_bytes(fields: list[bytes], name: bytes) -> bytes:
    """A field of a flat field list (KeyError when absent)."""
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            return fields[i + 1]
    raise KeyError(name)


def _field(fields: list[bytes], name: bytes, hint: int) -> float:
    """A numeric field, read at its usual position ``hint`` when it is there."""
    if hint < len(fields) and fields[hint - 1] == name:
        return float(fields[hint])
    return float(_field_bytes(fields, name))


def _job_and_stamp(raw: tuple[bytes, list[bytes]]) -> tuple[bytes, float]:
    """A raw journal entry's job id (as stored) and timestamp; EventError if missing."""
    fields = raw[1]
    try:
        jobkey = fields[1] if fields[0] == b"j" else _field_bytes(fields, b"j")
        return jobkey, _field(fields, b"t", 7)
    except (KeyError, ValueError, IndexError):
        raise ev.EventError(f"journal entry {raw[0]!r:.40}: no job id or timestamp") from None


def _id_ms(stream_id: bytes) -> int:
    """The milliseconds part of a stream id (Redis' clock when it was added)."""
    return int(stream_id.partition(b"-")[0])


def commit_error(exc: redis.ResponseError) -> FluxesError | redis.ResponseError:
    """The FluxesError for an error reply of ``commit.lua`` (see its header); a Redis that
    refused the whole script (full, busy, its disk failing) is ``exc`` itself, which the
    worker's loop waits out."""
    if reachability.is_stall(exc):
        return exc
    text = str(exc)
    if text.startswith("FENCED unfenced"):
        return FencedError(text[7:])
    if text.startswith("FENCED"):
        return FencedError(f"stale writer refused (current epoch {text[7:] or 'none'})")
    if text.startswith("KEYTYPE "):
        return KeyTypeError(f"commit refused, nothing written: {text[8:]}")
    if text.startswith("BADOP "):
        return BadBatchError(f"commit refused, nothing written: malformed op {text[6:]}")
    if text.startswith("NOTWAITING "):
        return NotWaitingError([int(j) for j in text[11:].split(",") if j.isdigit()])
    if text.startswith("CLAIMED "):
        return ClaimedError(text[8:].split(","))
    if text.startswith("CONFLICT "):
        conflicts = {}
        for item in text[9:].split(","):
            jobid, _, actual = item.partition(":")
            conflicts[int(jobid)] = int(actual)
        return ConflictError(conflicts)
    return FluxesError(f"commit failed: {text}")


def commit_result(result: Any) -> CommitResult:
    """The CommitResult of ``commit.lua``'s reply."""
    count, last = result
    return CommitResult(int(count), last.decode() if isinstance(last, bytes) else str(last))


def commit_then(client: redis.Redis, source: str, keys: Sequence[str], args: Sequence[Any],
                command: list[Any]) -> tuple[CommitResult, Any]:
    """``commit.lua`` with ``keys``/``args``, then ``command`` (a read of the same slot),
    sent in one write: one round trip for both. The commit's result (raising as
    :func:`commit_error` says), and ``command``'s reply (an error reply as is)."""
    commit = scripts.fcall_command(source, keys, args)
    direct = Direct.of(client, keys[1])
    reply, got = direct.execute([commit, command])
    if scripts.is_missing(reply):
        # a server without our function: nothing was written, the read is good
        scripts.load_via(direct.call, source)
        reply = direct.execute([commit])[0]
    if isinstance(reply, redis.ResponseError):
        raise commit_error(reply)
    return commit_result(reply), got
