"""The job hash ``{p}:job:<id>``: its field names, its reads and its writes, in one place.

Who writes what (docs/architecture.md, "Keys and streams"):

* the ingest creates the hash with the job (:func:`create`): ``owner``,
  ``urgency`` (left out at the default), ``queue``, the scheduler's normalized ``request``, and the
  digests of the job's jobspec blobs (:mod:`fluxes.domain.jm.content`):
  ``spec`` (as submitted, without its environment), ``full`` (with the
  instance's defaults applied, only when they changed it) and ``env`` (the
  environment both share), and ``cc``: a ``--cc`` copy's ``FLUXES_JOB_CC``,
  kept out of the environment blob so that the copies share it. The blobs
  (``{p}:blob:<owner>:<digest>``, each once per distinct content and owner,
  with a reference count) are written and counted in the same commit;
* the scheduler writes ``R`` with its SUCCESS response (:func:`set_r`);
* the job manager writes ``result`` and ``t_inactive`` when the job ends
  (:func:`set_result`);
* a purge releases the job's blob references (:func:`release_job_blobs`).

The hash holds only what every user may read (docs/security.md): the
jobspecs, with their environment, are in the owner's blobs, which only the
owner's ACL user (and the instance owner) can read; the hash names them by
digest. The jobspec a job runs with is the full one when there is one, else the
submitted one (:func:`effective`).
Readers take :class:`JobHash` (typed, blobs resolved) or the bulk reads of
:class:`JobHashes`: one round trip for the hashes and one for the blobs
they name that are not cached yet (one per slot on a cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fluxes.domain.jm.content import JobContent, splice
from fluxes.formats.urgency import DEFAULT_URGENCY
from fluxes.store.direct import execute_grouped
from fluxes.store.eventstore import Batch, EventStore
from fluxes.store.keys import Keys

# -- field names ------------------------------------------------------------------------

#: The name ``fluxes job info`` shows the jobspec as submitted under (from the blobs).
JOBSPEC: Final = "jobspec"
#: ... and the jobspec with defaults applied (when defaults changed it).
JOBSPEC_FULL: Final = "jobspec_full"
#: Digest of the blob of the jobspec as submitted, without its environment.
SPEC: Final = "spec"
#: Digest of the blob of the jobspec with defaults applied (when they changed it).
FULL: Final = "full"
#: Digest of the blob of the environment (absent: none split off).
ENV: Final = "env"
#: ``FLUXES_JOB_CC``, kept out of the environment blob so that the copies of a
#: ``--cc`` array share one (absent: none taken out).
CC: Final = "cc"
#: The scheduler's normalized request (:meth:`fluxes.domain.sched.request.Request.to_wire`).
REQUEST: Final = "request"
#: The allocated resources (RFC 20), written by the scheduler.
R: Final = "R"
#: The submitting user's uid.
OWNER: Final = "owner"
#: The urgency at submission (absent from a hash that exists: the default,
#: :data:`~fluxes.formats.urgency.DEFAULT_URGENCY`; ~27 bytes a pending job).
URGENCY: Final = "urgency"
#: The queue the job was admitted to (absent: the anonymous queue).
QUEUE: Final = "queue"
#: The job's result name once inactive (COMPLETED, FAILED, CANCELED, TIMEOUT; "" if none).
RESULT: Final = "result"
#: When the job became inactive (``repr`` of a UNIX time).
T_INACTIVE: Final = "t_inactive"
#: The job's eventlog index while short: written by commit.lua's ``E`` op, read through
#: fluxes.store.jobfacts (its ``INDEX_FIELD``), never through this module.
INDEX: Final = "ev"

#: The fields that name a job's jobspec (its blobs, and a --cc copy's variable).
JOBSPEC_FIELDS: Final = (SPEC, FULL, ENV, CC)
#: The fields that name blobs.
BLOB_FIELDS: Final = (SPEC, FULL, ENV)
#: What a jobspec is resolved from, in this order.
_SOURCES: Final = (SPEC, FULL, ENV, OWNER, CC)
#: Where the owner is in a row of :data:`_SOURCES`.
_OWNER_AT: Final = 3
#: Every field, in the order :meth:`JobHashes.get_many` reads them.
FIELDS: Final = (*_SOURCES, REQUEST, R, URGENCY, QUEUE, RESULT, T_INACTIVE)
#: The fields a start reads (:meth:`JobHashes.for_start`), in order: what a start
#: request carries of the hash (commit.lua's Y op, :func:`unpack_facts`).
START_FIELDS: Final = (*_SOURCES, R, RESULT)
#: Longest packed facts :func:`unpack_facts` reads (commit.lua copies at most 4096
#: bytes of values, plus their lengths and separators).
MAX_PACKED_FACTS: Final = 8192


def unpack_facts(raw: Any, n: int = len(START_FIELDS)) -> list[bytes | None] | None:
    """The ``n`` hash values commit.lua's Y op packed (``<length>:<bytes>`` or ``-``
    each, joined by ``,``); None when ``raw`` is not exactly that (then read the hash)."""
    if not isinstance(raw, bytes) or len(raw) > MAX_PACKED_FACTS:
        return None
    out: list[bytes | None] = []
    at = 0
    for k in range(n):
        if k:
            if raw[at:at + 1] != b",":
                return None
            at += 1
        if raw[at:at + 1] == b"-":
            out.append(None)
            at += 1
            continue
        colon = raw.find(b":", at, at + 6)
        digits = raw[at:colon]
        if colon < 0 or not digits.isdigit():
            return None
        end = colon + 1 + int(digits)
        if end > len(raw):
            return None
        out.append(raw[colon + 1:end])
        at = end
    return out if at == len(raw) else None


#: Blob contents a reader keeps (immutable: a digest names one content).
BLOBS_CACHED: Final = 256


def effective(full: bytes | None, submitted: bytes | None) -> bytes | None:
    """The jobspec a job runs with: the full one when stored, else the submitted one."""
    return full if full else submitted


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def _int(value: bytes | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _float(value: bytes | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _urgency(value: bytes | None) -> int | None:
    """The stored urgency of a job whose hash exists (absent: the default, left out)."""
    return DEFAULT_URGENCY if value is None else _int(value)


@dataclass(frozen=True, slots=True)
class JobHash:
    """What the job hash holds, blobs resolved (None: not stored or unreadable)."""

    jobid: int
    jobspec: bytes | None = None
    jobspec_full: bytes | None = None
    request: str | None = None
    R: bytes | None = None
    owner: int | None = None
    urgency: int | None = None
    queue: str | None = None
    result: str | None = None
    t_inactive: float | None = None

    @property
    def effective_jobspec(self) -> bytes | None:
        """The jobspec the job runs with (:func:`effective`)."""
        return effective(self.jobspec_full, self.jobspec)

    def text_fields(self) -> dict[str, str]:
        """The stored facts as text, by field name (``fluxes job info``); the jobspecs
        as ``jobspec`` and (when different) ``jobspec_full``, however stored."""
        values: dict[str, Any] = {
            JOBSPEC: self.jobspec, JOBSPEC_FULL: self.jobspec_full, REQUEST: self.request,
            R: self.R, OWNER: self.owner, URGENCY: self.urgency, QUEUE: self.queue,
            RESULT: self.result,
            T_INACTIVE: None if self.t_inactive is None else repr(self.t_inactive)}
        out = {}
        for name, value in values.items():
            if value is None:
                continue
            out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) \
                else str(value)
        return out


# -- writes (ops of a commit batch) -------------------------------------------------------


def create(batch: Batch, keys: Keys, jobid: int, *, owner: int, urgency: int,
           content: JobContent, queue: str | None = None,
           request: str | None = None) -> None:
    """Add to ``batch`` the hash of a new job and a reference to each of its blobs
    (the ingest, with the job's submit event)."""
    part = keys.partition_of(jobid)
    fields: dict[str, str | bytes | int | float] = {OWNER: owner, SPEC: content.spec.digest}
    if urgency != DEFAULT_URGENCY:
        fields[URGENCY] = urgency
    if content.full is not None:
        fields[FULL] = content.full.digest
    if content.env is not None:
        fields[ENV] = content.env.digest
    if content.cc is not None:
        fields[CC] = content.cc
    if queue is not None:
        fields[QUEUE] = queue
    if request is not None:
        fields[REQUEST] = request
    batch.hset(keys.job(jobid), fields)
    for blob in content.blobs:
        batch.blob_ref(keys.blob(part, owner, blob.digest), blob.data)


def set_r(batch: Batch, keys: Keys, jobid: int, r: bytes) -> None:
    """Add to ``batch`` the job's R (the scheduler, with its SUCCESS response)."""
    batch.hset(keys.job(jobid), {R: r})


def set_updated(batch: Batch, keys: Keys, jobid: int,
                fields: Mapping[str, str | None]) -> None:
    """Add to ``batch`` the facts a ``fluxes update`` of a pending job changed (the job
    manager, with the ``jobspec-update`` event): ``queue`` and ``request`` (None: the
    scheduler reads the jobspec instead)."""
    unknown = set(fields) - {QUEUE, REQUEST}
    if unknown:
        raise ValueError(f"job hash: {sorted(unknown)} cannot be updated")
    values = {name: value for name, value in fields.items() if value is not None}
    gone = [name for name, value in fields.items() if value is None]
    if values:
        batch.hset(keys.job(jobid), values)
    if gone:
        batch.hdel(keys.job(jobid), gone)


def set_result(batch: Batch, keys: Keys, jobid: int, result: str, t_inactive: float) -> None:
    """Add to ``batch`` the outcome of a job that became inactive (the job manager)."""
    batch.hset(keys.job(jobid), {RESULT: result, T_INACTIVE: repr(t_inactive)})


def release(batch: Batch, keys: Keys, jobid: int, owner: int,
            digests: Mapping[str, str]) -> None:
    """Add to ``batch`` the release of the blob references a job holds (``digests``:
    field -> digest, as stored); idempotent, so a purge may run again."""
    part = keys.partition_of(jobid)
    for name, digest in digests.items():
        batch.blob_release(keys.job(jobid), name, keys.blob(part, owner, digest), digest)


def release_job_blobs(store: EventStore, jobids: Sequence[int], token: str = "",
                      per_batch: int = 1000) -> int:
    """Release the blob references of ``jobids`` (what a purge calls before it deletes
    the jobs' keys): each blob's count goes down, and a blob no job names any
    more is deleted. ``token`` fences the commits (the job manager's); at most
    ``per_batch`` jobs per commit, since a script blocks Redis. Returns how many
    references were released; releasing again releases nothing."""
    keys = store.keys
    hashes = JobHashes(store.redis, keys)
    released = 0
    for i in range(0, len(jobids), per_batch):
        chunk = jobids[i:i + per_batch]
        batches: dict[int, Batch] = {}
        for jobid, (*digests, owner) in zip(chunk, hashes.rows(chunk, (*BLOB_FIELDS, OWNER)),
                                            strict=True):
            uid = _int(owner)
            named = {name: d.decode() for name, d in zip(BLOB_FIELDS, digests, strict=True)
                     if d}
            if uid is None or not named:
                continue
            part = keys.partition_of(jobid)
            batch = batches.get(part)
            if batch is None:
                batch = batches[part] = store.batch(part)
            release(batch, keys, jobid, uid, named)
            released += len(named)
        if batches:
            store.commit_many(list(batches.values()), token)
    return released


# -- reads -----------------------------------------------------------------------------------


class JobHashes:
    """Reads of job hashes, blobs resolved; one round trip per call for the hashes, one
    for the blobs not cached yet (one per slot on a cluster)."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.redis = client
        self.keys = keys
        self._blobs: dict[str, bytes] = {}

    def _run(self, commands: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        if not commands:
            return []
        replies = execute_grouped(self.redis, commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def rows(self, jobids: Sequence[int], fields: Sequence[str]) -> list[list[bytes | None]]:
        """``fields`` of each job's hash, as stored (HMGET)."""
        return self._run([(self.keys.job(j), ("HMGET", self.keys.job(j), *fields))
                          for j in jobids])

    def field(self, jobids: Sequence[int], name: str) -> list[bytes | None]:
        """One field of each job's hash (R, result, request...), as stored."""
        return [values[0] for values in self.rows(jobids, (name,))]

    def exists(self, jobids: Iterable[int]) -> list[bool]:
        """Whether each job has a hash."""
        keys = [self.keys.job(j) for j in jobids]
        return [bool(r) for r in self._run([(k, ("EXISTS", k)) for k in keys])]

    def _blob_data(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The data of each blob (missing ones left out), cached."""
        out: dict[str, bytes] = {}
        wanted = []
        for key in dict.fromkeys(keys):
            found = self._blobs.get(key)
            if found is None:
                wanted.append(key)
            else:
                out[key] = found
        for key, data in zip(wanted, self._run([(k, ("HGET", k, "data")) for k in wanted]),
                             strict=True):
            if data is None:
                continue
            if len(self._blobs) >= BLOBS_CACHED:
                self._blobs.clear()
            self._blobs[key] = out[key] = data
        return out

    def _resolve(self, jobids: Sequence[int], rows: Sequence[Sequence[bytes | None]]
                 ) -> list[tuple[bytes | None, bytes | None]]:
        """(jobspec as submitted, jobspec with defaults when different) from each row
        of :data:`_SOURCES`; None where a blob is missing or does not splice."""
        named: list[dict[str, str] | None] = []
        for jobid, (spec, full, env, owner, _cc) in zip(jobids, rows, strict=True):
            uid = _int(owner)
            if not spec or uid is None:
                named.append(None)
                continue
            part = self.keys.partition_of(jobid)
            named.append({name: self.keys.blob(part, uid, d.decode())
                          for name, d in ((SPEC, spec), (FULL, full), (ENV, env)) if d})
        data = self._blob_data(k for n in named if n for k in n.values())
        out: list[tuple[bytes | None, bytes | None]] = []
        for row, blobs in zip(rows, named, strict=True):
            if blobs is None:
                out.append((None, None))
                continue
            env = data.get(blobs[ENV]) if ENV in blobs else None
            spec_data = data.get(blobs[SPEC])
            full_data = data.get(blobs[FULL]) if FULL in blobs else None
            if (ENV in blobs and env is None) or spec_data is None:
                out.append((None, None))
                continue
            cc = _text(row[4])
            try:
                out.append((splice(spec_data, env, cc),
                            None if full_data is None else splice(full_data, env, cc)))
            except ValueError:
                out.append((None, None))
        return out

    def get(self, jobid: int) -> JobHash | None:
        """One job's hash; None when the job has none."""
        return self.get_many([jobid])[0]

    def get_many(self, jobids: Sequence[int]) -> list[JobHash | None]:
        """Each job's hash (None where there is none), in the order of ``jobids``."""
        rows = self.rows(jobids, FIELDS)
        specs = self._resolve(jobids, [row[:len(_SOURCES)] for row in rows])
        out: list[JobHash | None] = []
        for jobid, row, (spec, full) in zip(jobids, rows, specs, strict=True):
            if not any(v is not None for v in row):
                out.append(None)
                continue
            request, r, urgency, queue, result, t_inactive = row[len(_SOURCES):]
            out.append(JobHash(jobid, jobspec=spec, jobspec_full=full, request=_text(request),
                               R=r, owner=_int(row[_OWNER_AT]), urgency=_urgency(urgency),
                               queue=_text(queue), result=_text(result),
                               t_inactive=_float(t_inactive)))
        return out

    def effective_jobspecs(self, jobids: Sequence[int]) -> list[bytes | None]:
        """The jobspec each job runs with (:func:`effective`); None for a job without one."""
        if not jobids:
            return []
        rows = self.rows(jobids, _SOURCES)
        return [effective(full, spec) for spec, full in self._resolve(jobids, rows)]

    def allocations(self, jobids: Sequence[int]) -> list[tuple[bytes | None, str | None,
                                                               bytes | None]]:
        """(R, request, effective jobspec) of each job: what scheduler recovery reads.

        The jobspec is read only for jobs without a stored request (one the ingest could
        not represent, or that a ``fluxes update`` took away).
        """
        rows = self.rows(jobids, (R, REQUEST))
        old = [j for j, (_r, request) in zip(jobids, rows, strict=True) if not request]
        specs = dict(zip(old, self.effective_jobspecs(old), strict=True))
        return [(r, _text(request) or None, specs.get(jobid))
                for jobid, (r, request) in zip(jobids, rows, strict=True)]

    def for_start(self, jobids: Sequence[int],
                  carried: Mapping[int, Any] | None = None
                  ) -> dict[int, tuple[bytes | None, bytes | None, bytes | None, bytes | None]]:
        """(effective jobspec, R, owner, result) of each job, as an exec worker starting
        it needs them (``fluxes.store.exec_streams.ExecStreams.fetch``): one round trip
        for the hashes, one for the blobs not cached yet (none when the jobs share
        their jobspec, as a bulk submission's do). ``carried``: the :data:`START_FIELDS`
        of jobs packed in their start requests (:func:`unpack_facts`): their hashes are
        not read (packed facts that do not unpack are as if absent)."""
        unique = list(dict.fromkeys(jobids))
        known = {j: row for j in unique
                 if (row := unpack_facts((carried or {}).get(j))) is not None}
        read = [j for j in unique if j not in known]
        known.update(zip(read, self.rows(read, START_FIELDS), strict=True))
        rows = [known[j] for j in unique]
        n = len(_SOURCES)
        specs = self._resolve(unique, [row[:n] for row in rows])
        return {jobid: (effective(full, spec), row[n], row[_OWNER_AT], row[n + 1])
                for jobid, row, (spec, full) in zip(unique, rows, specs, strict=True)}

    def gone(self, jobids: Sequence[int]) -> list[bool]:
        """For each job: is it inactive (its hash has a ``result``) or purged (no hash)?"""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for jobid in jobids:
            key = self.keys.job(jobid)
            commands += [(key, ("HEXISTS", key, RESULT)), (key, ("EXISTS", key))]
        replies = self._run(commands)
        return [bool(replies[2 * i]) or not replies[2 * i + 1] for i in range(len(jobids))]

    def public(self, jobid: int) -> JobHash | None:
        """One job's hash without its jobspecs: what any user may read of another's job
        (the blobs are the owner's); None when the job has none."""
        row = self.rows([jobid], FIELDS)[0]
        if not any(v is not None for v in row):
            return None
        request, r, urgency, queue, result, t_inactive = row[len(_SOURCES):]
        return JobHash(jobid, request=_text(request), R=r, owner=_int(row[_OWNER_AT]),
                       urgency=_urgency(urgency), queue=_text(queue), result=_text(result),
                       t_inactive=_float(t_inactive))
