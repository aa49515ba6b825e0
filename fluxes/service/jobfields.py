"""``fluxes jobs -o``: the fields of a job row that flux's ``jobs`` computes from a
job's result and summary (return code, how it ended, the exception, time left)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

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
