"""Retention in Redis: purging inactive jobs, trimming acknowledged stream entries,
archiving and trimming the journal, and noticing history that went backwards.

**Purge** (:func:`purge`, ``purge.lua``): a job whose eventlog ends with
``clean`` (or ``invalidate``) loses every key it has: its eventlog, its hash,
its references to content-addressed blobs (a blob no job names any more goes),
its exec progress field, its output stream and its private text; a
journal-only ``purge`` entry naming it is appended in the same step, and the
job-list and accounting folds and every replay drop the job there. The output
stream is in the global slot, so it is deleted first, in a step of its own (an
inactive job's output is final): a purge cut short between the two leaves the
job without its output, and purging it again finishes. The child instance a batch/alloc job ran
(grandchildren included) is handed to :mod:`fluxes.store.children` at the same
point, whose sweeper deletes its keys a bounded SCAN slice at a time. A purge
never needs the job manager: it holds only active jobs.

**Streams** (:func:`trim_stream`, ``trim.lua``): the internal message streams
keep an entry until every consumer group has acknowledged it, then it goes.
The queue, resource and accounting admin streams are never trimmed: they are
the history their state is folded from.

**Journal** (:func:`trim_journal`): an entry goes only when (1) every consumer
group of the journal (the job list, accounting) has folded it, (2) it belongs
to a purged job, and so do all entries before it (the journal keeps the whole
history of every job that still exists, so the job manager's restore, a
rebuild of the job list and ``fluxes eventlog check`` never miss one), and
(3) it is archived (:mod:`fluxes.store.archive`), unless archiving is off.
Accounting first stores its model as of its folded position
(:func:`fluxes.store.accounting.save_base`): a rebuild starts there.

Why one module: purging, stream trimming and journal trimming obey one rule (nothing
goes that a reader still needs) and share the trim-state record every reader consults;
the :class:`Housekeeper` schedules all three (and the lost-write marks) for the job-list
worker. The archive is apart (:mod:`fluxes.store.archive`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from fluxes.config import RetentionConfig
from fluxes.domain.retention import (
    PURGE_EVENT,
    TERMINAL_EVENTS,
    GroupPosition,
    Limits,
    Loss,
    Mark,
    acknowledged_through,
    id_after,
    losses,
    merge_oldest,
    select_purge,
    trim_bound,
)
from fluxes.errors import FluxesError
from fluxes.store import jobfacts, jobhash
from fluxes.store.archive import ArchiveError, JournalArchive, RawEntry
from fluxes.store.children import ChildSweeper, doom_children
from fluxes.store.direct import Direct, execute_grouped
from fluxes.store.keys import GROUP_ACCOUNTING, Keys
from fluxes.store.scripts import lua_source

if TYPE_CHECKING:
    from fluxes.store.instance import Instance

PURGE_LUA = lua_source("purge")
_PURGE_SHA = hashlib.sha1(PURGE_LUA.encode()).hexdigest()
TRIM_LUA = lua_source("trim")
_TRIM_SHA = hashlib.sha1(TRIM_LUA.encode()).hexdigest()
#: Jobs per purge step (a script blocks Redis while it runs: ~20 us a job).
PURGE_BATCH = 500
#: Journal entries looked at per round trip when finding what may be trimmed.
SCAN_BLOCK = 2000

__all__ = ["PURGE_EVENT", "ArchiveError", "Housekeeper", "JournalArchive", "PurgeResult",
           "TrimState", "purge", "purge_candidates", "trim_journal",
           "trim_stream"]


# ---------------------------------------------------------------- purge


@dataclass
class PurgeResult:
    """What a purge did."""

    purged: list[int] = field(default_factory=list)
    #: jobs left alone because they are active: jobid -> their last event
    active: dict[int, str] = field(default_factory=dict)
    #: jobs with no eventlog (never existed, or purged already)
    unknown: list[int] = field(default_factory=list)


def purge(client: redis.Redis, keys: Keys, jobids: Iterable[int],
          now: float | None = None) -> PurgeResult:
    """Purge the inactive ones of ``jobids`` (see the module's docstring); active and
    unknown jobs are reported, not purged."""
    stamp = repr(time.time() if now is None else now)
    result = PurgeResult()
    by_part: dict[int, list[int]] = {}
    for jobid in dict.fromkeys(int(j) for j in jobids):  # plain ints: hiredis packs no others
        by_part.setdefault(keys.partition_of(jobid), []).append(jobid)
    for part, ids in sorted(by_part.items()):
        for i in range(0, len(ids), PURGE_BATCH):
            _purge_chunk(client, keys, part, ids[i:i + PURGE_BATCH], stamp, result)
    return result


def _purge_chunk(client: redis.Redis, keys: Keys, part: int, ids: list[int], stamp: str,
                 result: PurgeResult) -> None:
    fields = (*jobhash.BLOB_FIELDS, jobhash.OWNER)
    try:
        lasts = jobfacts.eventlog_entries(client, keys, ids, count=1, newest=True)
    except redis.ResponseError as exc:
        raise FluxesError(f"purge: {exc}") from None
    rows = execute_grouped(client, [(keys.job(jobid), ("HMGET", keys.job(jobid), *fields))
                                    for jobid in ids])
    inactive: list[tuple[int, dict[str, str], int | None]] = []
    for jobid, last, row in zip(ids, lasts, rows, strict=True):
        if isinstance(row, Exception):
            raise FluxesError(f"purge of {jobid}: {row}")
        if not last:
            result.unknown.append(jobid)
            continue
        name = last[-1][1].get(b"n", b"?").decode("utf-8", "replace")
        if name not in TERMINAL_EVENTS:
            result.active[jobid] = name
            continue
        *digests, owner = row
        named = {f: d.decode() for f, d in zip(jobhash.BLOB_FIELDS, digests, strict=True) if d}
        uid = int(owner) if owner and owner.isdigit() else None
        inactive.append((jobid, named if uid is not None else {}, uid))
    if not inactive:
        return
    # the output streams, PMI exchanges (global slot) and private text first: an
    # inactive job's are final
    doomed = [key for jobid, _n, uid in inactive if uid is not None
              for key in (keys.output(uid, jobid), keys.pmi(uid, jobid),
                          keys.private(part, uid, jobid))]
    execute_grouped(client, [(key, ("UNLINK", key)) for key in doomed])
    # a batch/alloc job's child instance goes too, swept a slice at a time
    doom_children(client, keys, [jobid for jobid, _n, _uid in inactive])
    script_keys = [keys.journal(part), keys.exec_progress(part)]
    index: dict[str, int] = {}

    def key_index(key: str) -> int:
        if key not in index:
            script_keys.append(key)
            index[key] = len(script_keys)
        return index[key]

    args: list[Any] = [stamp]
    for jobid, named, uid in inactive:
        args += (jobid, key_index(keys.eventlog(jobid)), key_index(keys.job(jobid)), len(named))
        for name, digest in named.items():
            assert uid is not None
            args += (name, digest, key_index(keys.blob(part, uid, digest)))
    try:
        reply = Direct.of(client, script_keys[0]).evalsha(_PURGE_SHA, PURGE_LUA, script_keys,
                                                          args)
    except redis.ResponseError as exc:
        text = str(exc)
        if text.startswith("ACTIVE "):
            _word, jobid_text, event = [*text.split(" ", 2), "?"][:3]
            raise FluxesError(f"purge refused: job {jobid_text} is active (its eventlog "
                              f"ends with {event}); nothing purged") from None
        raise FluxesError(f"purge refused, nothing purged: {text}") from None
    result.purged += [int(j) for j in reply[2:]]


def purge_candidates(client: redis.Redis, keys: Keys, limits: Limits, now: float,
                     batch: int = PURGE_BATCH) -> list[int]:
    """The next at most ``batch`` jobs ``limits`` purge, from every partition's inactive
    index (the job-list read model: jobs it has folded to INACTIVE, by the time they
    became inactive), oldest first. The number limit counts every partition."""
    if not limits.active:
        return []
    total, parts = inactive_index(client, keys, batch)
    return select_purge(merge_oldest(parts, batch), total, now, limits)


def inactive_index(client: redis.Redis, keys: Keys, oldest: int
                   ) -> tuple[int, list[list[tuple[int, float]]]]:
    """The number of inactive jobs in the read model, and each partition's ``oldest``
    oldest ones ``(jobid, t_inactive)``."""
    commands: list[tuple[str, tuple[Any, ...]]] = []
    for p in range(keys.partitions):
        key = keys.joblist_inactive(p)
        commands.append((key, ("ZCARD", key)))
        # (ZRANGE 0 -1 would be every job: ask for none then)
        commands.append((key, ("ZRANGE", key, 0, oldest - 1, "WITHSCORES") if oldest > 0
                         else ("ZRANGE", key, 1, 0)))
    replies = execute_grouped(client, commands)
    total = 0
    parts = []
    for p in range(keys.partitions):
        count, flat = replies[2 * p], replies[2 * p + 1]
        if isinstance(count, Exception) or isinstance(flat, Exception):
            raise FluxesError(f"inactive index of partition {p}: {count or flat}")
        total += int(count)
        if flat and isinstance(flat[0], list):  # pairs (a RESP3 reply), not a flat list
            flat = [x for pair in flat for x in pair]
        parts.append([(int(flat[k]), float(flat[k + 1])) for k in range(0, len(flat) - 1, 2)])
    return total, parts


# ---------------------------------------------------------------- streams


def internal_streams(keys: Keys, partition: int) -> list[str]:
    """The partition's message streams whose acknowledged entries may go (not the journal,
    which :func:`trim_journal` handles, nor ``sched:req``: :func:`positional_streams`)."""
    return [keys.jm_new(partition), keys.jm_ctl(partition), keys.sched_resp(partition),
            keys.exec_events(partition)]


def positional_streams(keys: Keys, partition: int) -> list[str]:
    """The partition's message streams read by position, not through a group, by a
    leased reader that starts at the stream's end when it takes over: the
    scheduler's ``sched:req`` (after its ``hello``, the job manager sends again what
    it still needs). The reader publishes how far it has read in its heartbeat
    (``read_positions``, :func:`reader_positions`); entries before that go. When no
    live reader says, they go by age (:func:`trim_by_age`)."""
    return [keys.sched_req(partition)]


#: A heartbeat older than this is a worker's that is gone (as ``fluxes status`` says).
ALIVE_S = 10.0


def reader_positions(client: redis.Redis, keys: Keys, now: float) -> dict[str, str]:
    """Per stream, the lowest position live workers' heartbeats say they have read it
    up to (``read_positions``: stream -> id, published once everything read is
    handled)."""
    out: dict[str, str] = {}
    for raw in client.hvals(keys.workers):
        try:
            record = json.loads(raw)
            if now - float(record.get("heartbeat", 0)) > ALIVE_S:
                continue
            positions = record.get("read_positions") or {}
            for stream, position in positions.items():
                if stream not in out or _id_key(str(position)) < _id_key(out[stream]):
                    out[stream] = str(position)
        except (ValueError, TypeError, AttributeError):
            continue  # a record of another version, or damaged: it names nothing
    return out


def trim_by_age(client: redis.Redis, stream: str, keep_s: float) -> int:
    """Remove the entries of ``stream`` added more than ``keep_s`` seconds ago (by Redis'
    clock); how many went."""
    seconds, micros = client.time()
    minid = f"{max(int((seconds + micros / 1e6 - keep_s) * 1000), 0)}-0"
    return int(client.xtrim(stream, minid=minid, approximate=False))


def global_streams(keys: Keys, users: Iterable[str], ranks: Iterable[int]) -> list[str]:
    """The global message streams whose acknowledged entries may go: every user's
    submit stream and every rank's exec request stream. Not ``queues``,
    ``resource:events`` or ``accounting``: they are the history their state is
    folded from; not ``deadletters``, which keeps its newest entries (MAXLEN)."""
    return [*(keys.submit(u) for u in sorted(set(users))),
            *(keys.exec_rank(r) for r in sorted(set(ranks)))]


def trim_stream(client: redis.Redis, stream: str, bound: str | None = None) -> int:
    """Remove the entries of ``stream`` every consumer group acknowledged (and, with
    ``bound``, at most up to it); how many went."""
    reply = Direct.of(client, stream).evalsha(_TRIM_SHA, TRIM_LUA, [stream], [bound or ""])
    return int(reply[0])


# ---------------------------------------------------------------- journal


@dataclass(frozen=True)
class TrimState:
    """How far a partition's journal was archived and trimmed (its retention hash)."""

    #: the last id trimmed ("0-0": none) and its entry's timestamp
    trimmed: str = "0-0"
    trimmed_t: float | None = None
    #: the last id trimmed without being archived ("0-0": none) and its timestamp
    lost_until: str = "0-0"
    lost_t: float | None = None
    #: the last id archived ("0-0": none)
    archived: str = "0-0"

    @property
    def was_trimmed(self) -> bool:
        """True once anything was trimmed: entries of jobs begun before are gone."""
        return self.trimmed != "0-0"


def read_trim_state(client: redis.Redis, keys: Keys, partition: int) -> TrimState:
    """The partition's :class:`TrimState` (nothing trimmed when the hash cannot be read:
    a user's ACL may not allow it)."""
    try:
        raw = client.hgetall(keys.retention(partition))
    except redis.exceptions.NoPermissionError:
        return TrimState()
    text = {k.decode(): v.decode() for k, v in raw.items()}

    def stamp(name: str) -> float | None:
        try:
            return float(text[name])
        except (KeyError, ValueError):
            return None

    return TrimState(trimmed=text.get("trimmed", "0-0"), trimmed_t=stamp("trimmed_t"),
                     lost_until=text.get("lost_until", "0-0"), lost_t=stamp("lost_t"),
                     archived=text.get("archived", "0-0"))


def group_positions(client: redis.Redis, stream: str) -> list[GroupPosition]:
    """Every consumer group of ``stream`` with what it has consumed ([] without one)."""
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:
        return []  # no such stream
    out = []
    for group in groups:
        name = _text(group["name"])
        oldest = None
        if group["pending"]:
            oldest = _text(client.xpending(stream, name)["min"])
        out.append(GroupPosition(name, _text(group["last-delivered-id"]), oldest))
    return out


@dataclass
class JournalTrim:
    """What one journal trim did."""

    partition: int
    #: entries removed from Redis, and entries appended to the archive
    trimmed: int = 0
    archived: int = 0
    #: the last id removed (None: none)
    upto: str | None = None
    #: why it stopped where it did
    reason: str = ""


def removable_prefix(client: redis.Redis, keys: Keys, partition: int, bound: str,
                     limit: int) -> list[RawEntry]:
    """The first journal entries, at most up to ``bound`` and ``limit`` of them, that
    belong to purged jobs, stopping before the first entry of a job that still has
    its eventlog: those may leave the journal."""
    journal = keys.journal(partition)
    direct = Direct.of(client, journal)
    out: list[RawEntry] = []
    start = "-"
    while len(out) < limit:
        block = direct.call("XRANGE", journal, start, bound, "COUNT",
                            min(SCAN_BLOCK, limit - len(out)))
        if not block:
            break
        jobs = sorted({j for _sid, fields in block if (j := _job_of(fields)) is not None})
        found = direct.execute([read for j in jobs for read in jobfacts.exists_reads(keys, j)])
        exists = {j: jobfacts.exists_of(*found[2 * k:2 * k + 2]) for k, j in enumerate(jobs)}
        for sid, fields in block:
            jobid = _job_of(fields)
            if jobid is not None and exists.get(jobid):
                return out
            out.append((sid, list(fields)))
        start = "(" + block[-1][0].decode()
        if len(block) < SCAN_BLOCK:
            break
    return out


def trim_journal(client: redis.Redis, keys: Keys, partition: int,
                 archive: JournalArchive | None, limit: int = 50_000) -> JournalTrim:
    """Archive (unless ``archive`` is None) and remove the journal entries that may go
    (see the module's docstring), at most ``limit`` of them."""
    from fluxes.store import accounting

    report = JournalTrim(partition)
    journal = keys.journal(partition)
    groups = group_positions(client, journal)
    bound = trim_bound(acknowledged_through(groups))
    if bound is None:
        report.reason = "nothing folded by every reader"
        return report
    entries = removable_prefix(client, keys, partition, bound, limit)
    if not entries:
        report.reason = "the oldest entry belongs to a job not purged"
        return report
    upto = entries[-1][0].decode()
    if archive is not None:
        state = read_trim_state(client, keys, partition)
        fresh = [e for e in entries if _newer(e[0].decode(), state.archived)]
        archive.append(client, fresh)
        report.archived = len(fresh)
    if any(g.name == GROUP_ACCOUNTING for g in groups):
        # rebuilds of the usage model start from this copy once the entries are gone
        based = accounting.save_base(client, keys, partition)
        if based is None:
            report.reason = "the accounting model could not be copied"
            return report
        upto = min(upto, based, key=_id_key)
    reply = Direct.of(client, journal).evalsha(
        _TRIM_SHA, TRIM_LUA, [journal, keys.retention(partition)],
        [upto, "0" if archive is not None else "1"])
    report.trimmed = int(reply[0])
    report.upto = _text(reply[1]) or None
    report.reason = "trimmed" if report.trimmed else "nothing left to trim"
    return report


def _job_of(fields: Sequence[bytes]) -> int | None:
    """The job id a raw journal entry names (None: none that is a number)."""
    for k in range(0, len(fields) - 1, 2):
        if fields[k] == b"j":
            value = fields[k + 1]
            return int(value) if value.isdigit() else None
    return None


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _newer(stream_id: str, than: str) -> bool:
    return _id_key(stream_id) > _id_key(than)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- lost writes


def worker_state_dir(client: redis.Redis, keys: Keys) -> Path:
    """Where a worker on this host keeps its local files: ``$FLUXES_STATE_DIR``; else the
    state directory ``fluxes start`` recorded, when its supervisor runs on this host;
    else ``$XDG_STATE_HOME/fluxes`` (``~/.local/state/fluxes``)."""
    env = os.environ.get("FLUXES_STATE_DIR")
    if env:
        return Path(env)
    recorded, host = client.hmget(keys.instance, ["state_dir", "supervisor_host"])
    if recorded and host and host.decode() == socket.gethostname() \
            and os.path.isdir(recorded.decode()):
        return Path(recorded.decode())
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "fluxes"


class MarkFile:
    """The newest history a worker saw of one partition, in a small local file.

    Written at most once a second and fsynced, so that it survives the power cut
    whose losses it is there to reveal; compared with what Redis holds when the
    worker starts leading the partition (at start, and after Redis comes back).
    """

    def __init__(self, directory: Path, keys: Keys, partition: int) -> None:
        self.path = directory / "marks" / f"{keys.ns}-p{partition}.json"

    def load(self) -> Mark | None:
        """The mark recorded (None: none, or unreadable)."""
        try:
            obj = json.loads(self.path.read_text())
            return Mark(str(obj["instance"]), str(obj["journal"]), int(obj.get("fluid_gen", 0)))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, mark: Mark) -> None:
        """Replace the mark (atomically: a new file fsynced, then renamed over)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".mark-")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump({"instance": mark.instance, "journal": mark.journal,
                           "fluid_gen": mark.fluid_gen}, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def stored_marks(client: redis.Redis, keys: Keys, partition: int) -> tuple[str, str, int]:
    """What Redis holds now: the instance's identity (its creation time), the journal's
    last generated id (trims do not move it back) and the FLUID generator counter."""
    created, gen = client.hmget(keys.instance, ["created"])[0], client.get(keys.fluid_generators)
    try:
        info = client.xinfo_stream(keys.journal(partition))
        last = _text(info["last-generated-id"])
    except redis.ResponseError:
        last = "0-0"  # no journal at all
    return (_text(created) if created else "", last, int(gen) if gen else 0)


def archive_for(client: redis.Redis, keys: Keys, config: RetentionConfig, partition: int
                ) -> JournalArchive | None:
    """The partition's journal archive as ``[job-manager] journal-archive`` configures it
    (None: archiving is off)."""
    if config.journal_archive == "":
        return None
    root = Path(config.journal_archive) if config.journal_archive is not None \
        else worker_state_dir(client, keys) / "archive"
    return JournalArchive(root, keys, partition)


# ---------------------------------------------------------------- the job-list worker's part

#: How often the marks are written (and so the newest writes a power cut may lose
#: without it being noticed).
MARK_EVERY_S = 1.0
#: How often the purge policy runs; a full batch runs the next again at once.
PURGE_EVERY_S = 2.0
#: How often the purged jobs' child instances are looked for when no sweep is under way.
CHILDREN_EVERY_S = 2.0
#: How often the acknowledged entries of the message streams are trimmed, and how
#: long they are kept anyway (by Redis' clock), for whoever looks at recent traffic.
STREAMS_EVERY_S = 5.0
STREAMS_KEEP_S = 10.0
#: How long the entries of streams read by position are kept when their reader does
#: not publish how far it has read (a reader of an older version): long past any
#: backlog it could still be reading.
POSITIONAL_KEEP_S = 300.0
#: How often the journal is archived and trimmed, and at most how many entries a time.
JOURNAL_EVERY_S = 10.0
JOURNAL_LIMIT = 20_000
#: How often the configuration is read again.
CONFIG_EVERY_S = 10.0


class Housekeeper:
    """Retention for the partitions a job-list worker leads: the purge policy, stream and
    journal trims, and the lost-write marks (checked when it starts leading a
    partition, written at most once a second after).

    ``run`` is called after every step with the partitions led and their folded
    positions; each duty runs when its time comes, so a call costs nothing most
    of the time. A duty that fails (an archive directory that is not writable, a
    key of the wrong type) is logged and tried again later; it never stops the
    fold. Redis errors propagate, for the worker's loop to retry.
    """

    def __init__(self, instance: Instance, log: logging.Logger,
                 state_dir: Path | None = None) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        self.log = log
        self._state_dir = state_dir
        self._config: RetentionConfig | None = None
        self._due: dict[str, float] = {}
        self._checked: dict[int, str] = {}  # partition -> the lease token it was checked under
        self.lost: dict[int, list[Loss]] = {}
        self.purged = 0
        self.trimmed = 0
        self.children = ChildSweeper(self.redis, self.keys)
        self._sweep_denied = False

    @property
    def state_dir(self) -> Path:
        """Where the marks (and, by default, the archive) are kept."""
        if self._state_dir is None:
            self._state_dir = worker_state_dir(self.redis, self.keys)
        return self._state_dir

    def config(self, now: float) -> RetentionConfig:
        """``[job-manager]``, read again every ``CONFIG_EVERY_S``."""
        if self._config is None or self._due_now("config", now, CONFIG_EVERY_S):
            self._config = self.instance.config().retention
        return self._config

    def _due_now(self, duty: str, now: float, every: float) -> bool:
        if now < self._due.get(duty, 0.0):
            return False
        self._due[duty] = now + every
        return True

    def status(self) -> dict[str, Any]:
        """Facts for the worker's heartbeat: losses found, jobs purged, entries trimmed."""
        out: dict[str, Any] = {}
        if self.lost:
            out["lost_writes"] = "; ".join(f"partition {p}: {loss.text()}"
                                           for p, found in sorted(self.lost.items())
                                           for loss in found)
        if self.purged:
            out["purged"] = self.purged
        return out

    def run(self, led: Mapping[int, tuple[str, str]], now: float | None = None) -> None:
        """Do what is due for the partitions ``led`` (partition -> (lease token, folded
        position))."""
        mono = time.monotonic() if now is None else now
        for partition, (token, _position) in led.items():
            if self._checked.get(partition) != token:
                self._check_marks(partition)
                self._checked[partition] = token
        for partition in list(self._checked):
            if partition not in led:
                del self._checked[partition]
        if not led:
            return
        if self._due_now("marks", mono, MARK_EVERY_S):
            self._guard("marks", lambda: self._save_marks(led))
        config = self.config(mono)
        limits = Limits(config.inactive_age_limit, config.inactive_num_limit)
        if limits.active and self._due_now("purge", mono, PURGE_EVERY_S):
            self._guard("purge", lambda: self._purge(led, limits, mono))
        if 0 in led and not self._sweep_denied and (
                self.children.sweeping or self._due_now("children", mono, CHILDREN_EVERY_S)):
            # the global slot's duty: the leader of partition 0 sweeps
            self._guard("children", self._sweep_children)
        if self._due_now("streams", mono, STREAMS_EVERY_S):
            self._guard("streams", lambda: self._trim_streams(led))
        if self._due_now("journal", mono, JOURNAL_EVERY_S):
            for partition in sorted(led):
                self._guard("journal", functools.partial(self._trim_journal, partition, config))

    def _sweep_children(self) -> None:
        """A step of the purged child instances' sweep (fluxes.store.children)."""
        try:
            self.children.step()
        except redis.exceptions.NoPermissionError as exc:
            # a child instance's own identity may not SCAN: its purged grandchildren go
            # when the job that runs it is purged in the parent (one warning, no more)
            self._sweep_denied = True
            self.log.warning("purged child instances are left to the parent instance",
                             extra={"error": str(exc)})

    def _guard(self, duty: str, work: Callable[[], object]) -> None:
        try:
            work()
        except (FluxesError, OSError, ValueError, redis.ResponseError) as exc:
            if isinstance(exc, redis.ResponseError) and str(exc).startswith(
                    ("BUSY", "LOADING", "MASTERDOWN")):
                raise
            self.log.error("retention failed, trying again later",
                           extra={"duty": duty, "error": f"{type(exc).__name__}: {exc}"})

    # ------------------------------------------------------------ lost writes

    def _check_marks(self, partition: int) -> None:
        """Compare the mark of ``partition`` with what Redis holds now; log loudly and
        report what went backwards."""
        instance, journal, fluid = stored_marks(self.redis, self.keys, partition)
        if not instance:
            return  # an instance never recorded (a test's) has no identity to compare
        mark = MarkFile(self.state_dir, self.keys, partition).load()
        if mark is None:
            return
        found = losses(mark, instance, journal, fluid if partition == 0 else 0)
        if found:
            self.lost[partition] = found
            for loss in found:
                self.log.error(f"writes lost: the {loss.text()}: Redis lost acknowledged "
                               "writes (a crash inside its fsync window?)",
                               extra={"partition": partition, "what": loss.what,
                                      "seen": loss.was, "now": loss.now})

    def _save_marks(self, led: Mapping[int, tuple[str, str]]) -> None:
        instance, _journal, fluid = stored_marks(self.redis, self.keys, 0)
        if not instance:
            return
        for partition, (_token, position) in led.items():
            MarkFile(self.state_dir, self.keys, partition).save(
                Mark(instance, position, fluid if partition == 0 else 0))

    # ------------------------------------------------------------ purge and trims

    def _purge(self, led: Mapping[int, tuple[str, str]], limits: Limits, mono: float) -> None:
        chosen = [j for j in purge_candidates(self.redis, self.keys, limits, time.time())
                  if self.keys.partition_of(j) in led]
        if not chosen:
            return
        result = purge(self.redis, self.keys, chosen)
        self.purged += len(result.purged)
        self.log.info("purged", extra={"jobs": len(result.purged),
                                       "active_left": len(result.active)})
        if len(chosen) >= PURGE_BATCH:
            self._due["purge"] = mono  # more to do: at the next call

    def _trim_streams(self, led: Mapping[int, tuple[str, str]]) -> None:
        streams = [s for p in sorted(led) for s in internal_streams(self.keys, p)]
        if 0 in led:
            streams += global_streams(self.keys, self._users(), self._ranks())
        seconds, micros = self.redis.time()
        keep = f"{max(int((seconds + micros / 1e6 - STREAMS_KEEP_S) * 1000), 0)}-0"
        removed = sum(trim_stream(self.redis, stream, keep) for stream in streams)
        read = reader_positions(self.redis, self.keys, seconds + micros / 1e6)
        for stream in (s for p in sorted(led) for s in positional_streams(self.keys, p)):
            if stream in read:
                bound = min(read[stream], keep, key=_id_key)
                if bound != "0-0":
                    removed += int(self.redis.xtrim(stream, minid=id_after(bound),
                                                    approximate=False))
            else:
                removed += trim_by_age(self.redis, stream, POSITIONAL_KEEP_S)
        self.trimmed += removed

    def _users(self) -> list[str]:
        owner, _uid = self.instance.owner()
        return [owner, *(u.decode() for u in self.redis.hkeys(self.keys.users))]

    def _ranks(self) -> list[int]:
        from fluxes.store.resources import load_inventory

        ranks = {int(r) for r in self.redis.hkeys(self.keys.exec_registry) if r.isdigit()}
        try:
            ranks.update(t.rank for t in load_inventory(self.instance))
        except (FluxesError, ValueError, OSError):
            pass  # no inventory recorded: the registered ranks are all there is
        return sorted(ranks)

    def _trim_journal(self, partition: int, config: RetentionConfig) -> None:
        archive = archive_for(self.redis, self.keys, config, partition)
        report = trim_journal(self.redis, self.keys, partition, archive, JOURNAL_LIMIT)
        if report.trimmed:
            self.log.info("journal trimmed", extra={
                "partition": partition, "entries": report.trimmed,
                "archived": report.archived, "upto": report.upto})
            if report.trimmed >= JOURNAL_LIMIT:
                self._due["journal"] = 0.0
