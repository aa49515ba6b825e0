"""``fluxes job timeleft|last|status|taskmap|hostpids``: small questions about jobs, as
flux's."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli.display import fmt_id, shown_id
from fluxes.cli.util import UsageError, die, help_with_example, instance, job_id_arg
from fluxes.store import jobfacts

if TYPE_CHECKING:
    from fluxes.cli.attach import Outcome
    from fluxes.domain.job.model import Job
    from fluxes.store.instance import Instance

#: What ``job timeleft`` prints for a job without a time limit (flux's UINT_MAX).
UNLIMITED = 4294967295


def register(sub: Any) -> None:
    """Add ``job timeleft``, ``job last``, ``job status``, ``job taskmap`` and
    ``job hostpids``."""
    tp = sub.add_parser("timeleft", **help_with_example(
        "Print the whole seconds left before a running job's time limit (0 once it\n"
        "ended, 4294967295 without a limit). Inside a job, the job is $FLUXES_JOB_ID.",
        ["fluxes job timeleft ƒ2t6V2H", "fluxes job timeleft -H  # inside a job: 1.5h"]))
    tp.add_argument("-H", "--human", action="store_true", help="as an FSD (1.5h)")
    tp.add_argument("id", nargs="?", type=job_id_arg, metavar="ID")
    tp.set_defaults(func=_timeleft)

    lp = sub.add_parser("last", **help_with_example(
        "Print the ids of your most recently submitted jobs, newest first: the last\n"
        "one, the last N, or a Python slice of the list ([:5], [2:4]).",
        ["fluxes job last", "fluxes job last 3", "fluxes job last '[1:3]'"]))
    lp.add_argument("which", nargs="?", default="1", metavar="N|SLICE")
    lp.set_defaults(func=_last)

    sp = sub.add_parser("status", **help_with_example(
        "Wait for jobs to end and exit with the largest of their exit codes.",
        ["fluxes job status ƒ2t6V2H", "fluxes job status -v -e 99 ƒ2t6V2H ƒ2t6V2J"]))
    sp.add_argument("-e", "--exception-exit-code", type=int, default=None, metavar="N",
                    help="exit code of a job ended by an exception (default: its own)")
    sp.add_argument("-v", "--verbose", action="store_true", help="print each job's exit code")
    sp.add_argument("-j", "--json", action="store_true",
                    help="print each job's result as a JSON line as it ends (flux's keys)")
    sp.add_argument("ids", nargs="+", type=job_id_arg, metavar="ID")
    sp.set_defaults(func=_status)

    mp = sub.add_parser("taskmap", **help_with_example(
        "Print where a started job's tasks run, as an RFC 34 task map (node ids are\n"
        "positions in the job's R), or one of its other forms.",
        ["fluxes job taskmap ƒ2t6V2H", "fluxes job taskmap --to=raw ƒ2t6V2H",
         "fluxes job taskmap --nodeid=3 ƒ2t6V2H"]))
    what = mp.add_mutually_exclusive_group()
    what.add_argument("--to", choices=("raw", "pmi", "multiline"),
                      help="raw idsets, PMI_process_mapping, or one node id per task")
    what.add_argument("--taskids", type=int, metavar="NODEID", help="the tasks of a node")
    what.add_argument("--ntasks", type=int, metavar="NODEID", help="how many tasks a node runs")
    what.add_argument("--nodeid", type=int, metavar="TASKID", help="the node of a task")
    what.add_argument("--hostname", type=int, metavar="TASKID", help="the host of a task")
    mp.add_argument("id", type=job_id_arg, metavar="ID")
    mp.set_defaults(func=_taskmap)

    hp = sub.add_parser("hostpids", **help_with_example(
        "Print HOST:PID of each task of a running job, in task order (the pid of the\n"
        "task's process group: 'kill -- -PID' on HOST reaches the task). Waits until\n"
        "every rank of the job started its tasks.",
        ["fluxes job hostpids ƒ2t6V2H", "fluxes job hostpids -d ' ' ƒ2t6V2H"]))
    hp.add_argument("-d", "--delimiter", default=",", metavar="STR",
                    help="between HOST:PID pairs (default ',')")
    hp.add_argument("-t", "--timeout", default=None, metavar="FSD",
                    help="give up after this long (default: wait)")
    hp.add_argument("-r", "--ranks", default=None, metavar="IDSET",
                    help="only the tasks of these task ranks (e.g. 0,2-3)")
    hp.add_argument("id", type=job_id_arg, metavar="ID")
    hp.set_defaults(func=_hostpids)


def _job(inst: Instance, jobid: int) -> Job:
    """The job's state from its eventlog; dies when there is none."""
    from fluxes.store.eventstore import EventStore

    store = EventStore(inst.redis, inst.keys)
    if not store.job_exists(jobid):
        die(f"job {shown_id(jobid)} not found")
    return store.replay_job(jobid)


def time_left(job: Job, r_expiration: float | None, now: float) -> float:
    """Seconds left of a started job (0 once it is past RUN; inf without a limit):
    its expiration is the latest ``resource-update``'s, else its R's."""
    from fluxes.domain.job.states import JobState

    if job.state & JobState.PENDING:
        raise ValueError(f"job {fmt_id(job.id)} has not started")
    if job.state is not JobState.RUN:
        return 0.0
    expiration = job.expiration if job.expiration is not None else r_expiration
    if not expiration:
        return math.inf
    return max(0.0, expiration - now)


def _timeleft(args: argparse.Namespace) -> int:
    from fluxes.formats import jobid as jobids
    from fluxes.formats.fsd import format_duration
    from fluxes.formats.rset import ResourceSet
    from fluxes.store.jobhash import JobHashes, R

    jobid = args.id
    if jobid is None:
        env = os.environ.get("FLUXES_JOB_ID")
        if not env:
            raise UsageError("fluxes job timeleft: not in a job ($FLUXES_JOB_ID is unset): "
                             "give a job ID")
        try:
            jobid = jobids.parse(env)
        except ValueError as exc:
            die(f"FLUXES_JOB_ID: {exc}")
    inst = instance(args)
    job = _job(inst, int(jobid))
    [raw] = JobHashes(inst.redis, inst.keys).field([int(jobid)], R)
    r_exp = None
    if raw:
        try:
            r_exp = ResourceSet(raw).expiration
        except ValueError:
            r_exp = None
    try:
        left = time_left(job, float(r_exp) if r_exp else None, time.time())
    except ValueError as exc:
        die(str(exc))
    if args.human:
        print(format_duration(math.floor(left) if math.isfinite(left) else left))
    else:
        print(UNLIMITED if math.isinf(left) else math.floor(left))
    return 0


_SLICE = re.compile(r"\[(-?\d*):(-?\d*)(?::(-?\d*))?\]")


def pick_last(ids: list[int], which: str) -> list[int]:
    """``job last``'s selection from ``ids`` (newest first): N, or a slice ``[a:b:c]``."""
    text = which.strip()
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise UsageError("fluxes job last: N must be at least 1")
        return ids[:count]
    match = _SLICE.fullmatch(text)
    if match is None:
        raise UsageError(f"fluxes job last: expected N or a slice like [:5], got {which!r}")
    start, stop, step = (int(v) if v else None for v in match.groups())
    if step == 0:
        raise UsageError("fluxes job last: slice step cannot be zero")
    return ids[slice(start, stop, step)]


def _last(args: argparse.Namespace) -> int:
    from fluxes.service.jobs import select_jobs

    inst = instance(args)
    records = select_jobs(inst, states="pending,running,inactive")
    ids = sorted((rec.id for rec in records), reverse=True)  # FLUIDs grow with time
    if not ids:
        die("job history is empty")
    chosen = pick_last(ids, args.which)
    for jobid in chosen:
        print(fmt_id(jobid))
    return 0


def status_code(outcome: Outcome, exception_code: int | None) -> int:
    """A job's code for ``job status``: its exit code, or ``exception_code`` when a
    fatal exception ended it and one is given."""
    if exception_code is not None and outcome.job.fatal is not None:
        return exception_code
    return outcome.exit_code


def _status(args: argparse.Namespace) -> int:
    import orjson

    from fluxes.cli.waitjobs import wait_jobs

    inst = instance(args)
    ids = list(dict.fromkeys(args.ids))
    check_exist(inst, ids)
    worst = 0

    def report(outcome: Outcome) -> None:
        nonlocal worst
        code = status_code(outcome, args.exception_exit_code)
        worst = max(worst, code)
        if args.json:
            print(orjson.dumps(status_json(outcome.job)).decode(), flush=True)
        if args.verbose:
            print(f"{shown_id(outcome.job.id)}: exit code {code}", file=sys.stderr)

    wait_jobs(inst, ids, report)
    return worst


def status_json(job: Job) -> dict[str, Any]:
    """``job status --json``'s object for an ended job, with flux's keys: the fatal
    exception's, the times reached, the wait status and the RFC 21 result code."""
    out: dict[str, Any] = {"id": job.id, "exception_occurred": job.fatal is not None}
    if job.fatal is not None:
        out.update(exception_severity=0, exception_type=job.fatal.type,
                   exception_note=job.fatal.note)
    for name in ("t_submit", "t_run", "t_cleanup"):
        value = getattr(job, name)
        if value is not None:
            out[name] = value
    if job.wait_status is not None:
        out["waitstatus"] = job.wait_status
    if job.result is not None:
        out["result"] = int(job.result)
    return out


def _taskmap(args: argparse.Namespace) -> int:
    import orjson

    from fluxes.domain.exec.layout import compute_layout
    from fluxes.formats import taskmap
    from fluxes.formats.rset import ResourceSet
    from fluxes.store.jobhash import JobHashes

    inst = instance(args)
    stored = JobHashes(inst.redis, inst.keys).get(int(args.id))
    if stored is None:
        die(f"job {shown_id(args.id)} not found")
    if stored.R is None:
        die(f"job {shown_id(args.id)} has no resources yet: it has not started")
    spec = stored.effective_jobspec
    if spec is None:
        die(f"job {shown_id(args.id)}: its jobspec is not readable (only its owner and "
            "the instance owner can read it)")
    try:
        rset = ResourceSet(stored.R)
        layout = compute_layout(orjson.loads(spec), rset)
        node_of = {t: share.node_rank for share in layout.shares for t in share.task_ranks}
        blocks = taskmap.from_nodes([node_of[t] for t in range(layout.size)])
        if args.to == "raw":
            print(taskmap.raw(blocks))
        elif args.to == "pmi":
            print(taskmap.pmi(blocks))
        elif args.to == "multiline":
            for task in range(layout.size):
                print(taskmap.node_of(blocks, task))
        elif args.taskids is not None:
            print(_node(taskmap.node_tasks(blocks), args.taskids))
        elif args.ntasks is not None:
            print(len(_node(taskmap.node_tasks(blocks), args.ntasks)))
        elif args.nodeid is not None:
            print(taskmap.node_of(blocks, args.nodeid))
        elif args.hostname is not None:
            share = layout.shares[taskmap.node_of(blocks, args.hostname)]
            print(rset.hostname(share.rank) or f"rank{share.rank}")
        else:
            print(taskmap.encode(blocks))
    except ValueError as exc:
        die(f"job {shown_id(args.id)}: {exc}")
    return 0


def _node(per_node: list[Any], node: int) -> Any:
    """Node ``node``'s entry; ValueError for a node the job does not use."""
    if not 0 <= node < len(per_node):
        raise ValueError(f"node {node} is not in the task map (0-{len(per_node) - 1})")
    return per_node[node]


def _hostpids(args: argparse.Namespace) -> int:
    from fluxes.cli.attach import output_key, private_output
    from fluxes.domain.exec.output import parse_pids
    from fluxes.domain.job.states import JobState
    from fluxes.formats.fsd import parse_duration
    from fluxes.formats.rset import ResourceSet
    from fluxes.store.errors import NoPermissionError
    from fluxes.store.jobhash import JobHashes, R

    wanted = _task_ranks(args.ranks)
    inst = instance(args)
    jobid = int(args.id)
    timeout = parse_duration(args.timeout) if args.timeout else None
    deadline = None if timeout is None else time.monotonic() + timeout
    key = output_key(inst, jobid)
    if key is None:
        die(f"job {shown_id(args.id)} not found")
    found: dict[int, tuple[str, int]] = {}
    ranks_seen: set[bytes] = set()
    position = "0-0"
    while True:
        if not _job(inst, jobid).state & (JobState.PENDING | JobState.RUN):
            die(f"job {shown_id(args.id)} is not running")
        [raw] = JobHashes(inst.redis, inst.keys).field([jobid], R)
        if raw and len(ranks_seen) >= len(ResourceSet(raw).ranks):
            break
        block = 1000
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                die(f"job {shown_id(args.id)}: timeout waiting for its tasks to start")
            block = max(1, min(block, int(left * 1000)))
        try:
            got = jobfacts.read_new(inst.redis, {key: position}, block=block)
        except NoPermissionError:
            die(private_output(jobid))
        for _stream, entries in got or []:
            for sid, fields in entries:
                position = sid.decode()
                if b"pids" not in fields:
                    continue
                try:
                    triples = parse_pids(fields)
                except ValueError as exc:
                    die(f"job {shown_id(args.id)}: {exc}")
                ranks_seen.add(fields.get(b"rank", b""))
                for task, host, pid in triples:
                    found[task] = (host, pid)
    if wanted is not None:
        beyond = set(wanted) - set(found)
        if beyond:
            die(f"job {shown_id(args.id)} has no task rank {min(beyond)} "
                f"(it has {len(found)} tasks)")
        found = {t: hp for t, hp in found.items() if t in wanted}
    print(args.delimiter.join(f"{host}:{pid}" for _t, (host, pid) in sorted(found.items())))
    return 0


def _task_ranks(text: str | None) -> frozenset[int] | None:
    """``hostpids -r``'s task ranks; a usage error for a bad idset."""
    from fluxes.formats.idset import IDSet

    if text is None:
        return None
    try:
        return frozenset(IDSet(text))
    except ValueError as exc:
        raise UsageError(f"fluxes job hostpids: -r {text!r}: {exc}") from None


def check_exist(inst: Instance, ids: list[int]) -> None:
    """Die naming the first of ``ids`` (as typed) that is no job, before waiting on any."""
    if not ids:
        return
    for one, found in zip(ids, jobfacts.which_exist(inst.redis, inst.keys, ids), strict=True):
        if not found:
            die(f"job {shown_id(one)} not found")
