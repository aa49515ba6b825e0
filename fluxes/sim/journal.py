"""The journal export format: one JSON object per line, one line per journal entry.

``fluxes eventlog export FILE`` writes an instance's journal (and what its
retention archive holds) in this format, ``fluxes simulate --journal-out
FILE`` writes a simulated run's journal in it, and ``fluxes simulate
--journal FILE`` and ``fluxes eventlog replay --file FILE`` read it. Keys:

=====  ==========================================================================
``id``  the entry's stream id (a simulated run numbers its entries by virtual time)
``j``   the job id
``s``   the event's position in the job's eventlog (absent for journal-only entries:
        ``annotations``, ``purge``)
``n``   the event name (RFC 21)
``t``   its timestamp (UNIX seconds)
``c``   its context (absent when empty)
``x``   the journal extras: on ``submit`` the job summary (name, queue, ntasks,
        nnodes, ncores, ngpus, duration, dependencies) and, when the job hash
        still holds it, ``request``, the scheduler's request (``Request.to_wire``);
        on ``alloc`` the ranks (and nodelist)
=====  ==========================================================================

:func:`replay` folds such records into job records exactly as the journal's
replay does (:func:`fluxes.domain.job.record.apply_record`), with the same
time travel (``until``): each job is folded up to, not including, its first
entry stamped later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final

import orjson

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import TransitionError
from fluxes.domain.job.record import JobRecord, apply_record, unpacked_extra

__all__ = ["Replayed", "Writer", "decode_line", "read_records", "record_of_entry", "replay"]

#: Journal-only entries that carry no eventlog position.
PURGE: Final = "purge"
#: What a line that is not a record counts as.
BAD_LINE: Final = "journal line not understood"
#: Lines longer than this are refused (a journal entry is small; a corrupt file is not).
MAX_LINE: Final = 16 << 20


def _json(raw: bytes | str | None) -> Any:
    """Decode a JSON field of a journal entry (None when absent or empty)."""
    if not raw:
        return None
    return orjson.loads(raw)


def record_of_entry(stream_id: str, jobid: int, seq: int | None, name: bytes | str,
                    timestamp: bytes | str | float, context: bytes | str | None,
                    extra: bytes | str | None) -> dict[str, Any]:
    """The export record of one journal entry (its fields as the journal holds them).

    ValueError (one line) when a field does not decode.
    """
    try:
        out: dict[str, Any] = {"id": stream_id, "j": jobid}
        if seq is not None:
            out["s"] = seq
        out["n"] = name.decode() if isinstance(name, bytes) else str(name)
        out["t"] = float(timestamp)
        ctx = _json(context)
        if ctx:
            out["c"] = ctx
        ext = _json(extra)
        if isinstance(ext, list):  # the export's x is an object, whatever the journal's form
            ext = unpacked_extra(ext) or ext
        if ext:
            out["x"] = ext
    except (ValueError, UnicodeDecodeError) as exc:  # orjson's error is a ValueError
        raise ValueError(f"journal entry {stream_id}: {str(exc).splitlines()[0]}") from None
    return out


def decode_line(line: bytes | str, where: str = "line") -> dict[str, Any]:
    """One line of an export file as a record; ValueError naming ``where``."""
    if len(line) > MAX_LINE:
        raise ValueError(f"{where}: longer than {MAX_LINE} bytes")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    for key, kind in (("j", int), ("n", str), ("t", (int, float))):
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{where}: {key!r} missing or not a {_kind(kind)}")
    seq = obj.get("s")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise ValueError(f"{where}: 's' is not an eventlog position")
    for key in ("c", "x"):
        if key in obj and not isinstance(obj[key], dict):
            raise ValueError(f"{where}: {key!r} is not an object")
    return obj


def _kind(kind: type | tuple[type, ...]) -> str:
    return "number" if isinstance(kind, tuple) else {int: "integer", str: "string"}[kind]


def read_records(stream: Iterable[bytes | str], errors: Counter[str] | None = None,
                 name: str = "journal") -> Iterator[dict[str, Any]]:
    """The records of an export file's lines (blank lines skipped).

    A bad line raises ValueError naming it, unless ``errors`` is given: it is
    then counted there and skipped.
    """
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            yield decode_line(line, f"{name}:{number}")
        except ValueError as exc:
            if errors is None:
                raise
            del exc  # counted, not told one by one: a history may hold many
            errors[BAD_LINE] += 1


@dataclass
class Replayed:
    """Job records folded from export records, the jobs that did not fold, the purged."""

    records: dict[int, JobRecord] = field(default_factory=dict)
    broken: dict[int, str] = field(default_factory=dict)
    purged: set[int] = field(default_factory=set)


def replay(records: Iterable[Mapping[str, Any]], until: float | None = None) -> Replayed:
    """Fold export records into job records (see the module docstring).

    A ``purge`` record drops its job (with ``until``, only one stamped by
    then); a job whose events do not apply is reported in ``broken``; entries
    of a job first seen without its ``submit`` (its beginning trimmed) are
    passed over, as the journal's replay does.
    """
    out = Replayed()
    frozen: set[int] = set()
    orphans: set[int] = set()
    for rec in records:
        jobid = rec["j"]
        name = rec["n"]
        stamp = float(rec["t"])
        if name == PURGE:
            if until is None or stamp <= until:
                out.records.pop(jobid, None)
                out.broken.pop(jobid, None)
                out.purged.add(jobid)
            continue
        if jobid in frozen or jobid in orphans or jobid in out.broken:
            continue
        if until is not None and stamp > until:
            frozen.add(jobid)
            continue
        record = out.records.get(jobid)
        if record is None and name != "submit":
            orphans.add(jobid)
            continue
        seq = rec.get("s")
        if record is not None and seq is not None and seq < record.job.seq:
            continue  # already folded (an export overlapping itself)
        try:
            event = ev.decode(name, stamp, rec.get("c"))
            out.records[jobid] = apply_record(record, jobid, event, rec.get("x"))
        except (ev.EventError, TransitionError, ValueError) as exc:
            out.broken[jobid] = str(exc)
            out.records.pop(jobid, None)
    return out


class Writer:
    """Writes a simulated run's journal in the export format, entry ids from virtual time."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self._ms = -1
        self._seq = 0
        self.entries = 0

    def _next_id(self, stamp: float) -> str:
        ms = max(int(stamp * 1000), self._ms)
        if ms == self._ms:
            self._seq += 1
        else:
            self._ms, self._seq = ms, 0
        return f"{ms}-{self._seq}"

    def event(self, jobid: int, seq: int | None, event: ev.Event,
              extra: Mapping[str, Any] | None) -> None:
        """Write one event (seq None: a journal-only entry)."""
        rec: dict[str, Any] = {"id": self._next_id(event.timestamp), "j": jobid}
        if seq is not None:
            rec["s"] = seq
        rec["n"] = event.event_name
        rec["t"] = event.timestamp
        ctx = event.context()
        if ctx:
            rec["c"] = ctx
        if extra:
            rec["x"] = extra
        self.out.write(orjson.dumps(rec))
        self.out.write(b"\n")
        self.entries += 1
