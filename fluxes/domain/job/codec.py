"""Compact JSON-ready encoding of :class:`Job` records, for checkpoints and read models."""

from __future__ import annotations

from typing import Any

from fluxes.domain.job.model import FatalException, Job
from fluxes.domain.job.states import JobState

#: Bump when the encoding changes; older checkpoints are then ignored (full replay).
CODEC_VERSION = 1

_FIELDS = Job._fields
_STATE = _FIELDS.index("state")
_SETS = tuple(_FIELDS.index(n) for n in ("set_flags", "dependencies"))
_TUPLES = tuple(_FIELDS.index(n) for n in ("prologs", "epilogs"))
_FATAL = _FIELDS.index("fatal")
_UPDATES = _FIELDS.index("jobspec_updates")


def _encoded_defaults() -> list[Any]:
    """Every field's default as :func:`job_to_json` writes it (the id's is a placeholder)."""
    out: list[Any] = list(Job(0))
    out[_STATE] = int(JobState.NEW)
    for i in _SETS:
        out[i] = []
    for i in _TUPLES:
        out[i] = []
    out[_UPDATES] = {}
    return out


_DEFAULTS = _encoded_defaults()


def job_to_json(job: Job) -> list[Any]:
    """Encode ``job`` as a list (field order of :class:`Job`) that orjson can dump."""
    out: list[Any] = list(job)
    out[_STATE] = int(job.state)
    for i in _SETS:
        out[i] = sorted(out[i])
    for i in _TUPLES:
        out[i] = list(out[i])
    if job.fatal is not None:
        out[_FATAL] = [job.fatal.type, job.fatal.note, job.fatal.timestamp]
    out[_UPDATES] = dict(job.jobspec_updates)
    # Trailing fields at their defaults are left out: a pending job's record is half
    # as long, and there is one per job in the read model (fluxes bench memory).
    end = len(out)
    while end > 1 and out[end - 1] == _DEFAULTS[end - 1]:
        end -= 1
    del out[end:]
    return out


def job_from_json(obj: Any) -> Job:
    """Decode what :func:`job_to_json` produced; ValueError if it does not fit."""
    if not isinstance(obj, list) or not 1 <= len(obj) <= len(_FIELDS):
        raise ValueError("job record: wrong shape")
    values = list(obj)
    values += _DEFAULTS[len(values):]
    try:
        values[_STATE] = JobState(values[_STATE])
        for i in _SETS:
            values[i] = frozenset(values[i])
        for i in _TUPLES:
            values[i] = tuple(values[i])
        if values[_FATAL] is not None:
            kind, note, ts = values[_FATAL]
            values[_FATAL] = FatalException(kind, note, ts)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"job record: {exc}") from None
    return Job(*values)
