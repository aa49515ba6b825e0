"""A job record: the event-sourced :class:`Job` plus descriptive facts from the journal.

The journal's ``x`` extras carry facts that are not events but that readers
need without another round trip: name, queue, task and node counts and
dependencies on ``submit``; ranks and nodelist on ``alloc``. Folding events
and merging extras gives the same record to every reader (job manager,
job-list, checks), live or replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes.domain.job import events as ev
from fluxes.domain.job.codec import job_from_json, job_to_json
from fluxes.domain.job.model import Job, apply


@dataclass(slots=True)
class JobRecord:
    """A job's state and the facts the journal extras gave about it."""

    job: Job
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> int:
        """The job id."""
        return self.job.id

    @property
    def queue(self) -> str:
        """The job's queue ("" for the anonymous queue)."""
        queue = self.info.get("queue")
        return queue if isinstance(queue, str) else ""

    def to_obj(self) -> dict[str, Any]:
        """JSON-ready form (checkpoints, read model)."""
        return {"j": job_to_json(self.job), "i": self.info}

    @classmethod
    def from_obj(cls, obj: Any) -> JobRecord:
        """Decode :meth:`to_obj` output; ValueError when it is not a record."""
        try:
            return cls(job_from_json(obj["j"]), dict(obj.get("i") or {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bad job record: {exc}") from None

    def to_json(self) -> bytes:
        """Compact JSON."""
        return orjson.dumps(self.to_obj())

    @classmethod
    def from_json(cls, raw: bytes | str) -> JobRecord:
        """Decode :meth:`to_json` output; ValueError when it is not a record."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"bad job record: {exc}") from None
        return cls.from_obj(obj)


#: The facts nearly every record has, stored by position in the read model's form
#: (:func:`stored_record`): their names are not repeated in every job's entry.
KNOWN_INFO = ("name", "ntasks", "nnodes", "ncores", "ngpus", "duration")


#: Positions of the state times in the stored job (its id left out): a time equal to
#: the one before it is stored as :data:`SAME_TIME` (the ingest writes submit,
#: validate and depend at one time: ~17 bytes a pending job).
_TIMES = tuple(i - 1 for i, name in enumerate(Job._fields) if name.startswith("t_"))[1:]
SAME_TIME = "="


def stored_record(record: JobRecord) -> bytes:
    """The job-list read model's form of ``record``: compact JSON ``[job, info]`` where
    ``job`` is :func:`job_to_json` without the id (the hash field is the id) and
    ``info`` the :data:`KNOWN_INFO` values by position, the other facts in an object
    after them (an info lacking one of them is stored as an object), a state time
    equal to the one before it as :data:`SAME_TIME`. ~100 bytes for a pending job
    instead of ~195: Redis allocates 112 instead of 224 per job (fluxes bench
    memory)."""
    info = record.info
    job = job_to_json(record.job)[1:]
    times = list(job)
    for i in _TIMES:
        if i < len(job) and isinstance(times[i], float) and times[i] == times[i - 1]:
            job[i] = SAME_TIME
    if all(k in info for k in KNOWN_INFO):
        packed: list[Any] = [info[k] for k in KNOWN_INFO]
        rest = {k: v for k, v in info.items() if k not in KNOWN_INFO}
        if rest:
            packed.append(rest)
        return orjson.dumps([job, packed])
    return orjson.dumps([job, info])


def packed_extra(extra: Mapping[str, Any]) -> bytes:
    """The journal's form of an entry's extras (its ``x`` field): a job summary (the
    ``submit`` extras, every one of :data:`KNOWN_INFO`) as a JSON array of those values
    by position, the other facts in an object after them; any other extras (``alloc``'s
    ranks) as a JSON object. ~54 bytes less a job in the journal (its names not
    repeated in every submit entry), which leaves a 256-byte stream node room for more
    entries: ~96 bytes a pending job in all (fluxes bench memory)."""
    if all(k in extra for k in KNOWN_INFO):
        packed: list[Any] = [extra[k] for k in KNOWN_INFO]
        rest = {k: v for k, v in extra.items() if k not in KNOWN_INFO}
        if rest:
            packed.append(rest)
        return orjson.dumps(packed)
    return orjson.dumps(dict(extra))


def unpacked_extra(obj: Any) -> dict[str, Any] | None:
    """The extras of a decoded ``x`` field: an object as it is, an array of
    :func:`packed_extra` as the object it packs (a copy); None when it is neither (a
    foreign or broken entry: each reader treats that as it did any non-object)."""
    if isinstance(obj, dict):
        return obj
    known = len(KNOWN_INFO)
    if not isinstance(obj, list) or len(obj) not in (known, known + 1):
        return None
    out = dict(zip(KNOWN_INFO, obj[:known], strict=True))
    if len(obj) > known:
        rest = obj[known]
        if not isinstance(rest, dict):
            return None
        out.update(rest)
    return out


def record_from_stored(jobid: int, raw: bytes | str) -> JobRecord:
    """Decode :func:`stored_record` output for job ``jobid``, or a record the read model
    stored before (:meth:`JobRecord.to_json`, an object); ValueError when it is
    neither."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"bad job record: {exc}") from None
    if isinstance(obj, dict):  # the previous form
        return JobRecord.from_obj(obj)
    try:
        job, packed = obj
        for i in _TIMES:
            if i < len(job) and job[i] == SAME_TIME:
                job[i] = job[i - 1]
        if isinstance(packed, list):
            info = dict(zip(KNOWN_INFO, packed[:len(KNOWN_INFO)], strict=True))
            if len(packed) > len(KNOWN_INFO):
                info.update(packed[len(KNOWN_INFO)])
        else:
            info = dict(packed)
        return JobRecord(job_from_json([jobid, *job]), info)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad job record: {exc}") from None


#: Distinct shared info dicts kept (a cache: clearing it only costs sharing).
SHARED_KEPT = 4096
_shared: dict[bytes, dict[str, Any]] = {}


def shared_info(facts: Mapping[str, Any]) -> dict[str, Any]:
    """A dict of ``facts``, the same object for equal facts (the jobs of one submission:
    ~0.5 KB a pending job in the job manager and the job list each). Safe because a
    record's info is never changed in place: :func:`apply_record` makes a new one."""
    try:
        key = orjson.dumps(facts, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return dict(facts)
    found = _shared.get(key)
    if found is None:
        if len(_shared) >= SHARED_KEPT:
            _shared.clear()
        found = _shared[key] = dict(facts)
    return found


def apply_record(record: JobRecord | None, jobid: int, event: ev.Event,
                 extra: Mapping[str, Any] | None = None) -> JobRecord:
    """Fold one journal entry into ``record`` (None for a job not seen before).

    Raises TransitionError/EventError like :func:`fluxes.domain.job.model.apply`;
    ``record`` itself is never modified.
    """
    if record is None:
        record = JobRecord(Job(jobid))
        if extra:
            # a new job's facts: jobs submitted together share one dict
            return JobRecord(apply(event, record.job), shared_info(extra))
    job = apply(event, record.job)
    info = record.info
    if extra:
        info = {**info, **extra}
    if isinstance(event, ev.JobspecUpdate):
        info = apply_jobspec_update(info, event.updates)
    return JobRecord(job, info)


def apply_jobspec_update(info: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """The record facts a ``jobspec-update`` changes (duration, queue, name)."""
    out = dict(info)
    if "attributes.system.duration" in updates:
        out["duration"] = updates["attributes.system.duration"]
    if "attributes.system.queue" in updates:
        out["queue"] = updates["attributes.system.queue"]
    if "attributes.system.job.name" in updates:
        out["name"] = updates["attributes.system.job.name"]
    return out
