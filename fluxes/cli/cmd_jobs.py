"""``fluxes jobs``: list jobs from the job-list read model, with flux's columns and options.

Why one module: it is one command whose options all shape the same listing
(selection, fields, format, output); the forecast's part lives in
:mod:`fluxes.cli.forecasting`.
"""

from __future__ import annotations

import argparse
import csv
import pwd
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fluxes.cli.cmd_queue import known_queue, queue_states
from fluxes.cli.display import shown_id, username
from fluxes.cli.jobfields import more_fields, returncode
from fluxes.cli.jobformat import FormatError, JobFormat
from fluxes.cli.jobpick import hosts_or_ranks, painter, refine, sort_fields, sorted_rows
from fluxes.cli.util import (
    UsageError,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
)
from fluxes.domain.job.states import JobResult, JobState, parse_states
from fluxes.formats import jobid as jobids
from fluxes.formats.fsd import format_duration
from fluxes.formats.hostlist import Hostlist

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fluxes.domain.jm.queues import QueueState
    from fluxes.domain.job.record import JobRecord
    from fluxes.store.instance import Instance
    from fluxes.store.joblist import JobListStore

#: Pause between looks at the job list while it folds a job just submitted.
CATCH_UP_PAUSE_S = 0.02
#: How long ``fluxes jobs ID`` waits for the job list to fold a job whose eventlog exists.
CATCH_UP_S = 5.0

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
    # sacct's everyday columns; the default of --csv
    "accounting": "{id.f58:>12} {username:<8.8} {bank:<8.8} ?:{queue:<8.8} {name:<10.10} "
                  "{status:<9} {ncores:>6} {nnodes:>6} {t_submit!D:<19} {t_run!D:<19} "
                  "{t_inactive!D:<19} {runtime:>8.1f} {returncode:>4}",
}

class JobId(int):
    """A job id that formats in any encoding: ``{id.f58}``, ``{id.dec}``, ``{id.words}``."""

    def __getattr__(self, form: str) -> str:
        if form in jobids.OUTPUT_FORMS:
            return jobids.encode(int(self), form)
        raise AttributeError(form)


class Row:
    """The fields a format string may name, computed from a job record."""

    # set by fluxes.cli.jobfields.more_fields
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
        #: (filled by :func:`fluxes.cli.cmd_batch.mark_instances` when a listing names them).
        self.instance: str | None = None
        self.instance_stats: str | None = None
        #: flux's ``uri``: the child instance's URI (no password), for FLUXES_URI
        self.uri: str | None = None
        self.t_submit_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.t_submit))
        end = job.t_cleanup or (now if job.state & JobState.RUNNING else None)
        self.runtime = (end - job.t_run) if job.t_run is not None and end is not None else 0.0
        self.runtime_text = _fmt_seconds(self.runtime) if job.t_run is not None else ""
        if job.state & JobState.PENDING:
            self.contextual_time = _fmt_seconds(now - job.t_submit)
        else:
            self.contextual_time = self.runtime_text
        self.contextual_info = _info(rec, now, _stopped(rec, queues))
        self.t_forecast = None
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
            return f"eta:{_fmt_seconds(max(estimate - now, 0.0))}"
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


def _wanted(states: str) -> tuple[JobState, JobResult]:
    """The states and results a ``-f`` text names."""
    parsed = parse_states(states)
    if isinstance(parsed, tuple):
        return parsed
    if isinstance(parsed, JobResult):
        return JobState(0), parsed
    return parsed, JobResult(0)


def caught_up(inst: Instance, timeout: float = CATCH_UP_S) -> JobListStore:
    """The job list, once it includes every journal entry written before this call.

    Read-your-writes: once ``job wait`` or ``wait-event ... clean`` has returned,
    the job's final record is listed. The job list folds within milliseconds;
    if it has not caught up within ``timeout`` (its worker is down), say so on
    stderr and read it as it is.
    """
    from fluxes.store.joblist import JobListStore

    store = JobListStore(inst.redis, inst.keys)
    behind = store.catch_up(timeout, CATCH_UP_PAUSE_S)
    if behind:
        print(f"fluxes: warning: the job list has not folded the newest journal entries "
              f"of partition(s) {', '.join(map(str, sorted(behind)))} (is a job-list "
              "worker running?); showing it as it is", file=sys.stderr)
    return store


def select_jobs(inst: Instance, states: str = "active", user: str | None = None,
                queue: str | None = None, everyone: bool = False,
                limit: int | None = None, window: Window | None = None) -> list[JobRecord]:
    """Job records matching the filters, newest first (active jobs before inactive)."""
    want_states, want_results = _wanted(states)
    need_inactive = bool(want_results) or bool(want_states & JobState.INACTIVE)
    need_active = bool(want_states & JobState.ACTIVE)
    store = caught_up(inst)
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
            if window is not None and not window.holds(rec):
                continue
            result = job.result
            if not (job.state & want_states or (result is not None and result & want_results)):
                continue
            out.append(rec)
            if limit and len(out) >= limit:
                return out
    return out


class Window:
    """The history filters ``sacct`` users reach for: jobs active at some time in
    [since, until) (submitted before ``until``, not inactive before ``since``) and
    charged to ``bank``."""

    def __init__(self, since: float | None = None, until: float | None = None,
                 bank: str | None = None) -> None:
        self.since = since
        self.until = until
        self.bank = bank

    def holds(self, rec: JobRecord) -> bool:
        """True when the job passes every filter given."""
        job = rec.job
        if self.until is not None and job.t_submit >= self.until:
            return False
        if self.since is not None and job.t_inactive is not None \
                and job.t_inactive < self.since:
            return False
        return self.bank is None or rec.info.get("bank") == self.bank


def _window(args: argparse.Namespace) -> Window | None:
    """The ``--since``/``--until``/``--bank`` filters (None when none is given)."""
    from fluxes.cli.display import parse_time

    if args.since is None and args.until is None and args.bank is None:
        return None
    try:
        since = parse_time(args.since) if args.since is not None else None
        until = parse_time(args.until) if args.until is not None else None
    except ValueError as exc:
        raise UsageError(f"fluxes jobs: {exc}") from None
    if since is not None and until is not None and until < since:
        raise UsageError("fluxes jobs: --until is before --since")
    return Window(since, until, args.bank)


def user_id(inst: Instance, user: str | None = None) -> int:
    """The uid of ``user`` (a name or uid; default: you, as the instance knows you)."""
    from fluxes.store.client import current_user

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
        "List jobs (default: your active ones), like 'flux jobs'.\n"
        "With JOBIDs, just those jobs, whatever their state or owner (-f, -q, -u\n"
        "still narrow the list when given); an unknown one is an error.",
        ["fluxes jobs", "fluxes jobs -a", "fluxes jobs ƒ2t6V2H ƒ2t6V2J",
         "fluxes jobs -A -f running", "fluxes jobs -A --since=-1d -B physics --csv",
         "fluxes jobs -o '{id.f58} {name} {status}'", "fluxes jobs --stats-only",
         "fluxes jobs -a -o '{id.f58} {t_run!D} {runtime!H} {sched.reason_pending}'",
         "fluxes jobs -a -o '{id.f58} {result} {returncode} {waitstatus}'",
         "fluxes jobs --forecast", "fluxes jobs -o '{id.f58} {t_forecast!D}' --forecast",
         "fluxes jobs -a --name=sim --sort=-t_submit -o '{id.f58} {result_abbrev} "
         "{inactive_reason}'", "fluxes jobs -a -i node[0-3]"]))
    p.add_argument("ids", nargs="*", type=job_id_arg, metavar="JOBID",
                   help="list just these jobs")
    p.add_argument("-a", action="store_true", help="include inactive jobs")
    p.add_argument("-A", action="store_true", help="every user's jobs")
    p.add_argument("-u", "--user", metavar="USER")
    p.add_argument("-q", "--queue", metavar="QUEUE")
    p.add_argument("--since", metavar="TIME",
                   help="jobs active at or after TIME (implies -a): a UNIX time, an ISO 8601 "
                        "date/time, or -FSD (that long ago)")
    p.add_argument("--until", metavar="TIME", help="jobs submitted before TIME")
    p.add_argument("-B", "--bank", metavar="BANK", help="jobs charged to BANK")
    p.add_argument("-f", "--filter", metavar="STATES|RESULTS",
                   help="e.g. pending,running or completed,failed")
    p.add_argument("-o", "--format", default="default", metavar="FORMAT",
                   help=f"a name ({', '.join(FORMATS)}) or a format string: fields such "
                        "as {id.f58} {name} {t_run!D} {runtime!H} {sched.reason_pending}")
    p.add_argument("-n", "--no-header", action="store_true")
    p.add_argument("-c", "--count", type=_count, metavar="N",
                   help="at most N jobs (0: no limit)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--csv", action="store_true",
                   help="the format's fields as CSV (default format: accounting)")
    p.add_argument("--stats", action="store_true", help="print job counts first")
    p.add_argument("--stats-only", action="store_true", help="print only job counts")
    p.add_argument("-R", "--recursive", action="store_true",
                   help="after each batch/alloc job, its child instance's jobs, indented "
                        "(with --json: in its \"jobs\" list)")
    p.add_argument("-L", "--level", type=_count, metavar="N",
                   help="with -R, descend at most N levels (0: no limit)")
    p.add_argument("--name", metavar="NAME", help="only jobs named NAME")
    p.add_argument("-i", "--include", metavar="HOSTS|RANKS",
                   help="only jobs allocated any of these nodes: a hostlist, or an idset of "
                        "ranks")
    p.add_argument("--sort", metavar="KEY,...",
                   help="order by these fields (a leading - reverses one), e.g. "
                        "-t_submit or username,-priority")
    p.add_argument("--forecast", action="store_true",
                   help="each pending job's expected start ({t_forecast}: a UNIX time, - "
                        "when it can never start), shown as START; lists pending jobs "
                        "unless -f is given (docs/forecast.md)")
    p.add_argument("--color", nargs="?", const="always", default="auto",
                   choices=("never", "always", "auto"), metavar="WHEN",
                   help="color lines by result: never, always or auto (default: auto, "
                        "when stdout is a terminal)")
    p.set_defaults(func=_jobs)


def stats_line(inst: Instance, store: JobListStore | None = None) -> str:
    """flux's ``--stats`` summary from the read model's counters (of ``store``, a
    job list already caught up, or one caught up now)."""
    counts = (store or caught_up(inst)).counters()
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


def _active(inst: Instance) -> int:
    """How many jobs are active (pending or running), from the caught-up counters."""
    counts = caught_up(inst).counters()
    return sum(counts.get(f"state:{s}", 0)
               for s in ("DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP"))


def _jobs(args: argparse.Namespace) -> int:
    if args.stats_only:
        inst = instance(args)
        print(stats_line(inst))
        # flux's: 1 when no job is active, for 'while fluxes jobs --stats-only; do ...'
        return 0 if _active(inst) else 1
    if args.json and args.csv:
        raise UsageError("fluxes jobs: --json and --csv cannot be combined")
    sort_keys = sort_fields(args.sort)
    include = hosts_or_ranks(args.include)
    if args.forecast:
        from fluxes.cli.forecasting import forecast_view

        forecast_view(args)
    name = "accounting" if args.csv and args.format == "default" else args.format
    fmt = None if args.json else _format(FORMATS.get(name, name))
    window = _window(args)
    inst = instance(args)
    records, missing, queues = _selected(inst, args, window)
    records = _revealed(inst, records)
    records = refine(records, args.name, include, args.count)
    if queues is None and any(rec.job.state is JobState.SCHED for rec in records):
        queues = queue_states(inst)
    now = time.time()
    rows = [Row(rec, now, queues) for rec in records]
    if sort_keys:
        records, rows = sorted_rows(records, rows, sort_keys)
    text = FORMATS.get(args.format, args.format)
    if args.forecast or "t_forecast" in text or "t_forecast" in (args.sort or ""):
        from fluxes.cli.forecasting import add_forecasts

        add_forecasts(inst, rows)
        records, rows = sorted_rows(records, rows, sort_keys) if sort_keys else (records, rows)
    if fmt is not None and ("instance" in text or "uri" in text):
        from fluxes.cli.cmd_batch import mark_instances

        mark_instances(inst, rows)
    if fmt is None:
        _print_json(inst, args, records, rows)
    elif args.csv:
        _print_csv(fmt, args, rows)
    else:
        _print_table(inst, fmt, args, records, rows)
    return _report_missing(missing)


def _print_json(inst: Instance, args: argparse.Namespace, records: list[JobRecord],
                rows: list[Row]) -> None:
    """``--json``: ``{"jobs": [...]}``, with ``-R`` each instance job's own ``jobs``."""
    if args.stats:
        print(stats_line(inst))
    listed = [r.as_dict() for r in rows]
    if args.recursive:
        from fluxes.cli.cmd_batch import nest_children

        for rec, entry in zip(records, listed, strict=True):
            nest_children(inst, rec.id, entry, args, depth=1)
    print_json({"jobs": listed})


def _print_csv(fmt: JobFormat, args: argparse.Namespace, rows: list[Row]) -> None:
    """``--csv``: the format's fields as CSV."""
    try:
        records_csv = fmt.render_csv(vars(row) for row in rows)
    except FormatError as exc:
        die(str(exc))
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerows(records_csv[1:] if args.no_header else records_csv)


def _print_table(inst: Instance, fmt: JobFormat, args: argparse.Namespace,
                 records: list[JobRecord], rows: list[Row]) -> None:
    """The formatted lines (colored with ``--color``), with ``-R`` children under theirs."""
    try:
        header, lines = fmt.render(vars(row) for row in rows)
    except FormatError as exc:
        die(str(exc))
    # only now that every line formatted: a bad format prints nothing but its error
    if args.stats:
        print(stats_line(inst))
    if not args.no_header:
        print(header)
    paint = painter(args.color)
    recursive = getattr(args, "recursive", False)
    for rec, row, line in zip(records, rows, lines, strict=True):
        print(paint(row, line))
        if recursive:
            from fluxes.cli.cmd_batch import print_children

            print_children(inst, rec.id, fmt, args, depth=1)


def _selected(inst: Instance, args: argparse.Namespace, window: Window | None
              ) -> tuple[list[JobRecord], list[int], dict[str | None, QueueState] | None]:
    """The records ``args`` ask for, the ids that named no job, and the queue states
    when they had to be read to check ``-q``."""
    queues: dict[str | None, QueueState] | None = None
    if args.queue is not None:
        # an unknown queue has no jobs: without this a typo would list nothing, quietly
        queues = queue_states(inst)
        known_queue(args.queue, queues)
    if args.ids:
        records, missing = jobs_by_id(inst, args.ids)
        records = _narrow(inst, records, args)
        return (records[:args.count] if args.count else records), missing, queues
    history = args.a or args.since is not None
    states = args.filter or ("active,inactive" if history else "active")
    # --name and -i narrow afterwards: -c counts the jobs that pass them
    narrowed = args.name is not None or args.include is not None
    records = select_jobs(inst, states=states, user=args.user, queue=args.queue,
                          everyone=args.A, limit=None if narrowed else args.count or None,
                          window=window)
    return records, [], queues


def _revealed(inst: Instance, records: list[JobRecord]) -> list[JobRecord]:
    """``records`` with the text private to their owners (exception notes, dependencies)
    put back where this user may read it (docs/security.md); stand-ins elsewhere."""
    from fluxes.store.private import hidden, reveal_for_reader

    return reveal_for_reader(inst.redis, inst.keys, records) if hidden(records) else records


def _report_missing(missing: list[int]) -> int:
    """One line per job id that named no job (as typed); exit code 1 if any."""
    sys.stdout.flush()
    for jobid in missing:
        print(f"fluxes: job {shown_id(jobid)} not found", file=sys.stderr)
    return 1 if missing else 0


def jobs_by_id(inst: Instance, ids: Iterable[int]) -> tuple[list[JobRecord], list[int]]:
    """The records of ``ids`` in the order given (repeats dropped), and the ids of no job.

    A job whose eventlog exists but which the job list has not folded yet (it
    lags by milliseconds) is waited for, up to :data:`CATCH_UP_S`, and so is
    the newest record of one it has (read-your-writes, :func:`caught_up`).
    """
    store = caught_up(inst)
    wanted = list(dict.fromkeys(ids))
    found: dict[int, JobRecord] = {}
    deadline = time.monotonic() + CATCH_UP_S
    todo = [int(j) for j in wanted]
    while True:
        for jobid, rec in zip(todo, store.get_many(todo), strict=True):
            if rec is not None:
                found[jobid] = rec
        todo = [j for j in todo if j not in found]
        if todo:
            pipe = inst.redis.pipeline(transaction=False)
            for jobid in todo:
                pipe.exists(inst.keys.eventlog(jobid))
            todo = [j for j, exists in zip(todo, pipe.execute(), strict=True) if exists]
        if not todo or time.monotonic() >= deadline:
            break
        time.sleep(CATCH_UP_PAUSE_S)
    return [found[j] for j in wanted if j in found], [j for j in wanted if j not in found]


def _narrow(inst: Instance, records: list[JobRecord],
            args: argparse.Namespace) -> list[JobRecord]:
    """Records of jobs named by id that pass the filters given explicitly (-f, -u, -q)."""
    out = records
    if args.filter:
        want_states, want_results = _wanted(args.filter)
        out = [r for r in out if r.job.state & want_states
               or (r.job.result is not None and r.job.result & want_results)]
    if args.user:
        uid = user_id(inst, args.user)
        out = [r for r in out if r.job.userid == uid]
    if args.queue is not None:
        out = [r for r in out if r.queue == args.queue]
    window = _window(args)
    if window is not None:
        out = [r for r in out if window.holds(r)]
    return out


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
