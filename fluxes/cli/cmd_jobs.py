"""``fluxes jobs``: list jobs from the job-list read model, with flux's columns and options."""

from __future__ import annotations

import argparse
import pwd
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fluxes import jobid as jobids
from fluxes.cli.display import username
from fluxes.cli.jobformat import FormatError, JobFormat
from fluxes.cli.util import die, help_with_example, instance, print_json
from fluxes.fsd import format_duration
from fluxes.hostlist import Hostlist
from fluxes.job.states import JobResult, JobState, parse_states

if TYPE_CHECKING:
    from fluxes.instance import Instance
    from fluxes.job.record import JobRecord

#: Named formats. ``?:`` hides the queue column when no listed job has a queue, as
#: flux does (an instance without named queues never shows it).
FORMATS = {
    "default": "{id.f58:>12} ?:{queue:<8.8} {username:<8.8} {name:<10.10} "
               "{status_abbrev:>2.2} {ntasks:>6} {nnodes:>6} {contextual_time:>8} "
               "{contextual_info}",
    "long": "{id.f58:>12} ?:{queue:<8.8} {username:<8.8} {name:<10.10} {status:<9} "
            "{ntasks:>6} {nnodes:>6} {priority:>10} {runtime_text:>8} {result:<9} "
            "{contextual_info}",
    "ids": "{id.f58}",
}

class JobId(int):
    """A job id that formats in any encoding: ``{id.f58}``, ``{id.dec}``, ``{id.words}``."""

    def __getattr__(self, form: str) -> str:
        if form in jobids.OUTPUT_FORMS:
            return jobids.encode(int(self), form)
        raise AttributeError(form)


class Row:
    """The fields a format string may name, computed from a job record."""

    def __init__(self, rec: JobRecord, now: float) -> None:
        job = rec.job
        info = rec.info
        self.id = JobId(rec.id)
        self.userid = job.userid
        self.username = username(job.userid) if job.userid >= 0 else "-"
        self.name = str(info.get("name") or "")
        self.queue = rec.queue
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
        self.duration_text = format_duration(float(info["duration"])) \
            if info.get("duration") else ""
        self.duration = float(info["duration"]) if info.get("duration") else None
        self.t_submit = job.t_submit
        self.t_depend = job.t_depend
        self.t_run = job.t_run
        self.t_cleanup = job.t_cleanup
        self.t_inactive = job.t_inactive
        self.annotations: dict[str, Any] = dict(job.annotations or {})
        self.t_submit_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.t_submit))
        end = job.t_cleanup or (now if job.state & JobState.RUNNING else None)
        self.runtime = (end - job.t_run) if job.t_run is not None and end is not None else 0.0
        self.runtime_text = _fmt_seconds(self.runtime) if job.t_run is not None else ""
        if job.state & JobState.PENDING:
            self.contextual_time = _fmt_seconds(now - job.t_submit)
        else:
            self.contextual_time = self.runtime_text
        self.contextual_info = _info(rec, now)

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


def _fmt_seconds(seconds: float) -> str:
    if seconds < 0:
        seconds = 0.0
    if seconds < 60:
        return f"{seconds:.3f}s" if seconds < 10 else f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _info(rec: JobRecord, now: float) -> str:
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
        sched = (job.annotations or {}).get("sched") or {}
        estimate = sched.get("t_estimate") if isinstance(sched, dict) else None
        if isinstance(estimate, int | float):
            return f"eta:{_fmt_seconds(max(estimate - now, 0.0))}"
        reason = sched.get("reason_pending") if isinstance(sched, dict) else None
        return str(reason) if reason else ""
    if (state is JobState.INACTIVE and job.fatal is not None
            and job.result != JobResult.COMPLETED and not rec.info.get("nodelist")):
        return f"{job.fatal.type}: {job.fatal.note}"[:60]
    return str(rec.info.get("nodelist") or "")


def select_jobs(inst: Instance, states: str = "active", user: str | None = None,
                queue: str | None = None, everyone: bool = False,
                limit: int | None = None) -> list[JobRecord]:
    """Job records matching the filters, newest first (active jobs before inactive)."""
    parsed = parse_states(states)
    if isinstance(parsed, tuple):
        want_states, want_results = parsed
    elif isinstance(parsed, JobResult):
        want_states, want_results = JobState(0), parsed
    else:
        want_states, want_results = parsed, JobResult(0)
    need_inactive = bool(want_results) or bool(want_states & JobState.INACTIVE)
    need_active = bool(want_states & JobState.ACTIVE)
    from fluxes.joblist.store import JobListStore

    store = JobListStore(inst.redis, inst.keys)
    ids = store.list_ids(active=need_active, inactive=need_inactive)
    uid = None if everyone else user_id(inst, user)
    out: list[JobRecord] = []
    chunk = 2000
    for i in range(0, len(ids), chunk):
        for rec in store.get_many(ids[i:i + chunk]):
            if rec is None:
                continue
            job = rec.job
            if uid is not None and job.userid != uid:
                continue
            if queue is not None and rec.queue != queue:
                continue
            result = job.result
            if not (job.state & want_states or (result is not None and result & want_results)):
                continue
            out.append(rec)
            if limit and len(out) >= limit:
                return out
    return out


def user_id(inst: Instance, user: str | None = None) -> int:
    """The uid of ``user`` (a name or uid; default: you, as the instance knows you)."""
    from fluxes.client import current_user

    who = user or inst.user or current_user()
    try:
        known = inst.redis.hget(inst.keys.users, who)
    except Exception:
        known = None  # a user without access to the users table is looked up locally
    return int(known) if known is not None else _uid_of(who)


def _uid_of(user: str) -> int:
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        die(f"unknown user {user!r}")


def register(subparsers: Any) -> None:
    """Add ``jobs``."""
    p = subparsers.add_parser("jobs", **help_with_example(
        "List jobs (default: your active ones), like 'flux jobs'.",
        ["fluxes jobs", "fluxes jobs -a", "fluxes jobs -A -f running",
         "fluxes jobs -o '{id.f58} {name} {status}'", "fluxes jobs --stats-only",
         "fluxes jobs -a -o '{id.f58} {t_run!D} {runtime!H} {sched.reason_pending}'"]))
    p.add_argument("-a", action="store_true", help="include inactive jobs")
    p.add_argument("-A", action="store_true", help="every user's jobs")
    p.add_argument("-u", "--user", metavar="USER")
    p.add_argument("-q", "--queue", metavar="QUEUE")
    p.add_argument("-f", "--filter", metavar="STATES|RESULTS",
                   help="e.g. pending,running or completed,failed")
    p.add_argument("-o", "--format", default="default", metavar="FORMAT",
                   help=f"a name ({', '.join(FORMATS)}) or a format string: fields such "
                        "as {id.f58} {name} {t_run!D} {runtime!H} {sched.reason_pending}")
    p.add_argument("-n", "--no-header", action="store_true")
    p.add_argument("-c", "--count", type=_count, metavar="N",
                   help="at most N jobs (0: no limit)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--stats", action="store_true", help="print job counts first")
    p.add_argument("--stats-only", action="store_true", help="print only job counts")
    p.set_defaults(func=_jobs)


def stats_line(inst: Instance) -> str:
    """flux's ``--stats`` summary from the read model's counters."""
    from fluxes.joblist.store import JobListStore

    counts = JobListStore(inst.redis, inst.keys).counters()
    running = counts.get("state:RUN", 0) + counts.get("state:CLEANUP", 0)
    pending = sum(counts.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))
    return (f"{running} running, {counts.get('result:COMPLETED', 0)} completed, "
            f"{counts.get('result:FAILED', 0)} failed, "
            f"{counts.get('result:CANCELED', 0)} canceled, "
            f"{counts.get('result:TIMEOUT', 0)} timeout, {pending} pending")


def _count(text: str) -> int:
    """argparse type of ``-c``: a number of jobs, 0 meaning all of them."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"count must be >= 0, got {value}")
    return value


def _jobs(args: argparse.Namespace) -> int:
    if args.stats_only:
        print(stats_line(instance(args)))
        return 0
    fmt = None if args.json else _format(FORMATS.get(args.format, args.format))
    inst = instance(args)
    states = args.filter or ("active,inactive" if args.a else "active")
    records = select_jobs(inst, states=states, user=args.user, queue=args.queue,
                          everyone=args.A, limit=args.count or None)
    now = time.time()
    rows = [Row(rec, now) for rec in records]
    if fmt is None:
        if args.stats:
            print(stats_line(inst))
        print_json({"jobs": [r.as_dict() for r in rows]})
        return 0
    try:
        header, lines = fmt.render(vars(row) for row in rows)
    except FormatError as exc:
        die(str(exc))
    # only now that every line formatted: a bad format prints nothing but its error
    if args.stats:
        print(stats_line(inst))
    if not args.no_header:
        print(header)
    for line in lines:
        print(line)
    return 0


def _format(fmt: str) -> JobFormat:
    try:
        return JobFormat(fmt)
    except FormatError as exc:
        die(str(exc))


def _check_format(fmt: str) -> None:
    """Die with one line unless ``fmt`` is a usable format."""
    _format(fmt)


def iter_rows(records: Iterable[JobRecord]) -> list[Row]:
    """Rows for records (used by other commands that print job tables)."""
    now = time.time()
    return [Row(rec, now) for rec in records]
