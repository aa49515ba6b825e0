"""One journal entry folded into a job record straight from its stream fields, for
the entries nearly every job has.

The job list folds every journal entry of every job (~11 a job) into the job's
record. Folding one the general way decodes it into a :class:`JournalEntry`,
then into its event dataclass (checking the context), runs the transition
and builds the new record: ~7 us an entry, most of the job list's CPU
(issue 26). :func:`fast_apply` reads the few fields the common events carry
and builds the new record directly.

Like :func:`fluxes.domain.job.fastfold.fold_common`, it accepts a strict subset
of what :func:`fluxes.domain.job.record.apply_record` accepts: the events of the
common history (submit, validate, depend, priority, alloc, start, finish,
release, free, clean) and journal-only annotations, contexts with the keys RFC
21 defines and values the event decoders accept, no context where RFC 21
defines none, a plain decimal eventlog position and job id, an extras field
that is JSON. Anything else returns None, and the caller folds the entry the
general way, which also reports what is wrong; the transitions' checks are the
state machine's (:mod:`fluxes.domain.job.model`). Within the subset the result
equals the general fold: tests/unit/test_joblist_fastapply.py checks it on
random histories, well-formed and not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fluxes.domain.job.events import MAX_PRIORITY, MAX_URGENCY
from fluxes.domain.job.fastfold import BAD, int_in, json_or_bad, stamp_of
from fluxes.domain.job.model import Job, merge_annotations, shared_float, shared_int
from fluxes.domain.job.record import JobRecord, shared_info, unpacked_extra
from fluxes.domain.job.states import JobState

_I = {name: i for i, name in enumerate(Job._fields)}
_STATE, _SEQ, _URGENCY, _USERID, _FLAGS = (_I[n] for n in (
    "state", "seq", "urgency", "userid", "flags"))
_PRIORITY, _T_SUBMIT, _T_DEPEND, _T_PRIORITY, _T_SCHED, _T_RUN, _T_CLEANUP, _T_INACTIVE = (
    _I[n] for n in ("priority", "t_submit", "t_depend", "t_priority", "t_sched", "t_run",
                    "t_cleanup", "t_inactive"))
_HAS_RESOURCES, _WAS_ALLOCATED, _STARTED, _RELEASED, _WAIT_STATUS, _ANNOTATIONS = (
    _I[n] for n in ("has_resources", "was_allocated", "started", "released", "wait_status",
                    "annotations"))

_NEW, _DEPEND, _PRIO, _SCHED = JobState.NEW, JobState.DEPEND, JobState.PRIORITY, JobState.SCHED
_RUN, _CLEANUP, _INACTIVE = JobState.RUN, JobState.CLEANUP, JobState.INACTIVE
_SUBMIT_KEYS = ("urgency", "userid", "flags", "version")

#: A transition: the job, its fields to change in place, the entry's stamp and
#: context (None: the entry has none; else the decoded JSON); False when the entry
#: is not one this module folds (the general fold decides: refuses or folds it).
Transition = Callable[[Job, list[Any], float, Any], bool]


def fast_apply(record: JobRecord | None, jobid: int, fields: Mapping[bytes, bytes]
               ) -> JobRecord | None:
    """``record`` (None: a job not seen before) after the journal entry ``fields`` of job
    ``jobid``; None when the entry is not one of the common ones this folds (fold it
    with :func:`~fluxes.domain.job.record.apply_record`)."""
    name = fields.get(b"n", b"")
    transition = _TRANSITIONS.get(name)
    if transition is None and name != b"submit":
        return None
    seq = fields.get(b"s")
    raw_ts = fields.get(b"t")
    if (seq is not None and not seq.isdigit()) or raw_ts is None:
        return None
    stamp = stamp_of(raw_ts)
    if stamp is None:
        return None
    raw_ctx = fields.get(b"c")
    ctx: Any = None
    if raw_ctx:
        ctx = _context(raw_ctx)
        if ctx is None:
            return None  # not JSON, or not an object (null: left to the general fold)
    raw_extra = fields.get(b"x")
    info: dict[str, Any] | None
    if transition is None:  # a submit: the job's first entry
        values: list[Any] = list(Job(jobid))
        if record is not None or not _submit(values, stamp, ctx):
            return None
        info = _submitted(raw_extra) if raw_extra else {}
        return None if info is None else JobRecord(tuple.__new__(Job, values), info)
    if record is None:
        return None
    job = record.job
    if job.seq == 0 or job.state is _INACTIVE:
        return None
    values = list(job)
    if not transition(job, values, stamp, ctx):
        return None
    info = _merged(record.info, raw_extra) if raw_extra else record.info
    return None if info is None else JobRecord(tuple.__new__(Job, values), info)


#: Contexts, submitted facts and merged facts kept by the bytes they come from (caches:
#: clearing them only costs time): the jobs of a submission carry the same bytes, and
#: most entries of most jobs the same few (``{"status":0}``).
KEPT = 1024
#: Longer bytes are not kept.
KEPT_BYTES = 512
_contexts: dict[bytes, dict[str, Any]] = {}
_submitted_infos: dict[bytes, dict[str, Any]] = {}
_merged_infos: dict[tuple[int, bytes], tuple[dict[str, Any], dict[str, Any]]] = {}
_SCALARS = (str, int, float, bool)
_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(cache: dict[_K, _V], key: _K, raw: bytes, value: _V) -> None:
    """Keep ``value`` in ``cache`` unless ``raw`` (what it came from) is longer than
    :data:`KEPT_BYTES`; a full cache starts again empty."""
    if len(raw) <= KEPT_BYTES:
        if len(cache) >= KEPT:
            cache.clear()
        cache[key] = value


def _context(raw: bytes) -> dict[str, Any] | None:
    """The context object ``raw`` holds (None: not JSON, or not an object); one of plain
    values is kept and given to every entry with the same bytes (the transitions only
    read it)."""
    found = _contexts.get(raw)
    if found is not None:
        return found
    ctx = json_or_bad(raw)
    if ctx.__class__ is not dict:
        return None
    if all(v is None or v.__class__ in _SCALARS for v in ctx.values()):
        _keep(_contexts, raw, raw, ctx)
    return ctx


def _submitted(raw: bytes) -> dict[str, Any] | None:
    """A new job's facts from its submit extras ``raw`` (None: not JSON), as
    :func:`~fluxes.domain.job.record.apply_record` makes them: shared by the jobs of a
    submission (:func:`~fluxes.domain.job.record.shared_info`)."""
    found = _submitted_infos.get(raw)
    if found is not None:
        return found
    decoded = json_or_bad(raw)
    if decoded is BAD:
        return None
    facts = unpacked_extra(decoded)
    if not facts:
        return {}
    info = shared_info(facts)
    _keep(_submitted_infos, raw, raw, info)
    return info


def _merged(info: dict[str, Any], raw: bytes) -> dict[str, Any] | None:
    """``info`` updated with the extras ``raw`` (None: not JSON), a new dict as
    :func:`~fluxes.domain.job.record.apply_record` makes it, kept for ``info`` (by
    identity: the jobs of a submission share one) and ``raw`` (the allocs of a
    submission's jobs often carry the same ranks): those jobs then share the result
    too, as a record's info is never changed in place."""
    key = (id(info), raw)
    found = _merged_infos.get(key)
    if found is not None and found[0] is info:
        return found[1]
    decoded = json_or_bad(raw)
    if decoded is BAD:
        return None
    facts = unpacked_extra(decoded)
    merged = {**info, **facts} if facts else info
    _keep(_merged_infos, key, raw, (info, merged))
    return merged


def _submit(values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is None or not all(k in ctx for k in _SUBMIT_KEYS):
        return False
    urgency, userid, flags = ctx["urgency"], ctx["userid"], ctx["flags"]
    if not (int_in(urgency, 0, MAX_URGENCY) and int_in(userid, 0) and int_in(flags, 0)
            and int_in(ctx["version"], 1, 1)):
        return False
    values[_URGENCY] = urgency
    values[_USERID] = shared_int(userid)
    values[_FLAGS] = flags
    values[_T_SUBMIT] = shared_float(stamp)
    values[_SEQ] = 1
    return True


def _validate(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is not None or job.state is not _NEW:
        return False
    values[_STATE] = _DEPEND
    values[_T_DEPEND] = shared_float(stamp)
    values[_SEQ] += 1
    return True


def _depend(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is not None or job.state is not _DEPEND or job.dependencies:
        return False
    values[_STATE] = _PRIO
    values[_T_PRIORITY] = shared_float(stamp)
    values[_SEQ] += 1
    return True


def _priority(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is None or not int_in(ctx.get("priority"), 0, MAX_PRIORITY):
        return False
    priority = shared_int(ctx["priority"])
    if job.state is _PRIO:
        values[_STATE] = _SCHED
        values[_T_SCHED] = shared_float(stamp)
    elif job.state is not _SCHED:
        return False
    values[_PRIORITY] = priority
    values[_SEQ] += 1
    return True


def _alloc(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    annotations = None
    if ctx is not None:
        if "annotations" not in ctx or not isinstance(ctx["annotations"], dict):
            return False
        annotations = ctx["annotations"]
    # (an alloc in CLEANUP, a job canceled while it was asked for, is the general fold's)
    if job.state is not _SCHED or job.has_resources or job.was_allocated:
        return False
    values[_STATE] = _RUN
    values[_HAS_RESOURCES] = values[_WAS_ALLOCATED] = True
    values[_T_RUN] = stamp
    values[_ANNOTATIONS] = merge_annotations(None, annotations)
    values[_SEQ] += 1
    return True


def _start(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is not None or (job.state is not _RUN and job.state is not _CLEANUP) \
            or not job.has_resources or job.started or job.prologs:
        return False
    values[_STARTED] = True
    values[_SEQ] += 1
    return True


def _finish(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is None or not int_in(ctx.get("status"), 0, 0xFFFF) \
            or (job.state is not _RUN and job.state is not _CLEANUP) \
            or not job.started or job.wait_status is not None:
        return False
    values[_WAIT_STATUS] = ctx["status"]
    if job.state is _RUN:
        values[_STATE] = _CLEANUP
        values[_T_CLEANUP] = stamp
    values[_SEQ] += 1
    return True


def _release(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is None or not isinstance(ctx.get("ranks"), str) \
            or ctx.get("final").__class__ is not bool:
        return False
    if job.state is not _CLEANUP or not job.has_resources or job.released:
        return False
    if ctx["final"]:
        values[_RELEASED] = True
    values[_SEQ] += 1
    return True


def _free(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is not None or job.state is not _CLEANUP or not job.has_resources or job.epilogs:
        return False
    values[_HAS_RESOURCES] = False
    values[_SEQ] += 1
    return True


def _clean(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    if ctx is not None or job.state is not _CLEANUP or job.has_resources or job.prologs \
            or job.epilogs or (job.started and job.wait_status is None):
        return False
    values[_STATE] = _INACTIVE
    values[_T_INACTIVE] = stamp
    values[_SEQ] += 1
    return True


def _annotations(job: Job, values: list[Any], stamp: float, ctx: Any) -> bool:
    # journal-only: not in the eventlog, so the position does not move
    new = None if ctx is None else ctx.get("annotations")
    if new is not None and not isinstance(new, dict):
        return False
    values[_ANNOTATIONS] = merge_annotations(job.annotations, new)
    return True


#: The transitions by event name (a submit, the first entry, is :func:`_submit`'s).
_TRANSITIONS: dict[bytes, Transition] = {
    b"validate": _validate, b"depend": _depend, b"priority": _priority,
    b"alloc": _alloc, b"start": _start, b"finish": _finish, b"release": _release,
    b"free": _free, b"clean": _clean, b"annotations": _annotations,
}
