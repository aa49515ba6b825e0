"""A job record: the event-sourced :class:`Job` plus descriptive facts from the journal.

The journal's ``x`` extras carry facts that are not events but that readers
need without another round trip: name, queue, task and node counts and
dependencies on ``submit``; ranks and nodelist on ``alloc``. Folding events
and merging extras gives the same record to every reader (job manager,
job-list, checks), live or replayed.
"""

from __future__ import annotations

import math
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
#: The last of :data:`KNOWN_INFO` at these values (and types) are left out at the end
#: of a packed info (a job without GPUs or a time limit: 6 bytes).
_INFO_DEFAULTS: tuple[Any, ...] = (0, 0.0)
#: Known facts a packed info has at least.
_INFO_LEAST = len(KNOWN_INFO) - len(_INFO_DEFAULTS)


def _pack_info(info: Mapping[str, Any]) -> list[Any] | None:
    """``info`` as an array (:data:`KNOWN_INFO` by position, trailing defaults left out,
    then an object of the other facts); None when it lacks one of them."""
    if not all(k in info for k in KNOWN_INFO):
        return None
    packed: list[Any] = [info[k] for k in KNOWN_INFO]
    rest = {k: v for k, v in info.items() if k not in KNOWN_INFO}
    if rest:
        packed.append(rest)
    elif not any(isinstance(v, dict) for v in packed):  # a last object is the rest
        while len(packed) > _INFO_LEAST:
            default = _INFO_DEFAULTS[len(packed) - 1 - _INFO_LEAST]
            last = packed[-1]
            if type(last) is not type(default) or last != default:
                break
            packed.pop()
    return packed


def _unpack_info(packed: list[Any]) -> dict[str, Any] | None:
    """The info :func:`_pack_info` packed (a copy); None when ``packed`` is not one."""
    rest = packed[-1] if packed and isinstance(packed[-1], dict) else None
    values = packed[:-1] if rest is not None else packed
    if not _INFO_LEAST <= len(values) <= len(KNOWN_INFO) \
            or (rest is None and len(packed) > len(KNOWN_INFO)):
        return None
    values = [*values, *_INFO_DEFAULTS[len(values) - _INFO_LEAST:]]
    out = dict(zip(KNOWN_INFO, values, strict=True))
    if rest is not None:
        out.update(rest)
    return out


#: Positions of the state times in the stored job (its id left out): a time equal to
#: the one before it is stored as :data:`SAME_TIME` (the ingest writes submit,
#: validate and depend at one time: ~17 bytes a pending job), one a little after it
#: as the string :data:`LATER` + the difference, as short as reads back exactly.
_TIMES = tuple(i - 1 for i, name in enumerate(Job._fields) if name.startswith("t_"))[1:]
SAME_TIME = "="
LATER = "+"


def _later(before: float, time: float) -> str | None:
    """``time`` as :data:`LATER` + its difference from ``before``, in few digits with
    which ``before + difference`` is exactly ``time``; None when that is not shorter
    than the time itself."""
    diff = time - before
    if not 0.0 < abs(diff) < math.inf:  # NaN too
        return None
    if 1e9 <= time < 1e10 and -1e6 < diff < 1e6:
        # a UNIX time of these decades is a multiple of 2**-22 or 2**-21: a number of
        # 1e-7 s always tells it from its neighbours, and dividing by 1e7 rounds as
        # reading its decimals would (one try: the job list writes a record at every
        # state change)
        short = round(diff * 1e7) / 1e7
        if before + short == time:
            text = repr(short)
            # such a time is written in 12 characters at least
            shorter = len(text) + 3 < 12 or len(text) + 3 < len(repr(time))
            return LATER + text if shorter else None
    # the digits that tell ``time`` from its neighbours, to start from
    digits = max(1, int(math.log10(abs(diff) / math.ulp(time))))
    while digits < 17:
        text = f"{diff:.{digits}g}"
        if before + float(text) == time:
            return LATER + text if len(text) + 3 < len(repr(time)) else None
        digits += 1
    return None


def stored_record(record: JobRecord) -> bytes:
    """The job-list read model's form of ``record``: compact JSON ``[job, info]`` where
    ``job`` is :func:`job_to_json` without the id (the hash field is the id) and
    ``info`` the :data:`KNOWN_INFO` values by position (trailing defaults left out),
    the other facts in an object after them (an info lacking one of them is stored as
    an object), a state time equal to the one before it as :data:`SAME_TIME`, one a
    little later as its difference (:data:`LATER`). ~85 bytes for a pending job
    instead of ~195: Redis allocates 96 instead of 224 per job (fluxes bench
    memory)."""
    job = job_to_json(record.job)[1:]
    before = job[_TIMES[0] - 1] if len(job) >= _TIMES[0] else None
    for i in _TIMES:
        if i >= len(job):
            break
        time = job[i]
        if isinstance(time, float) and isinstance(before, float):
            job[i] = SAME_TIME if time == before else _later(before, time) or time
        before = time
    # compact JSON: the array's two items side by side are the array's JSON
    return b"[" + orjson.dumps(job) + b"," + _stored_info(record.info) + b"]"


#: Stored infos kept (a cache: clearing it only costs time).
INFOS_KEPT = 4096
_infos: dict[int, tuple[Mapping[str, Any], bytes]] = {}


def _stored_info(info: Mapping[str, Any]) -> bytes:
    """The JSON of ``info`` in :func:`stored_record`, kept by the dict's identity: the
    jobs of a submission share one dict, and a job's dict stays the same from its
    alloc to its end, while the job list writes the job at every state change. Safe
    because a record's info is never changed in place (see :func:`shared_info`); the
    dict is held, so its id is not another's."""
    found = _infos.get(id(info))
    if found is not None and found[0] is info:
        return found[1]
    packed = _pack_info(info)
    raw = orjson.dumps(info if packed is None else packed)
    if len(_infos) >= INFOS_KEPT:
        _infos.clear()
    _infos[id(info)] = (info, raw)
    return raw


def packed_extra(extra: Mapping[str, Any]) -> bytes:
    """The journal's form of an entry's extras (its ``x`` field): a job summary (the
    ``submit`` extras, every one of :data:`KNOWN_INFO`) as a JSON array of those values
    by position (trailing defaults left out), the other facts in an object after them;
    any other extras (``alloc``'s ranks) as a JSON object. ~60 bytes less a job in the
    journal (its names not repeated in every submit entry), which leaves a 256-byte
    stream node room for more entries: ~96 bytes a pending job in all (fluxes bench
    memory)."""
    packed = _pack_info(extra)
    return orjson.dumps(dict(extra) if packed is None else packed)


def unpacked_extra(obj: Any) -> dict[str, Any] | None:
    """The extras of a decoded ``x`` field: an object as it is, an array of
    :func:`packed_extra` as the object it packs (a copy); None when it is neither (a
    foreign or broken entry: each reader treats that as it did any non-object)."""
    if isinstance(obj, dict):
        return obj
    return _unpack_info(obj) if isinstance(obj, list) else None


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
            if i < len(job) and isinstance(job[i], str):
                if job[i] == SAME_TIME:
                    job[i] = job[i - 1]
                elif job[i].startswith(LATER):
                    job[i] = job[i - 1] + float(job[i][1:])
        if isinstance(packed, list):
            info = _unpack_info(packed)
            if info is None:
                raise ValueError("not a packed info")
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
