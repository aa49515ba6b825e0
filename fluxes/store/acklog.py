"""Acknowledged jobs a Redis crash lost, found by id (docs/operations.md, "Lost jobs").

With ``appendfsync everysec`` a power cut (or a kill of the Redis host) can take
the last second or so of writes: Redis comes back from an AOF cut back to its
last fdatasync, without jobs whose ids the ingest had already given to their
clients. The journal's lost-write mark (:mod:`fluxes.store.retention`) notices
that the history went backwards, at most once a second; this module names every
job lost.

**Recording** (:class:`AckLog`). The ingest commits a block of requests, then
appends one line to a local file (its state directory, ``acks/<ns>-<worker>.log``)
naming each job id it is about to answer with, its partition and a journal id
at or after the job's own entries (the last id its block wrote in that
partition, or for a job created earlier, the partition's newest entry), and
fdatasyncs it: one sync per block, however many jobs it holds (group commit).
Only then does it send the replies. So every id a client ever got is on the
ingest's disk before the client got it.

**Checking** (:func:`AckLog.check`). When the ingest (re)connects, before it
handles a request, every line recorded is compared with what Redis holds: the
AOF is replayed in order, so a journal id still in the journal (or trimmed on
purpose: at or before the partition's ``trimmed`` point) means that every
write before it survived, the job's included. A job whose recorded journal id
is gone and which has neither its hash nor its eventlog was acknowledged and
lost: it is recorded in ``{ns}:lost:jobs`` (job id -> JSON: partition, journal
id, user, request, when acknowledged, when found and by whom), logged as an
error, and listed by ``fluxes status`` and ``fluxes admin lost-jobs`` until the
instance owner clears it. The file is then emptied: what is in Redis now is
what its AOF held when it started. Lines of another instance (a Redis
recreated on purpose: another ``created`` time) say nothing.

The file is rotated at ``ROTATE_BYTES`` (the previous one is kept, and checked
too), so it stays small when no check empties it for a long time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from fluxes.store.direct import Direct, execute_grouped
from fluxes.store.keys import Keys

#: A log file is set aside (replacing the previous one) once it holds this much.
ROTATE_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Acked:
    """A job id about to be given to a client: its partition, a journal id at or after
    its own entries, and who asked (for the report)."""

    jobid: int
    partition: int
    journal: str
    user: str
    req: str


def id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class AckLog:
    """One ingest worker's record of the job ids it acknowledged (see the module)."""

    def __init__(self, directory: Path, keys: Keys, worker: str) -> None:
        self.path = directory / "acks" / f"{keys.ns}-{worker}.log"
        self.keys = keys
        self.worker = worker
        self._fd: int | None = None
        self._size = 0
        #: True until the records were compared with Redis since the last (re)connection
        self.unchecked = True
        self.failed = False

    # ------------------------------------------------------------ recording

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    def record(self, instance: str, acked: Sequence[Acked], now: float | None = None) -> None:
        """Append one line naming ``acked`` and fdatasync it (OSError when it cannot be)."""
        if not acked:
            return
        line = orjson.dumps({"i": instance, "t": time.time() if now is None else now,
                             "a": [[a.jobid, a.partition, a.journal, a.user, a.req]
                                   for a in acked]}) + b"\n"
        fd = self._open()
        if self._size + len(line) > ROTATE_BYTES and self._size:
            self._rotate()
            fd = self._open()
        os.write(fd, line)
        os.fdatasync(fd)
        self._size += len(line)

    def _rotate(self) -> None:
        """Keep the current file as the previous one and start a new one."""
        self.close()
        os.replace(self.path, self.previous)

    @property
    def previous(self) -> Path:
        """The file set aside by the last rotation."""
        return self.path.with_suffix(".log.1")

    def close(self) -> None:
        """Close the file (it is opened again by the next record)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def lines(self) -> list[dict[str, Any]]:
        """Every readable line recorded, oldest first (a line cut by a crash is skipped)."""
        out = []
        for path in (self.previous, self.path):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            for raw in data.splitlines():
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(line, dict) and isinstance(line.get("a"), list):
                    out.append(line)
        return out

    def clear(self) -> None:
        """Forget every record (all checked): both files emptied, durably."""
        self.close()
        self.previous.unlink(missing_ok=True)
        if self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._size = 0

    # ------------------------------------------------------------ checking

    def check(self, client: Any, log: logging.Logger, now: float | None = None
              ) -> list[Acked]:
        """Compare every record with Redis; record and log the jobs lost (returned), then
        empty the files."""
        created = client.hget(self.keys.instance, "created")
        instance = created.decode() if created else ""
        acked = [a for line in self.lines() if line.get("i") == instance
                 for a in _parse(line)]
        lost = find_lost(client, self.keys, acked) if acked and instance else []
        if lost:
            found = time.time() if now is None else now
            report = {str(a.jobid): orjson.dumps({
                "partition": a.partition, "journal": a.journal, "user": a.user,
                "req": a.req, "found": found, "by": self.worker}) for a in lost}
            client.hset(self.keys.lost_jobs, mapping=report)
            log.error(f"jobs lost: {len(lost)} acknowledged jobs are not in Redis (a crash "
                      "inside its fsync window?); fluxes admin lost-jobs lists them",
                      extra={"jobs": [a.jobid for a in lost][:1000],
                             "partitions": sorted({a.partition for a in lost})})
        self.clear()
        self.unchecked = False
        return lost


def _parse(line: Mapping[str, Any]) -> Iterable[Acked]:
    """The jobs of one recorded line (malformed rows skipped)."""
    for row in line["a"]:
        try:
            jobid, part, journal, user, req = row
            id_key(str(journal))
            yield Acked(int(jobid), int(part), str(journal), str(user), str(req))
        except (TypeError, ValueError):
            continue


def find_lost(client: Any, keys: Keys, acked: Sequence[Acked]) -> list[Acked]:
    """Which of ``acked`` Redis lost: their journal id is gone (not trimmed on purpose),
    and so are their hash and eventlog. Pipelined: one round trip per slot for the
    journal ids, one for the jobs that may be lost."""
    marks = sorted({(a.partition, a.journal) for a in acked if a.partition < keys.partitions})
    commands: list[tuple[str, tuple[Any, ...]]] = []
    for part in sorted({p for p, _j in marks}):
        commands.append((keys.retention(part), ("HGET", keys.retention(part), "trimmed")))
    for part, journal in marks:
        commands.append((keys.journal(part), ("XRANGE", keys.journal(part), journal, journal)))
    replies = execute_grouped(client, commands)
    parts = sorted({p for p, _j in marks})
    trimmed = {p: _text(r) if r and not isinstance(r, Exception) else "0-0"
               for p, r in zip(parts, replies[:len(parts)], strict=True)}
    gone = set()
    for (part, journal), found in zip(marks, replies[len(parts):], strict=True):
        if isinstance(found, Exception):
            raise found
        if not found and id_key(journal) > id_key(trimmed[part]):
            gone.add((part, journal))
    maybe = [a for a in acked if (a.partition, a.journal) in gone]
    if not maybe:
        return []
    jobs: list[tuple[str, tuple[Any, ...]]] = []
    for a in maybe:
        jobs.append((keys.job(a.jobid), ("EXISTS", keys.job(a.jobid), keys.eventlog(a.jobid))))
    there = execute_grouped(client, jobs)
    lost = {a.jobid: a for a, n in zip(maybe, there, strict=True) if not n}
    return sorted(lost.values(), key=lambda a: a.jobid)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def journal_ends(client: Any, keys: Keys, partitions: Iterable[int]) -> dict[int, str]:
    """The newest journal id of each of ``partitions`` ("0-0": an empty journal)."""
    parts = sorted(set(partitions))
    replies = execute_grouped(client, [(keys.journal(p), ("XREVRANGE", keys.journal(p), "+",
                                                          "-", "COUNT", 1)) for p in parts])
    out = {}
    for part, reply in zip(parts, replies, strict=True):
        if isinstance(reply, Exception):
            raise reply
        out[part] = _text(reply[0][0]) if reply else "0-0"
    return out


# ---------------------------------------------------------------- the report


def lost_jobs(client: Any, keys: Keys) -> dict[int, dict[str, Any]]:
    """Every job recorded as lost: job id -> what was recorded of it."""
    out: dict[int, dict[str, Any]] = {}
    for jobid, raw in client.hgetall(keys.lost_jobs).items():
        try:
            info = orjson.loads(raw)
            out[int(jobid)] = info if isinstance(info, dict) else {}
        except (ValueError, orjson.JSONDecodeError):
            continue
    return dict(sorted(out.items()))


def clear_lost_jobs(client: Any, keys: Keys, jobids: Iterable[int] | None = None) -> int:
    """Forget lost jobs (the instance owner has dealt with them): those of ``jobids``, or
    every one. The number forgotten."""
    if jobids is None:
        count, _deleted = Direct.of(client, keys.lost_jobs).transaction([
            ("HLEN", keys.lost_jobs), ("DEL", keys.lost_jobs)])
        return int(count)
    ids = [str(j) for j in jobids]
    return int(client.hdel(keys.lost_jobs, *ids)) if ids else 0
