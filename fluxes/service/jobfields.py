"""``fluxes jobs -o``: the fields of a job row that flux's ``jobs`` computes from a
job's result and summary (return code, how it ended, the exception, time left, the
emoji of its state and result), and the ``instance.*`` fields of a job that runs an
instance, from the child's job counters and published resource summary."""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fluxes.domain.job.states import JobResult, JobState

if TYPE_CHECKING:
    from fluxes.domain.job.model import Job
    from fluxes.domain.job.record import JobRecord
    from fluxes.service.jobrows import Row


def more_fields(row: Row, rec: JobRecord, now: float) -> None:
    """The rest of flux's ``jobs -o`` fields: single-letter state, result code,
    success, exception, remaining time, ranks, working directory, dependencies."""
    job = rec.job
    info = rec.info
    result = job.result
    row.state_single = job.state.short
    row.result_abbrev = result.short if result is not None else ""
    row.state_emoji = _shown(STATE_EMOJI.get(job.state, ""), job.state.short)
    row.result_emoji = _shown(RESULT_EMOJI[result], result.short) if result is not None \
        else ""
    row.status_emoji = row.result_emoji or row.state_emoji
    row.success = "" if result is None else result is JobResult.COMPLETED
    row.ranks = str(info.get("ranks") or "")
    row.cwd = str(info.get("cwd") or "")
    row.project = str(info.get("project") or "")
    deps = info.get("dependencies")
    row.dependencies = ",".join(map(str, deps)) if isinstance(deps, list) else ""
    row.t_priority = job.t_priority
    row.t_sched = job.t_sched
    row.expiration = job.expiration
    # only a running job has time left; 0 once its expiration passed
    row.t_remaining = max(job.expiration - now, 0.0) \
        if job.expiration and job.state & JobState.RUNNING else 0.0
    fatal = job.fatal
    row.exception = {"occurred": fatal is not None,
                     "severity": 0 if fatal is not None else "",
                     "type": fatal.type if fatal is not None else "",
                     "note": fatal.note if fatal is not None else ""}
    row.inactive_reason = inactive_reason(job)


#: ``{state_emoji}``: a picture of each state (fluxes's choice).
STATE_EMOJI = {JobState.NEW: "\U0001f195", JobState.DEPEND: "\U0001f517",
               JobState.PRIORITY: "\U0001f522", JobState.SCHED: "\u23f3",
               JobState.RUN: "\U0001f3c3", JobState.CLEANUP: "\U0001f9f9",
               JobState.INACTIVE: "\U0001f4a4"}
#: ``{result_emoji}``: a picture of each result.
RESULT_EMOJI = {JobResult.COMPLETED: "\u2705", JobResult.FAILED: "\u274c",
                JobResult.CANCELED: "\U0001f6ab", JobResult.TIMEOUT: "\u23f0"}


def _shown(emoji: str, fallback: str) -> str:
    """``emoji``, or ``fallback`` when standard output cannot encode it (as flux does on
    an ASCII terminal)."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        emoji.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return fallback
    return emoji


#: The ``instance.*`` fields (flux's): name -> column title.
INSTANCE_FIELDS = {
    "instance.stats": "STATS", "instance.stats.total": "NJOBS",
    "instance.utilization": "CORE%", "instance.gpu_utilization": "GPU%",
    "instance.progress": "PROG",
    **{f"instance.resources.{state}.{kind}": f"{state.upper()}-{kind[1:].upper()}"
       for state in ("all", "up", "down", "allocated", "free") for kind in ("ncores",
                                                                           "ngpus")},
}


def instance_fields(counters: Mapping[str, int], summary: Mapping[str, Any] | None
                    ) -> dict[str, Any]:
    """The ``instance.*`` values (keys without ``instance.``) of a child instance with
    job-list ``counters`` (``state:X``/``result:X`` -> jobs) and the scheduler's
    published resource ``summary`` (None: none yet: no resource figures)."""
    pending = sum(counters.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))
    running = counters.get("state:RUN", 0) + counters.get("state:CLEANUP", 0)
    done = counters.get("result:COMPLETED", 0)
    failed = sum(counters.get(f"result:{r}", 0) for r in ("FAILED", "CANCELED", "TIMEOUT"))
    total = pending + running + counters.get("state:INACTIVE", 0)
    out: dict[str, Any] = {
        "stats": f"PD:{pending} R:{running} CD:{done} F:{failed}", "stats.total": total,
        "progress": counters.get("state:INACTIVE", 0) / total if total else 0.0}
    if summary is None:
        return out
    counts = {state: (_count(summary, state, "ncores"), _count(summary, state, "ngpus"))
              for state in ("free", "allocated", "down")}
    counts["up"] = (counts["free"][0] + counts["allocated"][0],
                    counts["free"][1] + counts["allocated"][1])
    counts["all"] = (counts["up"][0] + counts["down"][0], counts["up"][1] + counts["down"][1])
    for state, (cores, gpus) in counts.items():
        out[f"resources.{state}.ncores"] = cores
        out[f"resources.{state}.ngpus"] = gpus
    out["utilization"] = counts["allocated"][0] / counts["all"][0] \
        if counts["all"][0] else 0.0
    out["gpu_utilization"] = counts["allocated"][1] / counts["all"][1] \
        if counts["all"][1] else 0.0
    return out


def _count(summary: Mapping[str, Any], state: str, kind: str) -> int:
    part = summary.get(state)
    value = part.get(kind) if isinstance(part, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def inactive_reason(job: Job) -> str:
    """How an inactive job ended, in a few words (flux's ``inactive_reason``):
    ``Exit 0``, ``Canceled: NOTE``, ``Timeout``, ``Exception: type=T note=N``, a
    signal's description; empty while the job is active."""
    if job.state is not JobState.INACTIVE:
        return ""
    result = job.result
    fatal = job.fatal
    if result is JobResult.CANCELED:
        return f"Canceled: {fatal.note}" if fatal is not None and fatal.type == "cancel" \
            and fatal.note else "Canceled"
    if result is JobResult.TIMEOUT:
        return "Timeout"
    code = returncode(job)
    if result is JobResult.FAILED:
        if fatal is not None and fatal.type != "exec":
            return f"Exception: type={fatal.type}" + (f" note={fatal.note}" if fatal.note
                                                       else "")
        if code is not None and code < 0:
            return _signal_text(-code)
        if code in _EXIT_TEXT:
            return _EXIT_TEXT[code]
    return f"Exit {code if code is not None else ''}".rstrip()


#: What a shell's special exit codes mean.
_EXIT_TEXT = {126: "Command invoked cannot execute", 127: "command not found",
              128: "Invalid argument to exit"}


def _signal_text(signo: int) -> str:
    try:
        return signal.strsignal(signo) or f"Signaled {signo}"
    except ValueError:
        return f"Signaled {signo}"



def returncode(job: Job) -> int | None:
    """flux's ``returncode``: the exit code, or minus the signal that killed the job;
    -128 for a job canceled before it ran; None while active or when nothing ran.

    fluxes records the tasks' own wait status (there is no job shell in between
    to turn a signal into 128 + N), so a task killed by signal N gives -N.
    """
    status = job.wait_status
    if status is not None:
        signo = status & 0x7F
        return -signo if signo else (status >> 8) & 0xFF
    if job.result is JobResult.CANCELED:
        return -128
    return None
