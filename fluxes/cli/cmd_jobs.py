"""``fluxes jobs``: list jobs from the job-list read model, with flux's columns and options.

Why one module: it is one command, its options table and the three ways it prints
(table, CSV, JSON) read together; the format language (jobformat), the row's computed
fields (fluxes.service.jobfields), picking and sorting (jobpick), the instance tree
(jobtree) and the forecast's part (forecasting) are apart already.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli.cmd_queue import known_queue
from fluxes.cli.display import shown_id
from fluxes.cli.jobformat import FormatError, JobFormat
from fluxes.cli.jobpick import hosts_or_ranks, painter, refine, sort_fields, sorted_rows
from fluxes.cli.jobtree import thread_count
from fluxes.cli.util import (
    UsageError,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
)
from fluxes.domain.job.states import JobState
from fluxes.service.jobrows import Row
from fluxes.service.jobs import (
    Window,
    caught_up,
    jobs_by_id,
    select_jobs,
    user_id,
    wanted_states,
)
from fluxes.service.queues import queue_states

if TYPE_CHECKING:
    from fluxes.domain.jm.queues import QueueState
    from fluxes.domain.job.record import JobRecord
    from fluxes.store.instance import Instance
    from fluxes.store.joblist_read import JobListReader

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
    p.add_argument("--recurse-all", action="store_true",
                   help="-R into other users' batch and alloc jobs too (implies -R; "
                        "without it -R skips them, as flux's)")
    p.add_argument("--threads", type=thread_count, metavar="N", default=1,
                   help="read the child instances of batch and alloc jobs (instance "
                        "fields) with N threads (default 1)")
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
    # the small client (fluxes.store.lite): listing jobs imports no redis-py; it leaves
    # no file open to the interpreter's teardown, which it skips (main.quick_exit)
    p.set_defaults(func=_jobs, _lite=True, _quick_exit=True)


def stats_line(inst: Instance, store: JobListReader | None = None) -> str:
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


def _needs_full_client(args: argparse.Namespace, text: str) -> bool:
    """Whether the listing reads more than the job list: the forecast (a snapshot of the
    whole instance), child instances (-R, instance fields, uri); the small client of a
    plain listing answers only the job list's reads."""
    wanted = f"{text} {args.sort or ''}"
    return bool(args.forecast or args.recursive or args.recurse_all
                or any(word in wanted for word in ("t_forecast", "instance", "uri")))


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
        from fluxes.cli.cmd_forecast import forecast_view

        forecast_view(args)
    name = "accounting" if args.csv and args.format == "default" else args.format
    fmt = None if args.json else _format(FORMATS.get(name, name))
    window = _window(args)
    if _needs_full_client(args, FORMATS.get(name, name)):
        args._lite = False
    inst = instance(args)
    if args.recurse_all:
        args.recursive = True
    if args.recursive:
        args.owner_uid = user_id(inst)
    records, missing, queues = _selected(inst, args, window)
    records = _revealed(inst, records)
    records = refine(records, args.name, include, args.count)
    if queues is None and any(rec.job.state is JobState.SCHED for rec in records):
        queues = _row_queues(inst)
    now = time.time()
    rows = [Row(rec, now, queues) for rec in records]
    if sort_keys:
        records, rows = sorted_rows(records, rows, sort_keys)
    text = FORMATS.get(args.format, args.format)
    if args.forecast or "t_forecast" in text or "t_forecast" in (args.sort or ""):
        from fluxes.service.forecasting import add_forecasts

        add_forecasts(inst, rows)
        records, rows = sorted_rows(records, rows, sort_keys) if sort_keys else (records, rows)
    if fmt is not None and ("instance" in text or "uri" in text):
        from fluxes.cli.jobtree import mark_instances

        mark_instances(inst, rows, args.threads)
    if fmt is None:
        _print_json(inst, args, records, rows)
    elif args.csv:
        _print_csv(fmt, args, rows)
    else:
        _print_table(inst, fmt, args, records, rows)
    return _report_missing(missing)


def _row_queues(inst: Instance) -> dict[str | None, QueueState] | None:
    """The queue states the rows' INFO needs (a stopped queue's reason); None, without
    reading the configuration, while no queue was ever stopped or disabled."""
    from fluxes.store.queues import administered

    return queue_states(inst) if administered(inst.redis, inst.keys) else None


def _print_json(inst: Instance, args: argparse.Namespace, records: list[JobRecord],
                rows: list[Row]) -> None:
    """``--json``: ``{"jobs": [...]}``, with ``-R`` each instance job's own ``jobs``."""
    if args.stats:
        print(stats_line(inst))
    listed = [r.as_dict() for r in rows]
    if args.recursive:
        from fluxes.cli.jobtree import descends, nest_children

        for rec, entry in zip(records, listed, strict=True):
            if descends(args, rec):
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
            from fluxes.cli.jobtree import descends, print_children

            if descends(args, rec):
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


def _narrow(inst: Instance, records: list[JobRecord],
            args: argparse.Namespace) -> list[JobRecord]:
    """Records of jobs named by id that pass the filters given explicitly (-f, -u, -q)."""
    out = records
    if args.filter:
        want_states, want_results = wanted_states(args.filter)
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
