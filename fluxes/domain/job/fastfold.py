"""A finished job's journal history folded in one step, for the common history.

Almost every job of a busy instance has the same ten events: submit,
validate, depend, priority, alloc, start, finish, release, free, clean (and
journal-only annotations while it waits). Folding them one by one (decode
each event into its dataclass, run its transition, copy the record) is
what bounds a full replay; for that one history the end state is known in
advance, so :func:`fold_common` checks the entries and builds the final
record directly.

It accepts a strict subset of what :func:`fluxes.domain.job.record.apply_record`
accepts: the exact names at eventlog positions 0..9, contexts with only the
keys RFC 21 defines and values the event decoders accept, no context where
RFC 21 defines none. Anything else (another history, an unknown key, a
malformed value) returns None and the caller folds the entries one by one,
which also reports what is wrong. Within that subset the result equals the
one-by-one fold; tests/unit/test_fastfold.py checks this on random histories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import orjson

from fluxes.domain.job.events import MAX_PRIORITY, MAX_URGENCY
from fluxes.domain.job.model import Job, merge_annotations
from fluxes.domain.job.record import JobRecord, unpacked_extra
from fluxes.domain.job.states import JobState

#: The common history, by eventlog position.
COMMON: tuple[bytes, ...] = (b"submit", b"validate", b"depend", b"priority", b"alloc",
                             b"start", b"finish", b"release", b"free", b"clean")
_POSITIONS = tuple(str(i).encode() for i in range(len(COMMON)))
_ANNOTATIONS = b"annotations"
_SUBMIT_KEYS = frozenset({"urgency", "userid", "flags", "version"})


def fold_common(jobid: int, entries: Sequence[list[bytes]]) -> JobRecord | None:
    """The record of a job whose journal entries (flat field lists, in journal order)
    are the common finished history; None for any other history."""
    stamps: list[float] = []
    contexts: list[bytes | None] = []
    info: dict[str, Any] = {}
    allocated = False
    for fields in entries:
        # commit.lua writes j, s, n, t first, then c and x when present
        n = len(fields)
        if n < 6 or fields[0] != b"j":
            return None
        if fields[2] == b"n":  # journal-only entry (no eventlog position)
            if fields[3] != _ANNOTATIONS or allocated or not stamps or n not in (6, 8) \
                    or not _annotations_ok(fields):
                return None
            continue  # the alloc snapshot replaces whatever it merged
        pos = len(stamps)
        if n < 8 or pos >= len(COMMON) or fields[2] != b"s" or fields[3] != _POSITIONS[pos] \
                or fields[4] != b"n" or fields[5] != COMMON[pos] or fields[6] != b"t":
            return None
        stamp = stamp_of(fields[7])
        if stamp is None:
            return None
        ctx: bytes | None = None
        i = 8
        if i < n and fields[i] == b"c":
            ctx = fields[i + 1]
            i += 2
        if i < n and fields[i] == b"x":
            extra = json_or_bad(fields[i + 1])
            if extra is BAD:
                return None
            facts = unpacked_extra(extra)
            if facts is not None:
                info.update(facts)
            i += 2
        if i != n:
            return None
        stamps.append(stamp)
        contexts.append(ctx)
        allocated = pos >= 4
    if len(stamps) != len(COMMON):
        return None
    return _build(jobid, stamps, contexts, info)


#: What :func:`json_or_bad` gives for text that is not JSON.
BAD = object()


def json_or_bad(raw: bytes) -> Any:
    """``raw`` decoded as JSON, or :data:`BAD` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return BAD


def stamp_of(raw: bytes) -> float | None:
    """An entry's timestamp from its text: a finite non-negative float, else None."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 <= value < math.inf else None


def int_in(value: Any, lo: int, hi: int | None = None) -> bool:
    """Whether ``value`` is an int (not a bool) within ``lo``..``hi`` (no upper bound: None)."""
    return value.__class__ is int and value >= lo and (hi is None or value <= hi)


def _annotations_ok(fields: list[bytes]) -> bool:
    # j, id, n, "annotations", t, ts, c, ctx
    if len(fields) != 8 or fields[4] != b"t" or stamp_of(fields[5]) is None \
            or fields[6] != b"c":
        return False
    ctx = json_or_bad(fields[7])
    return (isinstance(ctx, dict) and len(ctx) == 1 and "annotations" in ctx
            and (ctx["annotations"] is None or isinstance(ctx["annotations"], dict)))


def _build(jobid: int, t: list[float], contexts: list[bytes | None],
           info: dict[str, Any]) -> JobRecord | None:
    # events RFC 21 defines without context: validate, depend, start, free, clean
    if any(contexts[i] is not None for i in (1, 2, 5, 8, 9)):
        return None
    submit = json_or_bad(contexts[0]) if contexts[0] is not None else BAD
    # the decoder wants all four keys (no defaults on the replay path)
    if not isinstance(submit, dict) or submit.keys() != _SUBMIT_KEYS:
        return None
    urgency = submit["urgency"]
    userid = submit["userid"]
    flags = submit["flags"]
    if not (int_in(urgency, 0, MAX_URGENCY) and int_in(userid, 0) and int_in(flags, 0)
            and int_in(submit["version"], 1, 1)):
        return None
    prio = json_or_bad(contexts[3]) if contexts[3] is not None else BAD
    if not isinstance(prio, dict) or prio.keys() != {"priority"} \
            or not int_in(prio["priority"], 0, MAX_PRIORITY):
        return None
    annotations = None
    if contexts[4] is not None:
        alloc = json_or_bad(contexts[4])
        if not isinstance(alloc, dict) or not alloc.keys() <= {"annotations"}:
            return None
        if "annotations" in alloc:
            if not isinstance(alloc["annotations"], dict):
                return None
            annotations = merge_annotations(None, alloc["annotations"])
    finish = json_or_bad(contexts[6]) if contexts[6] is not None else BAD
    if not isinstance(finish, dict) or finish.keys() != {"status"} \
            or not int_in(finish["status"], 0, 0xFFFF):
        return None
    release = json_or_bad(contexts[7]) if contexts[7] is not None else BAD
    if not isinstance(release, dict) or release.keys() != {"ranks", "final"} \
            or not isinstance(release["ranks"], str) or release["final"] is not True:
        return None
    job = Job(id=jobid, state=JobState.INACTIVE, seq=len(COMMON), urgency=urgency,
              userid=userid, flags=flags, priority=prio["priority"], t_submit=t[0],
              t_depend=t[1], t_priority=t[2], t_sched=t[3], t_run=t[4], t_cleanup=t[6],
              t_inactive=t[9], has_resources=False, was_allocated=True, started=True,
              released=True, wait_status=finish["status"], annotations=annotations)
    return JobRecord(job, info)
