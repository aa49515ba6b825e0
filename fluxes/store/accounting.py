"""Accounting in Redis: the admin stream of banks and associations, and the usage read
model folded from each partition's journal.

**Admin stream** (``{ns}:accounting``): one entry per change (field ``d``, the
event's JSON). :func:`append_admin` folds the stream, checks the new event
against the state it reaches (:func:`fluxes.domain.accounting.banks.apply`)
and appends it only if the stream still ends where it was read
(``accounting_admin.lua``), so two administrators racing never write an
event that the other's made impossible.

**Usage** (per partition, :class:`UsageStore`): ``{p}:acct:usage``
(association -> totals, and the half-life they were decayed with),
``{p}:acct:open`` (the active jobs), ``{p}:acct:jobs`` and ``{p}:acct:ended``
(ended allocations, for reports over a period). One accounting worker at a
time folds a partition's journal, the holder of the partition's accounting
lease, exactly as the job-list worker does: plain XREAD after the folded
position, kept as the ``accounting`` consumer group's last-delivered id,
and each block written with the new position in one step fenced by the
lease's token (``accounting_write.lua``), so after any crash position and
model agree and a deposed folder writes nothing. :func:`rebuild` (``fluxes
admin rebuild-accounting``) refolds from scratch the same way.

Why one module: the admin stream, the usage store, its folder, the rebuild and
the trim-point base copy share one key layout and one fenced write step; they
change together, and a reader of one needs the others' invariants in view.
"""

from __future__ import annotations

import hashlib
import os
import socket
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import (
    AccountError,
    AccountEvent,
    Accounts,
    apply,
    event_from_dict,
    replay,
)
from fluxes.domain.accounting.fairshare import FairShareTable, fair_share
from fluxes.domain.accounting.limits import HeldJob, Holdings, holdings
from fluxes.domain.accounting.usage import (
    Accum,
    AssocKey,
    Changes,
    Figures,
    JobCharge,
    OpenJob,
    UsageError,
    UsageState,
    add_usage,
    decayed_usage,
    minus_cleared,
)
from fluxes.domain.job.record import unpacked_extra
from fluxes.store.direct import Direct
from fluxes.store.eventstore import FencedError
from fluxes.store.groups import ensure_group
from fluxes.store.joblist_read import id_before
from fluxes.store.keys import GROUP_ACCOUNTING, Keys
from fluxes.store.lease import LEASE_TTL_MS, Lease
from fluxes.store.scripts import lua_source

WRITE_LUA = lua_source("accounting_write")
_WRITE_SHA = hashlib.sha1(WRITE_LUA.encode()).hexdigest()
ADMIN_LUA = lua_source("accounting_admin")
_ADMIN_SHA = hashlib.sha1(ADMIN_LUA.encode()).hexdigest()
#: Arguments per op at most: Lua's unpack() has a stack limit (8000 in Redis).
_CHUNK = 2000
#: Key indexes in KEYS of the fenced write.
_FENCE, _USAGE, _OPEN, _JOBS, _ENDED, _JOURNAL, _ACTIVE = range(1, 8)
#: The usage hash's field holding the half-life its figures were decayed with.
HALF_LIFE_FIELD = "@half-life"
#: The active-counts hash's field holding the journal id its counts are exact at.
POSITION_FIELD = "@position"
#: Its field holding the journal id of the last folded block that changed usage (an
#: allocation began or ended): the job manager's cue to reprioritize.
USAGE_AT_FIELD = "@usage-at"
#: Journal entries per read of a rebuild.
BLOCK = 2000
#: Times the admin append reads the stream again after losing a race.
ADMIN_RETRIES = 20
#: The journal entries usage reads; every other one is passed over unparsed.
_WANTED = frozenset((b"submit", b"alloc", b"start", b"free", b"clean", b"invalidate",
                     b"jobspec-update"))
#: Entries whose context the fold reads / whose extras it reads.
_CONTEXT = frozenset((b"submit", b"jobspec-update"))
_EXTRA = frozenset((b"submit", b"alloc"))

#: A journal entry as a stream read returns it: (id, {field: value}).
Entry = tuple[bytes, Mapping[bytes, bytes]]
#: Called for an entry that cannot be folded: (stream, id, fields, error).
BadEntry = Callable[[str, bytes, Mapping[bytes, bytes], str], None]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- admin stream


def read_admin(client: redis.Redis, keys: Keys) -> tuple[list[AccountEvent], str]:
    """Every admin event that decodes, and the id of the stream's last entry."""
    events: list[AccountEvent] = []
    last = "0-0"
    for sid, fields in client.xrange(keys.accounting):
        last = _text(sid)
        try:
            events.append(event_from_dict(orjson.loads(fields.get(b"d", b""))))
        except (orjson.JSONDecodeError, AccountError):
            continue  # a foreign write: replay passes it over, as it would a refused event
    return events, last


def load_accounts(client: redis.Redis, keys: Keys) -> Accounts:
    """The banks and associations: the admin stream folded."""
    return replay(read_admin(client, keys)[0])


class AccountsFollower:
    """The banks and associations, kept current by reading only the admin entries
    written since the last :meth:`refresh` (one XRANGE, usually empty): what the
    ingest, the job manager and the scheduler hold."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self.position = "0-0"
        self.accounts = Accounts()

    def refresh(self) -> Accounts:
        """The state after every admin entry written so far."""
        start = "-" if self.position == "0-0" else "(" + self.position
        state = self.accounts
        for sid, fields in self.redis.xrange(self.keys.accounting, min=start):
            self.position = _text(sid)
            try:
                state = apply(event_from_dict(orjson.loads(fields.get(b"d", b""))), state)
            except (orjson.JSONDecodeError, AccountError):
                continue  # as replay: a foreign or refused entry changes nothing
        self.accounts = state
        return state


def append_admin(client: redis.Redis, keys: Keys,
                 make: Callable[[Accounts], AccountEvent]) -> tuple[AccountEvent, Accounts]:
    """Append the event ``make(accounts)`` builds from the current state, once it applies
    (AccountError when it does not); the event and the state after it.

    The append is conditional on the stream still ending where it was read; a
    writer that lost the race reads again and builds its event anew.
    """
    events, after = append_admin_many(client, keys, lambda accounts: [make(accounts)])
    return events[0], after


def append_admin_many(client: redis.Redis, keys: Keys,
                      make: Callable[[Accounts], Sequence[AccountEvent]]
                      ) -> tuple[list[AccountEvent], Accounts]:
    """Append the events ``make(accounts)`` builds, all or none: each must apply to the
    state the ones before it leave (AccountError naming the first that does not, and
    nothing written); the events and the state after them. What ``fluxes account
    pop-db`` loads a file with."""
    for _ in range(ADMIN_RETRIES):
        events, last = read_admin(client, keys)
        accounts = replay(events)
        new = list(make(accounts))
        after = accounts
        for event in new:
            after = apply(event, after)
        if not new:
            return new, after
        try:
            Direct.of(client, keys.accounting).evalsha(
                _ADMIN_SHA, ADMIN_LUA, [keys.accounting],
                [last, *(orjson.dumps(event.to_dict()) for event in new)])
        except redis.ResponseError as exc:
            if str(exc).startswith("CONFLICT"):
                continue
            raise
        return new, after
    raise AccountError("the accounting stream keeps changing: try again")


# ---------------------------------------------------------------- usage model


def _key_field(key: AssocKey) -> str:
    return f"{key[0]}:{key[1]}"


def _field_key(field: str) -> AssocKey:
    uid, _, bank = field.partition(":")
    return int(uid), bank


@dataclass
class PartitionUsage:
    """What a reader gets of one partition's usage model."""

    half_life: float | None
    accums: dict[AssocKey, Accum]
    open: dict[int, OpenJob]


class UsageStore:
    """Reads and fenced writes of the usage read model."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def ensure_groups(self) -> None:
        """Create the accounting consumer group (the folded position) on every journal."""
        for p in range(self.keys.partitions):
            ensure_group(self.redis, self.keys.journal(p), GROUP_ACCOUNTING)

    # ------------------------------------------------------------ writes

    def _keys(self, partition: int) -> list[str]:
        k = self.keys
        return [k.acct_fence(partition), k.acct_usage(partition), k.acct_open(partition),
                k.acct_jobs(partition), k.acct_ended(partition), k.journal(partition),
                k.acct_active(partition)]

    def _run(self, partition: int, token: str, ops: Sequence[tuple[Any, ...]]) -> None:
        args: list[Any] = [token]
        for name, key, *rest in ops:
            args += (name, key, len(rest), *rest)
        keys = self._keys(partition)
        try:
            Direct.of(self.redis, keys[0]).evalsha(_WRITE_SHA, WRITE_LUA, keys, args)
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise FencedError(f"accounting of partition {partition}: token {token} is "
                                  f"stale (now {str(exc).split()[-1]})") from None
            raise

    def write(self, partition: int, changes: Changes, position: str, entries_read: int | None,
              token: str, purged: Sequence[int] = ()) -> None:
        """Write what a block changed and move the folded position to ``position`` (with
        ``entries_read``, its index from the first entry; None when unknown) in one step
        fenced by ``token``; the ended allocations of ``purged`` jobs go. FencedError,
        having written nothing, once another holder took the partition's accounting
        lease."""
        ops: list[tuple[Any, ...]] = []
        if changes.accums:
            ops += _chunked("HSET", _USAGE, _flat(
                (_key_field(k), orjson.dumps(a.to_obj())) for k, a in changes.accums.items()))
        if changes.opened:
            ops += _chunked("HSET", _OPEN, _flat(
                (j, orjson.dumps(o.to_obj())) for j, o in changes.opened.items()))
        if changes.closed:
            ops += _chunked("HDEL", _OPEN, sorted(changes.closed), 1)
        if changes.active:
            # absolute counts, not increments: a step written twice writes the same
            counted = [(_key_field(k), n) for k, n in changes.active.items() if n]
            gone = [_key_field(k) for k, n in changes.active.items() if not n]
            if counted:
                ops += _chunked("HSET", _ACTIVE, _flat(counted))
            if gone:
                ops += _chunked("HDEL", _ACTIVE, gone, 1)
        if changes.charges:
            ops += _chunked("HSET", _JOBS, _flat(
                (c.jobid, orjson.dumps(c.to_obj())) for c in changes.charges))
            ops += _chunked("ZADD", _ENDED, _flat((repr(c.t_free), c.jobid)
                                                  for c in changes.charges))
        if purged:
            # after the charges: a job may end and be purged within one block
            ops += _chunked("HDEL", _JOBS, sorted(purged), 1)
            ops += _chunked("ZREM", _ENDED, sorted(purged), 1)
        ops.append(("HSET", _ACTIVE, POSITION_FIELD, position))
        if changes.accums or any(job.t_alloc is not None for job in changes.opened.values()):
            ops.append(("HSET", _ACTIVE, USAGE_AT_FIELD, position))
        ops.append(_position(position, entries_read))
        self._run(partition, token, ops)

    def write_active(self, partition: int, token: str, counts: Mapping[AssocKey, int],
                     position: str) -> None:
        """Replace the partition's active-job counts with ``counts`` as of ``position``
        (the folded position) in one step fenced by ``token``: what a new holder does
        when the stored counts disagree with its open jobs (a model written before the
        counts existed)."""
        ops: list[tuple[Any, ...]] = [("UNLINK", _ACTIVE)]
        ops += _chunked("HSET", _ACTIVE, _flat((_key_field(k), n)
                                               for k, n in counts.items() if n))
        ops.append(("HSET", _ACTIVE, POSITION_FIELD, position))
        self._run(partition, token, ops)

    def reset(self, partition: int, token: str, half_life: float) -> None:
        """Empty the partition's model, record ``half_life`` and move the position to the
        journal's start, in one step fenced by ``token``: what is folded next is a
        rebuild.

        Once the journal was trimmed, its start is gone: the model is reset to
        the base copy instead (:func:`save_base`, taken before every trim) and the
        position to the base's, and the ended allocations of jobs still kept are
        left as they are (the fold after the base writes those of later ends).
        A base decayed with another half-life keeps its figures as they are."""
        base = load_base(self.redis, self.keys, partition)
        if base is None:
            self._run(partition, token, [
                ("UNLINK", _USAGE), ("UNLINK", _OPEN), ("UNLINK", _JOBS), ("UNLINK", _ENDED),
                ("UNLINK", _ACTIVE), ("HSET", _USAGE, HALF_LIFE_FIELD, repr(half_life)),
                ("HSET", _ACTIVE, POSITION_FIELD, "0-0"), _position("0-0", 0)])
            return
        usage = {k: v for k, v in base.usage.items() if k != HALF_LIFE_FIELD}
        ops: list[tuple[Any, ...]] = [("UNLINK", _USAGE), ("UNLINK", _OPEN),
                                      ("HSET", _USAGE, HALF_LIFE_FIELD, repr(half_life))]
        ops += _chunked("HSET", _USAGE, _flat(usage.items()))
        ops += _chunked("HSET", _OPEN, _flat(base.open.items()))
        counts = _counts(OpenJob.from_obj(orjson.loads(raw)) for raw in base.open.values())
        ops += [("UNLINK", _ACTIVE), ("HSET", _ACTIVE, POSITION_FIELD, base.position)]
        ops += _chunked("HSET", _ACTIVE, _flat((_key_field(k), n) for k, n in counts.items()))
        ops.append(_position(base.position, base.entries_read))
        self._run(partition, token, ops)

    def take_over(self, partition: int, holder: str, ttl_ms: int) -> str:
        """Take the partition's accounting lease whoever holds it; the new fencing token
        (safe: every write is fenced, so the former holder's next write is refused)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.keys.acct_lease(partition), holder, px=ttl_ms)
        pipe.incr(self.keys.acct_fence(partition))
        _ok, token = pipe.execute()
        return str(int(token))

    def lease_holder(self, partition: int) -> str | None:
        """Who holds the partition's accounting lease (None: nobody)."""
        raw = self.redis.get(self.keys.acct_lease(partition))
        return raw.decode("utf-8", "replace") if raw is not None else None

    # ------------------------------------------------------------ reads

    def position(self, partition: int) -> tuple[str, int | None]:
        """Where folding goes on: the id of the last entry the model includes, and its index
        from the first ever entry (None when Redis cannot tell)."""
        journal = self.keys.journal(partition)
        ensure_group(self.redis, journal, GROUP_ACCOUNTING)
        info = next(g for g in self.redis.xinfo_groups(journal)
                    if _text(g["name"]) == GROUP_ACCOUNTING)
        last = _text(info["last-delivered-id"])
        read = info.get("entries-read")
        entries_read = int(read) if read is not None else (0 if last == "0-0" else None)
        if info["pending"]:
            # nothing reads through the group, but a stray XREADGROUP may have: those
            # entries were never folded
            oldest = _text(self.redis.xpending(journal, GROUP_ACCOUNTING)["min"])
            return id_before(oldest), None
        return last, entries_read

    def partition(self, partition: int) -> PartitionUsage:
        """The partition's stored model (one round trip)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.acct_usage(partition))
        pipe.hgetall(self.keys.acct_open(partition))
        usage, opened = pipe.execute()
        half_life: float | None = None
        accums: dict[AssocKey, Accum] = {}
        for raw_field, raw in usage.items():
            name = _text(raw_field)
            if name == HALF_LIFE_FIELD:
                half_life = float(raw)
            else:
                accums[_field_key(name)] = Accum.from_obj(orjson.loads(raw))
        jobs = {int(j): OpenJob.from_obj(orjson.loads(raw)) for j, raw in opened.items()}
        return PartitionUsage(half_life, accums, jobs)

    def decayed(self, now: float) -> dict[AssocKey, Figures]:
        """Every association's decayed usage as of ``now``, running jobs included, summed
        over the partitions."""
        out: dict[AssocKey, Figures] = {}
        for p in range(self.keys.partitions):
            part = self.partition(p)
            add_usage(out, decayed_usage(part.accums, part.open.values(),
                                         part.half_life or 0.0, now))
        return out

    def behind(self) -> list[int]:
        """The partitions whose journal has entries the fold has not reached yet (what
        ``fluxes account update-usage`` waits for)."""
        out = []
        for p in range(self.keys.partitions):
            last = self.redis.xrevrange(self.keys.journal(p), count=1)
            if last and _stream_id(_text(last[0][0])) > _stream_id(self.position(p)[0]):
                out.append(p)
        return out

    def active(self, partition: int) -> tuple[str | None, dict[AssocKey, int]]:
        """The partition's stored active-job counts and the position they are exact at
        (None: never written)."""
        position: str | None = None
        counts: dict[AssocKey, int] = {}
        for raw_field, raw in self.redis.hgetall(self.keys.acct_active(partition)).items():
            name = _text(raw_field)
            if name == POSITION_FIELD:
                position = _text(raw)
            elif not name.startswith("@"):
                try:
                    counts[_field_key(name)] = int(raw)
                except ValueError:
                    counts[(-1, name)] = -1  # a foreign write: never equal to a count
        return position, counts

    def active_counts(self, wanted: Iterable[AssocKey]
                      ) -> tuple[dict[AssocKey, int], list[str | None]]:
        """The active jobs of the ``wanted`` associations summed over the partitions, and
        per partition the folded position the counts are exact at (None: never folded),
        read in one round trip (one per slot on a cluster): what the ingest checks
        ``max-active-jobs`` with, instead of reading every active job."""
        keys = sorted(set(wanted), key=_key_field)
        fields = [_key_field(k) for k in keys]
        pipe = self.redis.pipeline(transaction=False)
        for p in range(self.keys.partitions):
            pipe.hmget(self.keys.acct_active(p), [POSITION_FIELD, *fields])
        counts: dict[AssocKey, int] = {}
        positions: list[str | None] = []
        for values in pipe.execute():
            positions.append(None if values[0] is None else _text(values[0]))
            for key, raw in zip(keys, values[1:], strict=True):
                if raw is not None and raw.isdigit():  # a foreign write counts nothing
                    counts[key] = counts.get(key, 0) + int(raw)
        return counts, positions

    def usage_marks(self) -> tuple[str | None, ...]:
        """Per partition, the journal id of the last folded block that changed usage
        (None: none yet), in one round trip: when they move, the fair-share table is out
        of date."""
        pipe = self.redis.pipeline(transaction=False)
        for p in range(self.keys.partitions):
            pipe.hget(self.keys.acct_active(p), USAGE_AT_FIELD)
        return tuple(None if raw is None else _text(raw) for raw in pipe.execute())

    def open_jobs(self) -> dict[int, OpenJob]:
        """Every active job of every partition."""
        out: dict[int, OpenJob] = {}
        for p in range(self.keys.partitions):
            out.update(self.partition(p).open)
        return out

    def holdings(self, accounts: Accounts) -> Holdings:
        """What every association and bank holds now, from the active jobs folded so far
        (pending ones count as active, allocated ones as running with their nodes and
        cores). It lags the journal by the worker's fold (a fraction of a second): a
        caller that must not let a burst through counts its own jobs on top."""
        return holdings(accounts, (HeldJob(job.userid, job.bank or None,
                                           job.t_alloc is not None, job.nnodes, job.ncores)
                                   for job in self.open_jobs().values()))

    def charges(self, since: float, until: float | None = None) -> list[JobCharge]:
        """Ended allocations freed at or after ``since`` (and, with ``until``, allocated
        before it)."""
        out: list[JobCharge] = []
        for p in range(self.keys.partitions):
            # ZRANGE BYSCORE, not ZRANGEBYSCORE: what a user's ACL lets them read with
            ids = self.redis.zrange(self.keys.acct_ended(p), repr(since), "+inf",
                                    byscore=True)
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i:i + _CHUNK]
                for jobid, raw in zip(chunk, self.redis.hmget(self.keys.acct_jobs(p), chunk),
                                      strict=True):
                    if raw is None:
                        continue
                    charge = JobCharge.from_obj(int(jobid), orjson.loads(raw))
                    if until is None or charge.t_alloc < until:
                        out.append(charge)
        return out


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return (0, 0)


def _counts(jobs: Iterable[OpenJob]) -> dict[AssocKey, int]:
    out: dict[AssocKey, int] = {}
    for job in jobs:
        out[job.key] = out.get(job.key, 0) + 1
    return out


def _flat(pairs: Iterable[tuple[Any, Any]]) -> list[Any]:
    out: list[Any] = []
    for a, b in pairs:
        out += (a, b)
    return out


def _chunked(name: str, key: int, args: Sequence[Any], width: int = 2) -> list[tuple[Any, ...]]:
    step = _CHUNK - _CHUNK % width
    return [(name, key, *args[i:i + step]) for i in range(0, len(args), step)]


def _position(position: str, entries_read: int | None) -> tuple[Any, ...]:
    return ("POSITION", _JOURNAL, GROUP_ACCOUNTING, position,
            "" if entries_read is None else entries_read)


# ---------------------------------------------------------------- folding


def decode_entry(fields: Mapping[bytes, bytes]
                 ) -> tuple[int, str, float, dict[str, Any], dict[str, Any]] | None:
    """A journal entry as the usage fold takes it (jobid, name, timestamp, context,
    extras), or None for an entry the fold does not read. ValueError when malformed."""
    name = fields.get(b"n")
    if name not in _WANTED:
        return None
    assert name is not None
    jobid = int(fields[b"j"])
    timestamp = float(fields[b"t"])
    ctx: Any = {}
    extra: Any = {}
    if name in _CONTEXT and fields.get(b"c"):
        ctx = orjson.loads(fields[b"c"])
    if name in _EXTRA and fields.get(b"x"):
        extra = unpacked_extra(orjson.loads(fields[b"x"]))
    if not isinstance(ctx, dict) or not isinstance(extra, dict):
        raise ValueError("context and extras must be objects")
    return jobid, name.decode(), timestamp, ctx, extra


class PartitionFolder:
    """Folding one partition's journal into its usage model, as the holder of its lease.

    Valid only while its token is: once a write raises, what it holds may be
    ahead of what is stored, so its owner builds a new one from storage.
    """

    def __init__(self, store: UsageStore, partition: int, token: str, on_bad: BadEntry,
                 half_life: float) -> None:
        self.store = store
        self.partition = partition
        self.token = token
        self.on_bad = on_bad
        self.stream = store.keys.journal(partition)
        stored = store.partition(partition)
        if stored.half_life != half_life:
            # decayed totals of another half-life (or none recorded yet): fold again
            store.reset(partition, token, half_life)
            stored = PartitionUsage(half_life, {}, {})
        self.state = UsageState(half_life, stored.accums, stored.open)
        self.position, self.entries_read = store.position(partition)
        if store.active(partition) != (self.position, self.state.active):
            # a model stored before the counts existed (or a foreign write): count again
            store.write_active(partition, token, self.state.active, self.position)
        #: entries folded by this folder, bad ones included
        self.folded = 0

    def fold(self, entries: Sequence[Entry]) -> None:
        """Fold ``entries`` (the next ones after :attr:`position`) and write them with the
        new position in one fenced step; entries that cannot be folded go to
        ``on_bad``. FencedError (nothing written) when the token is stale."""
        if not entries:
            return
        state = self.state
        purged: list[int] = []
        for msg_id, fields in entries:
            if fields.get(b"n") == b"purge":
                # the job and its record go (fluxes/store/retention.py); usage stays
                jobid = fields.get(b"j", b"")
                if jobid.isdigit():
                    purged.append(int(jobid))
                continue
            try:
                decoded = decode_entry(fields)
                if decoded is not None:
                    state.feed(*decoded)
            except (KeyError, ValueError, UsageError) as exc:
                self.on_bad(self.stream, msg_id, fields, f"{type(exc).__name__}: {exc}")
        position = entries[-1][0].decode()
        read = None if self.entries_read is None else self.entries_read + len(entries)
        self.store.write(self.partition, state.take_changes(), position, read, self.token,
                         purged)
        self.position, self.entries_read = position, read
        self.folded += len(entries)


@dataclass
class Rebuilt:
    """What the rebuild of one partition did."""

    partition: int
    #: journal entries read (the bad ones included)
    entries: int
    #: associations charged in the partition
    associations: int
    #: entries that cannot be folded
    skipped: int
    #: who held the partition's accounting lease before (None: nobody)
    took_over_from: str | None
    #: the journal id the rebuilt model includes entries up to
    position: str


def rebuild(client: redis.Redis, keys: Keys, half_life: float,
            partitions: Iterable[int] | None = None, holder: str | None = None,
            ttl_ms: int = LEASE_TTL_MS) -> list[Rebuilt]:
    """Refold the usage model of ``partitions`` (default: all) from their journals.

    For each partition: take its accounting lease whoever holds it (the worker
    folding it has its next write refused and stands by), empty the model and
    move the position to the start in one step, fold the journal block by block
    as a worker does, release the lease. Every step leaves model and position in
    agreement, so a rebuild that dies half way is finished by the next holder.
    """
    store = UsageStore(client, keys)
    store.ensure_groups()
    name = holder or f"rebuild-accounting@{socket.gethostname()}:{os.getpid()}"
    wanted = range(keys.partitions) if partitions is None else partitions
    return [_rebuild_partition(client, store, p, name, ttl_ms, half_life) for p in wanted]


def _rebuild_partition(client: redis.Redis, store: UsageStore, partition: int, holder: str,
                       ttl_ms: int, half_life: float) -> Rebuilt:
    keys = store.keys
    if not 0 <= partition < keys.partitions:
        raise ValueError(f"no partition {partition}: the instance has {keys.partitions}")
    previous = store.lease_holder(partition)
    token = store.take_over(partition, holder, ttl_ms)
    lease = Lease(client, keys.acct_lease(partition), keys.acct_fence(partition), holder,
                  ttl_ms)
    lease.token = token  # taken by take_over; the Lease renews and releases it
    skipped: list[str] = []

    def bad(_stream: str, _msg_id: bytes, _fields: Mapping[bytes, bytes], error: str) -> None:
        skipped.append(error)  # the worker that first met it dead-lettered it already

    try:
        store.reset(partition, token, half_life)
        folder = PartitionFolder(store, partition, token, bad, half_life)
        while True:
            start = "-" if folder.position == "0-0" else "(" + folder.position
            entries = client.xrange(folder.stream, min=start, count=BLOCK)
            folder.fold(entries)
            if not lease.renew_if_due():
                raise FencedError(f"accounting of partition {partition}: lost the lease "
                                  "while rebuilding (another rebuild took it over?)")
            if len(entries) < BLOCK:
                break
        associations = len(folder.state.accums)
    finally:
        lease.release()
    return Rebuilt(partition, folder.folded, associations, len(skipped),
                   previous if previous != holder else None, folder.position)


# ---------------------------------------------------------------- base (journal trims)


@dataclass(frozen=True)
class Base:
    """The usage model as of a journal position: where a rebuild starts once the journal
    before it was trimmed (``fluxes.store.retention.trim_journal``)."""

    position: str
    entries_read: int | None
    #: the usage and open-jobs hashes, field -> value, as stored
    usage: dict[str, str]
    open: dict[str, str]


def save_base(client: redis.Redis, keys: Keys, partition: int) -> str | None:
    """Copy the partition's usage model and its folded position (read in one
    transaction, so they agree) to its base key; the position, or None when the
    model cannot be copied now (the fold left entries pending, or never ran)."""
    journal = keys.journal(partition)
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(keys.acct_usage(partition))
    pipe.hgetall(keys.acct_open(partition))
    pipe.xinfo_groups(journal)
    usage, opened, groups = pipe.execute()
    group = next((g for g in groups if _text(g["name"]) == GROUP_ACCOUNTING), None)
    if group is None or group["pending"]:
        return None
    position = _text(group["last-delivered-id"])
    read = group.get("entries-read")
    doc = {"position": position, "entries_read": None if read is None else int(read),
           "usage": {_text(k): _text(v) for k, v in usage.items()},
           "open": {_text(k): _text(v) for k, v in opened.items()}}
    client.set(keys.acct_base(partition), zlib.compress(orjson.dumps(doc), 1))
    return position


def load_base(client: redis.Redis, keys: Keys, partition: int) -> Base | None:
    """The partition's base (None: none was taken, or it does not decode)."""
    raw = client.get(keys.acct_base(partition))
    if not raw:
        return None
    try:
        doc = orjson.loads(zlib.decompress(raw))
        read = doc.get("entries_read")
        return Base(str(doc["position"]), None if read is None else int(read),
                    {str(k): str(v) for k, v in doc["usage"].items()},
                    {str(k): str(v) for k, v in doc["open"].items()})
    except (zlib.error, orjson.JSONDecodeError, KeyError, TypeError, ValueError,
            AttributeError):
        return None


# ---------------------------------------------------------------- fair share


def fair_share_now(client: redis.Redis, keys: Keys, config: InstanceConfig, now: float,
                   accounts: Accounts | None = None) -> FairShareTable:
    """The fair-share table as of ``now``: the admin stream folded, each association's
    decayed usage (running jobs included) in billing units. What the job manager
    installs in the multi-factor plugin (``plugin.update(table)``) every
    ``[accounting] reprioritize-interval``."""
    if accounts is None:
        accounts = load_accounts(client, keys)
    billing = config.accounting.billing
    decayed = minus_cleared(UsageStore(client, keys).decayed(now), accounts.cleared, now,
                            config.accounting.half_life)
    usage = {key: figures.billing(billing) for key, figures in decayed.items()}
    return fair_share(accounts, usage)
