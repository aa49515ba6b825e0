"""The Standard Workload Format (SWF) of the Parallel Workloads Archive: read and write.

The definition (version 2.2) is at
https://www.cs.huji.ac.il/labs/parallel/workload/swf.html. A file is plain
text: header comments (lines starting with ``;``, most of them ``; Key:
value``) and one line per job of 18 whitespace-separated numbers, ``-1``
where a field is unknown:

===  =====================================  ===  ===================================
 1   job number                              10  requested memory (KB per processor)
 2   submit time (s, from the log's start)   11  status (1 done, 0 failed, 5 canceled;
 3   wait time (s)                                2, 3, 4 partial executions)
 4   run time (s, wall clock)                12  user id
 5   allocated processors                    13  group id
 6   average CPU time used (s)               14  executable (application) number
 7   used memory (KB per processor)          15  queue number
 8   requested processors                    16  partition number
 9   requested time (s): the user's estimate 17  preceding job number
                                             18  think time from the preceding job (s)
===  =====================================  ===  ===================================

:func:`parse` never raises on a bad line: it skips the line and counts why
(:attr:`Trace.skipped`), and counts the fields it had to replace
(:attr:`Trace.fixed`). The rules, each from the definition or the issue it
answers (docs/simulate.md, "Input"):

* a line that is not 18 numbers is skipped (``malformed line``);
* a missing or negative submit time is skipped (the log has no time for it);
* a run time of -1 or <= 0 is skipped (nothing ran, or it ran for < 0.5 s);
* the processor count is the requested one (field 8), else the allocated one
  (field 5, counted); neither known, or 0, is skipped;
* a missing requested time (field 9) becomes the header's ``MaxRuntime`` when
  given, else the run time itself (counted: backfilling then has exact
  estimates);
* status 2, 3 and 4 lines are partial executions of a job whose whole run
  has its own line: they are skipped (counted);
* a job number seen before is skipped (counted); user and group -1 are kept
  as "unknown" (the simulator runs such jobs as uid 65534, ``nobody``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, TextIO

__all__ = ["FIELDS", "NOBODY", "SwfJob", "Trace", "format_line", "number", "parse", "parse_text",
           "write"]

#: Fields per job line.
FIELDS: Final = 18
#: The uid unknown users (-1) run as.
NOBODY: Final = 65534
#: SWF statuses of partial executions (checkpointed or swapped jobs).
_PARTIAL: Final = frozenset({2, 3, 4})

# Reasons a line is skipped (the keys of Trace.skipped).
MALFORMED: Final = "malformed line (not 18 numbers)"
NO_SUBMIT: Final = "submit time missing or negative"
NO_RUNTIME: Final = "run time missing or <= 0"
NO_PROCS: Final = "processor count missing or 0"
PARTIAL: Final = "partial execution line (status 2, 3 or 4)"
DUPLICATE: Final = "job number seen before"
# Fields replaced (the keys of Trace.fixed).
ALLOCATED_USED: Final = "requested processors missing: allocated processors used"
MAXRUNTIME_USED: Final = "requested time missing: the header's MaxRuntime used"
RUNTIME_USED: Final = "requested time missing: the run time used"
UNKNOWN_USER: Final = "user missing: runs as nobody (65534)"


@dataclass(slots=True)
class SwfJob:
    """One job line, as the simulator needs it (times in seconds from the log's start)."""

    number: int
    submit: float
    runtime: float
    procs: int
    requested: float
    status: int
    user: int
    group: int
    queue: int
    partition: int
    #: the 18 fields as read (the output SWF keeps the columns it does not change)
    fields: tuple[str, ...] = ()


@dataclass
class Trace:
    """A parsed SWF file: its header, the jobs kept and what was skipped or fixed."""

    header: dict[str, str] = field(default_factory=dict)
    #: the header comment lines, verbatim (without the newline)
    comments: list[str] = field(default_factory=list)
    jobs: list[SwfJob] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    fixed: Counter[str] = field(default_factory=Counter)
    lines: int = 0

    def header_int(self, key: str) -> int | None:
        """A positive integer header value (``MaxProcs``...), None when absent or bad."""
        raw = self.header.get(key.lower())
        if raw is None:
            return None
        try:
            value = int(float(raw.split()[0]))
        except (ValueError, IndexError, OverflowError):
            return None
        return value if value > 0 else None

    @property
    def max_procs(self) -> int | None:
        """``MaxProcs`` of the header."""
        return self.header_int("MaxProcs")

    @property
    def max_nodes(self) -> int | None:
        """``MaxNodes`` of the header."""
        return self.header_int("MaxNodes")

    @property
    def start_time(self) -> float:
        """``UnixStartTime`` of the header (the log's time 0), else 0."""
        value = self.header_int("UnixStartTime")
        return float(value) if value is not None else 0.0


def _number(text: str) -> float:
    """A field as a number (ValueError for anything else, inf and nan included)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def parse(stream: Iterable[str]) -> Trace:
    """Read an SWF file (an iterable of lines); see the module docstring for the rules."""
    trace = Trace()
    seen: set[int] = set()
    max_runtime: float | None = None
    for raw in stream:
        trace.lines += 1
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            trace.comments.append(raw.rstrip("\r\n"))
            key, sep, value = line[1:].partition(":")
            if sep and key.strip() and " " not in key.strip():
                trace.header.setdefault(key.strip().lower(), value.strip())
                if key.strip().lower() == "maxruntime":
                    try:
                        got = _number(value.split()[0])
                        max_runtime = got if got > 0 else None
                    except (ValueError, IndexError):
                        max_runtime = None
            continue
        parts = line.split()
        if len(parts) != FIELDS:
            trace.skipped[MALFORMED] += 1
            continue
        try:
            values = [_number(p) for p in parts]
        except ValueError:
            trace.skipped[MALFORMED] += 1
            continue
        job = _job(values, tuple(parts), max_runtime, trace)
        if job is None:
            continue
        if job.number in seen:
            trace.skipped[DUPLICATE] += 1
            continue
        seen.add(job.number)
        trace.jobs.append(job)
    return trace


def _job(v: list[float], parts: tuple[str, ...], max_runtime: float | None,
         trace: Trace) -> SwfJob | None:
    """The job of one line of numbers, or None (counted) when it cannot be simulated."""
    status = int(v[10])
    if status in _PARTIAL:
        trace.skipped[PARTIAL] += 1
        return None
    submit = v[1]
    if submit < 0:
        trace.skipped[NO_SUBMIT] += 1
        return None
    runtime = v[3]
    if runtime <= 0:
        trace.skipped[NO_RUNTIME] += 1
        return None
    procs = int(v[7])
    if procs <= 0:
        procs = int(v[4])
        if procs <= 0:
            trace.skipped[NO_PROCS] += 1
            return None
        trace.fixed[ALLOCATED_USED] += 1
    requested = v[8]
    if requested <= 0:
        if max_runtime is not None:
            requested = max_runtime
            trace.fixed[MAXRUNTIME_USED] += 1
        else:
            requested = runtime
            trace.fixed[RUNTIME_USED] += 1
    user = int(v[11])
    if user < 0:
        trace.fixed[UNKNOWN_USER] += 1
    return SwfJob(number=int(v[0]), submit=submit, runtime=runtime, procs=procs,
                  requested=requested, status=status, user=user, group=int(v[12]),
                  queue=int(v[14]), partition=int(v[15]), fields=parts)


def parse_text(text: str) -> Trace:
    """:func:`parse` of a whole text."""
    return parse(text.splitlines())


def number(value: float) -> str:
    """A time for an SWF column: an integer when it is one, else 2 decimals."""
    return str(int(value)) if value == int(value) else f"{value:.2f}"


def format_line(job: SwfJob, wait: float, runtime: float, procs: int) -> str:
    """The job's line with column 3 (wait), 4 (run time) and 5 (processors) replaced."""
    cols = list(job.fields) if len(job.fields) == FIELDS else [
        str(job.number), number(job.submit), "-1", number(job.runtime), str(job.procs), "-1",
        "-1", str(job.procs), number(job.requested), "-1", str(job.status), str(job.user),
        str(job.group), "-1", str(job.queue), str(job.partition), "-1", "-1"]
    cols[2] = number(wait)
    cols[3] = number(runtime)
    cols[4] = str(procs)
    return " ".join(cols)


def write(out: TextIO, comments: Iterable[str], lines: Iterator[str] | Iterable[str]) -> None:
    """Write an SWF file: the header comments, then the job lines."""
    for comment in comments:
        out.write(comment if comment.startswith(";") else f"; {comment}")
        out.write("\n")
    for line in lines:
        out.write(line)
        out.write("\n")
