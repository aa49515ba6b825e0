"""Job rows: the fields ``fluxes jobs -o`` and the web's job tables show, computed once
from a job record (fluxes.service.jobfields adds flux's less common ones)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fluxes.domain.job.states import JobResult, JobState
from fluxes.formats import jobid as jobids
from fluxes.formats.fsd import brief_duration, format_duration
from fluxes.formats.hostlist import Hostlist
from fluxes.service.jobfields import more_fields, returncode
from fluxes.service.users import username

if TYPE_CHECKING:
    from fluxes.domain.jm.queues import QueueState
    from fluxes.domain.job.record import JobRecord


class JobId(int):
    """A job id that formats in any encoding: ``{id.f58}``, ``{id.dec}``, ``{id.words}``."""

    def __getattr__(self, form: str) -> str:
        if form in jobids.OUTPUT_FORMS:
            return jobids.encode(int(self), form)
        raise AttributeError(form)


class Row:
    """The fields a format string may name, computed from a job record."""

    # set by fluxes.service.jobfields.more_fields
    state_single: str
    result_abbrev: str
    success: bool | str
    ranks: str
    cwd: str
    project: str
    dependencies: str
    t_priority: float | None
    t_sched: float | None
    expiration: float | None
    t_remaining: float
    exception: dict[str, Any]
    inactive_reason: str
    state_emoji: str
    result_emoji: str
    status_emoji: str

    def __init__(self, rec: JobRecord, now: float,
                 queues: Mapping[str | None, QueueState] | None = None) -> None:
        job = rec.job
        info = rec.info
        self.id = JobId(rec.id)
        self.userid = job.userid
        self.username = username(job.userid) if job.userid >= 0 else "-"
        self.name = str(info.get("name") or "")
        self.queue = rec.queue
        self.bank = str(info.get("bank") or "")
        self.state = job.state.name or ""
        result = job.result
        self.result = result.name if result is not None else ""
        self.status = self.result if result is not None else self.state
        self.status_abbrev = result.short if result is not None else job.state.short
        self.ntasks = int(info.get("ntasks") or 0)
        self.nnodes = int(info.get("nnodes") or 0) if "nodelist" not in info \
            else _count_hosts(str(info["nodelist"]))
        self.ncores = int(info.get("ncores") or 0)
        self.priority = job.priority if job.priority is not None else ""
        self.urgency = job.urgency
        self.nodelist = str(info.get("nodelist") or "")
        self.exit_code = job.exit_code if job.exit_code is not None else ""
        self.waitstatus = job.wait_status
        self.returncode = returncode(job)
        self.duration_text = format_duration(float(info["duration"])) \
            if info.get("duration") else ""
        self.duration = float(info["duration"]) if info.get("duration") else None
        self.t_submit = job.t_submit
        self.t_depend = job.t_depend
        self.t_run = job.t_run
        self.t_cleanup = job.t_cleanup
        self.t_inactive = job.t_inactive
        self.annotations: dict[str, Any] = dict(job.annotations or {})
        #: The child instance a batch/alloc job runs (namespace) and its job counts
        #: (filled by :func:`fluxes.cli.jobtree.mark_instances` when a listing names them).
        self.instance: str | None = None
        self.instance_stats: str | None = None
        #: its ``instance.*`` fields, without the prefix (None: not an instance job)
        self.instance_info: dict[str, Any] | None = None
        #: flux's ``uri``: the child instance's URI (no password), for FLUXES_URI
        self.uri: str | None = None
        self.t_submit_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.t_submit))
        end = job.t_cleanup or (now if job.state & JobState.RUNNING else None)
        self.runtime = (end - job.t_run) if job.t_run is not None and end is not None else 0.0
        self.runtime_text = fmt_seconds(self.runtime) if job.t_run is not None else ""
        if job.state & JobState.PENDING:
            self.contextual_time = fmt_seconds(now - job.t_submit)
        else:
            self.contextual_time = self.runtime_text
        self.contextual_info = _info(rec, now, _stopped(rec, queues))
        #: the expected start of a pending job (``--forecast``): a UNIX time, "-" for never
        self.t_forecast: float | str | None = None
        more_fields(self, rec, now)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``--json``): every field; times a job has not reached are left out."""
        out = {k: v for k, v in vars(self).items()
               if not k.endswith("_text") and v is not None}
        out["id"] = int(self.id)
        return out


def _count_hosts(nodelist: str) -> int:
    try:
        return len(Hostlist(nodelist))
    except ValueError:
        return 0


def fmt_seconds(seconds: float) -> str:
    """A run time or age as ``fluxes jobs`` shows it (milliseconds below 10 s)."""
    return brief_duration(seconds, 3 if seconds < 10 else 1)


def _stopped(rec: JobRecord, queues: Mapping[str | None, QueueState] | None) -> str | None:
    """Why the job's queue is stopped ("" without a reason), or None if it is not."""
    if not queues:
        return None
    state = queues.get(rec.queue or None)
    if state is None or state.started:
        return None
    return state.stop_reason or ""


def _info(rec: JobRecord, now: float, stopped: str | None = None) -> str:
    job = rec.job
    state = job.state
    if state is JobState.DEPEND:
        deps = ",".join(sorted(job.dependencies))
        return f"depends:{deps}" if deps else "depend"
    if state is JobState.PRIORITY:
        return "priority-wait"
    if state is JobState.SCHED:
        if job.priority == 0:
            return "held"
        if stopped is not None:
            # nothing is scheduled from a stopped queue: no estimate or reason is coming
            return f"queue stopped: {stopped}" if stopped else "queue stopped"
        sched = (job.annotations or {}).get("sched") or {}
        estimate = sched.get("t_estimate") if isinstance(sched, dict) else None
        if isinstance(estimate, int | float):
            return f"eta:{fmt_seconds(max(estimate - now, 0.0))}"
        reason = sched.get("reason_pending") if isinstance(sched, dict) else None
        return str(reason) if reason else ""
    if (state is JobState.INACTIVE and job.fatal is not None
            and job.result != JobResult.COMPLETED and not rec.info.get("nodelist")):
        note = job.fatal.note
        # dependency notes name their type already ("dependency: afterok: ...")
        text = note if note.startswith(f"{job.fatal.type}:") else \
            f"{job.fatal.type}: {note}" if note else job.fatal.type
        return text[:60]
    return str(rec.info.get("nodelist") or "")


def iter_rows(records: Iterable[JobRecord]) -> list[Row]:
    """Rows for records (used by other commands that print job tables)."""
    now = time.time()
    return [Row(rec, now) for rec in records]
