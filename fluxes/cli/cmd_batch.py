"""``fluxes batch``, ``fluxes alloc``, ``fluxes proxy``, ``fluxes pstree``, ``fluxes top``
and ``fluxes instance-child``: batch scripts and allocations run in a child instance
(docs/nested.md), and the views of the instance tree."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluxes.cli.cmd_submit import add_job_options, build_jobspec
from fluxes.cli.display import fmt_id
from fluxes.cli.util import (
    ArgumentParser,
    UsageError,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
)
from fluxes.domain.nested import CHILD_RUNNER
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from fluxes.store.nesting import ChildTable, has_mark, instance_of, set_mark

if TYPE_CHECKING:
    from fluxes.formats.jobspec import Jobspec

#: The hidden command every task of a batch or alloc job runs.
CHILD_COMMAND = CHILD_RUNNER
#: How long ``alloc``/``proxy`` wait for a child instance to come up.
WAIT_CHILD_S = 120.0


def register(subparsers: Any) -> None:
    """Add ``batch``, ``alloc``, ``proxy`` and ``instance-child``."""
    bp = subparsers.add_parser("batch", **help_with_example(
        "Submit a batch script: it runs in a child instance on the allocation, where\n"
        "fluxes run/submit/jobs act within it. #FLUX: (RFC 36) and #SBATCH directives in\n"
        "the script give options; the command line overrides them. Prints the job id.",
        ["fluxes batch -N2 -t 1h job.sh arg1", "fluxes batch --wrap -N1 fluxes run hostname",
         "fluxes batch --output=out.log --job-name=nightly nightly.sh"]))
    add_job_options(bp)
    bp.add_argument("--wrap", action="store_true", help="wrap COMMAND... in a /bin/sh script")
    bp.add_argument("--dry-run", action="store_true", help="print the jobspec, do not submit")
    bp.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]")
    bp.set_defaults(func=_batch)

    ap = subparsers.add_parser("alloc", **help_with_example(
        "Allocate resources and run COMMAND (default: a shell, reading commands from\n"
        "stdin when it is not a terminal) connected to a child instance on them; the\n"
        "allocation ends with COMMAND, and COMMAND with the allocation.",
        ["fluxes alloc -N2 -- fluxes run -N2 hostname", "fluxes alloc -N1",
         "echo 'fluxes run -N2 hostname' | fluxes alloc -N2", "fluxes alloc --bg -N1"]))
    add_job_options(ap)
    ap.add_argument("--bg", action="store_true",
                    help="wait for the instance to start, print the job id and leave it "
                         "running (reach it with fluxes proxy, end it with fluxes cancel)")
    ap.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    ap.set_defaults(func=_alloc)

    pp = subparsers.add_parser("proxy", **help_with_example(
        "Run COMMAND (default: a shell) connected to the child instance of a running\n"
        "batch or alloc job.", ["fluxes proxy ƒ2t6V2H fluxes jobs", "fluxes proxy ƒ2t6V2H"]))
    pp.add_argument("id", type=job_id_arg, metavar="JOBID")
    pp.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    pp.set_defaults(func=_proxy)

    cp = subparsers.add_parser(CHILD_COMMAND, help=argparse.SUPPRESS,
                               description="internal: a task of a batch or alloc job")
    cp.add_argument("--batch", action="store_true", help="run the job's batch script")
    cp.add_argument("command", nargs=argparse.REMAINDER, metavar="ARGS...")
    cp.set_defaults(func=_instance_child)
    register_pstree(subparsers)
    register_top(subparsers)


# ------------------------------------------------------------------ options

def _options_parser() -> ArgumentParser:
    """The job options alone, for reading a script's directives."""
    parser = ArgumentParser(prog="fluxes batch: directive", add_help=False)
    add_job_options(parser)
    return parser


def merge_directives(args: argparse.Namespace, words: list[str]) -> argparse.Namespace:
    """``args`` with the options of ``words`` (a script's directives) filled in where
    the command line left them unset; repeatable options get the directives' first."""
    if not words:
        return args
    parser = _options_parser()
    found, extra = parser.parse_known_args(words)
    if extra:
        raise UsageError(f"fluxes batch: directive: not an option: {' '.join(extra)}")
    defaults = vars(parser.parse_args([]))
    for dest, value in vars(found).items():
        if dest.startswith("_") or value == defaults.get(dest):
            continue
        given = getattr(args, dest, None)
        if isinstance(value, list):
            setattr(args, dest, [*value, *(given or [])])
        elif given == defaults.get(dest):
            setattr(args, dest, value)
    return args


def _allocation_shape(args: argparse.Namespace, nodes: int) -> tuple[int, int | None, bool]:
    """Cores and GPUs per node of a batch/alloc job, and whether it takes whole nodes.

    ``--cores=N`` is N cores spread evenly over the nodes, ``--gpus-per-node``
    the GPUs of each; the child instance runs one broker per node, so
    ``--tasks-per-node``/``--tasks-per-core`` have no meaning here.
    """
    for flag, value in (("--tasks-per-node", getattr(args, "tasks_per_node", None)),
                        ("--tasks-per-core", getattr(args, "tasks_per_core", None))):
        if value is not None:
            die(f"{flag}: not for batch/alloc (the instance runs one broker per node)")
    ncores = getattr(args, "cores", None)
    per_node_gpus = getattr(args, "gpus_per_node", None)
    if ncores is not None or per_node_gpus is not None:
        given = [flag for flag, value in (("-n", args.ntasks), ("-c", args.cores_per_task),
                                          ("-g", args.gpus_per_task)) if value is not None]
        if given:
            die(f"--cores/--gpus-per-node cannot be combined with {', '.join(given)}")
        if ncores is not None and (ncores < 1 or ncores % nodes):
            die(f"--cores={ncores} does not divide evenly over {nodes} node(s)")
        if per_node_gpus is not None and per_node_gpus < 0:
            die("--gpus-per-node must be >= 0")
        cores = ncores // nodes if ncores is not None else 1
        return cores, per_node_gpus or None, bool(args.nodes is not None and ncores is None)
    whole = args.nodes is not None and args.ntasks is None and args.cores_per_task is None
    slots = args.ntasks if args.ntasks is not None else 1
    cores = math.ceil(slots * (args.cores_per_task or 1) / nodes)
    gpus = math.ceil(slots * args.gpus_per_task / nodes) if args.gpus_per_task else None
    return cores, gpus, whole


def allocation_jobspec(args: argparse.Namespace, child_args: list[str],
                       script: str | None) -> Jobspec:
    """The jobspec of a batch/alloc job: one ``instance-child`` task per node.

    ``-N`` alone asks for whole nodes; ``-n``/``-c``/``-g`` ask for ``n`` slots of
    ``c`` cores (and ``g`` GPUs each) spread evenly over the ``-N`` nodes (default 1).
    """
    from fluxes.domain.nested import CHILD_ATTRIBUTE
    from fluxes.proc.nested import SCRIPT_ATTRIBUTE

    nodes = args.nodes if args.nodes is not None else 1
    if nodes < 1:
        die("-N/--nodes must be >= 1")
    for flag, value in (("-n", args.ntasks), ("-c", args.cores_per_task),
                        ("-g", args.gpus_per_task)):
        if value is not None and value < 1:
            die(f"{flag} must be >= 1")
    cores, gpus, whole = _allocation_shape(args, nodes)
    shaped = argparse.Namespace(**vars(args))
    shaped.cores = shaped.tasks_per_node = shaped.tasks_per_core = shaped.gpus_per_node = None
    shaped.nodes, shaped.ntasks, shaped.cores_per_task = nodes, nodes, cores
    shaped.gpus_per_task = gpus
    shaped.exclusive = bool(args.exclusive or whole)
    command = [sys.executable, "-m", "fluxes.cli.main", CHILD_COMMAND]
    # the mark that gets the job's tasks a Redis identity of the child's (docs/nested.md)
    shaped.setattr = [*args.setattr, f"system.{CHILD_ATTRIBUTE}=true"]
    if script is not None:
        command.append("--batch")
        shaped.setattr = [*shaped.setattr,
                          f"system.{SCRIPT_ATTRIBUTE}.script=" + _as_json(script)]
    return build_jobspec(shaped, [*command, "--", *child_args])


def _as_json(text: str) -> str:
    """``text`` as a JSON string (so --setattr keeps it a string, whatever it looks like)."""
    import orjson

    return orjson.dumps(text).decode()


def _read_script(args: argparse.Namespace) -> tuple[str, list[str], str]:
    """The script's text, its arguments and the job's default name."""
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.wrap:
        if not command:
            raise UsageError("fluxes batch: --wrap needs a COMMAND")
        return "#!/bin/sh\n" + shlex.join(command) + "\n", [], "wrap"
    if not command:
        if sys.stdin.isatty():
            raise UsageError("fluxes batch: no SCRIPT given (or pipe one on stdin, or --wrap)")
        text, args_, name = sys.stdin.read(), [], "stdin"
    else:
        try:
            text = Path(command[0]).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            die(f"{command[0]}: {getattr(exc, 'strerror', None) or exc}")
        args_, name = command[1:], os.path.basename(command[0])
    if not text.startswith("#!"):
        die(f"{name}: the script does not start with #! (e.g. #!/bin/sh), or use --wrap")
    return text, args_, name


def _batch(args: argparse.Namespace) -> int:
    from fluxes.formats.directives import script_directives

    text, script_args, name = _read_script(args)
    try:
        words = script_directives(text)
    except ValueError as exc:
        die(f"{name}: {exc}")
    args = merge_directives(args, words)
    if args.job_name is None:
        args.job_name = name
    if args.output is None:
        # as flux batch: the script's output goes to a file named by the job id
        args.output = "fluxes-{{id}}.out"
    spec = allocation_jobspec(args, script_args, text)
    if args.dry_run:
        print_json(spec.to_dict())
        return 0
    jobid = _submit(args, spec)
    print(fmt_id(jobid))
    return 0


def _submit(args: argparse.Namespace, spec: Jobspec) -> int:
    from fluxes.domain.jm.priority import parse_urgency
    from fluxes.store.client import Client

    urgency = None if args.urgency is None else parse_urgency(args.urgency)
    [result] = Client(instance(args)).submit([{"jobspec": spec, "urgency": urgency}])
    if not isinstance(result, int):
        die(result)
    return result


# ------------------------------------------------------------------ alloc, proxy

def _child_command(command: list[str]) -> list[str]:
    """COMMAND, or a shell: interactive on a terminal, else reading the commands piped
    to it on stdin (``echo 'fluxes run hostname' | fluxes alloc -N2``), as flux's."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        command = [os.environ.get("SHELL", "/bin/sh")]
    return command


def wait_for_child(inst: Instance, jobid: int, timeout: float = WAIT_CHILD_S) -> InstanceURI:
    """The URI of job ``jobid``'s child instance once it is up; FluxesError when the
    job ends first, is not an instance, or the wait times out."""
    from fluxes.proc.nested import READY, STOPPED, child_uri
    from fluxes.store.errors import NoPermissionError

    uri = child_uri(inst, jobid)
    deadline = time.monotonic() + timeout
    while True:
        try:
            ns, result = ChildTable(inst.redis, inst.keys).namespace_of(jobid), \
                _job_result(inst, jobid)
        except NoPermissionError:
            # a user's ACL identity reaches neither the children hash nor the child's
            # keys: only the job's own tasks get the child's identity (docs/nested.md)
            die(f"job {fmt_id(jobid)}: its instance cannot be reached with this Redis ACL "
                "user's credentials (under ACL users, use fluxes batch; docs/nested.md)")
        if ns is not None:
            if has_mark(inst.redis, Keys(uri.ns), STOPPED):
                die(f"job {fmt_id(jobid)}: its instance has ended")
            # recorded by the exec worker (under ACLs) before it is up: wait for that
            if has_mark(inst.redis, Keys(uri.ns), READY):
                return uri
        if result is not None:
            die(f"job {fmt_id(jobid)} ended ({result.decode()}) before its instance started")
        if time.monotonic() > deadline:
            die(f"job {fmt_id(jobid)}: no instance after {timeout:g}s")
        time.sleep(0.1)


def _run_in(uri: InstanceURI, command: list[str]) -> int:
    """Run ``command`` here with FLUXES_URI naming ``uri``; its exit code."""
    from fluxes.proc.launcher import _exit_code
    from fluxes.proc.nested import child_environment

    try:
        return _exit_code(subprocess.call(command, env=child_environment(uri, os.environ)))
    except OSError as exc:
        die(f"{command[0]}: {exc.strerror or exc}")


def _alloc(args: argparse.Namespace) -> int:
    from fluxes.proc.nested import STOP_REQUESTED
    from fluxes.store.client import Client

    if args.bg and [w for w in args.command if w != "--"]:
        raise UsageError("fluxes alloc: --bg runs no COMMAND (use fluxes proxy JOBID "
                         "COMMAND once it is up)")
    command = _child_command(list(args.command))
    inst = instance(args)
    if args.job_name is None:
        args.job_name = "alloc"
    spec = allocation_jobspec(args, [], None)
    jobid = _submit(args, spec)
    try:
        uri = wait_for_child(inst, jobid)
    except BaseException:
        Client(inst).cancel([jobid], note="fluxes alloc gave up")
        raise
    if args.bg:
        print(fmt_id(jobid))
        return 0
    try:
        code = _run_allocated(inst, jobid, uri, command)
    finally:
        set_mark(inst.redis, Keys(uri.ns), STOP_REQUESTED, repr(time.time()))
    deadline = time.monotonic() + 60
    while _job_result(inst, jobid) is None:
        if time.monotonic() > deadline:
            print(f"fluxes: job {fmt_id(jobid)} did not end within 60s", file=sys.stderr)
            break
        time.sleep(0.1)
    return code


#: How often ``alloc`` looks whether its allocation ended under its command.
ALLOC_WATCH_S = 0.2
#: How long a command gets to exit after SIGHUP once its allocation ended.
ALLOC_HANGUP_GRACE_S = 2.0


def _run_allocated(inst: Instance, jobid: int, uri: InstanceURI, command: list[str]) -> int:
    """Run ``command`` in the allocation; its exit code. If the allocation ends first
    (canceled, timed out, its instance killed), say so and hang up on the command
    (SIGHUP, as a closed terminal; SIGKILL after a grace), as flux's alloc shell
    ends with its instance."""
    import signal

    from fluxes.proc.launcher import _exit_code
    from fluxes.proc.nested import STOPPED, child_environment

    child_keys = Keys(uri.ns)
    # Off a terminal the command gets a process group of its own, so that the hang-up
    # reaches all it started; on one it stays in the terminal's foreground group (an
    # interactive shell passes SIGHUP on to its jobs itself).
    group = not sys.stdin.isatty()
    started: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        # Ctrl-C is the command's to handle (an interactive shell's), not the end of
        # alloc; a command in a group of its own gets it from here
        if group and started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started[0], signum)

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        try:
            proc = subprocess.Popen(command, env=child_environment(uri, os.environ),
                                    process_group=0 if group else None)
        except OSError as exc:
            die(f"{command[0]}: {exc.strerror or exc}")
        started.append(proc.pid)
        while True:
            try:
                return _exit_code(proc.wait(timeout=ALLOC_WATCH_S))
            except subprocess.TimeoutExpired:
                pass
            result = _job_result(inst, jobid)
            if result is None and not has_mark(inst.redis, child_keys, STOPPED):
                continue
            why = f"job {fmt_id(jobid)} ended ({result.decode()})" if result is not None \
                else f"job {fmt_id(jobid)}: its instance stopped"
            print(f"fluxes: alloc: the allocation ended: {why}; ending {command[0]}",
                  file=sys.stderr, flush=True)
            return _hang_up(proc, group) or 1
    finally:
        signal.signal(signal.SIGINT, previous)


def _hang_up(proc: subprocess.Popen[bytes], group: bool) -> int:
    """SIGHUP to the command (its whole process group when it has one), SIGKILL after
    :data:`ALLOC_HANGUP_GRACE_S`; its exit code."""
    import signal

    from fluxes.proc.launcher import _exit_code

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)

    send(signal.SIGHUP)
    try:
        code = _exit_code(proc.wait(timeout=ALLOC_HANGUP_GRACE_S))
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        code = _exit_code(proc.wait())
    if group:
        send(signal.SIGKILL)  # what the command left behind in its group
    return code


def _proxy(args: argparse.Namespace) -> int:
    inst = instance(args)
    if ChildTable(inst.redis, inst.keys).namespace_of(int(args.id)) is None:
        die(f"job {fmt_id(int(args.id))} runs no instance (not a batch or alloc job, "
            "or not started yet)")
    uri = wait_for_child(inst, int(args.id), timeout=0)
    return _run_in(uri, _child_command(list(args.command)))


def _instance_child(args: argparse.Namespace) -> int:
    from fluxes.proc.nested import run_child

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    return run_child(command, batch=args.batch)


# ------------------------------------------------------------------ jobs -R, pstree

def child_instance(inst: Instance, jobid: int) -> Instance | None:
    """The child instance job ``jobid`` ran or runs (its keys are kept), else None."""
    ns = ChildTable(inst.redis, inst.keys).namespace_of(jobid)
    return None if ns is None else instance_of(inst, ns)




def instance_summary(child: Instance) -> str:
    """``N running, M pending, K done`` from a child instance's job counters."""
    from fluxes.store.joblist_read import JobListReader

    counts = JobListReader(child.redis, child.keys).counters()
    running = counts.get("state:RUN", 0) + counts.get("state:CLEANUP", 0)
    pending = sum(counts.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))
    done = counts.get("state:INACTIVE", 0)
    stopped = has_mark(child.redis, child.keys, "stopped")
    return (f"{running} running, {pending} pending, {done} inactive"
            + (" (ended)" if stopped else ""))


def register_pstree(subparsers: Any) -> None:
    """Add ``pstree``."""
    tp = subparsers.add_parser("pstree", **help_with_example(
        "Show the tree of instances: batch and alloc jobs and the instances they run,\n"
        "with each child's job counts.", ["fluxes pstree", "fluxes pstree -a"]))
    tp.add_argument("-a", "--all", action="store_true",
                    help="also instances that have ended (their jobs are kept)")
    tp.set_defaults(func=_pstree)


def _pstree(args: argparse.Namespace) -> int:
    inst = instance(args)
    print(".")
    _tree(inst, args.all, "")
    return 0


def _tree(inst: Instance, everything: bool, indent: str) -> None:
    """Print ``inst``'s child instances below it, depth first."""
    children = sorted(ChildTable(inst.redis, inst.keys).all().items())
    shown = []
    for jobid, ns in children:
        child = instance_of(inst, ns)
        if everything or not has_mark(child.redis, child.keys, "stopped"):
            shown.append((jobid, child))
    for i, (jobid, child) in enumerate(shown):
        last = i == len(shown) - 1
        print(f"{indent}{'└── ' if last else '├── '}{fmt_id(jobid)}: "
              f"{instance_summary(child)}")
        _tree(child, everything, indent + ("    " if last else "│   "))




def register_top(subparsers: Any) -> None:
    """Add ``top``."""
    tp = subparsers.add_parser("top", **help_with_example(
        "The live view of an instance: resources and utilization, job counts, running and\n"
        "pending jobs (batch and alloc jobs marked +), refreshed in place. Keys: j/k or the\n"
        "arrows move, Enter goes into a + job's child instance, h goes up, q quits.",
        ["fluxes top", "fluxes top ƒ2t6V2H", "fluxes top --interval 1"]))
    tp.add_argument("id", nargs="?", type=job_id_arg, metavar="JOBID",
                    help="start in this batch or alloc job's child instance")
    tp.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                    help="refresh period (default 2)")
    tp.add_argument("--iterations", type=int, default=None, metavar="N",
                    help="stop after N frames (default: until q)")
    tp.set_defaults(func=_top)


def _top(args: argparse.Namespace) -> int:
    from fluxes.cli import top

    if args.interval <= 0 or (args.iterations is not None and args.iterations < 1):
        raise UsageError("fluxes top: --interval must be > 0 and --iterations >= 1")
    inst = instance(args)
    if args.id is not None:
        child = child_instance(inst, int(args.id))
        if child is None:
            die(f"job {fmt_id(int(args.id))} runs no instance (not a batch or alloc job, "
                "or not started yet)")
        inst = child
    return top.run(inst, interval=args.interval, iterations=args.iterations)


def _job_result(inst: Instance, jobid: int) -> bytes | None:
    """The job's result as its hash records it (None while the job is active)."""
    from fluxes.store.jobhash import RESULT, JobHashes

    return JobHashes(inst.redis, inst.keys).field([jobid], RESULT)[0]
